// make_plan: turns the unit tasks of a batch into one Plan with a strategy and a balance mode.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>

#include "meshcast/plan/plan.h"

namespace meshcast {

// How far balance order's search has come, for a progress line: the candidate plans it has
// simulated, and the fastest one's time over the lower bound (infinite before the first).
struct PlanProgress {
  int candidates = 0;
  double best_ratio = std::numeric_limits<double>::infinity();
};

struct PlanOptions {
  Strategy strategy = Strategy::broadcast;
  // Default: order for broadcast, size for send_recv and allgather (the paper's pairings).
  std::optional<Balance> balance = {};
  // Cut a transfer whose slice has replicas on several hosts into parts sent by different hosts
  // when that lowers the finish time (balance order; see docs/cli.md for none and size). Without
  // it, balance order keeps slices whole unless its plan is more than 1.05x the lower bound (on
  // batches of up to 1,024 unit tasks): then it plans with split too and keeps the faster plan.
  bool split = false;
  // Pipelining chunk of broadcasts; 0 picks one per broadcast from the cost model.
  int64_t chunk_bytes = 0;
  // How much improvement search balance order does: 0 keeps the greedy plan, 1 the default, 2
  // twice as much. The search counts work rather than time, so a plan never depends on the
  // machine's speed or load.
  double search_effort = 1;
  // Sends and broadcasts smaller than this that share a sender and a receiver chain are fused
  // into buckets of at most this many bytes (one message each), and larger broadcasts of one
  // sender along one chain into streams of at most this many bytes per device of the chain
  // (docs/concepts.md#buckets); 0 fuses nothing. Default: default_bucket_bytes of the batch's
  // cluster.
  std::optional<int64_t> bucket_bytes = {};
  // Called after each candidate plan balance order simulates (the search can take seconds on
  // several NICs per host); empty: not called. It does not change the plan.
  std::function<void(const PlanProgress&)> on_progress = {};
};

// The bucket size at which one message's latency is at most 1% of its time on one NIC:
// 99 x latency x one NIC's bandwidth (0 when the cluster has no latency).
int64_t default_bucket_bytes(const Cluster& cluster);

// The balance mode `options` resolves to for its strategy.
Balance effective_balance(const PlanOptions& options);

// Plans all tensors' unit tasks together: senders are balanced and ops ordered over the whole
// batch, so every NIC works while others do. Throws InvalidArgument on an invalid batch (naming
// the tensor), a negative chunk_bytes or bucket_bytes, or a search_effort that is negative or not
// finite. The result passes validate_plan and carries the lower bound and the bytes crossing host
// NICs.
Plan make_plan(const Batch& batch, const PlanOptions& options = {});
// The plan of Batch::of_one(problem).
Plan make_plan(const Resharding& problem, const PlanOptions& options = {});

// `plan`, its ops kept, on `cluster` instead of its own (e.g. a calibrated one): its lower bound
// counted for that cluster. Throws InvalidArgument where a mesh of the plan does not fit it.
Plan on_cluster(Plan plan, const Cluster& cluster);

// A plan and its estimate (estimate(plan), the simulated time).
struct EstimatedPlan {
  Plan plan;
  double estimate_s = 0;
};
// make_plan(batch, options) and its estimate, without simulating the plan again where the planner
// already simulated it to choose it (a large batch's plan takes as long to simulate as a tenth of
// its planning).
EstimatedPlan make_estimated_plan(const Batch& batch, const PlanOptions& options = {});

}  // namespace meshcast
