// The local executor against memcpy of the same bytes, and a compiled plan run again against
// compiling it each time (plan reuse).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "meshcast/planner/planner.h"
#include "meshcast/runtime/buffer_table.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/local/local_executor.h"
#include "meshcast/tasks/paper_cases.h"
#include "runtime_allocations.h"

namespace meshcast {
namespace {

// Paper cases at 1/64 of their size: 32 MiB tensors.
constexpr int kScale = 64;

// Bytes the plan writes into destination tiles: what a memcpy baseline must move too.
int64_t delivered_bytes(const Plan& plan) {
  int64_t bytes = 0;
  for (const Op& op : plan.ops) bytes += op.bytes * static_cast<int64_t>(op.receivers.size());
  return bytes;
}

Plan paper_plan(int paper_case, Strategy strategy) {
  return make_plan(paper_cases(kScale)[paper_case - 1].problem,
                   {.strategy = strategy, .search_effort = 0});
}

// One resharding on the local executor.
void BM_LocalReshard(benchmark::State& state) {
  const Plan plan =
      paper_plan(static_cast<int>(state.range(0)), static_cast<Strategy>(state.range(1)));
  auto executor = make_local_executor({.threads = static_cast<int>(state.range(2))});
  const auto compiled = executor->compile(plan);
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  const auto views = buffer_views(buffers);
  prepare_tiles(plan.batch, buffers);
  compiled->run(views);  // first touch of every page
  testing::allocations = 0;
  testing::counting_allocations = true;
  for (auto _ : state) compiled->run(views);
  testing::counting_allocations = false;
  state.SetBytesProcessed(state.iterations() * delivered_bytes(plan));
  state.counters["delivered_MiB"] = static_cast<double>(delivered_bytes(plan)) / (1 << 20);
  state.counters["allocs_per_run"] =
      static_cast<double>(testing::allocations) / static_cast<double>(state.iterations());
  if (count_destination_errors(plan.batch, buffers) != 0) state.SkipWithError("wrong bytes");
}

// memcpy of the same delivered bytes, one thread, one contiguous block, pages touched before.
void BM_MemcpySameBytes(benchmark::State& state) {
  const Plan plan =
      paper_plan(static_cast<int>(state.range(0)), static_cast<Strategy>(state.range(1)));
  const int64_t bytes = delivered_bytes(plan);
  std::vector<char> from(bytes, 1), to(bytes, 0);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

// Plan reuse: run a compiled plan, against planning and compiling it before every run.
void BM_RunCompiledPlan(benchmark::State& state) {
  const Resharding problem = paper_cases(256)[state.range(0) - 1].problem;
  auto executor = make_local_executor({.threads = 2});
  const auto compiled = executor->compile(make_plan(problem, {.search_effort = 0}));
  auto buffers = allocate_tile_buffers(problem, compiled->devices_here());
  prepare_tiles(problem, buffers);
  const auto views = buffer_views(buffers);
  compiled->run(views);
  testing::allocations = 0;
  testing::counting_allocations = true;
  for (auto _ : state) compiled->run(views);
  testing::counting_allocations = false;
  state.counters["allocs_per_run"] =
      static_cast<double>(testing::allocations) / static_cast<double>(state.iterations());
}

void BM_PlanCompileAndRun(benchmark::State& state) {
  const Resharding problem = paper_cases(256)[state.range(0) - 1].problem;
  auto executor = make_local_executor({.threads = 2});
  auto buffers = allocate_tile_buffers(problem, mesh_devices(problem));
  prepare_tiles(problem, buffers);
  const auto views = buffer_views(buffers);
  testing::allocations = 0;
  testing::counting_allocations = true;
  for (auto _ : state) executor->compile(make_plan(problem, {.search_effort = 0}))->run(views);
  testing::counting_allocations = false;
  state.counters["allocs_per_run"] =
      static_cast<double>(testing::allocations) / static_cast<double>(state.iterations());
}

// With threads: one worker (against memcpy's one thread) and two (one per core here).
void paper_args(benchmark::internal::Benchmark* b, bool threads) {
  for (int c : {1, 3, 7, 8})
    for (Strategy s : {Strategy::send_recv, Strategy::broadcast}) {
      if (!threads) b->Args({c, static_cast<int>(s)});
      for (int t : {1, 2})
        if (threads) b->Args({c, static_cast<int>(s), t});
    }
}

BENCHMARK(BM_LocalReshard)
    ->Apply([](auto* b) { paper_args(b, true); }) -> ArgNames({"case", "strategy", "threads"})
        -> Unit(benchmark::kMillisecond) -> UseRealTime();
BENCHMARK(BM_MemcpySameBytes)
    ->Apply([](auto* b) { paper_args(b, false); }) -> ArgNames({"case", "strategy"})
        -> Unit(benchmark::kMillisecond) -> UseRealTime();
BENCHMARK(BM_RunCompiledPlan)
    ->Arg(3)
    ->Arg(7)
    ->ArgName("case")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_PlanCompileAndRun)
    ->Arg(3)
    ->Arg(7)
    ->ArgName("case")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace meshcast
