"""Strided arrays as src and out: views into a serving engine's fused torch parameters (q, k, v in
qkv_proj) and transposed numpy arrays, passed through without a copy; every element of every
whole buffer checked, so that nothing outside the views is touched."""
import numpy as np
import pytest
import torch

import meshcast as mc

HIDDEN = 8
ROWS = {"q": 8, "k": 4, "v": 4}  # 4 heads, 2 kv heads of head_dim 2, tp 2
SENTINEL = -7.0


def fused_plan():
    cluster = mc.Cluster(hosts=2, devices_per_host=2)
    src = mc.Layout(mc.Mesh([2], [0, 1]), "RR")  # a trainer of 2 replicas
    dst = mc.Layout(mc.Mesh([2], [2, 3]), "S0R")  # served with tp 2
    tensors = {name: ([rows, HIDDEN], "float32", src, dst) for name, rows in ROWS.items()}
    return mc.plan(tensors, cluster=cluster), src, dst


def test_out_views_into_a_fused_torch_parameter():
    plan, src, dst = fused_plan()
    weights = {name: torch.arange(rows * HIDDEN, dtype=torch.float32).reshape(rows, HIDDEN) + 1000 * i
               for i, (name, rows) in enumerate(ROWS.items())}
    # Each serving device's qkv_proj = [q; k; v] of its rank, with a spare row at the end and a
    # spare column on either side, so that the views are strided and have bytes around them.
    per_rank = {name: rows // 2 for name, rows in ROWS.items()}
    fused = {d: torch.nn.Parameter(torch.full((sum(per_rank.values()) + 1, HIDDEN + 2), SENTINEL),
                                   requires_grad=False) for d in (2, 3)}
    out, offset = {}, 0
    for name, rows in per_rank.items():
        out[name] = {d: fused[d].data[offset:offset + rows, 1:1 + HIDDEN] for d in (2, 3)}
        offset += rows
    assert not out["k"][2].is_contiguous()
    shards = {name: mc.shard(w, src) for name, w in weights.items()}
    # A transposed numpy view as a source: strided reads.
    shards["v"] = {d: np.ascontiguousarray(t.numpy().T).T for d, t in shards["v"].items()}
    assert not shards["v"][0].flags["C_CONTIGUOUS"]
    resharder = mc.Resharder(plan)
    for _ in range(2):  # the second run binds the same strides: nothing compiled again
        result = resharder.run(shards, out)
        assert result["q"][2].data_ptr() == fused[2].data.data_ptr() + 4  # the view itself
    for d, rank in ((2, 0), (3, 1)):
        expected = torch.full_like(fused[d].data, SENTINEL)
        row = 0
        for name, rows in per_rank.items():
            expected[row:row + rows, 1:1 + HIDDEN] = weights[name][rank * rows:(rank + 1) * rows]
            row += rows
        assert torch.equal(fused[d].data, expected), f"device {d}"


def test_the_same_resharder_takes_contiguous_then_strided_outputs():
    plan, src, dst = fused_plan()
    x = np.arange(ROWS["q"] * HIDDEN, dtype=np.float32).reshape(ROWS["q"], HIDDEN)
    shards = {name: mc.shard(np.zeros((rows, HIDDEN), np.float32) if name != "q" else x, src)
              for name, rows in ROWS.items()}
    resharder = mc.Resharder(plan)
    plain = resharder.run(shards)
    wide = {d: np.full((ROWS["q"] // 2, 2 * HIDDEN), SENTINEL, np.float32) for d in (2, 3)}
    out = {"q": {d: w[:, ::2] for d, w in wide.items()}, "k": plain["k"], "v": plain["v"]}
    strided = resharder.run(shards, out)
    for d in (2, 3):
        assert np.array_equal(strided["q"][d], plain["q"][d])
        assert np.array_equal(wide[d][:, ::2], mc.shard(x, dst)[d])
        assert (wide[d][:, 1::2] == SENTINEL).all()


def test_out_views_into_a_fused_moe_w13_parameter():
    # A DeepSeek-V3-like model's routed experts, 4 of them: the trainer holds them over ep 2, the
    # server over etp 2 (tp=2, ep=1), each serving device a w13 [E, 2*I/2, H] as vLLM's FusedMoE
    # holds it: gate on rows 0..I/2, up after, one spare row and column around the views.
    experts, inner, hidden = 4, 4, 8
    b = mc.model_batch(arch="moe", dtype="float32", train="tp=2,ep=2", serve="tp=2",
                       cluster=mc.Cluster(hosts=1, devices_per_host=2), hidden=hidden, layers=1,
                       dense_layers=0, heads=2, experts=experts, moe_ffn=inner, shared_experts=0,
                       q_lora_rank=4, kv_lora_rank=4, qk_nope_dim=2, qk_rope_dim=2, v_head_dim=2,
                       ffn=8, vocab=8)
    names = {p: f"model.layers.0.mlp.experts.{p}_proj.weight" for p in ("gate", "up")}
    tensors = {name: b.tensors[name] for name in names.values()}
    plan = mc.plan(tensors, cluster=b.cluster)
    src = tensors[names["gate"]][2]
    weights = {name: torch.arange(experts * inner * hidden, dtype=torch.float32)
               .reshape(experts, inner, hidden) + 1000 * i for i, name in enumerate(names.values())}
    half = inner // 2
    w13 = {d: torch.nn.Parameter(torch.full((experts, 2 * half + 1, hidden + 1), SENTINEL),
                                 requires_grad=False) for d in (2, 3)}
    out = {names["gate"]: {d: w13[d].data[:, :half, :hidden] for d in (2, 3)},
           names["up"]: {d: w13[d].data[:, half:2 * half, :hidden] for d in (2, 3)}}
    assert not out[names["up"]][2].is_contiguous()
    shards = {name: mc.shard(w, src) for name, w in weights.items()}
    mc.Resharder(plan).run(shards, out)
    for d, rank in ((2, 0), (3, 1)):
        expected = torch.full_like(w13[d].data, SENTINEL)
        for part, name in enumerate(names.values()):
            rows = weights[name][:, rank * half:(rank + 1) * half]
            expected[:, part * half:(part + 1) * half, :hidden] = rows
        assert torch.equal(w13[d].data, expected), f"device {d}"
    # Views that share an element are refused, interleaved or not.
    out[names["up"]] = {d: w13[d].data[:, half - 1:2 * half - 1, :hidden] for d in (2, 3)}
    with pytest.raises(ValueError, match="share memory"):
        mc.Resharder(plan).run(shards, out)
