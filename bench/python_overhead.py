"""Resharder.run from Python against the same compiled plan run from C++ (`meshcast run`), for a
4 MiB tensor: the binding's overhead. Like for like: both sides time the wall clock around one
compiled plan's run call on the calling thread (C++: `wall_median_s`, measured in the library's
measure loop that `meshcast run` uses), the same buffers reused, the same repeats. Rounds alternate
the two so machine load hits both alike.
Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py build/tools/meshcast/meshcast
"""
import json
import statistics
import subprocess
import sys
import time

import numpy as np

import meshcast as mc

MESHCAST = sys.argv[1]
ROUNDS, ITERS, THREADS = 7, 50, 2

cluster = mc.Cluster(hosts=4, devices_per_host=4)
src = mc.Layout(mc.Mesh([2, 4], range(0, 8)), "S0R")
dst = mc.Layout(mc.Mesh([2, 4], range(8, 16)), "RS1")
plan = mc.plan(shape=(1024, 1024), dtype="float32", src=src, dst=dst, cluster=cluster)
plan_file = "/tmp/meshcast_python_overhead_plan.json"
with open(plan_file, "w") as f:
    f.write(plan.to_json())

x = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)
shards = mc.shard(x, src)
out = {d: np.empty_like(t) for d, t in mc.shard(x, dst).items()}
resharder = mc.Resharder(plan, threads=THREADS)

cpp_wall, cpp, python, python_executor = [], [], [], []
for r in range(ROUNDS):
    print(f"round {r + 1}/{ROUNDS}", file=sys.stderr)
    report = json.loads(subprocess.run(
        [MESHCAST, "run", "--plan", plan_file, "--backend", "local", "--threads", str(THREADS),
         "--iters", str(ITERS), "--warmup", "5", "--json"],
        check=True, capture_output=True, text=True).stdout)
    cpp_wall.append(report["wall_median_s"])
    cpp.append(report["median_s"])
    for _ in range(5):
        resharder.run(shards, out)
    times, executor_times = [], []
    for _ in range(ITERS):
        start = time.perf_counter()
        resharder.run(shards, out)
        times.append(time.perf_counter() - start)
        executor_times.append(resharder.seconds)
    python.append(statistics.median(times))
    python_executor.append(statistics.median(executor_times))
want = mc.shard(x, dst)
assert all(np.array_equal(out[d], want[d]) for d in want)
cw, c = statistics.median(cpp_wall), statistics.median(cpp)
p, pe = statistics.median(python), statistics.median(python_executor)
print(f"4 MiB float32 S0R -> RS1, 2x4 -> 2x4, {THREADS} threads, {ROUNDS} rounds x {ITERS} runs,")
print("medians of round medians")
print(f"C++ CompiledPlan::run, wall time around the call:  {cw * 1e3:.3f} ms")
print(f"Python Resharder.run, wall time around the call:   {p * 1e3:.3f} ms")
print(f"C++ executor time (start until the devices finish): {c * 1e3:.3f} ms")
print(f"Python executor time:                               {pe * 1e3:.3f} ms")
print(f"Python / C++: wall {p / cw:.3f}, executor time {pe / c:.3f}")

# The binding's fixed cost per call: the same layouts on a 16x16 tensor, where moving bytes
# costs almost nothing, Python's wall time around run() against the executor's own time.
tiny = mc.plan(shape=(16, 16), dtype="float32", src=src, dst=dst, cluster=cluster)
t = np.arange(256, dtype=np.float32).reshape(16, 16)
tiny_shards = mc.shard(t, src)
tiny_out = {d: np.empty_like(a) for d, a in mc.shard(t, dst).items()}
tiny_resharder = mc.Resharder(tiny, threads=THREADS)
walls, executors = [], []
for _ in range(20 + ROUNDS * ITERS):
    start = time.perf_counter()
    tiny_resharder.run(tiny_shards, tiny_out)
    walls.append(time.perf_counter() - start)
    executors.append(tiny_resharder.seconds)
gap = statistics.median(walls[20:]) - statistics.median(executors[20:])
print(f"16x16 tensor: wall - executor time {gap * 1e6:.1f} us per call "
      f"({gap / c * 100:.1f}% of the 4 MiB run)")
