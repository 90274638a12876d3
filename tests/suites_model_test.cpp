// The model generator: every parameter class's shape, spec and mesh on a small config, stages,
// device placement, and bad input.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "meshcast/error.h"
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

TEST(ModelTest, StagesSplitLayersInContiguousRuns) {
  // 10 layers over 4 stages: layers [0,2) [2,5) [5,7) [7,10).
  const auto params = model_parameters({.hidden = 16, .layers = 10, .heads = 4});
  std::map<int64_t, std::set<int64_t>> layers_of_stage;
  for (const auto& p : params)
    if (p.layer >= 0) layers_of_stage[stage_of(p, 10, 4)].insert(p.layer);
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
  for (const auto& config : {small_llama(), small_gpt()}) {
    const Batch b = model_batch(config, {.tp = 2, .pp = 2, .replicas = 2}, {.tp = 8, .replicas = 2},
                                paper_cluster(1));
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

TEST(ModelTest, ParsesParallelism) {
  const auto side = parse_model_parallelism("tp=4,pp=2,dp=3", "dp", "--train");
  EXPECT_EQ(side.tp, 4);
  EXPECT_EQ(side.pp, 2);
  EXPECT_EQ(side.replicas, 3);
  EXPECT_EQ(parse_model_parallelism("replicas=4", "replicas", "--serve").tp, 1);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << part;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ModelTest, BadInputNamesTheValue) {
  expect_error([] { parse_model_parallelism("tp=0", "dp", "--train"); }, "'tp=0'");
  expect_error([] { parse_model_parallelism("tp=4,replicas=2", "dp", "--train"); }, "'replicas=2'");
  expect_error([] { parse_model_parallelism("tp=4,tp=2", "dp", "--train"); }, "given twice");
  expect_error([] { parse_model_parallelism("tp=x", "dp", "--train"); }, "'tp=x'");
  expect_error([] { parse_model_parallelism("", "dp", "--train"); }, "--train");
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
