// Timed, verified runs of one plan on an executor: what `meshcast run` and `meshcast bench`
// report.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/watchdog.h"

namespace meshcast {

// The most timed runs, and the most warm-up runs, one measurement takes: a billion (a run that
// must last until it is stopped, as in the fault tests, asks for 100 million), low enough that
// their sum fits an int.
inline constexpr int kMaxIterations = 1'000'000'000;

// Throws InvalidArgument naming the count unless 0 <= warmup <= kMaxIterations and
// 1 <= iters <= kMaxIterations (measure() and the pipeline runtime check theirs with it).
void check_iteration_counts(int warmup, int iters);

struct MeasureOptions {
  int iters = 5;
  int warmup = 1;
  bool verify = false;
  // Seconds a process may wait in one phase (compiling, one run, the verification) before its
  // Watchdog ends it; 0: forever.
  double timeout_s = kDefaultTimeoutS;
};

struct Measurement {
  std::vector<double> times_s;  // per measured iteration: the slowest process's time
  double median_s = 0;
  // per measured iteration: wall-clock seconds around CompiledPlan::run on the calling thread
  // (the slowest process's), which adds to times_s the caller's wake-up once the workers finish:
  // what any caller of run() pays, and what a Python caller's timer around Resharder.run sees.
  std::vector<double> wall_times_s;
  double wall_median_s = 0;
  // Verification ran, every destination element was right and no byte outside the tiles'
  // regions of bound buffers (docs/json.md#batch-file) changed.
  bool verified = false;
  int64_t errors = 0;           // wrong destination elements over all processes (0 unless verified)
  int64_t checked = 0;          // destination elements checked over all processes
  int64_t outside_errors = 0;   // bytes of bound buffers outside every region that changed
  int64_t outside_checked = 0;  // bytes of bound buffers outside every region checked
};

// Compiles every plan once, allocates this process's devices' memory (allocate_device_memory:
// tiles, or the buffers the batch binds them into), fills the sources with the pattern, then runs
// `warmup` + `iters` times with a barrier before each. A run plays the plans one after another, the
// next starting when every process is done with the previous one (a barrier between them), and is
// timed as one: on each process the sum of the plans' RunTiming and of the waits in the barriers
// between them. Timing each plan alone would leave out what lies between them, and overlapping them
// would no longer play them one after another. With `verify`, the destinations are poisoned before
// the last run and checked after it, and so is every byte of a bound buffer outside its regions
// (check_memory). Collective over the executor's processes. Throws InvalidArgument on no plan,
// counts check_iteration_counts refuses or a bad timeout; ends the process (kTimeoutExitStatus)
// when a phase runs past the timeout.
Measurement measure(Executor& executor, std::span<const Plan> plans, const MeasureOptions& options);
// One plan: a sequence of one.
Measurement measure(Executor& executor, const Plan& plan, const MeasureOptions& options);

double median(std::vector<double> values);

}  // namespace meshcast
