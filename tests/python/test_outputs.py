"""What a run returns: outputs of the array kind asked for (never what the sources happen to be),
one run at a time from several threads, and outputs that must not share memory."""
import threading

import numpy as np
import pytest
import torch

import meshcast as mc

CLUSTER = mc.Cluster(hosts=4, devices_per_host=4)
TRAIN = mc.Mesh([2, 4], range(0, 8))
SERVE = mc.Mesh([4, 2], range(8, 16))


def mixed_batch():
    """A float32 tensor given as numpy and a bfloat16 one as torch (numpy has no bfloat16)."""
    tensors = {"w": ((8, 6), "float32", mc.Layout(TRAIN, "S0R"), mc.Layout(SERVE, "RS1")),
               "b": ((8, 6), torch.bfloat16, mc.Layout(TRAIN, "RS1"), mc.Layout(SERVE, "S0R"))}
    xs = {"w": np.arange(48, dtype=np.float32).reshape(8, 6),
          "b": torch.arange(48, dtype=torch.float32).reshape(8, 6).to(torch.bfloat16)}
    return tensors, xs


def test_outputs_are_the_array_kind_asked_for_whatever_the_sources_are():
    tensors, xs = mixed_batch()
    plan = mc.plan(tensors, cluster=CLUSTER)
    src = {name: mc.shard(xs[name], tensors[name][2]) for name in tensors}
    # numpy (the default) cannot hold the bfloat16 outputs: refused before anything moves.
    with pytest.raises(ValueError, match="tensor 'b' is bfloat16, which numpy has no dtype for: "
                                         "make the Resharder with array='torch'"):
        mc.Resharder(plan).run(src)
    out = mc.Resharder(plan, array="torch").run(src)
    for name, x in (("w", torch.from_numpy(xs["w"])), ("b", xs["b"])):
        want = mc.shard(x, tensors[name][3])
        assert sorted(out[name]) == sorted(want)
        for d in want:
            assert isinstance(out[name][d], torch.Tensor) and torch.equal(out[name][d], want[d])
    # Torch sources of a float32 plan give numpy outputs by default: the kind never follows them.
    one = mc.plan(shape=(8, 6), dtype="float32", src=tensors["w"][2], dst=tensors["w"][3],
                  cluster=CLUSTER)
    out = mc.Resharder(one).run(mc.shard(torch.from_numpy(xs["w"]), tensors["w"][2]))
    want = mc.shard(xs["w"], tensors["w"][3])
    assert all(type(out[d]) is np.ndarray and np.array_equal(out[d], want[d]) for d in want)
    with pytest.raises(ValueError, match="bad array 'jax': expected 'numpy' or 'torch'"):
        mc.Resharder(one, array="jax")


def example():
    src = mc.Layout(TRAIN, "S0R")
    dst = mc.Layout(SERVE, "RS1")
    plan = mc.plan(shape=(64, 32), dtype="float32", src=src, dst=dst, cluster=CLUSTER)
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    return plan, mc.shard(x, src), mc.shard(x, dst)


def test_one_resharder_from_several_threads_takes_turns_or_says_a_run_is_in_flight():
    plan, shards, want = example()
    resharder = mc.Resharder(plan)
    wrong = []

    def sync():
        for _ in range(20):
            try:
                out = resharder.run(shards)
                if out is None or any(not np.array_equal(out[d], want[d]) for d in want):
                    wrong.append(out)
            except Exception as e:  # noqa: BLE001: every failure is what the test reports
                wrong.append(e)

    def start_and_wait():  # unserialized: either a whole run's right outputs or RuntimeError
        for _ in range(20):
            try:
                resharder.start(shards)  # allocating runs Python code: other threads get in
                out = resharder.wait()
                if out is None or any(not np.array_equal(out[d], want[d]) for d in want):
                    wrong.append(out)
            except RuntimeError as e:
                if "in flight" not in str(e) and "nothing was started" not in str(e):
                    wrong.append(e)
            except Exception as e:  # noqa: BLE001
                wrong.append(e)

    for target in (sync, start_and_wait):
        threads = [threading.Thread(target=target) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not wrong, (target.__name__, wrong[:3])
    # start() and wait() are not serialized: a second start() while a run is in flight is an error.
    resharder.start(shards)
    with pytest.raises(RuntimeError, match=r"start\(\): a run is in flight"):
        resharder.start(shards)
    out = resharder.wait()
    assert all(np.array_equal(out[d], want[d]) for d in want)
    with pytest.raises(RuntimeError, match=r"wait\(\): nothing was started"):
        resharder.wait()


def test_outputs_sharing_memory_are_refused_naming_the_arrays():
    plan, shards, want = example()
    resharder = mc.Resharder(plan)
    out = {d: np.full(t.shape, -1, np.float32) for d, t in want.items()}
    with pytest.raises(ValueError, match=r"out\[8\] and out\[9\] share memory"):
        resharder.run(shards, {**out, 9: out[8]})
    # Two views of one buffer that overlap by half.
    rows, cols = want[8].shape
    base = np.zeros(3 * rows * cols // 2, np.float32)
    halves = {8: base[:rows * cols].reshape(rows, cols), 9: base[rows * cols // 2:].reshape(rows, cols)}
    with pytest.raises(ValueError, match=r"out\[8\] and out\[9\] share memory"):
        resharder.run(shards, {**out, **halves})
    assert all((a == -1).all() for a in out.values()) and not base.any()  # nothing was written
    # Reading a source while writing it: device 0 and 1 swap halves, given out=src.
    halves_of = mc.Layout(mc.Mesh([2], [0, 1]), "S0")
    swap = mc.plan(shape=(8,), dtype="float32", src=halves_of,
                   dst=mc.Layout(mc.Mesh([2], [1, 0]), "S0"), cluster=mc.Cluster(1, 2))
    src = mc.shard(np.arange(8, dtype=np.float32), halves_of)
    with pytest.raises(ValueError, match=r"(src|out)\[0\] and (src|out)\[0\] share memory"):
        mc.Resharder(swap).run(src, src)
    # Sources may share memory: two replicas given one array.
    replicated = mc.plan(shape=(4,), dtype="float32", src=mc.Layout(mc.Mesh([2], [0, 1]), "R"),
                         dst=mc.Layout(mc.Mesh([1], [2]), "R"), cluster=mc.Cluster(1, 3))
    x = np.arange(4, dtype=np.float32)
    assert np.array_equal(mc.Resharder(replicated).run({0: x, 1: x})[2], x)
