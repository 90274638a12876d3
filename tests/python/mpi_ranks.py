"""Run under mpirun (one rank per device) by test_mpi.py: random layouts in the three vocabularies,
each rank passing only its own shards to backend='mpi' and checking its destination tile element
by element against mc.shard of the global array."""
import random
import sys

import numpy as np
from mpi4py import MPI

import meshcast as mc

comm = MPI.COMM_WORLD
ranks = comm.Get_size()
rank = comm.Get_rank()
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
checked = 0
for case in range(12):
    # Source on the first ranks, destination on a shuffled subset; specs in random vocabularies.
    half = max(1, ranks // 2)
    src_mesh = mc.Mesh([2, half // 2] if half % 2 == 0 and half > 2 else [half], range(half),
                       axis_names=None)
    devices = list(range(ranks))
    rng.shuffle(devices)
    dst_mesh = mc.Mesh([2, ranks // 2], devices, axis_names=("dp", "tp"))
    src_spec = rng.choice(["S0R", "RS0", [mc.Shard(0)] * len(src_mesh.shape), "RR"])
    dst_spec = rng.choice([mc.P(None, "tp"), mc.P(("dp", "tp"), None), [mc.Replicate(), mc.Shard(1)],
                           [mc.Shard(0), mc.Shard(0)], "S1S0"])
    src, dst = mc.Layout(src_mesh, src_spec), mc.Layout(dst_mesh, dst_spec)
    shape = (rng.randint(1, 13), rng.randint(1, 9))
    cluster = mc.Cluster(hosts=ranks // 2, devices_per_host=2)
    plan = mc.plan(shape=shape, dtype="int64", src=src, dst=dst, cluster=cluster,
                   strategy=rng.choice(["send_recv", "allgather", "broadcast"]))
    x = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape) * 7 + case
    mine = {d: t for d, t in mc.shard(x, src).items() if d == rank}
    out = mc.Resharder(plan, backend="mpi", comm=comm).run(mine)
    want = mc.shard(x, dst)
    assert sorted(out) == ([rank] if rank in want else []), (rank, sorted(out))
    for d, tile in out.items():
        assert np.array_equal(tile, want[d]), (case, rank, src.spec, dst.spec)
        checked += tile.size
total = comm.allreduce(checked)
if rank == 0:
    print(f"{ranks} ranks: {total} destination elements right")
