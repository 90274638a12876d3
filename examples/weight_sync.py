"""Weight sync from a trainer to serving replicas: a small transformer-like torch model trains a
few steps on a trainer mesh with Megatron-style tensor-parallel shards; after every optimizer step
its weights are resharded to two serving replicas with a different layout, and every replica's
shards are checked bit for bit against the trainer's weights.

  PYTHONPATH=build/python /usr/bin/python3 examples/weight_sync.py           # all 8 devices here
  mpirun -np 8 /usr/bin/python3 examples/weight_sync.py                      # one rank per device
"""
import torch
from torch import nn

import meshcast as mc

STEPS, VOCAB, D, LAYERS = 3, 64, 32, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)    # column-parallel
        self.proj = nn.Linear(D, D, bias=False)       # row-parallel
        self.up = nn.Linear(D, 4 * D, bias=False)     # column-parallel
        self.down = nn.Linear(4 * D, D, bias=False)   # row-parallel

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        attention = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, dim=-1) @ v
        x = x + self.proj(attention)
        return x + self.down(torch.relu(self.up(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# Trainer: devices 0-3 as dp x tp = 2 x 2 (JAX words). Serving: devices 4-7, two replicas of
# tp = 2, each weight split along its other dimension (DTensor words).
trainer_mesh = mc.Mesh([2, 2], range(0, 4), axis_names=("dp", "tp"))
serving_mesh = mc.Mesh([2, 2], range(4, 8), axis_names=("replica", "tp"))


def layouts(name):
    """(trainer, serving) layouts of a parameter, by its class."""
    if name.endswith(("qkv.weight", "up.weight", "head.weight")):     # [out, in]: split out
        return mc.P("tp", None), [mc.Replicate(), mc.Shard(1)]
    if name.endswith(("proj.weight", "down.weight")):                 # [out, in]: split in
        return mc.P(None, "tp"), [mc.Replicate(), mc.Shard(0)]
    if name.endswith("embed.weight"):                                 # [vocab, d]: split vocab
        return mc.P("tp", None), [mc.Replicate(), mc.Shard(1)]
    return mc.P(None), [mc.Replicate(), mc.Replicate()]               # norms: replicated


def main():
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    under_mpi = comm.Get_size() > 1
    if under_mpi and comm.Get_size() != 8:
        raise SystemExit(f"weight_sync.py: run with 8 ranks (one per device), not {comm.Get_size()}")
    rank = comm.Get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # every rank computes the same weights, bit for bit
    model = Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cluster = mc.Cluster(hosts=2, devices_per_host=4)

    # One compiled Resharder per parameter, made once and reused after every step.
    syncs = {}
    for name, p in model.named_parameters():
        train_spec, serve_spec = layouts(name)
        src, dst = mc.Layout(trainer_mesh, train_spec), mc.Layout(serving_mesh, serve_spec)
        plan = mc.plan(shape=tuple(p.shape), dtype="float32", src=src, dst=dst, cluster=cluster)
        backend = dict(backend="mpi", comm=comm) if under_mpi else dict(backend="local")
        syncs[name] = (src, dst, mc.Resharder(plan, **backend))
    # The serving replicas' weights, written in place by every sync.
    serving = {name: {d: torch.empty(t.shape) for d, t in mc.shard(p.detach(), dst).items()
                      if not under_mpi or d == rank}
               for name, p in model.named_parameters() for _, dst, _ in [syncs[name]]}

    tokens = torch.randint(0, VOCAB, (4, 16))
    for step in range(STEPS):
        loss = nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        checked = 0
        for name, p in model.named_parameters():
            src, dst, resharder = syncs[name]
            weights = p.detach()
            shards = mc.shard(weights, src)  # the trainer's tensor-parallel shards
            if under_mpi:
                shards = {d: t for d, t in shards.items() if d == rank}
            resharder.run(shards, serving[name])
            want = mc.shard(weights, dst)
            for d, t in serving[name].items():
                assert torch.equal(t, want[d]), f"step {step}: {name} on device {d} differs"
                checked += t.numel()
        checked = comm.allreduce(checked) if under_mpi else checked
        if rank == 0:
            print(f"step {step}: loss {loss.item():.4f}, {len(syncs)} weights synced to 2 "
                  f"serving replicas, {checked} elements checked bit for bit")


if __name__ == "__main__":
    main()
