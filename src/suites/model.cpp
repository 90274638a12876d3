#include "meshcast/suites/model.h"

#include <fmt/format.h>

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

void add_layer(const ModelConfig& c, int64_t layer, std::vector<ModelParameter>& out) {
  const std::string p = fmt::format("layers.{}.", layer);
  const int64_t head_dim = c.hidden / c.heads;
  // `fused`: the serving buffer the parameter is a part of (stacked on dim 0), "" for none.
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, ParamClass cls,
                       std::string_view fused = "") {
    out.push_back(parameter(p + name, std::move(shape), cls, layer));
    if (!fused.empty()) out.back().fused = p + std::string(fused);
  };
  if (c.arch == ModelArch::llama) {
    add("attn_norm.weight", {c.hidden}, ParamClass::replicated);
    add("attn.q.weight", {c.heads * head_dim, c.hidden}, ParamClass::column, "attn.qkv_proj");
    add("attn.k.weight", {c.key_value_heads() * head_dim, c.hidden}, ParamClass::column,
        "attn.qkv_proj");
    add("attn.v.weight", {c.key_value_heads() * head_dim, c.hidden}, ParamClass::column,
        "attn.qkv_proj");
    add("attn.o.weight", {c.hidden, c.heads * head_dim}, ParamClass::row);
    add("mlp_norm.weight", {c.hidden}, ParamClass::replicated);
    add("mlp.gate.weight", {c.ffn, c.hidden}, ParamClass::column, "mlp.gate_up_proj");
    add("mlp.up.weight", {c.ffn, c.hidden}, ParamClass::column, "mlp.gate_up_proj");
    add("mlp.down.weight", {c.hidden, c.ffn}, ParamClass::row);
    return;
  }
  add("attn_norm.weight", {c.hidden}, ParamClass::replicated);
  add("attn_norm.bias", {c.hidden}, ParamClass::replicated);
  add("attn.qkv.weight", {3 * c.hidden, c.hidden}, ParamClass::column);
  add("attn.qkv.bias", {3 * c.hidden}, ParamClass::column_bias);
  add("attn.o.weight", {c.hidden, c.hidden}, ParamClass::row);
  add("attn.o.bias", {c.hidden}, ParamClass::replicated);
  add("mlp_norm.weight", {c.hidden}, ParamClass::replicated);
  add("mlp_norm.bias", {c.hidden}, ParamClass::replicated);
  add("mlp.up.weight", {c.ffn, c.hidden}, ParamClass::column);
  add("mlp.up.bias", {c.ffn}, ParamClass::column_bias);
  add("mlp.down.weight", {c.hidden, c.ffn}, ParamClass::row);
  add("mlp.down.bias", {c.hidden}, ParamClass::replicated);
}

// The spec of a parameter class on a (replicas, tp) mesh: tp is mesh axis 1, replicas axis 0.
ShardingSpec spec_of(ParamClass param_class, int rank) {
  switch (param_class) {
    case ParamClass::column:
    case ParamClass::vocab:
      return ShardingSpec::parse("S1R");
    case ParamClass::column_bias:
      return ShardingSpec::parse("S1");
    case ParamClass::row:
      return ShardingSpec::parse("RS1");
    case ParamClass::replicated:
      break;
  }
  return ShardingSpec(std::vector<ShardingSpec::DimAxes>(rank));
}

// The (replicas, tp) mesh of stage `stage` of a side whose first device is `first`.
Mesh stage_mesh(const ModelParallelism& side, int64_t stage, DeviceId first) {
  const int64_t per_stage = side.replicas * side.tp;
  std::vector<DeviceId> devices(per_stage);
  for (int64_t i = 0; i < per_stage; ++i) devices[i] = first + stage * per_stage + i;
  return Mesh({side.replicas, side.tp}, std::move(devices));
}

void check_side(const ModelParallelism& side, std::string_view what, int64_t layers) {
  for (const auto& [key, value] : std::array<std::pair<std::string_view, int64_t>, 3>{
           {{"tp", side.tp}, {"pp", side.pp}, {"replicas", side.replicas}}})
    if (value < 1)
      throw InvalidArgument(fmt::format("bad {} {}={}: expected >= 1", what, key, value));
  if (side.tp > kMaxDevices || side.pp > kMaxDevices || side.tp * side.pp > kMaxDevices ||
      side.tp * side.pp * side.replicas > kMaxDevices)
    throw InvalidArgument(fmt::format("bad {} tp={},pp={},replicas={}: more than {} devices", what,
                                      side.tp, side.pp, side.replicas, kMaxDevices));
  if (side.pp > layers)
    throw InvalidArgument(
        fmt::format("bad {} pp={}: expected at most the model's {} layers", what, side.pp, layers));
}

int64_t hosts_for(int64_t devices, int devices_per_host) {
  return (devices + devices_per_host - 1) / devices_per_host;
}

}  // namespace

std::string_view to_string(ModelArch arch) {
  return arch == ModelArch::llama ? "llama" : "gpt";
}

ModelArch parse_model_arch(std::string_view text) {
  if (text == "llama") return ModelArch::llama;
  if (text == "gpt") return ModelArch::gpt;
  throw InvalidArgument(fmt::format("bad architecture '{}': expected llama or gpt", text));
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

ModelParallelism parse_model_parallelism(std::string_view text, std::string_view replica_key,
                                         std::string_view option) {
  ModelParallelism side;
  std::array<bool, 3> seen{};
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string_view entry = text.substr(start, end - start);
    start = end + 1;
    const size_t eq = entry.find('=');
    const std::string_view key = entry.substr(0, eq);
    const int slot = key == "tp" ? 0 : key == "pp" ? 1 : key == replica_key ? 2 : -1;
    int64_t value = 0;
    const std::string_view digits = eq == std::string_view::npos ? "" : entry.substr(eq + 1);
    const auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (slot < 0 || digits.empty() || error != std::errc() ||
        ptr != digits.data() + digits.size() || value < 1)
      throw InvalidArgument(
          fmt::format("bad entry '{}' in {} '{}': expected tp=N, pp=N or {}=N with N >= 1", entry,
                      option, text, replica_key));
    if (seen[slot])
      throw InvalidArgument(
          fmt::format("bad entry '{}' in {} '{}': {} given twice", entry, option, text, key));
    seen[slot] = true;
    (slot == 0 ? side.tp : slot == 1 ? side.pp : side.replicas) = value;
  }
  return side;
}

std::vector<ModelParameter> model_parameters(const ModelConfig& c) {
  c.validate();
  std::vector<ModelParameter> out;
  out.push_back(parameter("embed.weight", {c.vocab, c.hidden}, ParamClass::vocab));
  if (c.arch == ModelArch::gpt)
    out.push_back(parameter("pos_embed.weight", {c.positions, c.hidden}, ParamClass::replicated));
  for (int64_t layer = 0; layer < c.layers; ++layer) add_layer(c, layer, out);
  out.push_back(parameter("norm.weight", {c.hidden}, ParamClass::replicated));
  if (c.arch == ModelArch::gpt)
    out.push_back(parameter("norm.bias", {c.hidden}, ParamClass::replicated));
  out.push_back(parameter("head.weight", {c.vocab, c.hidden}, ParamClass::vocab));
  return out;
}

int64_t stage_of(const ModelParameter& parameter, int64_t layers, int64_t pp) {
  if (parameter.layer < 0)
    return parameter.name.starts_with("norm.") || parameter.name == "head.weight" ? pp - 1 : 0;
  // The last stage s whose first layer s*L/pp is at or before this layer.
  int64_t stage = 0;
  while (stage + 1 < pp && (stage + 1) * layers / pp <= parameter.layer) ++stage;
  return stage;
}

Batch model_batch(const ModelConfig& config, const ModelParallelism& train,
                  const ModelParallelism& serve, Cluster cluster) {
  config.validate();
  check_side(train, "--train", config.layers);
  check_side(serve, "--serve", config.layers);
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
    t.src = Layout{stage_mesh(train, stage_of(p, config.layers, train.pp), 0), spec};
    t.dst = Layout{stage_mesh(serve, stage_of(p, config.layers, serve.pp), serve_first), spec};
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
