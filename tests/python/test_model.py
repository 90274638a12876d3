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
