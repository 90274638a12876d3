#include "meshcast/runtime/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "meshcast/error.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/watchdog.h"

namespace meshcast {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void check_iteration_counts(int warmup, int iters) {
  if (warmup < 0 || warmup > kMaxIterations)
    throw InvalidArgument(
        fmt::format("bad warm-up count {}: expected 0..{} runs", warmup, kMaxIterations));
  if (iters < 1 || iters > kMaxIterations)
    throw InvalidArgument(
        fmt::format("bad iteration count {}: expected 1..{} runs", iters, kMaxIterations));
}

namespace {

// One plan of a measured sequence, compiled, with this process's tiles.
struct Played {
  const Plan* plan = nullptr;
  std::unique_ptr<CompiledPlan> compiled;
  std::vector<TileBuffers> buffers;
  std::vector<DeviceBuffers> views;
};

}  // namespace

Measurement measure(Executor& executor, std::span<const Plan> plans, const MeasureOptions& o) {
  if (plans.empty()) throw InvalidArgument("measure: no plan given: expected at least one");
  check_iteration_counts(o.warmup, o.iters);
  Watchdog watchdog(o.timeout_s);
  watchdog.enter(plans.size() == 1 ? std::string("compiling the plan")
                                   : fmt::format("compiling the {} plans", plans.size()));
  std::vector<Played> played(plans.size());
  for (size_t k = 0; k < plans.size(); ++k) {
    Played& p = played[k];
    p.plan = &plans[k];
    p.compiled = executor.compile(plans[k]);
    p.buffers = allocate_tile_buffers(plans[k].batch, p.compiled->devices_here());
    p.views = buffer_views(p.buffers);
    prepare_tiles(plans[k].batch, p.buffers);
  }
  Measurement m;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const bool last = i + 1 == o.warmup + o.iters;
    if (last && o.verify)
      for (Played& p : played) prepare_tiles(p.plan->batch, p.buffers);
    watchdog.enter(fmt::format("run {} of {}", i + 1, o.warmup + o.iters));
    executor.barrier();
    const auto start = std::chrono::steady_clock::now();
    double executor_seconds = 0;
    for (size_t k = 0; k < played.size(); ++k) {
      if (k > 0) {
        const auto waiting = std::chrono::steady_clock::now();
        executor.barrier();
        executor_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting).count();
      }
      executor_seconds += played[k].compiled->run(played[k].views).seconds;
    }
    const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
    const double seconds = executor.max_over_processes(executor_seconds);
    const double wall_seconds = executor.max_over_processes(wall.count());
    if (i >= o.warmup) {
      m.times_s.push_back(seconds);
      m.wall_times_s.push_back(wall_seconds);
    }
  }
  m.median_s = median(m.times_s);
  m.wall_median_s = median(m.wall_times_s);
  if (o.verify) {
    watchdog.enter("the verification");
    int64_t elements = 0, errors = 0;
    for (const Played& p : played) {
      for (const TileBuffers& b : p.buffers)
        elements += tiles_of(p.plan->batch, b.tensor, b.device).dst.volume();
      errors += count_destination_errors(p.plan->batch, p.buffers);
    }
    m.errors = executor.sum_over_processes(errors);
    m.checked = executor.sum_over_processes(elements);
    m.verified = m.errors == 0;
  }
  return m;
}

Measurement measure(Executor& executor, const Plan& plan, const MeasureOptions& o) {
  return measure(executor, std::span<const Plan>(&plan, 1), o);
}

}  // namespace meshcast
