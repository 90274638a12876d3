"""Weight sync from a trainer to serving replicas: a small llama-like torch model trains a few
steps; its trainer and serving layouts are the ones `meshcast model` generates (mc.model_batch,
docs/models.md): trainer tp=2 x dp=2 on devices 0-3, two serving replicas of tp=2 on devices 4-7.
After every optimizer step all its weights move trainer shards -> serving replicas with one joint
plan, and every replica's shards are checked bit for bit against the trainer's weights.

  PYTHONPATH=build/python /usr/bin/python3 examples/weight_sync.py           # all 8 devices here
  mpirun -np 8 /usr/bin/python3 examples/weight_sync.py                      # one rank per device
  /usr/bin/python3 -m torch.distributed.run --nproc_per_node 8 --redirects 2 --tee 2 \
      examples/weight_sync.py --backend torch                                 # a gloo group
"""
import argparse

import torch
from torch import nn

import meshcast as mc

STEPS = 3
# A tiny llama: grouped-query attention (4 heads, 2 key-value heads), SwiGLU MLP, RMSNorm.
CONFIG = dict(arch="llama", hidden=32, layers=2, heads=4, kv_heads=2, ffn=64, vocab=64,
              dtype="float32")
TRAIN, SERVE = "tp=2,dp=2", "tp=2,replicas=2"


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)       # column-parallel
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)    # column-parallel
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)    # column-parallel
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)       # row-parallel

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = (p(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
                .repeat_interleave(self.heads // self.kv_heads, dim=1) for p in (self.k, self.v))
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = (q @ k.transpose(-1, -2) / self.head_dim ** 0.5).masked_fill(~causal, -1e9)
        return self.o((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=False)  # column-parallel
        self.up = nn.Linear(hidden, ffn, bias=False)    # column-parallel
        self.down = nn.Linear(ffn, hidden, bias=False)  # row-parallel

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn_norm = RMSNorm(c["hidden"])
        self.attn = Attention(c["hidden"], c["heads"], c["kv_heads"])
        self.mlp_norm = RMSNorm(c["hidden"])
        self.mlp = MLP(c["hidden"], c["ffn"])

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    """Parameter names and shapes as docs/models.md lists them for arch llama."""

    def __init__(self, c):
        super().__init__()
        self.embed = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])
        self.head = nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def processes(backend):
    """(ranks, this rank, the Resharder's backend arguments, a sum over the ranks)."""
    if backend == "torch":
        import torch.distributed as dist
        dist.init_process_group("gloo")  # env:// as torchrun sets it

        def total(n):
            t = torch.tensor([n])
            dist.all_reduce(t)
            return int(t)
        return dist.get_world_size(), dist.get_rank(), dict(backend="torch"), total
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if comm.Get_size() == 1:
        return 1, 0, dict(backend="local"), lambda n: n
    return comm.Get_size(), comm.Get_rank(), dict(backend="mpi", comm=comm), comm.allreduce


def train_step(model, optimizer, tokens):
    """One optimizer step on the next-token loss; returns the loss."""
    logits = model(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def serving_tiles(batch, devices):
    """The serving replicas' weights on `devices`, written in place by every sync: each device
    allocates its own tiles from the layout alone, as a serving process that never sees the full
    weight does."""
    return {name: {d: torch.empty(tile) for d in devices
                   if d in dst.mesh.devices and 0 not in (tile := dst.tile_shape(shape, d))}
            for name, (shape, _, _, dst) in batch.tensors.items()}


def check_serving(batch, params, serving, step):
    """Asserts that every serving tile equals its part of the trainer's weight, bit for bit;
    returns the number of elements checked."""
    checked = 0
    for name, (_, _, _, dst) in batch.tensors.items():
        want = mc.shard(params[name].detach(), dst, devices=list(serving[name]))
        for d, t in serving[name].items():
            assert torch.equal(t, want[d]), f"step {step}: {name} on device {d} differs"
            checked += t.numel()
    return checked


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["auto", "torch"], default="auto",
                        help="torch: one process per device in a gloo group (under torchrun); "
                             "auto: mpi under mpirun, local otherwise")
    size, rank, backend, total = processes(parser.parse_args().backend)
    if size > 1 and size != 8:
        raise SystemExit(f"weight_sync.py: run with 8 ranks (one per device), not {size}")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # every rank computes the same weights, bit for bit
    model = Llama(CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    params = dict(model.named_parameters())

    # The layouts `meshcast model` writes for this config; the torch model must match them.
    batch = mc.model_batch(**CONFIG, train=TRAIN, serve=SERVE,
                           cluster=mc.Cluster(hosts=1, devices_per_host=4))
    assert list(batch.tensors) == list(params), "the torch model's parameters differ from the batch"
    for name, (shape, _, _, _) in batch.tensors.items():
        assert shape == tuple(params[name].shape), f"{name}: {shape} vs {tuple(params[name].shape)}"

    # One joint plan of every parameter, compiled once and reused after every step.
    plan = mc.plan(batch.tensors, cluster=batch.cluster)
    resharder = mc.Resharder(plan, **backend)
    here = resharder.devices  # this rank's device under MPI, all 8 in-process
    serving = serving_tiles(batch, here)

    tokens = torch.randint(0, CONFIG["vocab"], (4, 16))
    for step in range(STEPS):
        loss = train_step(model, optimizer, tokens)
        # The trainer's shards of every weight (this rank's only, under MPI), one joint run.
        trainer = {name: mc.shard(params[name].detach(), src, devices=here)
                   for name, (_, _, src, _) in batch.tensors.items()}
        resharder.run(trainer, serving)
        checked = total(check_serving(batch, params, serving, step))
        if rank == 0:
            print(f"step {step}: loss {loss:.4f}, {len(batch.tensors)} weights synced to 2 "
                  f"serving replicas in one plan, {checked} elements checked bit for bit")
    if backend["backend"] == "torch":
        # The Resharder goes before the group it sends on, and the group before the interpreter:
        # torch 1.13's gloo group destroyed during interpreter exit can abort the process.
        import torch.distributed as dist
        del resharder
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
