"""Run under torchrun (one process per device, gloo) by test_torch.py: random batches in the three
spec vocabularies (uneven shards, meshes that overlap, every dtype with bfloat16, buckets of small
tensors), each rank passing only its own shards to backend='torch' and checking every element of
its destination tiles against mc.shard of the global tensors. A second argument `nccl` runs the
same on CUDA tensors and an NCCL group (one GPU per process)."""
import os
import random
import sys

import torch
import torch.distributed as dist

import meshcast as mc

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]

backend = sys.argv[2] if len(sys.argv) > 2 else "gloo"
dist.init_process_group(backend)
ranks = dist.get_world_size()
rank = dist.get_rank()
device = torch.device("cpu")
if backend == "nccl":
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
cluster = mc.Cluster(hosts=ranks // 2, devices_per_host=2)


def random_layout(names):
    """A mesh over a random subset of the ranks (so that source and destination meshes overlap)
    and a spec in one of the three vocabularies."""
    size = rng.choice([n for n in (2, 4, ranks) if n <= ranks])
    devices = rng.sample(range(ranks), size)
    shape = [2, size // 2] if size >= 4 and rng.random() < 0.5 else [size]
    mesh = mc.Mesh(shape, devices, axis_names=names[:len(shape)])
    axes = list(range(len(shape)))
    vocabulary = rng.choice(["alpa", "dtensor", "jax"])
    dim = rng.randrange(2)
    if vocabulary == "alpa":
        entry = "S" + "".join(map(str, axes)) if rng.random() < 0.7 else "R"
        spec = entry + "R" if dim == 0 else "R" + entry
    elif vocabulary == "dtensor":
        spec = [rng.choice([mc.Shard(dim), mc.Shard(1 - dim), mc.Replicate()]) for _ in axes]
    else:
        entry = rng.choice([None, mesh.axis_names[-1], tuple(mesh.axis_names)])
        spec = mc.P(entry, None) if dim == 0 else mc.P(None, entry)
    return mc.Layout(mesh, spec)


def global_tensor(shape, dtype, salt):
    x = torch.arange(shape[0] * shape[1], dtype=torch.int64).reshape(shape) * 7 + salt
    return (x % 120).to(getattr(torch, dtype)).to(device)


checked = 0
for case in range(8):
    tensors = {}
    for t in range(rng.randint(1, 5)):
        shape = (rng.randint(1, 13), rng.randint(1, 9))  # uneven against every mesh size
        tensors[f"t{t}"] = (shape, rng.choice(DTYPES), random_layout(("dp", "tp")),
                            random_layout(("replica", "tp")))
    plan = mc.plan(tensors, cluster=cluster,
                   strategy=rng.choice(["send_recv", "allgather", "broadcast"]),
                   bucket_bytes=rng.choice([None, 0, 1 << 20]))
    xs = {name: global_tensor(shape, dtype, case + i)
          for i, (name, (shape, dtype, _, _)) in enumerate(tensors.items())}
    src = {name: {d: tile for d, tile in mc.shard(xs[name], tensors[name][2]).items() if d == rank}
           for name in tensors}
    resharder = mc.Resharder(plan, backend="torch", timeout=60)
    for _ in range(2):  # a compiled plan runs again on the same shards
        out = resharder.run(src)
        for name, (_, _, _, dst) in tensors.items():
            want = mc.shard(xs[name], dst)
            assert sorted(out[name]) == ([rank] if rank in want else []), (name, sorted(out[name]))
            for d, tile in out[name].items():
                assert tile.dtype == want[d].dtype and torch.equal(tile, want[d]), \
                    (case, name, rank, tensors[name])
                checked += tile.numel()
total = torch.tensor([checked], device=device)
dist.all_reduce(total)
if rank == 0:
    print(f"{ranks} ranks: {int(total)} destination elements right")
dist.destroy_process_group()
