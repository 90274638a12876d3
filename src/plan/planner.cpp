#include "meshcast/plan/planner.h"

#include <fmt/format.h>

#include <cmath>

#include "balance.h"
#include "bucket.h"
#include "jobs.h"
#include "meshcast/error.h"
#include "meshcast/plan/estimate.h"
#include "meshcast/plan/lower_bound.h"

namespace meshcast {

Balance effective_balance(const PlanOptions& options) {
  if (options.balance) return *options.balance;
  return options.strategy == Strategy::broadcast ? Balance::order : Balance::size;
}

int64_t default_bucket_bytes(const Cluster& cluster) {
  return std::llround(99 * cluster.latency * cluster.nic_bandwidth);
}

Plan make_plan(const Batch& batch, const PlanOptions& options) {
  batch.validate();
  if (options.chunk_bytes < 0)
    throw InvalidArgument(
        fmt::format("bad chunk bytes {}: expected >= 0 (0 = automatic)", options.chunk_bytes));
  if (!(options.search_effort >= 0) || std::isinf(options.search_effort))
    throw InvalidArgument(
        fmt::format("bad search effort {}: expected >= 0", options.search_effort));
  if (options.bucket_bytes && *options.bucket_bytes < 0)
    throw InvalidArgument(
        fmt::format("bad bucket bytes {}: expected >= 0 (0 = no buckets)", *options.bucket_bytes));
  const auto tasks = decompose(batch);
  const auto jobs = detail::make_jobs(batch, tasks, options.strategy);

  Plan plan;
  plan.batch = batch;
  plan.strategy = options.strategy;
  plan.balance = effective_balance(options);
  switch (plan.balance) {
    case Balance::none:
      plan.ops = detail::balance_none(batch, jobs, options);
      break;
    case Balance::size:
      plan.ops = detail::balance_size(batch, jobs, options);
      break;
    case Balance::order:
      plan.ops = detail::balance_order(batch, jobs, options);
      break;
  }
  plan.ops = detail::bucket_ops(batch, std::move(plan.ops),
                                options.bucket_bytes.value_or(default_bucket_bytes(batch.cluster)),
                                options.chunk_bytes);
  for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) plan.ops[i].id = i;
  plan.lower_bound_s = lower_bound(batch, tasks);
  for (const HostTraffic& h : host_traffic(plan)) plan.network_bytes += h.out_bytes;
  return plan;
}

Plan make_plan(const Resharding& problem, const PlanOptions& options) {
  problem.validate();
  return make_plan(Batch::of_one(problem), options);
}

}  // namespace meshcast
