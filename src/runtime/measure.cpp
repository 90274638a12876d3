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
  DeviceMemory memory;
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
    p.memory = allocate_device_memory(plans[k].batch, p.compiled->devices_here());
    prepare_memory(plans[k].batch, p.memory);
  }
  Measurement m;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const bool last = i + 1 == o.warmup + o.iters;
    if (last && o.verify)
      for (Played& p : played) prepare_memory(p.plan->batch, p.memory);
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
      executor_seconds += played[k].compiled->run(played[k].memory.views).seconds;
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
    MemoryCheck total;
    for (const Played& p : played) {
      const MemoryCheck c = check_memory(p.plan->batch, p.memory);
      total.elements += c.elements;
      total.errors += c.errors;
      total.outside_bytes += c.outside_bytes;
      total.outside_errors += c.outside_errors;
    }
    m.errors = executor.sum_over_processes(total.errors);
    m.checked = executor.sum_over_processes(total.elements);
    m.outside_errors = executor.sum_over_processes(total.outside_errors);
    m.outside_checked = executor.sum_over_processes(total.outside_bytes);
    m.verified = m.errors == 0 && m.outside_errors == 0;
  }
  return m;
}

Measurement measure(Executor& executor, const Plan& plan, const MeasureOptions& o) {
  return measure(executor, std::span<const Plan>(&plan, 1), o);
}

}  // namespace meshcast
