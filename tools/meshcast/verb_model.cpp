// `meshcast model`: the batch file of a real architecture's weight sync (trainer -> server).
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>

#include "cli_common.h"
#include "meshcast/plan/json.h"
#include "meshcast/suites/model.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct ModelOptions {
  std::string arch = "llama";
  ModelConfig config;
  std::string dtype = "bfloat16";
  std::string train = "tp=1";
  std::string serve = "tp=1";
  int devices_per_host = 4;
  int nics_per_host = 1;
  ClusterOptions cluster;
  std::string output;
};

std::string device_range(const Mesh& first, const Mesh& last, const Cluster& cluster) {
  const DeviceId lo = first.devices().front();
  const DeviceId hi = last.devices().back();
  return fmt::format("devices {}-{} (hosts {}-{})", lo, hi, cluster.host_of(lo),
                     cluster.host_of(hi));
}

// One line per parameter class: how many tensors and bytes, and their spec.
void print_summary(const ModelOptions& o, const Batch& batch) {
  std::map<std::string, std::pair<int64_t, int64_t>> per_spec;  // spec -> tensors, bytes
  int64_t total = 0;
  for (const auto& t : batch.tensors) {
    auto& [count, bytes] = per_spec[t.src.spec.to_string()];
    ++count;
    bytes += t.tensor.bytes();
    total += t.tensor.bytes();
  }
  fmt::print("{} model: {} tensors, {} of {}\n", o.arch, batch.tensors.size(),
             human_bytes(static_cast<double>(total)), o.dtype);
  fmt::print(
      "  train {}: {}\n", o.train,
      device_range(batch.tensors.front().src.mesh, batch.tensors.back().src.mesh, batch.cluster));
  fmt::print(
      "  serve {}: {}\n", o.serve,
      device_range(batch.tensors.front().dst.mesh, batch.tensors.back().dst.mesh, batch.cluster));
  for (const auto& [spec, count_bytes] : per_spec)
    fmt::print("  spec {:<4} {:>5} tensors {:>24}\n", spec, count_bytes.first,
               human_bytes(static_cast<double>(count_bytes.second)));
  fmt::print("wrote {}\n", o.output);
}

void run_model(ModelOptions o) {
  o.config.arch = parse_model_arch(o.arch);
  o.config.dtype = parse_dtype(o.dtype);
  const Cluster cluster{.devices_per_host = o.devices_per_host,
                        .nic_bandwidth = gbps_to_bytes(o.cluster.nic_gbps),
                        .device_bandwidth = gbps_to_bytes(o.cluster.dev_gbps),
                        .latency = o.cluster.latency_us * 1e-6,
                        .nics_per_host = o.nics_per_host};
  const Batch batch = model_batch(o.config, parse_model_parallelism(o.train, "dp", "--train"),
                                  parse_model_parallelism(o.serve, "replicas", "--serve"), cluster);
  const std::string text = batch_to_json(batch).dump() + "\n";
  if (o.output.empty() || o.output == "-") {
    std::cout << text;
    return;
  }
  write_text_file(o.output, text);
  print_summary(o, batch);
}

}  // namespace

void add_model_verb(CLI::App& app) {
  auto o = std::make_shared<ModelOptions>();
  auto* verb = app.add_subcommand(
      "model", "Write the batch file of a model's weight sync from training to serving meshes");
  verb->add_option("--arch", o->arch,
                   "llama (separate q/k/v, gate/up/down) or gpt (fused qkv, "
                   "biases, learned positions)")
      ->capture_default_str();
  verb->add_option("--hidden", o->config.hidden, "Hidden size")->capture_default_str();
  verb->add_option("--layers", o->config.layers, "Transformer layers")->capture_default_str();
  verb->add_option("--heads", o->config.heads, "Attention heads")->capture_default_str();
  verb->add_option("--kv-heads", o->config.kv_heads,
                   "Key/value heads (0: --heads; fewer: grouped-query attention, llama only)")
      ->capture_default_str();
  verb->add_option("--ffn", o->config.ffn, "MLP inner size")->capture_default_str();
  verb->add_option("--vocab", o->config.vocab, "Vocabulary size")->capture_default_str();
  verb->add_option("--positions", o->config.positions,
                   "gpt: rows of the learned position embedding")
      ->capture_default_str();
  verb->add_option("--dtype", o->dtype, "Element type of every parameter")->capture_default_str();
  verb->add_option("--train", o->train, "Trainer: tp=N,pp=N,dp=N (missing keys are 1)")
      ->capture_default_str();
  verb->add_option("--serve", o->serve, "Server: tp=N,pp=N,replicas=N (missing keys are 1)")
      ->capture_default_str();
  verb->add_option("--devices-per-host", o->devices_per_host, "Devices per host")
      ->capture_default_str();
  verb->add_option("--nics-per-host", o->nics_per_host, "NICs per host (--nic-gbps each)")
      ->capture_default_str();
  add_cluster_options(*verb, o->cluster);
  verb->add_option("-o,--output", o->output,
                   "Write the batch file here and print a summary (default: the file on stdout)");
  verb->callback([o] { run_model(*o); });
}

}  // namespace meshcast::cli
