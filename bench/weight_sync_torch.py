"""Weight sync over one gloo group: meshcast's joint plan against the two ways RL frameworks move
weights today, on the same group and the same bytes (docs/results.md#weight-sync-over-gloo-on-the-emulated-cluster).

One process per device of the model's cluster (device d = rank d of the default group, under
torchrun; scripts/weight-sync-emucluster --torch starts one torchrun node per emulated host). The
model is the weights suite's Llama-7B-like sync (mc.model_batch(arch="llama"), bfloat16, trainer
tp=4,pp=2 on devices 0-7) into `--serve`, shrunk with mc.shrink_batch to `--bytes` (by default
what one calibrated NIC moves in a second, as `meshcast bench --batch` shrinks it). Methods:

  joint      meshcast's joint plan of the whole batch, played by mc.Resharder(plan,
             backend="torch"), planned on the calibrated cluster with its latency raised to what
             one message costs over this transport: the median time of an op of a plan of 200
             one-element sends from device 0 to the first serving device, played over gloo before
             the methods run (the Python transport's calls and threads cost more per message than
             the calibrated wire latency, and the planner chooses chunks and buckets by it).
  joint_calibrated
             the same on the calibrated cluster as it is: the plan meshcast bench --batch plays
             over MPI.
  broadcast  checkpoint-engine's broadcast mode: each trainer rank packs the distinct source
             shards it holds first (in mesh order) into buckets of up to --bucket-bytes and
             dist.broadcast's each bucket to every serving rank (a group of that trainer rank and
             all serving ranks, made once); owners take turns in rank order, buckets in order;
             each serving rank copies out the parts of its tiles.
  gather     OpenRLHF's / slime's default: the tensors of one source-mesh root (the first device
             of the tensor's source mesh, as the weights suite's gather_broadcast; here devices 0
             and 4, one per pipeline stage) are gathered into whole tensors on that root (every
             other distinct source shard sent to it point to point), packed into buckets of up to
             --bucket-bytes, and each bucket dist.broadcast to every serving rank (a group of the
             root and all serving ranks); each serving rank copies out its tiles.

Each method: one warm-up and --iters timed runs, each after a barrier; a run's time is the slowest
rank's; the median is reported. Before every run every element of every serving tile is set to
the bitwise complement of what it must become, and after it every element of every serving tile is checked on every serving rank against the
formula the sources were filled from (bit for bit). Rank 0 prints one JSON document (the
simulated time of the joint plan on the calibrated cluster included) and writes it to --json.
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import meshcast as mc

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", required=True, help="serving parallelism, e.g. tp=8 or tp=2,replicas=4")
    p.add_argument("--label", default="", help="the model's name in the output (default: --serve)")
    p.add_argument("--cluster", required=True, help="cluster file of meshcast calibrate")
    p.add_argument("--bytes", type=int, default=0,
                   help="model size after shrinking (0: what one calibrated NIC moves in 1 s, at "
                        "most 64 MiB, as meshcast bench)")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--methods", default="joint,joint_calibrated,broadcast,gather")
    p.add_argument("--bucket-bytes", type=int, default=4 << 20,
                   help="bucket of the broadcast and gather methods (default 4 MiB)")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", default="", help="rank 0 writes the document here")
    return p.parse_args()


def cluster_of(path, hosts, devices_per_host):
    figures = json.load(open(path))
    return mc.Cluster(hosts, devices_per_host, figures["nic_gbps"], figures["dev_gbps"],
                      figures["latency_us"], figures.get("nics_per_host", 1))


def nonempty(box):
    return all(hi > lo for lo, hi in box)


def intersect(a, b):
    box = tuple((max(alo, blo), min(ahi, bhi)) for (alo, ahi), (blo, bhi) in zip(a, b))
    return box if nonempty(box) else None


def within(box, origin):
    """Slices of `box` in an array whose element 0 is at `origin`'s low corner."""
    return tuple(slice(lo - olo, hi - olo) for (lo, hi), (olo, _) in zip(box, origin))


_INT = {2: torch.int16, 4: torch.int32}


def pattern(index, shape, dtype, box):
    """The tile `box` of tensor number `index`: bits from a formula of the global index (any bit
    pattern, NaNs included, so that every element is distinct within 65,536 and compared bit for
    bit)."""
    rank = len(shape)
    flat = torch.zeros((), dtype=torch.int64)
    stride = 1
    for d in reversed(range(rank)):
        lo, hi = box[d]
        flat = flat + (torch.arange(lo, hi, dtype=torch.int64) * stride).reshape(
            [-1 if i == d else 1 for i in range(rank)])
        stride *= shape[d]
    size = torch.empty((), dtype=dtype).element_size()
    bits = 8 * size
    v = (flat * 40503 + (flat >> 16) * 9973 + index * 7919) & ((1 << bits) - 1)
    v = torch.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v.to(_INT[size]).view(dtype).contiguous()


def same_bits(a, b):
    size = a.element_size()
    return torch.equal(a.view(_INT[size]), b.view(_INT[size]))


class Model:
    def __init__(self, args, me):
        probe = mc.model_batch(arch="llama", dtype="bfloat16", train="tp=4,pp=2", serve=args.serve,
                               cluster=mc.Cluster(1, 4))
        self.cluster = cluster_of(args.cluster, probe.cluster.hosts, 4)
        nbytes = args.bytes or min(64 << 20, int(self.cluster.nic_gbps * 1e9 / 8))
        self.tensors = mc.shrink_batch(probe.tensors, nbytes)
        self.names = list(self.tensors)
        self.me = me
        self.bytes = 0
        # Per tensor: dtype, shape, {device: box} of the source and destination tiles.
        self.info = []
        for name, (shape, dtype, src, dst) in self.tensors.items():
            dtype = getattr(torch, dtype)
            self.bytes += torch.empty((), dtype=dtype).element_size() * _numel(shape)
            self.info.append((name, shape, dtype,
                              {d: b for d, b in src.tiles(shape).items() if nonempty(b)},
                              {d: b for d, b in dst.tiles(shape).items() if nonempty(b)}))
        self.serving = sorted({d for *_, dst in self.info for d in dst})
        self.trainer = sorted({d for *_, src, _ in self.info for d in src})
        # This rank's source shards and destination tiles (and what they must hold).
        self.src = {name: {me: pattern(i, shape, dtype, src[me])}
                    for i, (name, shape, dtype, src, _) in enumerate(self.info) if me in src}
        self.out = {name: {me: torch.empty([hi - lo for lo, hi in dst[me]], dtype=dtype)}
                    for name, shape, dtype, _, dst in self.info if me in dst}
        self.expected = {name: pattern(i, shape, dtype, dst[me])
                         for i, (name, shape, dtype, _, dst) in enumerate(self.info) if me in dst}

    def reset(self):
        """Every destination element made different from what it must become."""
        for name, expected in self.expected.items():
            size = expected.element_size()
            torch.bitwise_not(expected.view(_INT[size]), out=self.out[name][self.me].view(_INT[size]))

    def check(self):
        """(elements checked, wrong) of this rank's destination tiles."""
        checked = wrong = 0
        for name, expected in self.expected.items():
            got = self.out[name][self.me]
            checked += got.numel()
            if not same_bits(got, expected):
                size = got.element_size()
                wrong += int((got.view(_INT[size]) != expected.view(_INT[size])).sum())
        return checked, wrong

    def first_holders(self, i):
        """{holder: box} of tensor i's distinct source shards, each held first by `holder`."""
        _, _, _, src, _ = self.info[i]
        seen = {}
        for d in sorted(src):
            seen.setdefault(src[d], d)
        return {d: box for box, d in seen.items()}

    def keep(self, i, box, data):
        """Copies the part of `data` (the box `box` of tensor i) that this rank's tile needs."""
        name, _, _, _, dst = self.info[i]
        if self.me not in dst:
            return
        part = intersect(box, dst[self.me])
        if part is not None:
            self.out[name][self.me][within(part, dst[self.me])].copy_(data[within(part, box)])


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def buckets(entries, limit):
    """Consecutive entries (i, box, nbytes) in buckets of at most `limit` bytes (an entry larger
    than that alone): [(entries with their byte offsets, bucket bytes)]."""
    out, current, size = [], [], 0
    for i, box, nbytes in entries:
        if current and size + nbytes > limit:
            out.append((current, size))
            current, size = [], 0
        current.append((i, box, size))
        size += nbytes
    if current:
        out.append((current, size))
    return out


class Broadcast:
    """checkpoint-engine's broadcast mode (the module's docstring)."""

    def __init__(self, model, limit):
        self.model = model
        owned = {d: [] for d in model.trainer}
        for i, (_, _, dtype, _, _) in enumerate(model.info):
            for holder, box in model.first_holders(i).items():
                owned[holder].append((i, box, _nbytes(box, dtype)))
        self.rounds = [(d, buckets(owned[d], limit)) for d in model.trainer if owned[d]]
        self.groups = {d: dist.new_group(sorted({d, *model.serving})) for d, _ in self.rounds}
        largest = max((size for _, bs in self.rounds for _, size in bs), default=0)
        self.buffer = torch.empty(largest, dtype=torch.uint8)

    def run(self):
        m, me = self.model, self.model.me
        for owner, owner_buckets in self.rounds:
            if me != owner and me not in m.serving:
                continue
            for entries, size in owner_buckets:
                buf = self.buffer[:size]
                if me == owner:
                    for i, box, offset in entries:
                        shard = m.src[m.info[i][0]][me]
                        buf[offset:offset + shard.numel() * shard.element_size()].copy_(
                            shard.reshape(-1).view(torch.uint8))
                dist.broadcast(buf, src=owner, group=self.groups[owner])
                if me in m.serving:
                    for i, box, offset in entries:
                        dtype = m.info[i][2]
                        n = _nbytes(box, dtype)
                        m.keep(i, box, buf[offset:offset + n].view(dtype).view(
                            [hi - lo for lo, hi in box]))


class Gather:
    """OpenRLHF's / slime's gather on a root, then broadcast (the module's docstring)."""

    def __init__(self, model, limit):
        self.model = model
        per_root = {}
        for i, (_, shape, dtype, src, _) in enumerate(model.info):
            root = min(src)  # the source mesh's first device (tp=4,pp=2: 0 or 4)
            whole = tuple((0, s) for s in shape)
            per_root.setdefault(root, []).append((i, whole, _nbytes(whole, dtype)))
        self.rounds = [(root, buckets(entries, limit)) for root, entries in sorted(per_root.items())]
        self.groups = {root: dist.new_group(sorted({root, *model.serving}))
                       for root, _ in self.rounds}
        largest = max((size for _, bs in self.rounds for _, size in bs), default=0)
        self.buffer = torch.empty(largest, dtype=torch.uint8)
        self.received = {}  # (i, holder) -> the root's receive buffer of that shard

    def run(self):
        m, me = self.model, self.model.me
        for root, root_buckets in self.rounds:
            for entries, size in root_buckets:
                buf = self.buffer[:size]
                # The gather: every other holder of a distinct shard sends it to the root.
                works = []
                for i, whole, offset in entries:
                    name, shape, dtype, _, _ = m.info[i]
                    for holder, box in m.first_holders(i).items():
                        if holder == root:
                            continue
                        if me == holder:
                            works.append(dist.isend(m.src[name][me], root, tag=i))
                        elif me == root:
                            key = (i, holder)
                            if key not in self.received:
                                self.received[key] = torch.empty([hi - lo for lo, hi in box],
                                                                 dtype=dtype)
                            works.append(dist.irecv(self.received[key], holder, tag=i))
                for w in works:
                    w.wait()
                if me != root and me not in m.serving:
                    continue
                if me == root:
                    for i, whole, offset in entries:
                        name, shape, dtype, _, _ = m.info[i]
                        full = buf[offset:offset + _nbytes(whole, dtype)].view(dtype).view(shape)
                        for holder, box in m.first_holders(i).items():
                            part = m.src[name][me] if holder == root else self.received[(i, holder)]
                            full[within(box, whole)].copy_(part)
                dist.broadcast(buf, src=root, group=self.groups[root])
                if me in m.serving:
                    for i, whole, offset in entries:
                        _, shape, dtype, _, _ = m.info[i]
                        m.keep(i, whole, buf[offset:offset + _nbytes(whole, dtype)].view(dtype)
                               .view(shape))


def transport_latency(model, timeout, ops=200):
    """Seconds one op of `ops` one-element sends from device 0 to the first serving device takes
    over this transport (the slowest rank's time of a run after a warm-up, over `ops`)."""
    a, b = model.trainer[0], model.serving[0]
    src, dst = mc.Layout(mc.Mesh([1], [a]), "R"), mc.Layout(mc.Mesh([1], [b]), "R")
    tensors = {f"t{i}": ((1,), "float32", src, dst) for i in range(ops)}
    plan = mc.plan(tensors, cluster=model.cluster, strategy="send_recv", bucket_bytes=0)
    resharder = mc.Resharder(plan, backend="torch", timeout=timeout)
    shards = {n: {a: torch.full((1,), float(i))} for i, n in enumerate(tensors)} if model.me == a else {}
    for _ in range(2):
        dist.barrier()
        started = time.perf_counter()
        resharder.run(shards)
        seconds = slowest(time.perf_counter() - started)
    del resharder
    return seconds / ops


class Joint:
    def __init__(self, model, timeout, cluster):
        self.model = model
        # Planned once, on rank 0 (as meshcast bench plans on its leader), and sent to the others.
        text = [mc.plan(model.tensors, cluster=cluster).to_json() if model.me == 0 else None]
        dist.broadcast_object_list(text, src=0)
        self.plan = mc.Plan.from_json(text[0])
        self.plan_latency_us = cluster.latency_us
        self.resharder = mc.Resharder(self.plan, backend="torch", timeout=timeout)

    def run(self):
        m = self.model
        self.resharder.run({n: m.src.get(n, {}) for n in m.names},
                           {n: m.out.get(n, {}) for n in m.names})


def _nbytes(box, dtype):
    return _numel([hi - lo for lo, hi in box]) * torch.empty((), dtype=dtype).element_size()


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def total(*counts):
    t = torch.tensor(counts, dtype=torch.int64)
    dist.all_reduce(t)
    return [int(x) for x in t]


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    me = dist.get_rank()
    model = Model(args, me)
    if dist.get_world_size() != model.cluster.hosts * model.cluster.devices_per_host:
        raise ValueError(f"the model's cluster has {model.cluster.hosts * 4} devices, the group "
                         f"{dist.get_world_size()} ranks: expected one rank per device")
    doc = {"model": args.label or args.serve, "serve": args.serve, "tensors": len(model.names),
           "model_bytes": model.bytes, "bucket_bytes": args.bucket_bytes,
           "cluster": vars(model.cluster), "iters": args.iters, "rows": []}
    c = model.cluster
    latency_s = transport_latency(model, args.timeout)
    over_gloo = mc.Cluster(c.hosts, c.devices_per_host, c.nic_gbps, c.dev_gbps,
                           max(c.latency_us, latency_s * 1e6), c.nics_per_host)
    doc["transport_latency_us"] = latency_s * 1e6
    for method in args.methods.split(","):
        setup = time.perf_counter()
        player = {"joint": lambda: Joint(model, args.timeout, over_gloo),
                  "joint_calibrated": lambda: Joint(model, args.timeout, model.cluster),
                  "broadcast": lambda: Broadcast(model, args.bucket_bytes),
                  "gather": lambda: Gather(model, args.bucket_bytes)}[method]()
        setup = time.perf_counter() - setup
        times, checked, wrong = [], 0, 0
        for run in range(1 + args.iters):
            model.reset()
            dist.barrier()
            started = time.perf_counter()
            player.run()
            seconds = slowest(time.perf_counter() - started)
            c, w = model.check()
            checked, wrong = checked + c, wrong + w
            if run > 0:
                times.append(seconds)
        checked, wrong = total(checked, wrong)
        row = {"method": method, "times_s": times, "median_s": statistics.median(times),
               "checked": checked, "wrong": wrong, "setup_s": setup}
        if method.startswith("joint"):
            sim = player.plan.simulate()
            row.update(simulated_s=sim.time_s, lower_bound_s=sim.lower_bound_s,
                       ops=len(player.plan.ops), latency_us=player.plan_latency_us)
            del player.resharder  # before the group goes (docs/python.md)
        doc["rows"].append(row)
        if me == 0:
            print(json.dumps(row), flush=True)
        if wrong:
            raise RuntimeError(f"{method}: {wrong} of {checked} destination elements wrong")
    if me == 0:
        joint = next((r for r in doc["rows"] if r["method"] == "joint"), None)
        for r in doc["rows"]:
            if joint:
                r["joint_speedup"] = r["median_s"] / joint["median_s"]
        if args.json:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
