#include "meshcast/pipeline/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine.h"
#include "meshcast/error.h"

namespace meshcast::pipeline {
namespace {

void check_time(double t, std::string_view what, int index) {
  if (!std::isfinite(t) || t < 0)
    throw InvalidArgument(
        fmt::format("bad {} {} of {}: expected a finite time >= 0", what, t, index));
}

void check_costs(const Schedule& s, const PipelineCosts& costs) {
  if (static_cast<int>(costs.stages.size()) != s.virtual_stages())
    throw InvalidArgument(
        fmt::format("costs give {} stages, the schedule has {} virtual stages "
                    "({} stages x {} chunks)",
                    costs.stages.size(), s.virtual_stages(), s.stages, s.chunks));
  for (int v = 0; v < static_cast<int>(costs.stages.size()); ++v) {
    check_time(costs.stages[v].forward_s, "forward time", v);
    check_time(costs.stages[v].backward_s, "backward time", v);
    if (!(costs.stages[v].activation_bytes >= 0))
      throw InvalidArgument(fmt::format("bad activation bytes {} of stage {}: expected >= 0",
                                        costs.stages[v].activation_bytes, v));
  }
  for (int e = 0; e < static_cast<int>(costs.edges.size()); ++e) {
    check_time(costs.edges[e].activation_s, "activation transfer time of edge", e);
    check_time(costs.edges[e].gradient_s, "gradient transfer time of edge", e);
  }
}

std::vector<Edge> edges_of(const PipelineCosts& costs) {
  std::vector<Edge> edges;
  for (const auto& e : costs.edges) edges.push_back(e.edge);
  return edges;
}

}  // namespace

PipelineCosts uniform_costs(int virtual_stages, double forward_s, double backward_s,
                            double transfer_s) {
  PipelineCosts costs;
  costs.stages.assign(virtual_stages, StageCost{forward_s, backward_s, 0});
  for (const auto& e : chain_edges(virtual_stages))
    costs.edges.push_back({e, transfer_s, transfer_s});
  return costs;
}

PipelineResult simulate_pipeline(const Schedule& schedule, const PipelineCosts& costs,
                                 const PipelineOptions& options) {
  check_costs(schedule, costs);
  const LoweredSchedule lowered = lower(schedule, edges_of(costs));
  EngineInput input{.schedule = schedule,
                    .lowered = lowered,
                    .forward_s = {},
                    .backward_s = {},
                    .message_s = {},
                    .senders_block = !options.overlap,
                    .record = true};
  for (const auto& st : costs.stages) {
    input.forward_s.push_back(st.forward_s);
    input.backward_s.push_back(st.backward_s);
  }
  input.message_s.reserve(lowered.messages.size());
  for (const auto& msg : lowered.messages) {
    const auto& e = costs.edges[msg.edge];
    input.message_s.push_back(msg.payload == Payload::activation ? e.activation_s : e.gradient_s);
  }
  EngineOutput run = run_engine(input);
  if (!run.stuck.empty())
    throw InvalidArgument(fmt::format("deadlock: {}", fmt::join(run.stuck, "; ")));

  PipelineResult r;
  r.makespan_s = run.makespan_s;
  r.timeline = std::move(run.timeline);
  r.transfers = std::move(run.transfers);
  std::sort(r.transfers.begin(), r.transfers.end(),
            [](const auto& a, const auto& b) { return a.start < b.start; });
  double idle_total = 0;
  const auto peaks = peak_in_flight(schedule);
  std::vector<double> activation_bytes;
  for (const auto& st : costs.stages) activation_bytes.push_back(st.activation_bytes);
  const auto peak_bytes = peak_activation_bytes(schedule, activation_bytes);
  for (int d = 0; d < schedule.stages; ++d) {
    StageReport st{.busy_s = run.busy_s[d],
                   .transfer_wait_s = run.transfer_wait_s[d],
                   .dependency_wait_s = run.dependency_wait_s[d],
                   .idle_s = std::max(0.0, r.makespan_s - run.busy_s[d]),
                   .peak_in_flight = peaks[d],
                   .peak_activation_bytes = peak_bytes[d]};
    idle_total += st.idle_s;
    r.stages.push_back(st);
  }
  if (r.makespan_s > 0) {
    r.bubble_fraction = idle_total / (schedule.stages * r.makespan_s);
    r.microbatches_per_s = schedule.microbatches / r.makespan_s;
  }
  return r;
}

nlohmann::json result_to_json(const PipelineResult& r) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : r.stages)
    stages.push_back({{"busy_s", st.busy_s},
                      {"transfer_wait_s", st.transfer_wait_s},
                      {"dependency_wait_s", st.dependency_wait_s},
                      {"idle_s", st.idle_s},
                      {"peak_in_flight", st.peak_in_flight},
                      {"peak_activation_bytes", st.peak_activation_bytes}});
  return {{"makespan_s", r.makespan_s},
          {"bubble_fraction", r.bubble_fraction},
          {"microbatches_per_s", r.microbatches_per_s},
          {"stages", std::move(stages)}};
}

}  // namespace meshcast::pipeline
