"""A chain over gloo against one dist.send of the same bytes (docs/results.md#a-chain-over-gloo).

One process per host (torchrun, e.g. `scripts/emucluster torchrun --nproc-per-node 1`), rank r =
device r. Rank 0 sends --bytes to every other rank three ways, each timed as the slowest rank's
time after a barrier, median of --iters runs after one warm-up:

  chain      meshcast's broadcast plan (one chained broadcast 0 -> 1 -> ... -> N-1 in chunks of
             --chunk-bytes), played by mc.Resharder(plan, backend="torch"); every element of
             every receiver checked after every run;
  send_one   one dist.send of the same bytes from rank 0 to rank 1 (the time a perfectly
             pipelined chain approaches when every hop has a link of its own);
  broadcast  gloo's dist.broadcast of the same bytes from rank 0 to all.

The plan's cluster is --cluster (meshcast calibrate's figures: the chain window follows its
bandwidth and latency). Prints one JSON document per chunk size; `vs_one` is send_one's time
over the chain's (the MPI chain reaches 0.94 of one MPI_Send in docs/performance.md).
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import meshcast as mc


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def timed(run, iters):
    times = []
    for i in range(1 + iters):
        dist.barrier()
        started = time.perf_counter()
        run()
        seconds = slowest(time.perf_counter() - started)
        if i > 0:
            times.append(seconds)
    return statistics.median(times), times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bytes", type=int, default=16 << 20)
    p.add_argument("--chunk-bytes", default="262144", help="comma-separated chunk sizes")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--cluster", required=True, help="cluster file of meshcast calibrate")
    p.add_argument("--methods", default="chain,send_one,broadcast")
    args = p.parse_args()
    dist.init_process_group("gloo")
    me, n = dist.get_rank(), dist.get_world_size()
    figures = json.load(open(args.cluster))
    cluster = mc.Cluster(n, 1, figures["nic_gbps"], figures["dev_gbps"], figures["latency_us"])
    elements = args.bytes // 4
    methods = args.methods.split(",")
    rows = []
    if "send_one" in methods:
        data = torch.arange(elements, dtype=torch.int32)

        def send_one():
            if me == 0:
                dist.send(data, 1)
            elif me == 1:
                dist.recv(data, 0)
        median, times = timed(send_one, args.iters)
        rows.append({"method": "send_one", "median_s": median, "times_s": times})
    if "broadcast" in methods:
        data = torch.arange(elements, dtype=torch.int32)
        median, times = timed(lambda: dist.broadcast(data, 0), args.iters)
        rows.append({"method": "broadcast", "median_s": median, "times_s": times})
    if "chain" in methods:
        src = mc.Layout(mc.Mesh([1], [0]), "R")
        dst = mc.Layout(mc.Mesh([n - 1], list(range(1, n))), "R")
        expected = torch.arange(elements, dtype=torch.int32)
        for chunk in (int(c) for c in args.chunk_bytes.split(",")):
            plan = mc.plan(shape=(elements,), dtype="int32", src=src, dst=dst, cluster=cluster,
                           strategy="broadcast", chunk_bytes=chunk)
            resharder = mc.Resharder(plan, backend="torch")
            shards = {0: expected} if me == 0 else {}
            out = {me: torch.empty(elements, dtype=torch.int32)} if me > 0 else {}
            wrong = [0]

            def chain():
                if me > 0:
                    out[me].fill_(-1)
                resharder.run(shards, out)
                if me > 0 and not torch.equal(out[me], expected):
                    wrong[0] += 1
            median, times = timed(chain, args.iters)
            bad = torch.tensor([wrong[0]])
            dist.all_reduce(bad)
            if int(bad):
                raise RuntimeError(f"chain of {chunk} B chunks: {int(bad)} runs delivered wrong bytes")
            rows.append({"method": "chain", "chunk_bytes": chunk, "ops": len(plan.ops),
                         "median_s": median, "times_s": times,
                         "simulated_s": plan.simulate().time_s, "verified_runs": (1 + args.iters) * (n - 1)})
            del resharder
    one = next((r["median_s"] for r in rows if r["method"] == "send_one"), None)
    for r in rows:
        if one and r["method"] == "chain":
            r["vs_one"] = one / r["median_s"]
    if me == 0:
        print(json.dumps({"ranks": n, "bytes": elements * 4, "cluster": vars(cluster), "rows": rows},
                         indent=1), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
