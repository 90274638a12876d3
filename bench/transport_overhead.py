"""Per-op overhead of a transport: a plan of N tiny sends (one float32 each, no buckets) from
device 0 to device 1, played by the torch backend (gloo, under torchrun) or the mpi backend
(under mpirun); prints the median seconds of a run and the ops per second. docs/results.md
gives the commands and figures.

  /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 \\
      bench/transport_overhead.py torch
  mpirun -np 2 /usr/bin/python3 bench/transport_overhead.py mpi
"""
import statistics
import sys
import time

import torch

import meshcast as mc

backend = sys.argv[1]
ops = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 7
if backend == "torch":
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, extra = dist.get_rank(), {}
else:
    from mpi4py import MPI
    rank, extra = MPI.COMM_WORLD.Get_rank(), dict(comm=MPI.COMM_WORLD)
src = mc.Layout(mc.Mesh([1], [0]), "R")
dst = mc.Layout(mc.Mesh([1], [1]), "R")
tensors = {f"t{i}": ((1,), "float32", src, dst) for i in range(ops)}
plan = mc.plan(tensors, cluster=mc.Cluster(hosts=2, devices_per_host=1), strategy="send_recv",
               bucket_bytes=0)
assert len(plan.ops) == ops, len(plan.ops)
resharder = mc.Resharder(plan, backend=backend, **extra)
shards = {name: ({0: torch.full((1,), float(i))} if rank == 0 else {})
          for i, name in enumerate(tensors)}
seconds = []
for _ in range(runs + 1):  # the first run warms up
    started = time.perf_counter()
    out = resharder.run(shards)
    seconds.append(time.perf_counter() - started)
if rank == 1:
    assert all(float(out[name][1]) == i for i, name in enumerate(tensors))
    median = statistics.median(seconds[1:])
    print(f"{backend}: {ops} ops of 4 bytes, median run {median:.4f} s over {runs} runs, "
          f"{ops / median:.0f} ops/s")
