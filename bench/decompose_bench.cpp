// Decomposition time at growing scale: realistic layouts and an all-to-all-like pair.
#include <benchmark/benchmark.h>

#include "meshcast/tasks/unit_task.h"

namespace meshcast {
namespace {

// `hosts` x 8 devices on each side, destination on the following hosts.
Resharding grown(int hosts, const char* src_spec, const char* dst_spec) {
  Resharding p;
  p.tensor = {{8192, 1024, 512}, DType::float16};
  p.src = Layout{Mesh::placed({hosts, 8}, 0, 8), ShardingSpec::parse(src_spec)};
  p.dst = Layout{Mesh::placed({hosts, 8}, hosts, 8), ShardingSpec::parse(dst_spec)};
  p.cluster = Cluster{.hosts = 2 * hosts, .devices_per_host = 8};
  return p;
}

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
