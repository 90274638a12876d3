"""Run by test_torch.py as 4 processes of one gloo group (env:// variables set by the test, as a
launcher sets them). Mode `refusals`: a plan for another world size and ranks given different
plans raise ValueError on every rank before any byte moves, and the group still works after.
Mode `killed`: rank 1 kills itself (SIGKILL) before its third run; every other rank's third run
(a rank that had no part left to play with rank 1 then the next, whose peer left after raising)
must raise (RuntimeError: a peer's connection closed, or TimeoutError) within the timeout, and the
process lives on to print what it caught."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import meshcast as mc

mode = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
assert dist.get_world_size() == 4, "run with 4 ranks"
src = mc.Layout(mc.Mesh([2], [0, 1]), "S0")
dst = mc.Layout(mc.Mesh([2], [2, 3]), "R")
x = torch.arange(1 << 16, dtype=torch.int32)
mine = {d: t for d, t in mc.shard(x, src).items() if d == rank}


def plan(strategy="broadcast", hosts=2):
    return mc.plan(shape=(1 << 16,), dtype="int32", src=src, dst=dst, strategy=strategy,
                   cluster=mc.Cluster(hosts=hosts, devices_per_host=2))


if mode == "refusals":
    try:
        mc.Resharder(plan(hosts=4), backend="torch")
        print(f"rank {rank}: a plan of 8 devices was accepted on 4 ranks")
    except ValueError as e:
        print(f"rank {rank}: wrong world size refused: {e}")
    try:
        mc.Resharder(plan("send_recv" if rank == 0 else "broadcast"), backend="torch", timeout=30)
        print(f"rank {rank}: different plans were accepted")
    except ValueError as e:
        print(f"rank {rank}: different plans refused: {e}")
    out = mc.Resharder(plan(), backend="torch", timeout=30).run(mine)
    want = mc.shard(x, dst)
    assert all(torch.equal(t, want[d]) for d, t in out.items())
    print(f"rank {rank}: the same plan ran after the refusals")
elif mode == "killed":
    timeout = float(sys.argv[2])
    resharder = mc.Resharder(plan(), backend="torch", timeout=timeout)
    for run in range(1, 1000):
        if rank == 1 and run == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        started = time.monotonic()
        try:
            resharder.run(mine)
        except (RuntimeError, TimeoutError) as e:
            kind = "TimeoutError" if isinstance(e, TimeoutError) else "RuntimeError"
            print(f"rank {rank}: run {run} raised {kind} after "
                  f"{time.monotonic() - started:.1f} s: {e}", flush=True)
            os._exit(0)  # the group is broken: leave without its destructor
    print(f"rank {rank}: 999 runs, expected the killed peer to stop them")
