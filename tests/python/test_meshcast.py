"""The Python package: layouts in the three vocabularies, runs on numpy and torch checked element
by element against mc.shard of the global array, zero-copy, and bad input."""
import json
import random

import numpy as np
import pytest
import torch

import meshcast as mc


def random_case(rng):
    """A random resharding with its specs in a random vocabulary each."""
    rank = rng.randint(1, 3)
    shape = [rng.randint(1, 11) for _ in range(rank)]
    meshes = []
    first = 0
    for _ in range(2):
        mesh_shape = [rng.randint(1, 3) for _ in range(rng.randint(1, 2))]
        n = int(np.prod(mesh_shape))
        devices = list(range(first, first + n))
        rng.shuffle(devices)
        meshes.append(mc.Mesh(mesh_shape, devices, axis_names=[f"a{i}" for i in range(len(mesh_shape))]))
        first = rng.choice([0, first + n])  # destination shares devices or not
    layouts = []
    for mesh in meshes:
        dims = [[] for _ in range(rank)]
        for axis in range(len(mesh.shape)):
            d = rng.randint(0, rank)
            if d < rank:
                dims[d].append(axis)
        vocabulary = rng.choice(["alpa", "dtensor", "jax"])
        if vocabulary == "dtensor":
            placements = [mc.Replicate() for _ in mesh.shape]
            for d, axes in enumerate(dims):
                for a in axes:
                    placements[a] = mc.Shard(d)
            spec = placements
        elif vocabulary == "jax":
            spec = mc.P(*[None if not axes else (mesh.axis_names[axes[0]] if len(axes) == 1 else
                          tuple(mesh.axis_names[a] for a in axes)) for axes in dims])
        else:
            spec = "".join("R" if not axes else "S" + "".join(map(str, axes)) for axes in dims)
        layouts.append(mc.Layout(mesh, spec))
    devices = max(max(m.devices) for m in meshes) + 1
    cluster = mc.Cluster(hosts=devices, devices_per_host=1)
    return shape, layouts[0], layouts[1], cluster


@pytest.mark.parametrize("seed", range(6))
def test_random_layouts_every_element(seed):
    rng = random.Random(seed)
    for _ in range(25):
        shape, src, dst, cluster = random_case(rng)
        dtype = rng.choice(["float32", "int64", "float64", "int8"])
        plan = mc.plan(shape=shape, dtype=dtype, src=src, dst=dst, cluster=cluster,
                       strategy=rng.choice(["send_recv", "allgather", "broadcast"]))
        x = (np.arange(int(np.prod(shape))) % 120).astype(dtype).reshape(shape)
        out = mc.Resharder(plan).run(mc.shard(x, src))
        want = mc.shard(x, dst)
        assert sorted(out) == sorted(want), (src, dst)
        for d in want:
            assert np.array_equal(out[d], want[d]), (shape, src, dst, d)
        assert np.array_equal(mc.unshard(out, dst), x)


def test_torch_tensors_and_bfloat16():
    src = mc.Layout(mc.Mesh([4]), [mc.Shard(0)])
    dst = mc.Layout(mc.Mesh([2, 2], range(4, 8)), [mc.Replicate(), mc.Shard(1)])
    plan = mc.plan(shape=(6, 10), dtype="bfloat16", src=src, dst=dst,
                   cluster=mc.Cluster(hosts=2, devices_per_host=4))
    x = torch.arange(60, dtype=torch.float32).reshape(6, 10).to(torch.bfloat16)
    out = mc.Resharder(plan, array="torch").run(mc.shard(x, src))
    want = mc.shard(x, dst)
    assert all(isinstance(t, torch.Tensor) and torch.equal(out[d], want[d]) for d, t in want.items())
    assert torch.equal(mc.unshard(out, dst), x)


def test_nested_dtensor_split_differs_from_flat():
    mesh = mc.Mesh([2, 2])
    nested = mc.Layout(mesh, [mc.Shard(0), mc.Shard(0)])
    flat = mc.Layout(mesh, mc.P(("0", "1")))
    assert nested.spec == "S0/1" and flat.spec == "S01"
    x = np.arange(5)
    # DTensor: chunk(5, 2) = 3, 2; then each by 2: 2, 1 and 1, 1. torch.chunk(5, 4): 2, 2, 1.
    assert [len(t) for t in mc.shard(x, nested).values()] == [2, 1, 1, 1]
    assert [len(t) for t in mc.shard(x, flat).values()] == [2, 2, 1]


def test_equivalent_specs_give_identical_plans():
    mesh = mc.Mesh([2, 4], axis_names=("dp", "tp"))
    dst = mc.Layout(mc.Mesh([2, 4], range(8, 16)), "RS1")
    cluster = mc.Cluster(hosts=4, devices_per_host=4)
    def plan(spec):
        return mc.plan(shape=(64, 32), dtype="float32", src=mc.Layout(mesh, spec), dst=dst,
                       cluster=cluster)
    plans = [plan(spec).to_json() for spec in ["S01R", "S01,R", mc.P(("dp", "tp"), None),
                                               (("dp", "tp"), None), "P(('dp','tp'), None)"]]
    assert all(p == plans[0] for p in plans)
    # Nested (DTensor) and flat splits agree when the sizes divide: the same ops.
    assert plan([mc.Shard(0), mc.Shard(0)]).ops == plan("S01R").ops


def example():
    cluster = mc.Cluster(hosts=4, devices_per_host=4)
    src = mc.Layout(mc.Mesh([2, 4], range(0, 8)), "S0R")
    dst = mc.Layout(mc.Mesh([2, 4], range(8, 16), axis_names=("dp", "tp")), mc.P(None, "tp"))
    plan = mc.plan(shape=(64, 32), dtype="float32", src=src, dst=dst, cluster=cluster)
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    return plan, src, dst, x


def test_plan_json_round_trip_and_simulation():
    plan, _, _, _ = example()
    again = mc.Plan.from_json(plan.to_json())
    assert again.to_json() == plan.to_json() and again.ops == plan.ops
    sim = plan.simulate()
    assert sim.time_s >= plan.lower_bound_s * (1 - 1e-9) and sim.lower_bound_s == plan.lower_bound_s
    assert sim.busiest_links and sim.busiest_links[0].bytes > 0
    assert {op["kind"] for op in plan.ops} <= {"send", "broadcast", "allgather", "copy"}
    with pytest.raises(ValueError, match="not JSON"):
        mc.Plan.from_json("{")


def test_simulation_names_the_term_of_the_bound():
    # Hosts 2 and 3 each take in the whole 8 KiB over one NIC, where hosts 0 and 1 send out a half
    # each: in(h) of host 2 (the first of the two) decides.
    plan, _, _, _ = example()
    term = plan.simulate().bound_term
    assert term["term"] == "in" and term["at"] == 2 and term["text"].startswith("in(h) of host 2: ")
    # A plan document whose bound is not this version's count names none.
    doc = json.loads(plan.to_json())
    doc["lower_bound_s"] *= 2
    assert mc.Plan.from_json(json.dumps(doc)).simulate().bound_term is None


def test_zero_copy_in_place_and_reuse():
    plan, src, dst, x = example()
    resharder = mc.Resharder(plan)
    shards = mc.shard(x, src)
    out = {d: np.zeros_like(t) for d, t in mc.shard(x, dst).items()}
    pointers = {d: a.ctypes.data for d, a in out.items()}
    for _ in range(2):
        got = resharder.run(shards, out)
        assert all(got[d] is out[d] and got[d].ctypes.data == pointers[d] for d in out)
        assert all(np.array_equal(out[d], t) for d, t in mc.shard(x, dst).items())
    # torch: the output tensors given are the ones written.
    t_out = {d: torch.zeros(tuple(a.shape)) for d, a in out.items()}
    t_ptr = {d: t.data_ptr() for d, t in t_out.items()}
    resharder.run(mc.shard(torch.from_numpy(x), src), t_out)
    assert all(t_out[d].data_ptr() == t_ptr[d] and np.array_equal(t_out[d].numpy(), out[d]) for d in out)


def test_start_wait_releases_the_gil():
    plan, src, dst, x = example()
    resharder = mc.Resharder(plan)
    resharder.start(mc.shard(x, src))
    busy = sum(range(1000))  # Python runs while the transfer is in flight
    out = resharder.wait()
    assert busy == 499500
    assert all(np.array_equal(out[d], t) for d, t in mc.shard(x, dst).items())
    with pytest.raises(RuntimeError, match="nothing was started"):
        resharder.wait()
    # Dropped while a run is in flight: the run finishes first, nothing crashes.
    out = {d: np.zeros_like(t) for d, t in mc.shard(x, dst).items()}
    dropped = mc.Resharder(plan)
    dropped.start(mc.shard(x, src), out)
    del dropped
    assert all(np.array_equal(out[d], t) for d, t in mc.shard(x, dst).items())


def bad_input_error(mutate, kind=ValueError):
    plan, src, dst, x = example()
    shards = mc.shard(x, src)
    out = {d: np.full(t.shape, -1, np.float32) for d, t in mc.shard(x, dst).items()}
    shards, out = mutate(shards, out)
    with pytest.raises(kind) as error:
        mc.Resharder(plan).run(shards, out)
    if isinstance(out, dict):  # nothing written to out on error
        assert all((a == -1).all() for a in out.values() if isinstance(a, np.ndarray) and a.dtype == np.float32)
    return str(error.value)


def test_bad_input_names_the_value_and_what_was_expected():
    def wrong_dtype(s, o):
        s[0] = s[0].astype(np.float64)
        return s, o
    assert "src[0]: dtype float64, expected float32" in bad_input_error(wrong_dtype)

    def wrong_shape(s, o):
        s[1] = s[1][:3]
        return s, o
    assert "src[1]: shape (3, 32), expected (32, 32)" in bad_input_error(wrong_shape)

    def missing(s, o):
        del s[2]
        return s, o
    assert "src: no shard for device 2" in bad_input_error(missing)

    def reversed_view(s, o):
        s[0] = s[0][::-1]
        return s, o
    assert "src[0]: strides (-128, 4) bytes, expected non-negative multiples of the element size 4" \
        in bad_input_error(reversed_view)

    def out_missing(s, o):
        del o[9]
        return s, o
    assert "out: no array for device 9" in bad_input_error(out_missing)

    def out_readonly(s, o):
        o[8].setflags(write=False)
        return s, o
    assert "out[8]: read-only" in bad_input_error(out_readonly)

    def not_an_array(s, o):
        s[0] = [1, 2, 3]
        return s, o
    assert "src[0]: got <class 'list'>, expected a numpy array" in bad_input_error(not_an_array, TypeError)

    def stranger(s, o):
        s[99] = s[0]
        return s, o
    assert "src: device 99 is not in the source mesh" in bad_input_error(stranger)

    def not_a_dict(s, o):
        return list(s.values()), o
    assert "expected a dict" in bad_input_error(not_a_dict, TypeError)


def test_bad_layouts_and_options():
    mesh = mc.Mesh([2, 4], axis_names=("dp", "tp"))
    with pytest.raises(ValueError, match=r"'pp' \(expected one of dp, tp\)"):
        mc.Layout(mesh, mc.P(None, "pp"))
    with pytest.raises(ValueError, match="1 placements, but the mesh has 2 axes"):
        mc.Layout(mesh, [mc.Shard(0)])
    with pytest.raises(TypeError, match="expected an Alpa string"):
        mc.Layout(mesh, 3)
    with pytest.raises(ValueError, match="bad sharding spec 'S0Q'"):
        mc.Layout(mesh, "S0Q")
    plan, src, dst, _ = example()
    cluster = mc.Cluster(hosts=4, devices_per_host=4)
    with pytest.raises(ValueError, match="float128"):
        mc.plan(shape=(4, 4), dtype="float128", src=src, dst=dst, cluster=cluster)
    with pytest.raises(ValueError, match="bad strategy 'fast'"):
        mc.plan(shape=(4, 4), dtype="float32", src=src, dst=dst, cluster=cluster, strategy="fast")
    with pytest.raises(ValueError, match="source: sharding spec 'S0R' has 2 entries, but the tensor has 3"):
        mc.plan(shape=(4, 4, 4), dtype="float32", src=src, dst=dst, cluster=cluster)
    with pytest.raises(ValueError, match="bad backend 'gpu'"):
        mc.Resharder(plan, backend="gpu")
    with pytest.raises(TypeError, match="expected an mc.Layout"):
        mc.plan(shape=(4, 4), dtype="float32", src="S0R", dst=dst, cluster=cluster)


def test_staging_memory_is_reported_and_bounded():
    # Device 1, outside both meshes, relays the tensor to device 2: it stages the 128 bytes.
    cluster = mc.Cluster(hosts=2, devices_per_host=2)
    src = mc.Layout(mc.Mesh([1], devices=[0]), "RR")
    dst = mc.Layout(mc.Mesh([1], devices=[2]), "RR")
    doc = json.loads(mc.plan(shape=(4, 8), dtype="float32", src=src, dst=dst,
                             cluster=cluster).to_json())
    assert len(doc["ops"]) == 1
    doc["ops"][0].update(kind="broadcast", receivers=[1, 2], chunk_bytes=0)
    plan = mc.Plan.from_json(json.dumps(doc))
    with pytest.raises(ValueError, match="needs 128 bytes of staging memory"):
        mc.Resharder(plan, max_staging_bytes=64)
    resharder = mc.Resharder(plan, max_staging_bytes=128)
    assert resharder.staging_bytes == 128
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(resharder.run({0: x})[2], x)


def test_lazily_negated_torch_tensors_are_refused():
    # t.neg() views keep the values un-negated in memory with a bit set: their bytes are not theirs.
    def negated_src(s, o):
        s[0] = torch._neg_view(torch.from_numpy(-s[0]))
        return s, o
    assert "src[0]: a torch tensor with is_neg() set" in bad_input_error(negated_src)

    def negated_out(s, o):
        o[8] = torch._neg_view(torch.zeros(tuple(o[8].shape)))
        return s, o
    assert "out[8]: a torch tensor with is_neg() set" in bad_input_error(negated_out)


def test_integers_out_of_range_name_the_argument():
    _, src, dst, x = example()
    cluster = mc.Cluster(hosts=4, devices_per_host=4)
    with pytest.raises(ValueError, match=r"bad hosts 1099511627776: expected an integer in"):
        mc.Cluster(hosts=1 << 40, devices_per_host=4)
    with pytest.raises(ValueError, match=r"bad shape entry 1180591620717411303424"):
        mc.plan(shape=(1 << 70, 4), dtype="float32", src=src, dst=dst, cluster=cluster)
    with pytest.raises(ValueError, match=r"bad chunk_bytes 18446744073709551616"):
        mc.plan(shape=(64, 32), dtype="float32", src=src, dst=dst, cluster=cluster,
                chunk_bytes=1 << 64)
    with pytest.raises(ValueError, match=r"bad strategy '3'"):  # a str() of what was given
        mc.plan(shape=(64, 32), dtype="float32", src=src, dst=dst, cluster=cluster, strategy=3)
    with pytest.raises(TypeError, match=r"threads 'many': expected an integer"):
        mc.Resharder(example()[0], threads="many")
    with pytest.raises(ValueError, match=r"src: device 1180591620717411303424 is not in the source mesh"):
        mc.Resharder(example()[0]).run({**mc.shard(x, src), 1 << 70: x})
    with pytest.raises(ValueError, match=r"bad ndim -1: expected an integer >= 0"):
        mc.Layout(mc.Mesh([2]), "S0", ndim=-1)


def test_tile_shapes_without_the_global_array():
    mesh = mc.Mesh([2, 4], axis_names=("dp", "tp"))
    x = np.arange(10 * 3).reshape(10, 3)
    for spec in ([mc.Shard(0), mc.Shard(0)], mc.P(("dp", "tp"), None), "RS1"):
        layout = mc.Layout(mesh, spec)
        shards = mc.shard(x, layout)
        for d in mesh.devices:
            shape = layout.tile_shape((10, 3), d)
            assert (d in shards) == (0 not in shape), (spec, d, shape)  # empty tiles left out
            box = layout.tile((10, 3), d)
            assert np.array_equal(x[tuple(slice(lo, hi) for lo, hi in box)].reshape(shape),
                                  shards.get(d, np.zeros(shape, x.dtype)))
        assert mc.shard(x, layout, devices=[5, 99]).keys() == shards.keys() & {5}
    with pytest.raises(ValueError, match="device 8 is not in the mesh"):
        mc.Layout(mesh, "S0R").tile_shape((10, 3), 8)


def test_dtypes_of_torch_and_numpy_and_exported_exceptions():
    _, src, dst, _ = example()
    cluster = mc.Cluster(hosts=4, devices_per_host=4)
    def plan(dtype):
        return mc.plan(shape=(64, 32), dtype=dtype, src=src, dst=dst, cluster=cluster).to_json()
    assert plan(torch.bfloat16) == plan("bfloat16")
    assert plan(np.float32) == plan(np.dtype("float32")) == plan(torch.float32) == plan("float32")
    assert "64x32 int8 S0R -> RS1" in repr(mc.plan(shape=(64, 32), dtype=np.int8, src=src, dst=dst,
                                                   cluster=cluster))
    assert issubclass(mc.InvalidArgument, ValueError) and issubclass(mc.ParseError, ValueError)
    assert issubclass(mc.Error, RuntimeError)
    with pytest.raises(mc.InvalidArgument, match="bad sharding spec 'S0Q'"):
        mc.Layout(mc.Mesh([2]), "S0Q")
    with pytest.raises(mc.ParseError, match="not JSON"):
        mc.Plan.from_json("{")


def test_dtensor_words_mesh_dim_names_and_torch_placement_objects():
    mesh = mc.Mesh([2, 4], mesh_dim_names=("dp", "tp"))
    assert mesh.axis_names == ["dp", "tp"] and mc.Layout(mesh, mc.P(None, "tp")).spec == "RS1"
    with pytest.raises(ValueError, match="axis_names .* and mesh_dim_names .* differ"):
        mc.Mesh([2, 4], axis_names=("a", "b"), mesh_dim_names=("dp", "tp"))

    # Stand-ins for torch >= 2's torch.distributed.tensor placements (Debian's torch is 1.13):
    # meshcast knows them by class name and `dim`, importing no torch module.
    class Shard:
        def __init__(self, dim):
            self.dim = dim

        def __repr__(self):
            return f"Shard(dim={self.dim})"

    class Replicate:
        pass

    class Partial:
        pass

    assert mc.Layout(mesh, [Replicate(), Shard(1)], ndim=2).spec == "RS1"
    assert mc.Layout(mesh, [Shard(0), mc.Shard(0)], ndim=2).spec == "S0/1R"
    with pytest.raises(ValueError, match="pending reduction"):
        mc.Layout(mesh, [Partial(), Shard(0)])
