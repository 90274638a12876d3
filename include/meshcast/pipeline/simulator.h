// Pipeline simulator: plays a schedule with per-stage compute times and per-edge transfer times,
// with or without overlap of transfers, and reports makespan, bubbles, memory and throughput.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/schedule.h"

namespace meshcast::pipeline {

// Costs of one virtual stage per microbatch; `activation_bytes` is what it keeps from a forward
// until the matching backward.
struct StageCost {
  double forward_s = 1;
  double backward_s = 1;
  double activation_bytes = 0;
};

// Transfer times of one edge when it has its sender's out-port and receiver's in-port to itself.
struct EdgeCost {
  Edge edge;
  double activation_s = 0;
  double gradient_s = 0;
};

struct PipelineCosts {
  std::vector<StageCost> stages;  // per virtual stage
  std::vector<EdgeCost> edges;    // the schedule is lowered along these edges
};

// Every virtual stage takes `forward_s` and `backward_s`; every chain edge takes `transfer_s` in
// both directions.
PipelineCosts uniform_costs(int virtual_stages, double forward_s, double backward_s,
                            double transfer_s);

struct PipelineOptions {
  // A send starts when its data is produced (its step is done) and the receiver waits for its
  // arrival. true: the send runs on a separate channel while the sender computes on. false: the
  // sender's stream is blocked until the transfer is done, as in a runtime that runs sends on its
  // compute stream, so every transfer costs its sender and (by arrival) its receiver.
  bool overlap = true;
};

enum class SpanKind { forward, backward, comm };

// What a stage's stream did over [start, end): compute, or blocked on transfers (comm).
struct Span {
  SpanKind kind = SpanKind::comm;
  int microbatch = -1;
  int chunk = 0;
  double start = 0;
  double end = 0;
};

struct TransferSpan {
  int message = 0;  // index into LoweredSchedule::messages
  int from_stage = 0;
  int to_stage = 0;
  Payload payload = Payload::activation;
  int microbatch = 0;
  double start = 0;
  double end = 0;
};

struct StageReport {
  double busy_s = 0;  // computing
  // Stream blocked on transfers: a received message already produced but still in flight, or
  // (without overlap) its own sends. Zero when transfers take no time.
  double transfer_wait_s = 0;
  // Stream waiting at a receive for data its sender had not produced yet: the bubble.
  double dependency_wait_s = 0;
  double idle_s = 0;       // makespan - busy_s (includes both waits and the stage's start and end)
  int peak_in_flight = 0;  // microbatch-chunks whose activations are held at the peak
  double peak_activation_bytes = 0;
};

struct PipelineResult {
  double makespan_s = 0;
  double bubble_fraction = 0;  // idle share of stages x makespan
  double microbatches_per_s = 0;
  std::vector<StageReport> stages;
  std::vector<std::vector<Span>> timeline;  // per stage, in time order
  std::vector<TransferSpan> transfers;      // in start order
};

// Validates the schedule against the cost edges (check_steps), then plays it. Transfers on one
// (sender stage, receiver stage) pair run one at a time in posting order; concurrent transfers
// that leave the same stage or enter the same stage share its port: each runs at
// 1 / max(transfers on its sender's out-port, transfers on its receiver's in-port) of its full
// rate. Throws InvalidArgument on costs of the wrong size or negative times, and on a deadlock.
PipelineResult simulate_pipeline(const Schedule& schedule, const PipelineCosts& costs,
                                 const PipelineOptions& options = {});

// {"makespan_s", "bubble_fraction", "microbatches_per_s", "stages": [{"busy_s", ...}]}
nlohmann::json result_to_json(const PipelineResult& result);

}  // namespace meshcast::pipeline
