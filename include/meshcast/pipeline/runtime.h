// The pipeline runtime: plays a schedule on an executor. Every stage plays its row of the lowered
// schedule; each activation and gradient is resharded between the stages' meshes by a compiled
// plan of the chosen strategy, started when its data is produced, and a stage computes only on
// data that has fully arrived.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "meshcast/pipeline/model.h"
#include "meshcast/pipeline/schedule.h"
#include "meshcast/pipeline/simulator.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/watchdog.h"

namespace meshcast::pipeline {

enum class ComputeMode {
  // Each forward and backward sleeps until its configured time has passed since it began: the
  // host is free (as with an accelerator kernel), so many stages on few cores keep their times.
  timed,
  // Each virtual stage is a block y = tanh(x W1) W2 (fp32, weights h x h replicated over the
  // stage's mesh, rows sharded as the activations are); x is the sum of the tensors arriving on
  // the stage's edges; the loss is 0.5 |y|^2 at the last stage. Forward and backward are real.
  real,
};
// "timed" or "real". Throws InvalidArgument naming the text.
ComputeMode parse_compute_mode(std::string_view text);
std::string_view to_string(ComputeMode mode);

struct RuntimeOptions {
  ComputeMode compute = ComputeMode::timed;
  Strategy strategy = Strategy::broadcast;
  // true: a stage computes on while its sends move; false: it waits at each send until done.
  bool overlap = true;
  // Every transfer takes at least this long from its start (an injected network delay). A
  // transfer starts, as in the simulator, once posted and once its channel's previous message
  // has arrived. At most kLongestSeconds (meshcast/duration.h).
  double transfer_delay_s = 0;
  // When given, every transfer also takes its edge's time here (e.g. model_costs(): the
  // simulator's network emulated on in-process copies, which take next to no time themselves),
  // with the simulator's port sharing: concurrent transfers that leave one stage or enter one
  // stage each move at 1 / max(transfers on the sender's out-port, on the receiver's in-port) of
  // the full rate. The ports are those of this process's transfers (under MPI, its own).
  std::optional<PipelineCosts> emulated_network = {};
  // Iterations played before the measured ones (0..kMaxIterations, meshcast/runtime/measure.h).
  int warmup_iterations = 1;
  // Measured iterations (1..kMaxIterations): the result is the one whose makespan is the median.
  int iterations = 1;
  // Seconds a process may wait in one phase (compiling the channels' plans, one iteration with
  // its combined figures, the gradient check) before its watchdog names the phase and ends the
  // process with kTimeoutExitStatus, so that mpirun stops every rank when a peer died or hangs
  // (meshcast/runtime/watchdog.h); 0, or above kLongestSeconds: forever. An iteration longer than
  // this needs a larger one.
  double timeout_s = kDefaultTimeoutS;
};

struct RuntimeResult {
  // The measured run in the simulator's terms: makespan, per-stage busy / comm wait / idle, the
  // timeline of every stage and every transfer (for gantt_svg and chrome_trace). Its
  // peak_in_flight is measured: the most forward stashes (microbatch-chunks whose forward ran and
  // whose backward has not freed its stash) a stage held at once.
  PipelineResult measured;
  std::vector<int> predicted_peak_in_flight;  // per stage, from the schedule (peak_in_flight())
  // real compute: the largest relative difference, over every weight gradient, between the
  // pipeline's and the whole model's run in one process (max |a - b| / max |b| per weight).
  std::optional<double> gradient_error;
};

// Makes one executor: the runtime makes one per channel (the transfers from one stage to another:
// with one chunk per stage an edge's activations or its gradients), so that channels move their
// messages concurrently; under MPI every process makes them in the same order (collective).
using ExecutorFactory = std::function<std::unique_ptr<Executor>()>;

// The model's stages are the schedule's virtual stages: chunk c of stage d is model stage
// c * schedule.stages + d, on the same mesh as the stage's other chunks.
// Plays the schedule on the devices whose buffers this process holds (every device in-process;
// under MPI one rank per device, each playing its stage's row); measured figures and the gradient
// check are combined over the processes. Throws InvalidArgument before running anything when the
// schedule does not fit the model (stage count, chunks of one stage on different meshes, an edge
// between two chunks of one stage, edges), deadlocks (validate()), an edge has no
// tensors (a fixed time moves no bytes), the executor does not fit the cluster (an MPI rank count
// that differs from its devices), a transfer delay outside 0..kLongestSeconds
// (meshcast/duration.h), iteration counts check_iteration_counts refuses, a transfer delay or
// emulated network is asked of a process that does not hold every stage, or (real compute) the
// model has no edges, or the tensors of a stage do not share one shape and one tile per device
// with an unsharded last dimension. A model of one stage (no edges) plays its compute alone.
RuntimeResult run_pipeline(const PipelineModel& model, const Schedule& schedule,
                           const ExecutorFactory& make_executor,
                           const RuntimeOptions& options = {});

// Bytes run_pipeline allocates for `devices` (the devices one process, or the processes of one
// machine, play) with a schedule of `microbatches`: every edge tensor's source and destination
// tiles per microbatch and direction, and with real compute the blocks' weights and weight
// gradients. A double, so that no sum over a huge model overflows; the caller compares it with
// the memory there is before running.
double pipeline_buffer_bytes(const PipelineModel& model, int microbatches, ComputeMode compute,
                             const std::vector<DeviceId>& devices);

// The model with every tensor dimension multiplied by `factor` (rounded, at least 1), so that a
// full-size configuration runs real compute at test sizes. Throws InvalidArgument unless
// 0 < factor <= 1.
PipelineModel shrink_tensors(PipelineModel model, double factor);

}  // namespace meshcast::pipeline
