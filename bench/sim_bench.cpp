// Simulation time at growing scale: plans made once, then simulate() timed alone. The cost should
// follow ops and flows (and how many flows share links), not bytes.
#include <benchmark/benchmark.h>

#include "grown_layouts.h"

#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"

namespace meshcast {
namespace {

// Dim 0 grows with the hosts so each host holds the same bytes.
Plan grown_plan(int hosts, const char* src_spec, const char* dst_spec, Strategy strategy) {
  const Resharding p = bench::grown(hosts, src_spec, dst_spec, {16LL * hosts * 8, 1024, 512});
  return make_plan(p, PlanOptions{.strategy = strategy, .search_effort = 0});
}

void run(benchmark::State& state, const Plan& plan) {
  int64_t flows = 0;
  for (auto _ : state) {
    SimResult r = simulate(plan);
    flows = r.flows;
    benchmark::DoNotOptimize(r);
  }
  state.counters["ops"] = static_cast<double>(plan.ops.size());
  state.counters["flows"] = static_cast<double>(flows);
}

// One sender and one receiver per task (8 x hosts sends), pairs of hosts independent.
void BM_Simulate_Pointwise(benchmark::State& state) {
  run(state, grown_plan(static_cast<int>(state.range(0)), "S0RS1", "S01RR", Strategy::send_recv));
}
BENCHMARK(BM_Simulate_Pointwise)->Arg(1)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);

// Every source host sends to every destination host (hosts x hosts chained broadcasts): flows
// compete for NICs across the whole cluster.
void BM_Simulate_AllToAllBroadcast(benchmark::State& state) {
  run(state, grown_plan(static_cast<int>(state.range(0)), "RS0R", "S0RR", Strategy::broadcast));
}
BENCHMARK(BM_Simulate_AllToAllBroadcast)->Arg(8)->Arg(64)->Arg(128)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace meshcast
