"""Batches: many named tensors planned together and run with {name: {device: array}}, every
element checked against mc.shard of its global array."""
import json

import numpy as np
import pytest
import torch

import meshcast as mc

CLUSTER = mc.Cluster(hosts=4, devices_per_host=4)
TRAIN = mc.Mesh([2, 4], range(0, 8), axis_names=("dp", "tp"))
SERVE = mc.Mesh([4, 2], range(8, 16), axis_names=("replica", "tp"))


def batch():
    return {
        "embed": ((50, 12), "float32", mc.Layout(TRAIN, mc.P("tp", None)),
                  mc.Layout(SERVE, [mc.Replicate(), mc.Shard(1)])),
        "qkv": ((36, 12), "float32", mc.Layout(TRAIN, [mc.Replicate(), mc.Shard(0)]),
                mc.Layout(SERVE, "RS1")),
        "norm": ((12,), "float64", mc.Layout(TRAIN, "R"), mc.Layout(SERVE, mc.P(None))),
        "steps": ((3, 5), "int64", mc.Layout(TRAIN, [mc.Shard(0), mc.Shard(0)]),
                  mc.Layout(SERVE, "S0/1R")),
    }


def globals_of(tensors, torch_tensors=False):
    out = {}
    for name, (shape, dtype, _, _) in tensors.items():
        x = (np.arange(int(np.prod(shape))) * 3 + len(name)).astype(dtype).reshape(shape)
        out[name] = torch.from_numpy(x) if torch_tensors else x
    return out


@pytest.mark.parametrize("use_torch", [False, True])
def test_batch_every_element(use_torch):
    tensors = batch()
    plan = mc.plan(tensors, cluster=CLUSTER)
    assert plan.tensors == list(tensors)
    assert {p["tensor"] for op in plan.ops for p in op["pieces"]} == set(range(len(tensors)))
    xs = globals_of(tensors, use_torch)
    src = {name: mc.shard(xs[name], tensors[name][2]) for name in tensors}
    out = mc.Resharder(plan, array="torch" if use_torch else "numpy").run(src)
    assert sorted(out) == sorted(tensors)
    for name, (_, _, _, dst) in tensors.items():
        want = mc.shard(xs[name], dst)
        assert sorted(out[name]) == sorted(want), name
        for d in want:
            got = out[name][d].numpy() if use_torch else out[name][d]
            wanted = want[d].numpy() if use_torch else want[d]
            assert np.array_equal(got, wanted), (name, d)


def test_batch_plan_json_round_trip_and_simulation():
    plan = mc.plan(batch(), cluster=CLUSTER, strategy="send_recv")
    again = mc.Plan.from_json(plan.to_json())
    assert again.to_json() == plan.to_json() and again.tensors == plan.tensors
    assert plan.simulate().time_s >= plan.lower_bound_s * (1 - 1e-9)


def test_batch_bad_input_names_the_tensor():
    tensors = batch()
    plan = mc.plan(tensors, cluster=CLUSTER)
    xs = globals_of(tensors)
    src = {name: mc.shard(xs[name], tensors[name][2]) for name in tensors}
    resharder = mc.Resharder(plan)
    bad = dict(src, qkv={d: a.astype(np.float64) for d, a in src["qkv"].items()})
    with pytest.raises(ValueError, match=r"src\['qkv'\]\[\d+\]: dtype float64, expected float32"):
        resharder.run(bad)
    with pytest.raises(ValueError, match=r"src: tensor 'bias' is not in the plan"):
        resharder.run(dict(src, bias={}))
    missing = {name: v for name, v in src.items() if name != "norm"}
    with pytest.raises(ValueError, match=r"src\['norm'\]: no shard for device 0"):
        resharder.run(missing)
    with pytest.raises(ValueError, match=r"tensors\[2\] 'norm'"):
        mc.plan(dict(tensors, norm=((12,), "float64", mc.Layout(TRAIN, "RR"),
                                    mc.Layout(SERVE, "R"))), cluster=CLUSTER)
    with pytest.raises(TypeError, match="expected \\(shape, dtype, src, dst\\)"):
        mc.plan({"w": (1, 2)}, cluster=CLUSTER)


def test_batch_buckets_fuse_the_small_tensors_and_bucket_bytes_zero_does_not():
    tensors = batch()
    fused = mc.plan(tensors, cluster=CLUSTER)
    unfused = mc.plan(tensors, cluster=CLUSTER, bucket_bytes=0)
    assert max(len(op["pieces"]) for op in fused.ops) > 1
    assert max(len(op["pieces"]) for op in unfused.ops) == 1
    assert sum(op["bytes"] for op in fused.ops) == sum(op["bytes"] for op in unfused.ops)
    xs = globals_of(tensors)
    src = {name: mc.shard(xs[name], tensors[name][2]) for name in tensors}
    out = mc.Resharder(fused).run(src)
    for name, (_, _, _, dst) in tensors.items():
        want = mc.shard(xs[name], dst)
        for d in want:
            assert np.array_equal(out[name][d], want[d]), (name, d)


def test_a_batch_plan_describes_every_tensor():
    tensors = batch()
    plan = mc.plan(tensors, cluster=CLUSTER)
    total = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype, _, _ in tensors.values())
    assert repr(plan).startswith(f"Plan({len(plan.ops)} ops, 4 tensors, {total} bytes, lower_bound_s=")
    assert plan.bytes == total
    def spec(layout, shape):  # the Alpa form at the tensor's rank
        return mc.Layout(layout.mesh, layout.spec_text, ndim=len(shape)).spec
    assert [(t["name"], tuple(t["shape"]), t["dtype"], t["src_spec"], t["dst_spec"]) for t in plan.batch] == \
        [(n, s, d, spec(src, s), spec(dst, s)) for n, (s, d, src, dst) in tensors.items()]
    with pytest.raises(ValueError, match=r"plan.shape: the plan moves 4 tensors, each with its own; "
                                         r"plan.batch lists them"):
        plan.shape


def test_a_cluster_document_is_loaded_with_its_per_host_nics_and_planned_for(tmp_path):
    """mc.Cluster.load reads what `meshcast calibrate -o` writes, per-host NICs included, and the
    plan is made for them; a document `--cluster FILE` refuses is refused, naming the file."""
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"hosts": 4, "devices_per_host": 4, "nic_gbps": 25,
                                "host_nics": [2, 2, 2, 2]}))
    loaded = mc.Cluster.load(path)
    assert (loaded.hosts, loaded.devices_per_host, loaded.nic_gbps, loaded.dev_gbps,
            loaded.latency_us, loaded.nics_per_host) == (4, 4, 25.0, 100.0, 5.0, 1)
    assert (loaded.host_nics, loaded.host_nic_gbps) == ([2, 2, 2, 2], [])

    def plan(cluster):
        return mc.plan(shape=(1 << 20, 16), dtype="float32", src=mc.Layout(TRAIN, "S0R"),
                       dst=mc.Layout(SERVE, "RR"), cluster=cluster)
    two = plan(loaded)
    same = plan(mc.Cluster(4, 4, nic_gbps=25, host_nics=[2, 2, 2, 2]))
    assert (two.ops, two.lower_bound_s) == (same.ops, same.lower_bound_s)
    # The per-host NICs reach the planner: each host's bytes leave by two NICs instead of one.
    assert two.lower_bound_s == pytest.approx(plan(mc.Cluster(4, 4, nic_gbps=25)).lower_bound_s / 2,
                                              rel=0.01)
    with pytest.raises(ValueError, match="per-host NIC counts list 3 entries, expected 4"):
        plan(mc.Cluster(4, 4, host_nics=[1, 2, 2]))
    # The plan for two NICs played on one NIC a host, as `simulate --plan --cluster` plays it: the
    # bound of that cluster, and a time no plan beats there, far beyond the two NICs'.
    one_nic = mc.Cluster(4, 4, nic_gbps=25)
    played = two.simulate(cluster=one_nic)
    assert played.lower_bound_s == plan(one_nic).lower_bound_s
    assert played.time_s >= played.lower_bound_s > 1.5 * two.simulate().time_s
    with pytest.raises(ValueError, match="uses device 8, but the cluster has 2 hosts"):
        two.simulate(cluster=mc.Cluster(2, 4))
    # A model's batch keeps them on the hosts it lays out (the hosts beyond get nics_per_host).
    model = mc.model_batch(arch="llama", hidden=64, layers=2, heads=4, ffn=128, vocab=100,
                           train="tp=2", serve="tp=2", cluster=mc.Cluster(1, 4, host_nics=[2]))
    assert (model.cluster.hosts, model.cluster.host_nics) == (2, [2, 1])

    path.write_text('{"nic_gbs": 100}')
    with pytest.raises(ValueError, match=r"cluster file '.*cluster.json': cluster: unknown key "
                                         r"'nic_gbs'.*\(did you mean 'nic_gbps'\?\)"):
        mc.Cluster.load(path)
    path.write_text("nics_per_host: 2")
    with pytest.raises(ValueError, match="cluster.json': not a JSON document"):
        mc.Cluster.load(path)
    path.write_text("[" * 100 + "]" * 100)  # read through the library's depth-bounded parser
    with pytest.raises(ValueError, match="cluster.json': not a JSON document: .*nested more than 32"):
        mc.Cluster.load(path)
    with pytest.raises(FileNotFoundError):
        mc.Cluster.load(tmp_path / "missing.json")
