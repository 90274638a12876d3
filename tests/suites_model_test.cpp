// The model generator: every parameter class's shape, spec and mesh on a small config, stages,
// device placement, and bad input.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "meshcast/error.h"
#include "meshcast/layout/layout.h"
#include "meshcast/plan/json.h"
#include "meshcast/suites/model.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

// 4 layers, hidden 16, 4 heads of 4 with 2 kv heads, ffn 24, vocab 50 (uneven over tp 4).
ModelConfig small_llama() {
  return {.arch = ModelArch::llama,
          .hidden = 16,
          .layers = 4,
          .heads = 4,
          .kv_heads = 2,
          .ffn = 24,
          .vocab = 50};
}

ModelConfig small_gpt() {
  return {.arch = ModelArch::gpt,
          .hidden = 16,
          .layers = 3,
          .heads = 4,
          .ffn = 64,
          .vocab = 30,
          .positions = 12};
}

// DeepSeek-V3's architecture shrunk: MLA with q and kv compression, one dense layer then two MoE
// layers of 8 routed experts, a shared expert and a router with its bias.
ModelConfig small_moe() {
  return {.arch = ModelArch::moe,
          .hidden = 16,
          .layers = 3,
          .heads = 4,
          .ffn = 24,
          .vocab = 50,
          .dtype = DType::float8_e4m3fn,
          .q_lora_rank = 8,
          .kv_lora_rank = 6,
          .qk_nope_dim = 4,
          .qk_rope_dim = 2,
          .v_head_dim = 4,
          .dense_layers = 1,
          .experts = 8,
          .shared_experts = 1,
          .moe_ffn = 6,
          .router_bias = true};
}

// The [lo, hi) of every dimension of the tile the device at mesh position `index` holds.
std::vector<std::pair<int64_t, int64_t>> tile(const TensorResharding& t, bool src, int64_t index) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Interval& i : tile_at(t.tensor, src ? t.src : t.dst, index).dims)
    out.emplace_back(i.lo, i.hi);
  return out;
}
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

std::map<std::string, TensorResharding> by_name(const Batch& batch) {
  std::map<std::string, TensorResharding> out;
  for (const auto& t : batch.tensors) EXPECT_TRUE(out.emplace(t.name, t).second) << t.name;
  return out;
}

std::vector<DeviceId> range(DeviceId first, DeviceId count) {
  std::vector<DeviceId> out(count);
  for (DeviceId i = 0; i < count; ++i) out[i] = first + i;
  return out;
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << part;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ModelTest, LlamaLayoutOfEveryParameterClass) {
  // Trainer tp=4, pp=2 on hosts 0-1; server tp=2, replicas=4 on hosts 2-3.
  const Batch b =
      model_batch(small_llama(), {.tp = 4, .pp = 2}, {.tp = 2, .replicas = 4}, paper_cluster(1));
  EXPECT_EQ(b.cluster.hosts, 4);
  EXPECT_EQ(b.cluster.devices_per_host, 4);
  EXPECT_EQ(b.tensors.size(), 2 + 4 * 9 + 1u);
  const auto t = by_name(b);
  const Mesh stage0({1, 4}, range(0, 4));
  const Mesh stage1({1, 4}, range(4, 4));
  const Mesh server({4, 2}, range(8, 8));
  struct Expected {
    std::string name;
    std::vector<int64_t> shape;
    std::string spec;
    Mesh src;
  };
  const std::vector<Expected> expected = {
      {"embed.weight", {50, 16}, "S1R", stage0},
      {"layers.0.attn_norm.weight", {16}, "R", stage0},
      {"layers.0.attn.q.weight", {16, 16}, "S1R", stage0},
      {"layers.0.attn.k.weight", {8, 16}, "S1R", stage0},
      {"layers.0.attn.v.weight", {8, 16}, "S1R", stage0},
      {"layers.0.attn.o.weight", {16, 16}, "RS1", stage0},
      {"layers.1.mlp_norm.weight", {16}, "R", stage0},
      {"layers.1.mlp.gate.weight", {24, 16}, "S1R", stage0},
      {"layers.1.mlp.up.weight", {24, 16}, "S1R", stage0},
      {"layers.1.mlp.down.weight", {16, 24}, "RS1", stage0},
      {"layers.2.attn.q.weight", {16, 16}, "S1R", stage1},
      {"layers.3.mlp.down.weight", {16, 24}, "RS1", stage1},
      {"norm.weight", {16}, "R", stage1},
      {"head.weight", {50, 16}, "S1R", stage1},
  };
  for (const auto& e : expected) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(t.contains(e.name));
    const auto& r = t.at(e.name);
    EXPECT_EQ(r.tensor, (TensorSpec{e.shape, DType::bfloat16}));
    EXPECT_EQ(r.src.spec.to_string(), e.spec);
    EXPECT_EQ(r.dst.spec.to_string(), e.spec);
    EXPECT_EQ(r.src.mesh, e.src);
    EXPECT_EQ(r.dst.mesh, server);
  }
}

TEST(ModelTest, GptHasFusedQkvBiasesAndLearnedPositions) {
  const Batch b = model_batch(small_gpt(), {.tp = 2, .pp = 1, .replicas = 2}, {.tp = 4, .pp = 3},
                              paper_cluster(1));
  EXPECT_EQ(b.tensors.size(), 2 + 3 * 12 + 3u);
  const auto t = by_name(b);
  const Mesh trainer({2, 2}, range(0, 4));
  const std::map<std::string, std::pair<std::vector<int64_t>, std::string>> expected = {
      {"embed.weight", {{30, 16}, "S1R"}},      {"pos_embed.weight", {{12, 16}, "RR"}},
      {"layers.1.attn_norm.bias", {{16}, "R"}}, {"layers.1.attn.qkv.weight", {{48, 16}, "S1R"}},
      {"layers.1.attn.qkv.bias", {{48}, "S1"}}, {"layers.1.attn.o.weight", {{16, 16}, "RS1"}},
      {"layers.1.attn.o.bias", {{16}, "R"}},    {"layers.1.mlp.up.weight", {{64, 16}, "S1R"}},
      {"layers.1.mlp.up.bias", {{64}, "S1"}},   {"layers.1.mlp.down.weight", {{16, 64}, "RS1"}},
      {"layers.1.mlp.down.bias", {{16}, "R"}},  {"norm.bias", {{16}, "R"}},
      {"head.weight", {{30, 16}, "S1R"}},
  };
  for (const auto& [name, shape_spec] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(t.contains(name));
    EXPECT_EQ(t.at(name).tensor.shape, shape_spec.first);
    EXPECT_EQ(t.at(name).src.spec.to_string(), shape_spec.second);
    EXPECT_EQ(t.at(name).src.mesh, trainer);  // dp=2: axis 0 of every stage's mesh
  }
  // Server: pp=3 over 3 layers, one layer per stage; stage s is devices 4 + 4s (host 1 + s).
  EXPECT_EQ(t.at("embed.weight").dst.mesh, Mesh({1, 4}, range(4, 4)));
  EXPECT_EQ(t.at("layers.1.mlp.up.bias").dst.mesh, Mesh({1, 4}, range(8, 4)));
  EXPECT_EQ(t.at("head.weight").dst.mesh, Mesh({1, 4}, range(12, 4)));
}

TEST(ModelTest, MoeLayoutOfEveryParameterClass) {
  // Trainer: one stage of tp=2 x dp=2 with ep=4 (experts over all four devices, etp 1). Server:
  // two replicas of tp=4, experts over ep=2 with etp = 4 / 2 = 2.
  const Batch b = model_batch(small_moe(), {.tp = 2, .replicas = 2, .ep = 4},
                              {.tp = 4, .replicas = 2, .ep = 2, .etp = 2}, paper_cluster(1));
  EXPECT_EQ(b.cluster.hosts, 3);
  // embed, 12 in the dense layer, 17 in each MoE layer, norm, head.
  EXPECT_EQ(b.tensors.size(), 1 + 12 + 2 * 17 + 2u);
  const auto t = by_name(b);
  const Mesh trainer({2, 2}, range(0, 4));
  const Mesh server({2, 4}, range(4, 8));
  const Mesh trainer_experts({1, 4, 1}, range(0, 4));
  const Mesh server_experts({2, 2, 2}, range(4, 8));
  struct Expected {
    std::string name;
    std::vector<int64_t> shape;
    std::string spec;
    bool experts = false;
  };
  const std::string l0 = "model.layers.0.";
  const std::string l2 = "model.layers.2.";
  const std::vector<Expected> expected = {
      {"model.embed_tokens.weight", {50, 16}, "S1R"},
      {l0 + "input_layernorm.weight", {16}, "R"},
      {l0 + "self_attn.q_a_proj.weight", {8, 16}, "RR"},
      {l0 + "self_attn.q_a_layernorm.weight", {8}, "R"},
      {l0 + "self_attn.q_b_proj.weight", {4 * 6, 8}, "S1R"},
      {l0 + "self_attn.kv_a_proj_with_mqa.weight", {6 + 2, 16}, "RR"},
      {l0 + "self_attn.kv_a_layernorm.weight", {6}, "R"},
      {l0 + "self_attn.kv_b_proj.weight", {4 * 8, 6}, "S1R"},
      {l0 + "self_attn.o_proj.weight", {16, 16}, "RS1"},
      {l0 + "post_attention_layernorm.weight", {16}, "R"},
      {l0 + "mlp.gate_proj.weight", {24, 16}, "S1R"},
      {l0 + "mlp.up_proj.weight", {24, 16}, "S1R"},
      {l0 + "mlp.down_proj.weight", {16, 24}, "RS1"},
      {l2 + "mlp.gate.weight", {8, 16}, "RR"},
      {l2 + "mlp.gate.e_score_correction_bias", {8}, "R"},
      {l2 + "mlp.experts.gate_proj.weight", {8, 6, 16}, "S1S2R", true},
      {l2 + "mlp.experts.up_proj.weight", {8, 6, 16}, "S1S2R", true},
      {l2 + "mlp.experts.down_proj.weight", {8, 16, 6}, "S1RS2", true},
      {l2 + "mlp.shared_experts.gate_proj.weight", {6, 16}, "S1R"},
      {l2 + "mlp.shared_experts.down_proj.weight", {16, 6}, "RS1"},
      {"model.norm.weight", {16}, "R"},
      {"lm_head.weight", {50, 16}, "S1R"},
  };
  for (const auto& e : expected) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(t.contains(e.name));
    const auto& r = t.at(e.name);
    EXPECT_EQ(r.tensor, (TensorSpec{e.shape, DType::float8_e4m3fn}));
    EXPECT_EQ(r.src.spec.to_string(), e.spec);
    EXPECT_EQ(r.dst.spec.to_string(), e.spec);
    EXPECT_EQ(r.src.mesh, e.experts ? trainer_experts : trainer);
    EXPECT_EQ(r.dst.mesh, e.experts ? server_experts : server);
  }
  EXPECT_FALSE(t.contains(l0 + "mlp.gate.weight"));  // the dense layer has no router
  // Expert 5 of layer 2 (rows 5 of the stacked tensor): on trainer device 2 (ep rank 2 of 4
  // holds experts 4-5), on the server with ep rank 1 (experts 4-7), its rows split over etp 2.
  const auto& gate = t.at(l2 + "mlp.experts.gate_proj.weight");
  EXPECT_EQ(tile(gate, true, 2), (Ranges{{4, 6}, {0, 6}, {0, 16}}));
  EXPECT_EQ(tile(gate, false, 2), (Ranges{{4, 8}, {0, 3}, {0, 16}}));  // device 6
  EXPECT_EQ(tile(gate, false, 7), (Ranges{{4, 8}, {3, 6}, {0, 16}}));  // device 11
}

TEST(ModelTest, MoeWithGroupedQueryAttentionSharesKvHeadsOverTp) {
  // Qwen3-MoE's architecture shrunk: 4 query heads of 8 over 2 kv heads, q/k norms, no shared
  // experts, no dense layer, no router bias. tp=4 > 2 kv heads: each kv head on 2 tp ranks.
  ModelConfig c = model_preset("qwen3-235b-a22b");
  for (const auto& [key, value] : std::vector<std::pair<std::string, int64_t>>{{"hidden", 16},
                                                                               {"layers", 2},
                                                                               {"heads", 4},
                                                                               {"kv-heads", 2},
                                                                               {"head-dim", 8},
                                                                               {"experts", 4},
                                                                               {"moe-ffn", 6},
                                                                               {"vocab", 40}})
    set_model_dimension(c, key, value);
  const Batch b =
      model_batch(c, {.tp = 2, .pp = 2}, {.tp = 4, .ep = 4, .etp = 1}, paper_cluster(1));
  EXPECT_EQ(b.tensors.size(), 1 + 2 * 12 + 2u);
  const auto t = by_name(b);
  const std::string l1 = "model.layers.1.";
  EXPECT_EQ(t.at(l1 + "self_attn.q_proj.weight").tensor.shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(t.at(l1 + "self_attn.o_proj.weight").tensor.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(t.at(l1 + "self_attn.q_norm.weight").tensor.shape, (std::vector<int64_t>{8}));
  const auto& k = t.at(l1 + "self_attn.k_proj.weight");
  EXPECT_EQ(k.tensor.shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(k.src.mesh, Mesh({1, 2}, {2, 3}));              // stage 1, tp=2: one head per rank
  EXPECT_EQ(k.dst.mesh, Mesh({1, 2, 2}, range(4, 4)));      // (replicas, kv heads, tp / kv)
  EXPECT_EQ(tile(k, false, 1), (Ranges{{0, 8}, {0, 16}}));  // ranks 0 and 1: head 0
  EXPECT_EQ(tile(k, false, 2), (Ranges{{8, 16}, {0, 16}}));
  EXPECT_FALSE(t.contains(l1 + "mlp.gate.e_score_correction_bias"));
  EXPECT_FALSE(t.contains(l1 + "mlp.shared_experts.gate_proj.weight"));
  EXPECT_EQ(t.at(l1 + "mlp.experts.down_proj.weight").dst.mesh, Mesh({1, 4, 1}, range(4, 4)));
  b.validate();
}

TEST(ModelTest, PresetsHaveThePublishedParameterCounts) {
  // Total parameters as their model cards state them (docs/models.md), without DeepSeek-V3's
  // multi-token-prediction module: 671B, 1T (1.0-1.04T), 235B.
  const auto parameters = [](const ModelConfig& c) {
    int64_t n = 0;
    for (const auto& p : model_parameters(c)) n += TensorSpec{p.shape, c.dtype}.elements();
    return static_cast<double>(n);
  };
  EXPECT_NEAR(parameters(model_preset("deepseek-v3")) / 1e9, 671, 0.5);
  EXPECT_NEAR(parameters(model_preset("kimi-k2")) / 1e9, 1020, 20);
  EXPECT_NEAR(parameters(model_preset("qwen3-235b-a22b")) / 1e9, 235, 0.5);
  expect_error([] { model_preset("deepseek-v2"); }, "'deepseek-v2'");
}

TEST(ModelTest, ExpertParallelismIsChecked) {
  const auto moe = small_moe();
  // ep=3 does not divide 8 experts; ep x etp = 8 does not divide a stage's 4 devices.
  expect_error([&] { model_batch(moe, {.tp = 3, .ep = 3}, {}, paper_cluster(1)); },
               "ep=3: expected a divisor of the model's 8 experts");
  expect_error([&] { model_batch(moe, {.tp = 4, .ep = 4, .etp = 2}, {}, paper_cluster(1)); },
               "ep x etp = 8 to divide a stage's tp x replicas = 4");
  expect_error([] { model_batch(small_llama(), {.tp = 2, .ep = 2}, {}, paper_cluster(1)); },
               "ep=2,etp=1: expected 1 for a dense llama model");
  expect_error([] { parse_model_parallelism("tp=4,ep=3", ModelSide::serve, "--serve"); },
               "ep=3 expected to divide tp=4");
  expect_error([] { parse_model_parallelism("tp=4,etp=2", ModelSide::serve, "--serve"); },
               "'etp=2'");
  const auto side = parse_model_parallelism("tp=8,ep=2", ModelSide::serve, "--serve");
  EXPECT_EQ(side.etp, 4);
  EXPECT_EQ(parse_model_parallelism("tp=8,dp=4,ep=32,etp=1", ModelSide::train, "--train").ep, 32);
}

TEST(ModelTest, StagesSplitLayersInContiguousRuns) {
  // 10 layers over 4 stages: layers [0,2) [2,5) [5,7) [7,10).
  const auto params = model_parameters({.hidden = 16, .layers = 10, .heads = 4});
  std::map<int64_t, std::set<int64_t>> layers_of_stage;
  for (const auto& p : params)
    if (p.layer >= 0 && p.layer < 10) layers_of_stage[stage_of(p, 10, 4)].insert(p.layer);
  EXPECT_EQ(layers_of_stage[0], (std::set<int64_t>{0, 1}));
  EXPECT_EQ(layers_of_stage[1], (std::set<int64_t>{2, 3, 4}));
  EXPECT_EQ(layers_of_stage[2], (std::set<int64_t>{5, 6}));
  EXPECT_EQ(layers_of_stage[3], (std::set<int64_t>{7, 8, 9}));
}

TEST(ModelTest, ServerStartsOnTheHostAfterTheTrainer) {
  // 6 trainer devices on 4-device hosts take 2 hosts; the server starts at device 8.
  const Batch b = model_batch(small_llama(), {.tp = 3, .pp = 2}, {.tp = 2}, paper_cluster(1));
  EXPECT_EQ(b.cluster.hosts, 3);
  EXPECT_EQ(b.tensors.back().src.mesh.devices(), (std::vector<DeviceId>{3, 4, 5}));
  EXPECT_EQ(b.tensors.back().dst.mesh.devices(), (std::vector<DeviceId>{8, 9}));
  for (const auto& t : b.tensors) {
    t.src.validate(t.tensor);
    t.dst.validate(t.tensor);
    t.src.mesh.check_fits(b.cluster);
    t.dst.mesh.check_fits(b.cluster);
  }
}

TEST(ModelTest, BatchIsValidAndItsFileRoundTrips) {
  for (const auto& config : {small_llama(), small_gpt(), small_moe()}) {
    const int64_t ep = config.arch == ModelArch::moe ? 2 : 1;
    const Batch b =
        model_batch(config, {.tp = 2, .pp = 2, .replicas = 2, .ep = ep},
                    {.tp = 8, .replicas = 2, .ep = ep, .etp = 8 / ep}, paper_cluster(1));
    b.validate();
    EXPECT_EQ(batch_from_json(nlohmann::json::parse(batch_to_json(b).dump())), b);
  }
}

// Serving engines' fused buffers: q, k, v stacked in attn.qkv_proj and gate, up in
// mlp.gate_up_proj, each part after the largest tile of the one before; nothing else bound.
TEST(ModelTest, LlamaServingDestinationsAreBoundIntoFusedBuffers) {
  for (const auto& [tp, k_at, v_at, up_at] :
       {std::tuple{4, 4, 6, 6}, {3, 6, 9, 8}}) {  // tp 3: q 16 rows -> tiles of 6, 6, 4
    const Batch b = model_batch(small_llama(), {.tp = 2}, {.tp = tp}, paper_cluster(1));
    std::map<std::string, BufferBinding> bound;
    for (const auto& t : b.tensors) {
      EXPECT_FALSE(t.src_buffer) << t.name;
      if (t.dst_buffer) bound[t.name] = *t.dst_buffer;
    }
    EXPECT_EQ(bound.size(), 4u * 5u) << "q, k, v, gate, up of 4 layers";
    const auto at = [&](const std::string& name) { return bound.at("layers.2." + name); };
    EXPECT_EQ(at("attn.q.weight"), (BufferBinding{"layers.2.attn.qkv_proj", {0, 0}}));
    EXPECT_EQ(at("attn.k.weight"), (BufferBinding{"layers.2.attn.qkv_proj", {k_at, 0}}));
    EXPECT_EQ(at("attn.v.weight"), (BufferBinding{"layers.2.attn.qkv_proj", {v_at, 0}}));
    EXPECT_EQ(at("mlp.gate.weight"), (BufferBinding{"layers.2.mlp.gate_up_proj", {0, 0}}));
    EXPECT_EQ(at("mlp.up.weight"), (BufferBinding{"layers.2.mlp.gate_up_proj", {up_at, 0}}));
  }
  for (const auto& t : model_batch(small_gpt(), {.tp = 2}, {.tp = 2}, paper_cluster(1)).tensors)
    EXPECT_FALSE(t.src_buffer || t.dst_buffer) << t.name << ": gpt has nothing to fuse";
}

// The MoE serving layout as vLLM and SGLang hold it: q_a_proj and kv_a_proj_with_mqa stacked in
// fused_qkv_a_proj; gate and up (dense MLP, shared experts) in gate_up_proj; the routed experts'
// gate and up in w13 [E_local, 2*I/etp, H] (gate on rows 0.., up after: dim 1) and down in w2;
// with grouped-query attention q, k, v in qkv_proj. Nothing else bound, the trainer never.
TEST(ModelTest, MoeServingDestinationsAreBoundIntoFusedBuffers) {
  // Server tp=4, ep=2, etp=2: dense ffn 24 -> 6 rows a rank, an expert's 6 -> 3, the shared
  // expert's 6 over tp 4 -> tiles of 2, 2, 2, 0.
  const Batch b = model_batch(small_moe(), {.tp = 2, .replicas = 2, .ep = 4},
                              {.tp = 4, .replicas = 2, .ep = 2, .etp = 2}, paper_cluster(1));
  b.validate();
  std::map<std::string, BufferBinding> bound;
  for (const auto& t : b.tensors) {
    EXPECT_FALSE(t.src_buffer) << t.name;
    if (t.dst_buffer) bound[t.name] = *t.dst_buffer;
  }
  EXPECT_EQ(bound.size(), 4u + 2u * 7u) << "dense layer: 2 + 2; MoE layers: 2 + 2 + 1 + 2";
  const auto expect = [&](const std::string& name, const std::string& buffer,
                          std::vector<int64_t> offset) {
    ASSERT_TRUE(bound.contains(name)) << name;
    EXPECT_EQ(bound.at(name), (BufferBinding{buffer, std::move(offset)})) << name;
  };
  for (const std::string l : {"model.layers.0.", "model.layers.2."}) {
    expect(l + "self_attn.q_a_proj.weight", l + "self_attn.fused_qkv_a_proj.weight", {0, 0});
    expect(l + "self_attn.kv_a_proj_with_mqa.weight", l + "self_attn.fused_qkv_a_proj.weight",
           {8, 0});
  }
  const std::string l0 = "model.layers.0.", l2 = "model.layers.2.";
  expect(l0 + "mlp.gate_proj.weight", l0 + "mlp.gate_up_proj.weight", {0, 0});
  expect(l0 + "mlp.up_proj.weight", l0 + "mlp.gate_up_proj.weight", {6, 0});
  expect(l2 + "mlp.experts.gate_proj.weight", l2 + "mlp.experts.w13_weight", {0, 0, 0});
  expect(l2 + "mlp.experts.up_proj.weight", l2 + "mlp.experts.w13_weight", {0, 3, 0});
  expect(l2 + "mlp.experts.down_proj.weight", l2 + "mlp.experts.w2_weight", {0, 0, 0});
  expect(l2 + "mlp.shared_experts.gate_proj.weight", l2 + "mlp.shared_experts.gate_up_proj.weight",
         {0, 0});
  expect(l2 + "mlp.shared_experts.up_proj.weight", l2 + "mlp.shared_experts.gate_up_proj.weight",
         {2, 0});

  // Grouped-query attention (Qwen3-MoE), 2 kv heads of 8 over tp 4: q's 32 rows -> 8 a rank,
  // each kv head whole on two ranks; etp 1: w13's up right after an expert's 6 gate rows.
  ModelConfig gqa = small_moe();
  gqa.kv_lora_rank = gqa.q_lora_rank = 0;
  gqa.kv_heads = 2;
  gqa.head_dim = 8;
  gqa.shared_experts = 0;
  const Batch g = model_batch(gqa, {.tp = 2}, {.tp = 4, .ep = 4}, paper_cluster(1));
  g.validate();
  bound.clear();
  for (const auto& t : g.tensors)
    if (t.dst_buffer) bound[t.name] = *t.dst_buffer;
  EXPECT_EQ(bound.size(), 3u * 3u + 2u + 2u * 3u)
      << "q, k, v in 3 layers; gate, up in the dense one; gate, up, down in 2 MoE layers";
  expect(l2 + "self_attn.q_proj.weight", l2 + "self_attn.qkv_proj.weight", {0, 0});
  expect(l2 + "self_attn.k_proj.weight", l2 + "self_attn.qkv_proj.weight", {8, 0});
  expect(l2 + "self_attn.v_proj.weight", l2 + "self_attn.qkv_proj.weight", {16, 0});
  expect(l2 + "mlp.experts.up_proj.weight", l2 + "mlp.experts.w13_weight", {0, 6, 0});
}

TEST(ModelTest, ParsesParallelism) {
  const auto side = parse_model_parallelism("tp=4,pp=2,dp=3", ModelSide::train, "--train");
  EXPECT_EQ(side.tp, 4);
  EXPECT_EQ(side.pp, 2);
  EXPECT_EQ(side.replicas, 3);
  EXPECT_EQ(parse_model_parallelism("replicas=4", ModelSide::serve, "--serve").tp, 1);
}

TEST(ModelTest, BadInputNamesTheValue) {
  expect_error([] { parse_model_parallelism("tp=0", ModelSide::train, "--train"); }, "'tp=0'");
  expect_error([] { parse_model_parallelism("tp=4,replicas=2", ModelSide::train, "--train"); },
               "'replicas=2'");
  expect_error([] { parse_model_parallelism("tp=4,tp=2", ModelSide::train, "--train"); },
               "given twice");
  expect_error([] { parse_model_parallelism("tp=x", ModelSide::train, "--train"); }, "'tp=x'");
  expect_error([] { parse_model_parallelism("", ModelSide::train, "--train"); }, "--train");
  expect_error([] { parse_model_arch("bert"); }, "'bert'");
  auto bad_heads = small_llama();
  bad_heads.heads = 5;
  expect_error([&] { model_parameters(bad_heads); }, "heads 5");
  auto bad_gpt = small_gpt();
  bad_gpt.kv_heads = 2;
  expect_error([&] { model_parameters(bad_gpt); }, "kv-heads 2");
  expect_error([] { model_batch(small_llama(), {.pp = 5}, {}, paper_cluster(1)); }, "pp=5");
  expect_error(
      [] {
        model_batch(small_llama(), {.tp = 1 << 20, .pp = 4, .replicas = 4}, {}, paper_cluster(1));
      },
      "--train");
}

}  // namespace
}  // namespace meshcast
