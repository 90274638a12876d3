// Decomposition time at growing scale: realistic layouts and an all-to-all-like pair.
#include <benchmark/benchmark.h>

#include "grown_layouts.h"

#include "meshcast/tasks/unit_task.h"

namespace meshcast {
namespace {

using bench::grown;

void run(benchmark::State& state, const char* src_spec, const char* dst_spec) {
  const auto p = grown(static_cast<int>(state.range(0)), src_spec, dst_spec);
  size_t tasks = 0;
  for (auto _ : state) {
    auto t = decompose(p);
    tasks = t.size();
    benchmark::DoNotOptimize(t);
  }
  state.counters["devices"] = static_cast<double>(p.src.mesh.size());
  state.counters["tasks"] = static_cast<double>(tasks);
}

void BM_Decompose_S0RS1_to_S01RR(benchmark::State& s) {
  run(s, "S0RS1", "S01RR");
}
// Every source tile meets every destination tile along dim 1 vs dim 0: all-to-all.
void BM_Decompose_AllToAll_RS01R_to_S01RR(benchmark::State& s) {
  run(s, "RS01R", "S01RR");
}

BENCHMARK(BM_Decompose_S0RS1_to_S01RR)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Decompose_AllToAll_RS01R_to_S01RR)
    ->Arg(1)
    ->Arg(8)
    ->Arg(64)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace meshcast
