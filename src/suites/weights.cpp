#include "meshcast/suites/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "meshcast/error.h"
#include "meshcast/planner/lower_bound.h"
#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/suites/model.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

WeightsCase model_case(std::string label, std::string name, const ModelConfig& config,
                       const ModelParallelism& train, const ModelParallelism& serve,
                       const Cluster& cluster) {
  const auto side = [](const ModelParallelism& p, std::string_view replicas) {
    return fmt::format("tp={},pp={},{}={}{}", p.tp, p.pp, replicas, p.replicas,
                       p.ep > 1 ? fmt::format(",ep={}", p.ep) : "");
  };
  std::string description =
      fmt::format("{} {} -> {}", name, side(train, "dp"), side(serve, "replicas"));
  if (cluster.devices_per_host != 4 || cluster.nics_per_host != 1)
    description += fmt::format(" ({} devices, {} NICs per host)", cluster.devices_per_host,
                               cluster.nics_per_host);
  return {std::move(label), std::move(description), model_batch(config, train, serve, cluster)};
}

// The op broadcasting `pieces` from `sender` through `receivers` (in order) as one message,
// pipelined in fixed chunks; a send when there is one receiver.
Op baseline_op(std::vector<Piece> pieces, DeviceId sender, const std::vector<DeviceId>& receivers) {
  Op op = make_op(receivers.size() == 1 ? OpKind::send : OpKind::broadcast, std::move(pieces),
                  sender, receivers);
  if (op.kind == OpKind::broadcast) op.chunk_bytes = std::min(op.bytes, kBaselineChunkBytes);
  return op;
}

// A tensor's distinct source shards: for each, the first device holding it (in mesh order) and
// the unit tasks inside it, as pieces in task order. A task's slice lies in one source tile and
// its first sender is that tile's first holder, so a shard is exactly the union of its pieces.
std::map<DeviceId, std::vector<Piece>> source_shards(const Batch& batch, int tensor,
                                                     const std::vector<UnitTask>& tasks) {
  std::map<DeviceId, std::vector<Piece>> shards;
  for (int k = 0; k < static_cast<int>(tasks.size()); ++k)
    shards[tasks[k].senders.front()].push_back(make_piece(batch, tensor, k, tasks[k].slice));
  return shards;
}

// Every destination device of a tensor except `sender`, in mesh order.
std::vector<DeviceId> destinations(const TensorResharding& t, DeviceId sender) {
  std::vector<DeviceId> out;
  for (DeviceId d : t.dst.mesh.devices())
    if (d != sender) out.push_back(d);
  return out;
}

// A copy for each task that `device` both needs and holds (the planner's rule): the baselines
// send nothing to the device a shard starts from.
void copies_of(Plan& plan, int tensor, const std::vector<UnitTask>& tasks, DeviceId device) {
  for (int k = 0; k < static_cast<int>(tasks.size()); ++k) {
    const auto& t = tasks[k];
    const bool holds = std::find(t.senders.begin(), t.senders.end(), device) != t.senders.end();
    const bool needs =
        std::find(t.receivers.begin(), t.receivers.end(), device) != t.receivers.end();
    if (holds && needs)
      plan.ops.push_back(
          make_op(OpKind::copy, {make_piece(plan.batch, tensor, k, t.slice)}, device, {device}));
  }
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

std::vector<WeightsCase> weights_moe_suite() {
  // configs/clusters/h20.json: 8 GPUs and eight 400 Gb/s NICs per host, 3,600 Gb/s NVLink.
  const Cluster h20 = Cluster::from_gbps(
      {.devices_per_host = 8, .nic_gbps = 400, .dev_gbps = 3600, .nics_per_host = 8});
  std::vector<WeightsCase> suite;
  for (const int64_t replicas : {16, 128})
    for (const auto& [preset, name] :
         {std::pair{"kimi-k2", "Kimi-K2"}, std::pair{"deepseek-v3", "DeepSeek-V3"}}) {
      ModelConfig config = model_preset(preset);
      config.dtype = DType::float8_e4m3fn;
      const ModelParallelism train{.tp = 8, .pp = 8, .replicas = 4, .ep = 32};
      const ModelParallelism serve{.tp = 16, .replicas = replicas, .ep = 16};
      suite.push_back(model_case(fmt::format("{}-{}", preset, serve.devices()), name, config, train,
                                 serve, h20));
    }
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
  const auto tasks = decompose(batch);
  for (int i = 0; i < static_cast<int>(batch.tensors.size()); ++i) {
    const auto& t = batch.tensors[i];
    for (auto& [holder, pieces] : source_shards(batch, i, tasks[i])) {
      copies_of(plan, i, tasks[i], holder);
      const auto receivers = destinations(t, holder);
      if (!receivers.empty()) plan.ops.push_back(baseline_op(std::move(pieces), holder, receivers));
    }
  }
  number_ops(plan);
  return plan;
}

Plan gather_broadcast_plan(const Batch& batch) {
  Plan plan = baseline_plan(batch);
  const auto tasks = decompose(batch);
  for (int i = 0; i < static_cast<int>(batch.tensors.size()); ++i) {
    const auto& t = batch.tensors[i];
    const DeviceId root = t.src.mesh.device_at(0);
    std::vector<Piece> whole;
    for (auto& [holder, pieces] : source_shards(batch, i, tasks[i])) {
      whole.insert(whole.end(), pieces.begin(), pieces.end());
      if (holder != root) plan.ops.push_back(baseline_op(std::move(pieces), holder, {root}));
    }
    copies_of(plan, i, tasks[i], root);
    const auto receivers = destinations(t, root);
    if (!receivers.empty()) plan.ops.push_back(baseline_op(std::move(whole), root, receivers));
  }
  number_ops(plan);
  return plan;
}

WeightsRow weights_row(const WeightsCase& weights_case, WeightsMethod method, Executor* executor,
                       const MeasureOptions& measure) {
  using Clock = std::chrono::steady_clock;
  const Batch& batch = weights_case.batch;
  WeightsRow row{.label = weights_case.label,
                 .description = weights_case.description,
                 .method = method,
                 .tensors = static_cast<int64_t>(batch.tensors.size())};
  for (const auto& t : batch.tensors) row.model_bytes += t.tensor.bytes();
  const auto planning = Clock::now();
  std::vector<Plan> plans;   // per distinct problem
  std::vector<int> plan_of;  // per tensor played: its plan
  if (method == WeightsMethod::per_tensor) {
    // Tensors of the same shape, dtype and layouts (a model's layers within one pipeline stage)
    // are one problem, whose plan (make_plan gives identical plans for identical problems) and
    // simulated time are computed once: a 405B-like model's 1,137 tensors are 98 problems.
    std::vector<Resharding> problems;
    for (size_t i = 0; i < batch.tensors.size(); ++i) {
      Resharding problem = batch.resharding(i);
      const auto same = std::find(problems.begin(), problems.end(), problem);
      plan_of.push_back(static_cast<int>(same - problems.begin()));
      if (same != problems.end()) continue;
      plans.push_back(make_plan(problem));
      problems.push_back(std::move(problem));
    }
  } else {
    plans.push_back(method == WeightsMethod::joint            ? make_plan(batch)
                    : method == WeightsMethod::full_broadcast ? full_broadcast_plan(batch)
                                                              : gather_broadcast_plan(batch));
    plan_of.push_back(0);
  }
  row.plan_s = std::chrono::duration<double>(Clock::now() - planning).count();
  row.lower_bound_s = method == WeightsMethod::per_tensor ? lower_bound(batch, decompose(batch))
                                                          : plans.front().lower_bound_s;
  std::vector<int> repeats(plans.size(), 0);
  for (int p : plan_of) ++repeats[p];
  double simulated_s = 0;
  for (size_t p = 0; p < plans.size(); ++p) {
    const SimResult result = simulate(plans[p]);
    simulated_s += repeats[p] * result.time_s;
    row.network_bytes += repeats[p] * nic_bytes(result);
    row.ops += repeats[p] * static_cast<int64_t>(plans[p].ops.size());
  }
  if (!executor) {
    row.time_s = simulated_s;
    return row;
  }
  // per_tensor's plans are played one after another and timed as one run (measure() of the
  // sequence), as a caller syncing tensor by tensor would. Timing each plan alone, after an untimed
  // barrier and report, left out those idle gaps, in which a shaped link (a token bucket) refills
  // its burst: on the emulated cluster per_tensor then moved small tensors faster than the NIC.
  row.predicted_s = simulated_s;
  std::vector<Plan> played;
  for (int p : plan_of) played.push_back(plans[p]);
  const Measurement m = meshcast::measure(*executor, played, measure);
  if (measure.verify && !m.verified)
    throw Error(fmt::format("{} {}: {} of {} destination elements wrong", weights_case.label,
                            to_string(method), m.errors, m.checked));
  row.time_s = m.median_s;
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
