// Schedule generation, validation and pipeline simulation at growing stages x microbatches.
#include <benchmark/benchmark.h>

#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/simulator.h"

namespace meshcast::pipeline {
namespace {

void generate(benchmark::State& state, ScheduleKind kind) {
  const int n = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(make_schedule(kind, n, m));
}

void check(benchmark::State& state, ScheduleKind kind) {
  const int n = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  const auto s = make_schedule(kind, n, m);
  for (auto _ : state) validate(s);
}

// Generation and simulation together, with transfers of half a forward that overlap.
void generate_and_simulate(benchmark::State& state, ScheduleKind kind) {
  const int n = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  const auto costs = uniform_costs(n, 1, 2, 0.5);
  size_t transfers = 0;
  for (auto _ : state) {
    const auto r = simulate_pipeline(make_schedule(kind, n, m), costs);
    transfers = r.transfers.size();
    benchmark::DoNotOptimize(r.makespan_s);
  }
  state.counters["steps"] = 2.0 * n * m;
  state.counters["transfers"] = static_cast<double>(transfers);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Args({8, 64})->Args({16, 256})->Args({64, 1024})->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(generate, eager_1f1b, ScheduleKind::eager_1f1b)->Apply(sizes);
BENCHMARK_CAPTURE(check, eager_1f1b, ScheduleKind::eager_1f1b)->Apply(sizes);
BENCHMARK_CAPTURE(generate_and_simulate, one_f_one_b, ScheduleKind::one_f_one_b)->Apply(sizes);
BENCHMARK_CAPTURE(generate_and_simulate, eager_1f1b, ScheduleKind::eager_1f1b)->Apply(sizes);
BENCHMARK_CAPTURE(generate_and_simulate, gpipe, ScheduleKind::gpipe)->Apply(sizes);

}  // namespace
}  // namespace meshcast::pipeline
