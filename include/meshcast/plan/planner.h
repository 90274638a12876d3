// make_plan: turns the unit tasks of one resharding into a Plan with a strategy and a balance mode.
#pragma once

#include <cstdint>
#include <optional>

#include "meshcast/plan/plan.h"

namespace meshcast {

struct PlanOptions {
  Strategy strategy = Strategy::broadcast;
  // Default: order for broadcast, size for send_recv and allgather (the paper's pairings).
  std::optional<Balance> balance = {};
  // Cut a transfer whose slice has replicas on several hosts into parts sent by different hosts
  // when that lowers the finish time (balance order; see docs/cli.md for none and size).
  bool split = false;
  // Pipelining chunk of broadcasts; 0 picks one per broadcast from the cost model.
  int64_t chunk_bytes = 0;
  // Wall-clock budget of the improvement search of balance order; 0 keeps the greedy plan.
  double search_ms = 10;
};

// The balance mode `options` resolves to for its strategy.
Balance effective_balance(const PlanOptions& options);

// Throws InvalidArgument on an invalid problem or negative chunk_bytes / search_ms. The result
// passes validate_plan and carries the lower bound and the bytes crossing host NICs.
Plan make_plan(const Resharding& problem, const PlanOptions& options = {});

}  // namespace meshcast
