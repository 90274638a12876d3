"""Run under mpirun with 4 ranks by test_mpi.py: plans from devices 0-1 to devices 2-3, the senders
passing torch tensors and the receivers nothing. Every rank's outputs are the kind its Resharder
was made with (array=), whatever the rank holds; numpy, which has no bfloat16, is refused on every
rank alike before any byte moves, so that no rank is left waiting for the others."""
import torch
from mpi4py import MPI

import meshcast as mc

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
assert comm.Get_size() == 4, "run with 4 ranks"
src = mc.Layout(mc.Mesh([2], [0, 1]), "S0R")
dst = mc.Layout(mc.Mesh([2], [2, 3]), "RS0")
x = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4) * 3 + 1
for dtype in (torch.bfloat16, torch.float32):
    plan = mc.plan(shape=(6, 4), dtype=dtype, src=src, dst=dst,
                   cluster=mc.Cluster(hosts=2, devices_per_host=2))
    mine = mc.shard(x.to(dtype), src, devices=[rank])
    for array in ("numpy", "torch"):
        resharder = mc.Resharder(plan, backend="mpi", comm=comm, array=array, timeout=30)
        try:
            out = resharder.run(mine)
            got = {type(a).__module__.split(".")[0] + "." + type(a).__name__ for a in out.values()}
            want = mc.shard(x.to(dtype), dst, devices=[rank])
            assert sorted(out) == sorted(want), (rank, sorted(out))
            assert all(torch.equal(torch.as_tensor(out[d]), want[d]) for d in want), (rank, dtype)
        except ValueError as e:
            got = {f"ValueError ({e})"}
        outcomes = comm.allgather(sorted(got))
        if rank == 0:
            by_outcome = {}
            for r, outcome in enumerate(outcomes):
                by_outcome.setdefault(", ".join(outcome) or "nothing", []).append(str(r))
            print(f"{str(dtype)[6:]} {array}: " +
                  "; ".join(f"{o} on ranks {','.join(rs)}" for o, rs in by_outcome.items()))
