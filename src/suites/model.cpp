#include "meshcast/suites/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <utility>

#include "meshcast/error.h"

namespace meshcast {
namespace {

// A parameter of layer `layer` (or of the whole model with -1).
ModelParameter parameter(std::string name, std::vector<int64_t> shape, ParamClass param_class,
                         int64_t layer = -1) {
  return {std::move(name), std::move(shape), param_class, layer};
}

// Appends the parameters of one layer, each name prefixed `prefix`.
struct LayerParameters {
  std::string prefix;
  int64_t layer;
  std::vector<ModelParameter>& out;

  // `fused`: the serving buffer the parameter is a part of (its parts stacked on `fused_dim`),
  // "" for none.
  void add(std::string_view name, std::vector<int64_t> shape, ParamClass cls,
           std::string_view fused = "", int fused_dim = 0) const {
    out.push_back(parameter(prefix + std::string(name), std::move(shape), cls, layer));
    if (fused.empty()) return;
    out.back().fused = prefix + std::string(fused);
    out.back().fused_dim = fused_dim;
  }
};

// A moe model's gated MLP under `mlp` ("mlp." for a dense layer, "mlp.shared_experts." for the
// shared experts): gate_proj and up_proj fused for serving into gate_up_proj (vLLM's and SGLang's
// MergedColumnParallelLinear), then down_proj.
void add_gated_mlp(const LayerParameters& l, const std::string& mlp, int64_t inner,
                   int64_t hidden) {
  const std::string gate_up = mlp + "gate_up_proj.weight";
  l.add(mlp + "gate_proj.weight", {inner, hidden}, ParamClass::column, gate_up);
  l.add(mlp + "up_proj.weight", {inner, hidden}, ParamClass::column, gate_up);
  l.add(mlp + "down_proj.weight", {hidden, inner}, ParamClass::row);
}

// A moe layer with the Hugging Face names of DeepSeek-V3 (MLA) or Qwen3-MoE (grouped-query
// attention). Routed experts are stacked: one [experts, out, in] tensor per projection, expert j
// being the Hugging Face tensor mlp.experts.j.<proj>.weight. Serving buffers carry vLLM's
// parameter names (docs/models.md#fused-serving-buffers).
void add_moe_layer(const ModelConfig& c, int64_t layer, std::vector<ModelParameter>& out) {
  const LayerParameters l{fmt::format("model.layers.{}.", layer), layer, out};
  l.add("input_layernorm.weight", {c.hidden}, ParamClass::replicated);
  if (c.mla()) {
    const int64_t qk_head = c.qk_nope_dim + c.qk_rope_dim;
    // vLLM fuses the two latent down-projections, both replicated, into fused_qkv_a_proj.
    const std::string_view qkv_a = c.q_lora_rank > 0 ? "self_attn.fused_qkv_a_proj.weight" : "";
    if (c.q_lora_rank > 0) {
      l.add("self_attn.q_a_proj.weight", {c.q_lora_rank, c.hidden}, ParamClass::replicated, qkv_a);
      l.add("self_attn.q_a_layernorm.weight", {c.q_lora_rank}, ParamClass::replicated);
      l.add("self_attn.q_b_proj.weight", {c.heads * qk_head, c.q_lora_rank}, ParamClass::column);
    } else {
      l.add("self_attn.q_proj.weight", {c.heads * qk_head, c.hidden}, ParamClass::column);
    }
    l.add("self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_dim, c.hidden},
          ParamClass::replicated, qkv_a);
    l.add("self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}, ParamClass::replicated);
    l.add("self_attn.kv_b_proj.weight", {c.heads * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank},
          ParamClass::column);
    l.add("self_attn.o_proj.weight", {c.hidden, c.heads * c.v_head_dim}, ParamClass::row);
  } else {
    const int64_t hd = c.attention_head_dim();
    const std::string_view qkv = "self_attn.qkv_proj.weight";
    l.add("self_attn.q_proj.weight", {c.heads * hd, c.hidden}, ParamClass::column, qkv);
    l.add("self_attn.k_proj.weight", {c.key_value_heads() * hd, c.hidden}, ParamClass::kv_column,
          qkv);
    l.add("self_attn.v_proj.weight", {c.key_value_heads() * hd, c.hidden}, ParamClass::kv_column,
          qkv);
    l.add("self_attn.o_proj.weight", {c.hidden, c.heads * hd}, ParamClass::row);
    l.add("self_attn.q_norm.weight", {hd}, ParamClass::replicated);
    l.add("self_attn.k_norm.weight", {hd}, ParamClass::replicated);
  }
  l.add("post_attention_layernorm.weight", {c.hidden}, ParamClass::replicated);
  if (layer < c.dense_layers) {
    add_gated_mlp(l, "mlp.", c.ffn, c.hidden);
    return;
  }
  l.add("mlp.gate.weight", {c.experts, c.hidden}, ParamClass::replicated);
  if (c.router_bias) l.add("mlp.gate.e_score_correction_bias", {c.experts}, ParamClass::replicated);
  // vLLM's and SGLang's FusedMoE: w13 [E_local, 2*I/etp, H] holds gate then up on dim 1, w2
  // [E_local, H, I/etp] down.
  const std::string_view w13 = "mlp.experts.w13_weight", w2 = "mlp.experts.w2_weight";
  l.add("mlp.experts.gate_proj.weight", {c.experts, c.moe_ffn, c.hidden}, ParamClass::expert_column,
        w13, 1);
  l.add("mlp.experts.up_proj.weight", {c.experts, c.moe_ffn, c.hidden}, ParamClass::expert_column,
        w13, 1);
  l.add("mlp.experts.down_proj.weight", {c.experts, c.hidden, c.moe_ffn}, ParamClass::expert_row,
        w2);
  if (c.shared_experts > 0)
    add_gated_mlp(l, "mlp.shared_experts.", c.shared_experts * c.moe_ffn, c.hidden);
}

void add_layer(const ModelConfig& c, int64_t layer, std::vector<ModelParameter>& out) {
  if (c.arch == ModelArch::moe) {
    add_moe_layer(c, layer, out);
    return;
  }
  const LayerParameters l{fmt::format("layers.{}.", layer), layer, out};
  const int64_t head_dim = c.hidden / c.heads;
  if (c.arch == ModelArch::llama) {
    l.add("attn_norm.weight", {c.hidden}, ParamClass::replicated);
    l.add("attn.q.weight", {c.heads * head_dim, c.hidden}, ParamClass::column, "attn.qkv_proj");
    l.add("attn.k.weight", {c.key_value_heads() * head_dim, c.hidden}, ParamClass::column,
          "attn.qkv_proj");
    l.add("attn.v.weight", {c.key_value_heads() * head_dim, c.hidden}, ParamClass::column,
          "attn.qkv_proj");
    l.add("attn.o.weight", {c.hidden, c.heads * head_dim}, ParamClass::row);
    l.add("mlp_norm.weight", {c.hidden}, ParamClass::replicated);
    l.add("mlp.gate.weight", {c.ffn, c.hidden}, ParamClass::column, "mlp.gate_up_proj");
    l.add("mlp.up.weight", {c.ffn, c.hidden}, ParamClass::column, "mlp.gate_up_proj");
    l.add("mlp.down.weight", {c.hidden, c.ffn}, ParamClass::row);
    return;
  }
  l.add("attn_norm.weight", {c.hidden}, ParamClass::replicated);
  l.add("attn_norm.bias", {c.hidden}, ParamClass::replicated);
  l.add("attn.qkv.weight", {3 * c.hidden, c.hidden}, ParamClass::column);
  l.add("attn.qkv.bias", {3 * c.hidden}, ParamClass::column_bias);
  l.add("attn.o.weight", {c.hidden, c.hidden}, ParamClass::row);
  l.add("attn.o.bias", {c.hidden}, ParamClass::replicated);
  l.add("mlp_norm.weight", {c.hidden}, ParamClass::replicated);
  l.add("mlp_norm.bias", {c.hidden}, ParamClass::replicated);
  l.add("mlp.up.weight", {c.ffn, c.hidden}, ParamClass::column);
  l.add("mlp.up.bias", {c.ffn}, ParamClass::column_bias);
  l.add("mlp.down.weight", {c.hidden, c.ffn}, ParamClass::row);
  l.add("mlp.down.bias", {c.hidden}, ParamClass::replicated);
}

// The spec of a parameter class on its mesh (mesh_of): tp (or ep) is mesh axis 1, replicas axis 0,
// etp (or a kv head's ranks) axis 2.
ShardingSpec spec_of(ParamClass param_class, int rank) {
  switch (param_class) {
    case ParamClass::column:
    case ParamClass::kv_column:
    case ParamClass::vocab:
      return ShardingSpec::parse("S1R");
    case ParamClass::expert_column:
      return ShardingSpec::parse("S1S2R");
    case ParamClass::expert_row:
      return ShardingSpec::parse("S1RS2");
    case ParamClass::column_bias:
      return ShardingSpec::parse("S1");
    case ParamClass::row:
      return ShardingSpec::parse("RS1");
    case ParamClass::replicated:
      break;
  }
  return ShardingSpec(std::vector<ShardingSpec::DimAxes>(rank));
}

// Stage `stage` of a side whose first device is `first`, as a mesh of `shape` (its devices in
// order, tp fastest).
Mesh stage_mesh(const ModelParallelism& side, int64_t stage, DeviceId first,
                std::vector<int64_t> shape) {
  const int64_t per_stage = side.replicas * side.tp;
  std::vector<DeviceId> devices(per_stage);
  for (int64_t i = 0; i < per_stage; ++i)
    devices[i] = static_cast<DeviceId>(first + stage * per_stage + i);
  return Mesh(std::move(shape), std::move(devices));
}

// The mesh a parameter class lies on in a stage: (replicas, tp); routed experts (edp, ep, etp);
// kv_column with fewer kv heads than tp ranks (replicas, kv_heads, tp / kv_heads).
Mesh mesh_of(ParamClass param_class, const ModelConfig& c, const ModelParallelism& side,
             int64_t stage, DeviceId first) {
  if (param_class == ParamClass::expert_column || param_class == ParamClass::expert_row)
    return stage_mesh(side, stage, first,
                      {side.replicas * side.tp / (side.ep * side.etp), side.ep, side.etp});
  if (param_class == ParamClass::kv_column && c.key_value_heads() < side.tp)
    return stage_mesh(side, stage, first,
                      {side.replicas, c.key_value_heads(), side.tp / c.key_value_heads()});
  return stage_mesh(side, stage, first, {side.replicas, side.tp});
}

void check_side(const ModelParallelism& side, ModelSide which, const ModelConfig& c) {
  const std::string_view what = which == ModelSide::train ? "--train" : "--serve";
  const int64_t layers = c.layers;
  for (const auto& [key, value] :
       std::array<std::pair<std::string_view, int64_t>, 5>{{{"tp", side.tp},
                                                            {"pp", side.pp},
                                                            {"replicas", side.replicas},
                                                            {"ep", side.ep},
                                                            {"etp", side.etp}}})
    if (value < 1)
      throw InvalidArgument(fmt::format("bad {} {}={}: expected >= 1", what, key, value));
  if (side.tp > kMaxDevices || side.pp > kMaxDevices || side.tp * side.pp > kMaxDevices ||
      side.tp * side.pp * side.replicas > kMaxDevices)
    throw InvalidArgument(fmt::format("bad {} tp={},pp={},replicas={}: more than {} devices", what,
                                      side.tp, side.pp, side.replicas, kMaxDevices));
  if (side.pp > layers)
    throw InvalidArgument(
        fmt::format("bad {} pp={}: expected at most the model's {} layers", what, side.pp, layers));
  if (c.arch != ModelArch::moe) {
    // A server's etp is tp / ep, whatever the model; a trainer's is its own.
    if (side.ep != 1 || (which == ModelSide::train && side.etp != 1))
      throw InvalidArgument(fmt::format(
          "bad {} ep={},etp={}: expected 1 for a dense {} model (experts are --arch moe's)", what,
          side.ep, side.etp, to_string(c.arch)));
    return;
  }
  const int64_t per_stage = side.tp * side.replicas;
  if (per_stage % (side.ep * side.etp) != 0)
    throw InvalidArgument(fmt::format(
        "bad {} ep={},etp={}: expected ep x etp = {} to divide a stage's tp x replicas = {}", what,
        side.ep, side.etp, side.ep * side.etp, per_stage));
  if (c.experts % side.ep != 0)
    throw InvalidArgument(fmt::format("bad {} ep={}: expected a divisor of the model's {} experts",
                                      what, side.ep, c.experts));
  const int64_t kv = c.key_value_heads();
  if (!c.mla() && kv < side.tp && side.tp % kv != 0)
    throw InvalidArgument(
        fmt::format("bad {} tp={}: expected a multiple or a divisor of the model's {} kv heads",
                    what, side.tp, kv));
}

// The moe checks of ModelConfig::validate.
void validate_moe(const ModelConfig& c) {
  for (const auto& [name, value] :
       std::array<std::pair<std::string_view, int64_t>, 9>{{{"head-dim", c.head_dim},
                                                            {"q-lora-rank", c.q_lora_rank},
                                                            {"kv-lora-rank", c.kv_lora_rank},
                                                            {"qk-nope-dim", c.qk_nope_dim},
                                                            {"qk-rope-dim", c.qk_rope_dim},
                                                            {"v-head-dim", c.v_head_dim},
                                                            {"dense-layers", c.dense_layers},
                                                            {"shared-experts", c.shared_experts},
                                                            {"moe-ffn", c.moe_ffn}}})
    if (value < 0) throw InvalidArgument(fmt::format("bad {} {}: expected >= 0", name, value));
  if (c.experts < 1)
    throw InvalidArgument(fmt::format("bad experts {}: expected >= 1 for --arch moe", c.experts));
  if (c.moe_ffn < 1)
    throw InvalidArgument(fmt::format("bad moe-ffn {}: expected >= 1 for --arch moe", c.moe_ffn));
  if (c.dense_layers > c.layers)
    throw InvalidArgument(fmt::format("bad dense-layers {}: expected at most the model's {} layers",
                                      c.dense_layers, c.layers));
  if (c.mla()) {
    for (const auto& [name, value] :
         std::array<std::pair<std::string_view, int64_t>, 3>{{{"qk-nope-dim", c.qk_nope_dim},
                                                              {"qk-rope-dim", c.qk_rope_dim},
                                                              {"v-head-dim", c.v_head_dim}}})
      if (value < 1)
        throw InvalidArgument(
            fmt::format("bad {} {}: expected >= 1 with MLA attention (kv-lora-rank {})", name,
                        value, c.kv_lora_rank));
    return;
  }
  if (c.head_dim == 0 && c.hidden % c.heads != 0)
    throw InvalidArgument(fmt::format(
        "bad heads {}: expected a divisor of hidden {} (or a --head-dim)", c.heads, c.hidden));
  if (c.heads % c.key_value_heads() != 0)
    throw InvalidArgument(
        fmt::format("bad kv-heads {}: expected a divisor of heads {}", c.kv_heads, c.heads));
}

int64_t hosts_for(int64_t devices, int devices_per_host) {
  return (devices + devices_per_host - 1) / devices_per_host;
}

}  // namespace

std::string_view to_string(ModelArch arch) {
  switch (arch) {
    case ModelArch::llama:
      return "llama";
    case ModelArch::gpt:
      return "gpt";
    case ModelArch::moe:
      break;
  }
  return "moe";
}

ModelArch parse_model_arch(std::string_view text) {
  for (ModelArch arch : {ModelArch::llama, ModelArch::gpt, ModelArch::moe})
    if (text == to_string(arch)) return arch;
  throw InvalidArgument(fmt::format("bad architecture '{}': expected llama, gpt or moe", text));
}

std::string_view to_string(ParamClass param_class) {
  switch (param_class) {
    case ParamClass::column:
      return "column";
    case ParamClass::column_bias:
      return "column_bias";
    case ParamClass::row:
      return "row";
    case ParamClass::vocab:
      return "vocab";
    case ParamClass::kv_column:
      return "kv_column";
    case ParamClass::expert_column:
      return "expert_column";
    case ParamClass::expert_row:
      return "expert_row";
    case ParamClass::replicated:
      break;
  }
  return "replicated";
}

void ModelConfig::validate() const {
  for (const auto& [name, value] :
       std::array<std::pair<std::string_view, int64_t>, 6>{{{"hidden", hidden},
                                                            {"layers", layers},
                                                            {"heads", heads},
                                                            {"ffn", ffn},
                                                            {"vocab", vocab},
                                                            {"positions", positions}}})
    if (value < 1) throw InvalidArgument(fmt::format("bad {} {}: expected >= 1", name, value));
  if (kv_heads < 0)
    throw InvalidArgument(
        fmt::format("bad kv-heads {}: expected >= 1 (or 0: as many as heads)", kv_heads));
  if (arch == ModelArch::moe) {
    validate_moe(*this);
    return;
  }
  if (hidden % heads != 0)
    throw InvalidArgument(
        fmt::format("bad heads {}: expected a divisor of hidden {}", heads, hidden));
  if (heads % key_value_heads() != 0)
    throw InvalidArgument(
        fmt::format("bad kv-heads {}: expected a divisor of heads {}", kv_heads, heads));
  if (arch == ModelArch::gpt && key_value_heads() != heads)
    throw InvalidArgument(fmt::format(
        "bad kv-heads {} for gpt: expected heads {} (gpt has no grouped-query attention)", kv_heads,
        heads));
}

ModelConfig model_preset(std::string_view name) {
  // DeepSeek-V3 (deepseek-ai/DeepSeek-V3, config.json); Kimi-K2 is its architecture with 384
  // experts, 64 heads, one dense layer and a larger vocabulary (moonshotai/Kimi-K2-Instruct).
  ModelConfig v3{.arch = ModelArch::moe,
                 .hidden = 7168,
                 .layers = 61,
                 .heads = 128,
                 .ffn = 18432,
                 .vocab = 129280,
                 .q_lora_rank = 1536,
                 .kv_lora_rank = 512,
                 .qk_nope_dim = 128,
                 .qk_rope_dim = 64,
                 .v_head_dim = 128,
                 .dense_layers = 3,
                 .experts = 256,
                 .shared_experts = 1,
                 .moe_ffn = 2048,
                 .router_bias = true};
  if (name == "deepseek-v3") return v3;
  if (name == "kimi-k2") {
    ModelConfig k2 = v3;
    k2.heads = 64;
    k2.vocab = 163840;
    k2.dense_layers = 1;
    k2.experts = 384;
    return k2;
  }
  // Qwen/Qwen3-235B-A22B, config.json: grouped-query attention with q/k norms, no shared experts,
  // no dense layers, no router bias.
  if (name == "qwen3-235b-a22b")
    return {.arch = ModelArch::moe,
            .hidden = 4096,
            .layers = 94,
            .heads = 64,
            .kv_heads = 4,
            .ffn = 12288,
            .vocab = 151936,
            .head_dim = 128,
            .experts = 128,
            .moe_ffn = 1536};
  throw InvalidArgument(
      fmt::format("bad preset '{}': expected deepseek-v3, kimi-k2 or qwen3-235b-a22b", name));
}

const std::vector<std::string_view>& model_dimension_keys() {
  static const std::vector<std::string_view> keys = {
      "hidden",      "layers",       "heads",       "kv-heads",       "ffn",        "vocab",
      "positions",   "head-dim",     "experts",     "shared-experts", "moe-ffn",    "dense-layers",
      "q-lora-rank", "kv-lora-rank", "qk-nope-dim", "qk-rope-dim",    "v-head-dim", "router-bias"};
  return keys;
}

void set_model_dimension(ModelConfig& c, std::string_view key, int64_t value) {
  int64_t* const fields[] = {&c.hidden,      &c.layers,         &c.heads,       &c.kv_heads,
                             &c.ffn,         &c.vocab,          &c.positions,   &c.head_dim,
                             &c.experts,     &c.shared_experts, &c.moe_ffn,     &c.dense_layers,
                             &c.q_lora_rank, &c.kv_lora_rank,   &c.qk_nope_dim, &c.qk_rope_dim,
                             &c.v_head_dim};
  if (key == "router-bias") {
    if (value != 0 && value != 1)
      throw InvalidArgument(fmt::format("bad router-bias {}: expected 0 or 1", value));
    c.router_bias = value == 1;
    return;
  }
  const auto& keys = model_dimension_keys();
  for (size_t i = 0; i < std::size(fields); ++i)
    if (keys[i] == key) {
      *fields[i] = value;
      return;
    }
  throw InvalidArgument(
      fmt::format("bad model dimension '{}': expected one of {}", key, fmt::join(keys, ", ")));
}

ModelConfig make_model_config(std::string_view arch, std::string_view preset,
                              const std::vector<std::pair<std::string, int64_t>>& dimensions) {
  ModelConfig config;
  if (!preset.empty()) {
    config = model_preset(preset);
    if (!arch.empty() && parse_model_arch(arch) != config.arch)
      throw InvalidArgument(fmt::format("bad arch '{}' with preset '{}': expected {}", arch, preset,
                                        to_string(config.arch)));
  } else if (!arch.empty() && parse_model_arch(arch) == ModelArch::moe) {
    config = model_preset("deepseek-v3");
  } else if (!arch.empty()) {
    config.arch = parse_model_arch(arch);
  }
  for (const auto& [key, value] : dimensions) set_model_dimension(config, key, value);
  return config;
}

ModelConfig llama_7b() {
  return {};
}

ModelConfig llama_70b() {
  return {.arch = ModelArch::llama,
          .hidden = 8192,
          .layers = 80,
          .heads = 64,
          .kv_heads = 8,
          .ffn = 28672,
          .vocab = 32000};
}

ModelConfig gpt_2_7b() {
  return {.arch = ModelArch::gpt,
          .hidden = 2560,
          .layers = 32,
          .heads = 32,
          .ffn = 10240,
          .vocab = 50257,
          .positions = 2048};
}

ModelParallelism parse_model_parallelism(std::string_view text, ModelSide side,
                                         std::string_view option) {
  const bool train = side == ModelSide::train;
  const std::string_view replica_key = train ? "dp" : "replicas";
  const std::string_view expected =
      train ? "tp=N, pp=N, dp=N, ep=N or etp=N" : "tp=N, pp=N, replicas=N or ep=N";
  ModelParallelism p;
  int64_t* const slots[] = {&p.tp, &p.pp, &p.replicas, &p.ep, &p.etp};
  const std::array<std::string_view, 5> keys = {"tp", "pp", replica_key, "ep", train ? "etp" : ""};
  std::array<bool, 5> seen{};
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string_view entry = text.substr(start, end - start);
    start = end + 1;
    const size_t eq = entry.find('=');
    const std::string_view key = entry.substr(0, eq);
    const auto it = key.empty() ? keys.end() : std::find(keys.begin(), keys.end(), key);
    const int slot = it == keys.end() ? -1 : static_cast<int>(it - keys.begin());
    int64_t value = 0;
    const std::string_view digits = eq == std::string_view::npos ? "" : entry.substr(eq + 1);
    const auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (slot < 0 || digits.empty() || error != std::errc() ||
        ptr != digits.data() + digits.size() || value < 1)
      throw InvalidArgument(fmt::format("bad entry '{}' in {} '{}': expected {} with N >= 1", entry,
                                        option, text, expected));
    if (seen[slot])
      throw InvalidArgument(
          fmt::format("bad entry '{}' in {} '{}': {} given twice", entry, option, text, key));
    seen[slot] = true;
    *slots[slot] = value;
  }
  if (!train) {
    if (p.tp % p.ep != 0)
      throw InvalidArgument(fmt::format(
          "bad {} '{}': ep={} expected to divide tp={} (a replica's experts over its tp ranks)",
          option, text, p.ep, p.tp));
    p.etp = p.tp / p.ep;
  }
  return p;
}

std::vector<ModelParameter> model_parameters(const ModelConfig& c) {
  c.validate();
  std::vector<ModelParameter> out;
  const bool moe = c.arch == ModelArch::moe;
  const int64_t last = c.layers;  // the final norm and the head: after every layer
  out.push_back(parameter(moe ? "model.embed_tokens.weight" : "embed.weight", {c.vocab, c.hidden},
                          ParamClass::vocab));
  if (c.arch == ModelArch::gpt)
    out.push_back(parameter("pos_embed.weight", {c.positions, c.hidden}, ParamClass::replicated));
  for (int64_t layer = 0; layer < c.layers; ++layer) add_layer(c, layer, out);
  out.push_back(parameter(moe ? "model.norm.weight" : "norm.weight", {c.hidden},
                          ParamClass::replicated, last));
  if (c.arch == ModelArch::gpt)
    out.push_back(parameter("norm.bias", {c.hidden}, ParamClass::replicated, last));
  out.push_back(parameter(moe ? "lm_head.weight" : "head.weight", {c.vocab, c.hidden},
                          ParamClass::vocab, last));
  return out;
}

int64_t stage_of(const ModelParameter& parameter, int64_t layers, int64_t pp) {
  if (parameter.layer < 0) return 0;
  if (parameter.layer >= layers) return pp - 1;
  // The last stage s whose first layer s*L/pp is at or before this layer.
  int64_t stage = 0;
  while (stage + 1 < pp && (stage + 1) * layers / pp <= parameter.layer) ++stage;
  return stage;
}

Batch model_batch(const ModelConfig& config, const ModelParallelism& train,
                  const ModelParallelism& serve, Cluster cluster) {
  config.validate();
  check_side(train, ModelSide::train, config);
  check_side(serve, ModelSide::serve, config);
  const int g = cluster.devices_per_host;
  if (g < 1) throw InvalidArgument(fmt::format("bad devices per host {}: expected >= 1", g));
  const int64_t train_hosts = hosts_for(train.devices(), g);
  const int64_t hosts = train_hosts + hosts_for(serve.devices(), g);
  cluster.hosts = static_cast<int>(hosts);
  if (!cluster.host_nic_bandwidth.empty())
    cluster.host_nic_bandwidth.resize(cluster.hosts, cluster.nic_bandwidth);
  if (!cluster.host_nics.empty()) cluster.host_nics.resize(cluster.hosts, cluster.nics_per_host);
  cluster.validate();
  const DeviceId serve_first = static_cast<DeviceId>(train_hosts * g);

  Batch batch;
  batch.cluster = cluster;
  // Per fused serving buffer: where its next part starts along the dim its parts stack on.
  std::map<std::string, int64_t, std::less<>> fused_end;
  for (auto& p : model_parameters(config)) {
    const int rank = static_cast<int>(p.shape.size());
    const ShardingSpec spec = spec_of(p.param_class, rank);
    TensorResharding t;
    t.tensor = TensorSpec{std::move(p.shape), config.dtype};
    t.src = Layout{mesh_of(p.param_class, config, train, stage_of(p, config.layers, train.pp), 0),
                   spec};
    t.dst = Layout{
        mesh_of(p.param_class, config, serve, stage_of(p, config.layers, serve.pp), serve_first),
        spec};
    t.name = std::move(p.name);
    if (!p.fused.empty()) {
      // Stacked after the parts before it, each taking its largest tile (torch.chunk's first).
      int64_t& end = fused_end[p.fused];
      BufferBinding binding{p.fused, std::vector<int64_t>(rank, 0)};
      binding.offset[p.fused_dim] = end;
      end += tile_at(t.tensor, t.dst, 0).dims[p.fused_dim].size();
      t.dst_buffer = std::move(binding);
    }
    batch.tensors.push_back(std::move(t));
  }
  return batch;
}

}  // namespace meshcast
