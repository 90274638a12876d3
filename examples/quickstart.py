# The quickstart of docs/python.md: plan, simulate and run a resharding of a numpy array.
import numpy as np, meshcast as mc
cluster = mc.Cluster(hosts=4, devices_per_host=4, nic_gbps=10, dev_gbps=100)
src = mc.Layout(mc.Mesh([2, 4], devices=range(0, 8)), "S0R")
dst = mc.Layout(mc.Mesh([2, 4], devices=range(8, 16), axis_names=("dp", "tp")), mc.P(None, "tp"))
plan = mc.plan(shape=(1024, 512), dtype="float32", src=src, dst=dst, cluster=cluster)
print(plan.lower_bound_s, plan.simulate().time_s, len(plan.ops))
x = np.arange(1024 * 512, dtype=np.float32).reshape(1024, 512)
out = mc.Resharder(plan).run(mc.shard(x, src))      # {device id: ndarray}, local backend
want = mc.shard(x, dst)
assert all(np.array_equal(out[d], want[d]) for d in want)
