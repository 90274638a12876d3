"""Run under mpirun with 4 ranks by test_mpi.py: rank 1 stops itself (SIGSTOP) after two runs of
a Resharder; the other ranks' third wait() must raise TimeoutError within the timeout (the run
named), never end the process itself. Each then ends the job with comm.Abort, as a user's script
would, so that mpirun stops the stopped rank too."""
import os
import signal

import numpy as np
from mpi4py import MPI

import meshcast as mc

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
assert comm.Get_size() == 4, "run with 4 ranks"
mesh = mc.Mesh([2], [0, 1])
src, dst = mc.Layout(mesh, "S0"), mc.Layout(mc.Mesh([2], [2, 3]), "R")
plan = mc.plan(shape=(1 << 16,), dtype="int32", src=src, dst=dst,
               cluster=mc.Cluster(hosts=2, devices_per_host=2))
x = np.arange(1 << 16, dtype=np.int32)
mine = {d: t for d, t in mc.shard(x, src).items() if d == rank}
resharder = mc.Resharder(plan, backend="mpi", comm=comm, timeout=3)
try:
    for run in range(1, 1000):
        if rank == 1 and run == 3:
            os.kill(os.getpid(), signal.SIGSTOP)
        resharder.run(mine)
except TimeoutError as e:
    print(f"rank {rank}: TimeoutError: {e}", flush=True)
    comm.Abort(3)
print(f"rank {rank}: 999 runs, expected to be stopped by the timeout")
