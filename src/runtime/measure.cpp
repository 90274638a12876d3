#include "meshcast/runtime/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

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

Measurement measure(Executor& executor, const Plan& plan, const MeasureOptions& o) {
  if (o.iters < 1)
    throw InvalidArgument(fmt::format("bad iteration count {}: expected >= 1", o.iters));
  if (o.warmup < 0)
    throw InvalidArgument(fmt::format("bad warmup count {}: expected >= 0", o.warmup));
  Watchdog watchdog(o.timeout_s);
  watchdog.enter("compiling the plan");
  const auto compiled = executor.compile(plan);
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  const auto views = buffer_views(buffers);
  prepare_tiles(plan.batch, buffers);
  Measurement m;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const bool last = i + 1 == o.warmup + o.iters;
    if (last && o.verify) prepare_tiles(plan.batch, buffers);
    watchdog.enter(fmt::format("run {} of {}", i + 1, o.warmup + o.iters));
    executor.barrier();
    const auto start = std::chrono::steady_clock::now();
    const double executor_seconds = compiled->run(views).seconds;
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
    int64_t elements = 0;
    for (const TileBuffers& b : buffers)
      elements += tiles_of(plan.batch, b.tensor, b.device).dst.volume();
    m.errors = executor.sum_over_processes(count_destination_errors(plan.batch, buffers));
    m.checked = executor.sum_over_processes(elements);
    m.verified = m.errors == 0;
  }
  return m;
}

}  // namespace meshcast
