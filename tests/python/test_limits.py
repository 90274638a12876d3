"""Values at the edges of what the library can represent: a timeout beyond the clock's range means
forever, not an overflowed deadline that ends the process at once."""
import subprocess
import sys

import numpy as np
import pytest

import meshcast as mc


def small_plan():
    cluster = mc.Cluster(hosts=2, devices_per_host=2)
    src = mc.Layout(mc.Mesh([2], devices=[0, 1]), "S0R")
    dst = mc.Layout(mc.Mesh([2], devices=[2, 3]), "RS0")
    return mc.plan(shape=(6, 4), dtype="float32", src=src, dst=dst, cluster=cluster), src, dst


@pytest.mark.parametrize("timeout", [1e10, 1e300])
def test_a_huge_timeout_means_forever(timeout):
    # 1e10 s once overflowed the watchdog's nanoseconds: its deadline lay in the past and the
    # process ended at once with exit status 3. The Resharder now raises instead, but a child
    # process still keeps a regression from ending pytest itself.
    child = subprocess.run([sys.executable, "-c", f"""
import numpy as np, meshcast as mc, sys
sys.path.insert(0, {repr(__file__.rsplit('/', 1)[0])})
from test_limits import small_plan
plan, src, dst = small_plan()
x = np.arange(24, dtype=np.float32).reshape(6, 4)
out = mc.Resharder(plan, timeout={timeout!r}).run(mc.shard(x, src))
want = mc.shard(x, dst)
assert sorted(out) == sorted(want), (sorted(out), sorted(want))
for device, shard in want.items():
    assert np.array_equal(out[device], shard), device
print("ok")
"""], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "ok"


@pytest.mark.parametrize("timeout", [-1.0, float("nan"), float("inf")])
def test_a_negative_or_non_finite_timeout_is_refused(timeout):
    plan, _, _ = small_plan()
    with pytest.raises(Exception, match="expected a number of seconds >= 0"):
        mc.Resharder(plan, timeout=timeout)
