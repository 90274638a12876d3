// `meshcast model`: the batch file of a real architecture's weight sync (trainer -> server).
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "meshcast/plan/json.h"
#include "meshcast/suites/model.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct ModelOptions {
  std::string arch;    // empty: llama, or moe with a preset
  std::string preset;  // a public MoE configuration (model_preset)
  // The dimensions given on the command line (model_dimension_keys order): they replace the
  // architecture's defaults or the preset's (make_model_config).
  std::vector<std::optional<int64_t>> dimensions =
      std::vector<std::optional<int64_t>>(model_dimension_keys().size());
  std::string dtype = "bfloat16";
  std::string train = "tp=1";
  std::string serve = "tp=1";
  int devices_per_host = 4;
  ClusterOptions cluster;
  std::string cluster_file;  // a cluster document: devices per host, NICs and links
  std::string output;
};

ModelConfig model_config(const ModelOptions& o) {
  std::vector<std::pair<std::string, int64_t>> given;
  const auto& keys = model_dimension_keys();
  for (size_t i = 0; i < keys.size(); ++i)
    if (o.dimensions[i]) given.emplace_back(keys[i], *o.dimensions[i]);
  ModelConfig config = make_model_config(o.arch, o.preset, given);
  config.dtype = parse_dtype(o.dtype);
  return config;
}

std::string device_range(const Mesh& first, const Mesh& last, const Cluster& cluster) {
  const DeviceId lo = first.devices().front();
  const DeviceId hi = last.devices().back();
  return fmt::format("devices {}-{} (hosts {}-{})", lo, hi, cluster.host_of(lo),
                     cluster.host_of(hi));
}

// One line per parameter class: how many tensors and bytes, and their spec.
void print_summary(const ModelOptions& o, const ModelConfig& config, const Batch& batch) {
  std::map<std::string, std::pair<int64_t, int64_t>> per_spec;  // spec -> tensors, bytes
  int64_t total = 0;
  for (const auto& t : batch.tensors) {
    auto& [count, bytes] = per_spec[t.src.spec.to_string()];
    ++count;
    bytes += t.tensor.bytes();
    total += t.tensor.bytes();
  }
  fmt::print("{} model: {} tensors, {} of {}\n",
             o.preset.empty() ? std::string(to_string(config.arch)) : o.preset,
             batch.tensors.size(), human_bytes(static_cast<double>(total)), o.dtype);
  fmt::print(
      "  train {}: {}\n", o.train,
      device_range(batch.tensors.front().src.mesh, batch.tensors.back().src.mesh, batch.cluster));
  fmt::print(
      "  serve {}: {}\n", o.serve,
      device_range(batch.tensors.front().dst.mesh, batch.tensors.back().dst.mesh, batch.cluster));
  for (const auto& [spec, count_bytes] : per_spec)
    fmt::print("  spec {:<5} {:>5} tensors {:>24}\n", spec, count_bytes.first,
               human_bytes(static_cast<double>(count_bytes.second)));
  fmt::print("wrote {}\n", o.output);
}

void run_model(const ModelOptions& o) {
  const ModelConfig config = model_config(o);
  Cluster options{.devices_per_host = o.devices_per_host};
  set_links(options, o.cluster);
  const Cluster cluster =
      o.cluster_file.empty() ? options : load_cluster_file(o.cluster_file, options);
  const Batch batch =
      model_batch(config, parse_model_parallelism(o.train, ModelSide::train, "--train"),
                  parse_model_parallelism(o.serve, ModelSide::serve, "--serve"), cluster);
  const std::string text = batch_to_json(batch).dump() + "\n";
  if (o.output.empty() || o.output == "-") {
    std::cout << text;
    return;
  }
  write_text_file(o.output, text);
  print_summary(o, config, batch);
}

}  // namespace

void add_model_verb(CLI::App& app) {
  auto o = std::make_shared<ModelOptions>();
  auto* verb = app.add_subcommand(
      "model", "Write the batch file of a model's weight sync from training to serving meshes");
  verb->add_option("--arch", o->arch,
                   "llama (separate q/k/v, gate/up/down; the default), gpt (fused qkv, biases, "
                   "learned positions) or moe (MLA or grouped-query attention, routed and shared "
                   "experts; DeepSeek-V3's dimensions unless --preset)");
  verb->add_option("--preset", o->preset,
                   "A public MoE configuration: deepseek-v3, kimi-k2 or qwen3-235b-a22b "
                   "(docs/models.md); the dimension options change it");
  // Each dimension: its option, and its help with the default.
  const std::map<std::string_view, std::string> help = {
      {"hidden", "Hidden size (default 4096)"},
      {"layers", "Transformer layers (default 32)"},
      {"heads", "Attention heads (default 32)"},
      {"kv-heads",
       "Key/value heads (0, the default: --heads; fewer: grouped-query attention, llama and moe)"},
      {"ffn", "MLP inner size (moe: of the dense layers; default 11008)"},
      {"vocab", "Vocabulary size (default 32000)"},
      {"positions", "gpt: rows of the learned position embedding (default 2048)"},
      {"head-dim", "moe grouped-query attention: head size (0: hidden / heads)"},
      {"experts", "moe: routed experts per MoE layer"},
      {"shared-experts", "moe: shared experts per MoE layer"},
      {"moe-ffn", "moe: inner size of one expert"},
      {"dense-layers", "moe: the first layers, with a dense MLP of --ffn"},
      {"q-lora-rank", "moe MLA: query compression rank (0: one q_proj)"},
      {"kv-lora-rank", "moe: key/value compression rank of MLA (0: grouped-query attention)"},
      {"qk-nope-dim", "moe MLA: query/key head size without rotary embedding"},
      {"qk-rope-dim", "moe MLA: query/key head size with rotary embedding"},
      {"v-head-dim", "moe MLA: value head size"},
      {"router-bias", "moe: 1 if the router has an e_score_correction_bias (the presets say)"}};
  const auto& keys = model_dimension_keys();
  for (size_t i = 0; i < keys.size(); ++i)
    verb->add_option(fmt::format("--{}", keys[i]), o->dimensions[i], help.at(keys[i]));
  verb->add_option("--dtype", o->dtype, "Element type of every parameter")->capture_default_str();
  verb->add_option("--train", o->train,
                   "Trainer: tp=N,pp=N,dp=N,ep=N,etp=N (missing keys are 1; ep x etp divides "
                   "tp x dp)")
      ->capture_default_str();
  verb->add_option("--serve", o->serve,
                   "Server: tp=N,pp=N,replicas=N,ep=N (missing keys are 1; ep divides tp)")
      ->capture_default_str();
  auto links = add_cluster_options(*verb, o->cluster);
  links.push_back(verb->add_option("--devices-per-host", o->devices_per_host, "Devices per host")
                      ->capture_default_str());
  auto* cluster = verb->add_option(
      "--cluster", o->cluster_file,
      "A cluster file (e.g. configs/clusters/h20.json): devices and "
      "NICs per host, links; its host count is replaced by the "
      "hosts both sides need; missing keys keep the defaults of the options it excludes");
  for (auto* option : links) cluster->excludes(option);
  verb->add_option("-o,--output", o->output,
                   "Write the batch file here and print a summary (default: the file on stdout)");
  verb->callback([o] { run_model(*o); });
}

}  // namespace meshcast::cli
