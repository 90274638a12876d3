"""mc.model_batch: `meshcast model`'s parameters and layouts (docs/models.md) as a batch for
mc.plan, run with every element checked against mc.shard of its global array."""
import numpy as np
import pytest

import meshcast as mc

GPT = dict(arch="gpt", hidden=16, layers=3, heads=4, ffn=32, vocab=50, positions=8,
           dtype="float32")


def test_gpt_parameters_and_layouts():
    b = mc.model_batch(**GPT, train="tp=2,pp=3", serve="tp=4,replicas=2",
                       cluster=mc.Cluster(hosts=1, devices_per_host=4))
    assert len(b.tensors) == 12 * 3 + 5  # docs/models.md: a gpt model has 12 L + 5 tensors
    names = list(b.tensors)
    assert names[:2] == ["embed.weight", "pos_embed.weight"]
    assert names[-3:] == ["norm.weight", "norm.bias", "head.weight"]
    # Trainer: 3 stages of (1, 2) on devices 0-5 (2 hosts); server: 2 replicas of tp=4 from the
    # first host after the trainer's, devices 8-15: 4 hosts in all.
    assert b.cluster.hosts == 4 and b.cluster.devices_per_host == 4
    shape, dtype, src, dst = b.tensors["layers.1.attn.qkv.weight"]
    assert (shape, dtype) == ((48, 16), "float32")
    assert (src.mesh.shape, src.mesh.devices, src.spec) == ([1, 2], [2, 3], "S1R")
    assert (dst.mesh.shape, dst.mesh.devices, dst.spec) == ([2, 4], list(range(8, 16)), "S1R")
    assert b.tensors["layers.2.mlp.down.weight"][2].spec == "RS1"
    assert b.tensors["layers.0.mlp.up.bias"][3].spec == "S1"
    assert b.tensors["head.weight"][2].mesh.devices == [4, 5]  # the last stage
    assert b.tensors["norm.bias"][2].spec == "R"


def test_model_batch_runs_every_element():
    b = mc.model_batch(**GPT, train="tp=2,dp=2", serve="tp=4",
                       cluster=mc.Cluster(hosts=1, devices_per_host=4, nic_gbps=25.0))
    assert b.cluster.nic_gbps == 25.0
    plan = mc.plan(b.tensors, cluster=b.cluster)
    assert plan.tensors == list(b.tensors)
    weights = {name: (np.arange(int(np.prod(shape))) * 7 + i).astype(dtype).reshape(shape)
               for i, (name, (shape, dtype, _, _)) in enumerate(b.tensors.items())}
    out = mc.Resharder(plan).run({name: mc.shard(weights[name], src)
                                  for name, (_, _, src, _) in b.tensors.items()})
    for name, (_, _, _, dst) in b.tensors.items():
        want = mc.shard(weights[name], dst)
        assert set(out[name]) == set(want), name
        for d, tile in want.items():
            assert np.array_equal(out[name][d], tile), f"{name} on device {d}"


def test_shrink_batch_keeps_even_shards_and_runs_every_element():
    b = mc.model_batch(**GPT, train="tp=2,dp=2", serve="tp=4",
                       cluster=mc.Cluster(hosts=1, devices_per_host=4))
    full = sum(int(np.prod(shape)) * 4 for shape, *_ in b.tensors.values())
    small = mc.shrink_batch(b.tensors, full // 4)
    assert list(small) == list(b.tensors)

    def rows(layout, shape):  # the distinct row counts of the layout's tiles
        return {hi - lo for (lo, hi), *_ in layout.tiles(shape).values()}
    shrunk = evenly_split = 0
    for name, (shape, dtype, src, dst) in small.items():
        before = b.tensors[name]
        assert (dtype, src, dst) == before[1:] and shape[1:] == before[0][1:], name
        assert 1 <= shape[0] <= before[0][0], name
        # A dim 0 both layouts split evenly before, they split evenly after.
        if all(len(rows(layout, before[0])) == 1 for layout in (src, dst)):
            evenly_split += 1
            assert all(len(rows(layout, shape)) == 1 for layout in (src, dst)), name
        shrunk += int(np.prod(shape)) * 4
    assert evenly_split > 0 and shrunk < full // 2
    # Shrinking to more than the batch has changes nothing.
    assert {n: t[0] for n, t in mc.shrink_batch(b.tensors, full).items()} == \
        {n: t[0] for n, t in b.tensors.items()}
    plan = mc.plan(small, cluster=b.cluster)
    weights = {name: (np.arange(int(np.prod(shape))) * 7 + i).astype(dtype).reshape(shape)
               for i, (name, (shape, dtype, _, _)) in enumerate(small.items())}
    out = mc.Resharder(plan).run({name: mc.shard(weights[name], src)
                                  for name, (_, _, src, _) in small.items()})
    for name, (_, _, _, dst) in small.items():
        for d, tile in mc.shard(weights[name], dst).items():
            assert np.array_equal(out[name][d], tile), f"{name} on device {d}"
    with pytest.raises(ValueError, match="bad bytes 0: expected > 0"):
        mc.shrink_batch(b.tensors, 0)
    with pytest.raises(TypeError, match="expected a non-empty dict"):
        mc.shrink_batch({}, 100)


@pytest.mark.parametrize("change, message", [
    (dict(heads=5), "bad heads 5"),
    (dict(arch="bert"), "bert"),
    (dict(train="tp=2,replicas=2"), "bad entry 'replicas=2' in train"),
    (dict(serve="tp=0"), "serve"),
    (dict(train="pp=4"), "pp=4"),
])
def test_bad_values_named(change, message):
    args = dict(GPT, train="tp=2", serve="tp=2", cluster=mc.Cluster(hosts=1, devices_per_host=4))
    args.update(change)
    with pytest.raises(ValueError, match=message):
        mc.model_batch(**args)
    with pytest.raises(TypeError, match="expected an mc.Cluster"):
        mc.model_batch(**GPT, cluster=None)


# A shrunk DeepSeek-V3: MLA, a dense layer, then MoE layers of 8 stacked experts, a shared expert
# and a router with its bias.
MOE = dict(arch="moe", hidden=16, layers=3, heads=4, q_lora_rank=8, kv_lora_rank=6, qk_nope_dim=4,
           qk_rope_dim=2, v_head_dim=4, ffn=24, experts=8, moe_ffn=6, dense_layers=1, vocab=40)


def test_moe_preset_layouts():
    b = mc.model_batch(preset="kimi-k2", dtype="float8_e4m3fn", train="tp=8,pp=8,dp=4,ep=32",
                       serve="tp=16,ep=16,replicas=2",
                       cluster=mc.Cluster(hosts=1, devices_per_host=8, nics_per_host=8))
    # docs/models.md: embeddings, norm and head, 61 layers of 9 attention tensors, one dense MLP
    # of 3, 60 MoE MLPs of 8 (router, bias, 3 stacked experts, 3 shared).
    assert len(b.tensors) == 3 + 61 * 9 + 3 + 60 * 8
    assert b.cluster.hosts == 32 + 4
    shape, dtype, src, dst = b.tensors["model.layers.60.mlp.experts.gate_proj.weight"]
    assert (shape, dtype) == ((384, 2048, 7168), "float8_e4m3fn")
    # The last stage's 32 GPUs as (edp 1, ep 32, etp 1); each server replica's 16 as (1, 16, 1)
    # stacked over the 2 replicas.
    assert (src.mesh.shape, src.mesh.devices, src.spec) == ([1, 32, 1], list(range(224, 256)),
                                                            "S1S2R")
    assert (dst.mesh.shape, dst.mesh.devices[0], dst.spec) == ([2, 16, 1], 256, "S1S2R")
    assert b.tensors["model.layers.0.mlp.gate_proj.weight"][3].spec == "S1R"  # the dense layer
    assert b.tensors["lm_head.weight"][0] == (163840, 7168)


def test_moe_float8_runs_every_element():
    # float8 weights travel as their bytes: uint8 arrays (numpy has no float8, torch 1.13 neither).
    b = mc.model_batch(**MOE, dtype="float8_e4m3fn", train="tp=2,dp=2,ep=4",
                       serve="tp=4,ep=2,replicas=2", cluster=mc.Cluster(hosts=1, devices_per_host=4))
    plan = mc.plan(b.tensors, cluster=b.cluster)
    weights = {name: ((np.arange(int(np.prod(shape))) * 7 + i) % 251).astype("uint8").reshape(shape)
               for i, (name, (shape, _, _, _)) in enumerate(b.tensors.items())}
    out = mc.Resharder(plan).run({name: mc.shard(weights[name], src)
                                  for name, (_, _, src, _) in b.tensors.items()})
    for name, (_, dtype, _, dst) in b.tensors.items():
        assert dtype == "float8_e4m3fn"
        for d, tile in mc.shard(weights[name], dst).items():
            assert out[name][d].dtype == np.uint8
            assert np.array_equal(out[name][d], tile), f"{name} on device {d}"


@pytest.mark.parametrize("change, message", [
    (dict(train="tp=3,ep=3"), "bad --train ep=3: expected a divisor of the model's 8 experts"),
    (dict(serve="tp=2,ep=4"), "ep=4 expected to divide tp=2"),
    (dict(preset="llama-3"), "bad preset 'llama-3'"),
])
def test_moe_bad_values_named(change, message):
    args = dict(MOE, train="tp=2", serve="tp=2", cluster=mc.Cluster(hosts=1, devices_per_host=4))
    args.update(change)
    if "preset" in change:
        args.pop("arch")
    with pytest.raises(ValueError, match=message):
        mc.model_batch(**args)
    with pytest.raises(TypeError, match="unexpected keyword argument 'expert'"):
        mc.model_batch(**MOE, expert=4, cluster=mc.Cluster(hosts=1, devices_per_host=4))


def test_float8_torch_tensors_are_their_bytes():
    torch = pytest.importorskip("torch")
    src, dst = mc.Layout(mc.Mesh([2], [0, 1]), "S0R"), mc.Layout(mc.Mesh([2], [2, 3]), "RR")
    plan = mc.plan(shape=(6, 4), dtype="float8_e5m2", src=src, dst=dst,
                   cluster=mc.Cluster(hosts=2, devices_per_host=2))
    whole = (torch.arange(24) * 5 % 256).to(torch.uint8).reshape(6, 4)
    out = mc.Resharder(plan, array="torch").run(mc.shard(whole, src))
    # Allocated as torch's float8 where torch has it (2.1 and later), else as uint8 bytes.
    want = getattr(torch, "float8_e5m2", torch.uint8)
    for d in (2, 3):
        assert out[d].dtype == want
        assert torch.equal(out[d].view(torch.uint8), whole), f"device {d}"
