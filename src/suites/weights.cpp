#include "meshcast/suites/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "meshcast/plan/lower_bound.h"
#include "meshcast/plan/planner.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/suites/model.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

WeightsCase model_case(std::string label, std::string name, const ModelConfig& config,
                       const ModelParallelism& train, const ModelParallelism& serve,
                       const Cluster& cluster) {
  const auto side = [](const ModelParallelism& p, std::string_view replicas) {
    return fmt::format("tp={},pp={},{}={}", p.tp, p.pp, replicas, p.replicas);
  };
  std::string description =
      fmt::format("{} {} -> {}", name, side(train, "dp"), side(serve, "replicas"));
  if (cluster.devices_per_host != 4 || cluster.nics_per_host != 1)
    description += fmt::format(" ({} devices, {} NICs per host)", cluster.devices_per_host,
                               cluster.nics_per_host);
  return {std::move(label), std::move(description), model_batch(config, train, serve, cluster)};
}

// The op broadcasting `slice` of tensor `tensor` from `sender` through `receivers` (in order),
// pipelined in fixed chunks; a send when there is one receiver.
Op baseline_op(const Batch& batch, int tensor, const Box& slice, DeviceId sender,
               const std::vector<DeviceId>& receivers) {
  Op op = make_op(receivers.size() == 1 ? OpKind::send : OpKind::broadcast,
                  {make_piece(batch, tensor, 0, slice)}, sender, receivers);
  if (op.kind == OpKind::broadcast) op.chunk_bytes = std::min(op.bytes, kBaselineChunkBytes);
  return op;
}

// Each distinct non-empty source tile of `t` with the first device holding it.
std::vector<std::pair<Box, DeviceId>> source_shards(const TensorResharding& t) {
  std::vector<std::pair<Box, DeviceId>> shards;
  std::set<Box> seen;
  const auto tiles = device_tiles(t.tensor, t.src);
  for (size_t i = 0; i < tiles.size(); ++i)
    if (!tiles[i].empty() && seen.insert(tiles[i]).second)
      shards.emplace_back(tiles[i], t.src.mesh.device_at(static_cast<int64_t>(i)));
  return shards;
}

// Every destination device of a tensor except `sender`, in mesh order.
std::vector<DeviceId> destinations(const TensorResharding& t, DeviceId sender) {
  std::vector<DeviceId> out;
  for (DeviceId d : t.dst.mesh.devices())
    if (d != sender) out.push_back(d);
  return out;
}

Plan baseline_plan(const Batch& batch) {
  Plan plan;
  plan.batch = batch;
  plan.strategy = Strategy::broadcast;
  plan.balance = Balance::none;
  plan.lower_bound_s = lower_bound(batch, decompose(batch));
  return plan;
}

void number_ops(Plan& plan) {
  for (size_t i = 0; i < plan.ops.size(); ++i) plan.ops[i].id = static_cast<int>(i);
}

int64_t nic_bytes(const SimResult& result) {
  int64_t bytes = 0;
  for (const auto& link : result.links)
    if (link.host >= 0 && link.name.ends_with(".out")) bytes += link.bytes;
  return bytes;
}

}  // namespace

std::vector<WeightsCase> weights_suite() {
  const Cluster paper = paper_cluster(1);
  Cluster eight_gpus = paper;
  eight_gpus.devices_per_host = 8;
  eight_gpus.nics_per_host = 4;
  std::vector<WeightsCase> suite;
  suite.push_back(model_case("llama7b-tp2r4", "Llama-7B", llama_7b(), {.tp = 4, .pp = 2},
                             {.tp = 2, .replicas = 4}, paper));
  suite.push_back(
      model_case("llama7b-tp8", "Llama-7B", llama_7b(), {.tp = 4, .pp = 2}, {.tp = 8}, paper));
  suite.push_back(model_case("gpt2.7b", "GPT-2.7B", gpt_2_7b(), {.tp = 2, .pp = 4},
                             {.tp = 4, .replicas = 2}, paper));
  suite.push_back(model_case("llama70b", "Llama-70B", llama_70b(), {.tp = 8, .pp = 4},
                             {.tp = 8, .replicas = 8}, paper));
  suite.push_back(model_case("llama7b-8x4nic", "Llama-7B", llama_7b(), {.tp = 8, .pp = 2},
                             {.tp = 8, .replicas = 2}, eight_gpus));
  suite.push_back(model_case("llama7b-8x4nic-tp4", "Llama-7B", llama_7b(), {.tp = 8, .pp = 2},
                             {.tp = 4, .replicas = 4}, eight_gpus));
  return suite;
}

std::string_view to_string(WeightsMethod method) {
  switch (method) {
    case WeightsMethod::joint:
      return "joint";
    case WeightsMethod::per_tensor:
      return "per_tensor";
    case WeightsMethod::full_broadcast:
      return "full_broadcast";
    case WeightsMethod::gather_broadcast:
      break;
  }
  return "gather_broadcast";
}

std::vector<WeightsMethod> all_weights_methods() {
  return {WeightsMethod::joint, WeightsMethod::per_tensor, WeightsMethod::full_broadcast,
          WeightsMethod::gather_broadcast};
}

Plan full_broadcast_plan(const Batch& batch) {
  Plan plan = baseline_plan(batch);
  for (int i = 0; i < static_cast<int>(batch.tensors.size()); ++i) {
    const auto& t = batch.tensors[i];
    for (const auto& [shard, holder] : source_shards(t)) {
      const auto receivers = destinations(t, holder);
      if (!receivers.empty()) plan.ops.push_back(baseline_op(batch, i, shard, holder, receivers));
    }
  }
  number_ops(plan);
  return plan;
}

Plan gather_broadcast_plan(const Batch& batch) {
  Plan plan = baseline_plan(batch);
  for (int i = 0; i < static_cast<int>(batch.tensors.size()); ++i) {
    const auto& t = batch.tensors[i];
    const DeviceId root = t.src.mesh.device_at(0);
    for (const auto& [shard, holder] : source_shards(t))
      if (holder != root) plan.ops.push_back(baseline_op(batch, i, shard, holder, {root}));
    const auto receivers = destinations(t, root);
    const Box whole = full_box(t.tensor.shape);
    if (!receivers.empty()) plan.ops.push_back(baseline_op(batch, i, whole, root, receivers));
  }
  number_ops(plan);
  return plan;
}

WeightsRow weights_row(const WeightsCase& weights_case, WeightsMethod method) {
  using Clock = std::chrono::steady_clock;
  const Batch& batch = weights_case.batch;
  WeightsRow row{.label = weights_case.label,
                 .description = weights_case.description,
                 .method = method,
                 .tensors = static_cast<int64_t>(batch.tensors.size())};
  for (const auto& t : batch.tensors) row.model_bytes += t.tensor.bytes();
  const auto planning = Clock::now();
  const auto account = [&row](const Plan& plan) {
    const SimResult result = simulate(plan);
    row.time_s += result.time_s;
    row.network_bytes += nic_bytes(result);
    row.ops += static_cast<int64_t>(plan.ops.size());
  };
  if (method == WeightsMethod::per_tensor) {
    std::vector<Plan> plans;
    for (size_t i = 0; i < batch.tensors.size(); ++i)
      plans.push_back(make_plan(batch.resharding(i)));
    row.plan_s = std::chrono::duration<double>(Clock::now() - planning).count();
    for (const auto& plan : plans) account(plan);
    row.lower_bound_s = lower_bound(batch, decompose(batch));
    return row;
  }
  const Plan plan = method == WeightsMethod::joint            ? make_plan(batch)
                    : method == WeightsMethod::full_broadcast ? full_broadcast_plan(batch)
                                                              : gather_broadcast_plan(batch);
  row.plan_s = std::chrono::duration<double>(Clock::now() - planning).count();
  row.lower_bound_s = plan.lower_bound_s;
  account(plan);
  return row;
}

void fill_joint_speedups(std::vector<WeightsRow>& rows) {
  std::map<std::string, double> joint;
  for (const auto& r : rows)
    if (r.method == WeightsMethod::joint) joint[r.label] = r.time_s;
  for (auto& r : rows) {
    auto it = joint.find(r.label);
    r.joint_speedup = it == joint.end() ? 0 : r.time_s / it->second;
  }
}

}  // namespace meshcast
