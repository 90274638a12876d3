// Planning time at growing scale (8 -> 8, 64 -> 64, 512 -> 512 devices) for every strategy and
// balance mode; balance order is timed with its greedy alone (search effort 0), since the search
// adds its budget of work on top.
#include <benchmark/benchmark.h>

#include "grown_layouts.h"

#include "meshcast/planner/planner.h"

namespace meshcast {
namespace {

using bench::grown;

void run(benchmark::State& state, const char* src_spec, const char* dst_spec, Strategy strategy,
         Balance balance) {
  const auto p = grown(static_cast<int>(state.range(0)), src_spec, dst_spec);
  const PlanOptions options{.strategy = strategy, .balance = balance, .search_effort = 0};
  size_t ops = 0;
  for (auto _ : state) {
    Plan plan = make_plan(p, options);
    ops = plan.ops.size();
    benchmark::DoNotOptimize(plan);
  }
  state.counters["devices"] = static_cast<double>(p.src.mesh.size());
  state.counters["ops"] = static_cast<double>(ops);
}

// Host-replicated rows to host-replicated columns: every task has 8 candidate senders and a
// chain of 8 receivers; hosts x hosts tasks.
void BM_Plan_Replicated(benchmark::State& s, Strategy strategy, Balance balance) {
  run(s, "S0RR", "RS0R", strategy, balance);
}
// No replication: one sender and one receiver per task, 8 x hosts tasks.
void BM_Plan_Sharded(benchmark::State& s, Strategy strategy, Balance balance) {
  run(s, "S0RS1", "S01RR", strategy, balance);
}

#define MESHCAST_PLAN_BENCH(fn, strategy, balance)                                  \
  BENCHMARK_CAPTURE(fn, strategy##_##balance, Strategy::strategy, Balance::balance) \
      ->Arg(1)                                                                      \
      ->Arg(8)                                                                      \
      ->Arg(64)                                                                     \
      ->Unit(benchmark::kMillisecond)

MESHCAST_PLAN_BENCH(BM_Plan_Replicated, broadcast, none);
MESHCAST_PLAN_BENCH(BM_Plan_Replicated, broadcast, size);
MESHCAST_PLAN_BENCH(BM_Plan_Replicated, broadcast, order);
MESHCAST_PLAN_BENCH(BM_Plan_Replicated, send_recv, size);
MESHCAST_PLAN_BENCH(BM_Plan_Replicated, send_recv, order);
MESHCAST_PLAN_BENCH(BM_Plan_Replicated, allgather, size);
MESHCAST_PLAN_BENCH(BM_Plan_Replicated, allgather, order);
MESHCAST_PLAN_BENCH(BM_Plan_Sharded, broadcast, order);

}  // namespace
}  // namespace meshcast
