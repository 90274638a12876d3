// The weights suite of `meshcast bench`: whole models synced from training to serving meshes,
// each by four methods — meshcast's joint plan, meshcast tensor by tensor, and the two ways
// weight-update middleware does it today (docs/results.md#weight-sync).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/plan/plan.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/measure.h"
#include "meshcast/tasks/batch.h"

namespace meshcast {

struct WeightsCase {
  std::string label;        // "llama7b-tp2r4"
  std::string description;  // "Llama-7B tp=4,pp=2 -> tp=2,replicas=4"
  Batch batch;
};

// Llama-7B-like tp=4,pp=2 -> tp=2,replicas=4 and -> tp=8; a GPT-like model; a Llama-70B-like sync
// from 32 to 64 devices; Llama-7B on hosts of 8 devices and 4 NICs, served by tp=8 (a replica per
// host) and by tp=4 (two replicas per host). The paper's cluster figures (10 Gbps NICs, 100 Gbps
// device links; 4 devices and 1 NIC per host unless the description says otherwise).
std::vector<WeightsCase> weights_suite();
// The trillion-parameter rows, opt-in (`meshcast bench --suite weights-moe`: minutes of CPU, so
// no test plans them): Kimi-K2 and DeepSeek-V3 in float8_e4m3fn from a Megatron trainer of 256
// GPUs (tp=8,pp=8,dp=4,ep=32) to vLLM-style servers of tp=16,ep=16 with 16 and 128 replicas (256
// and 2,048 GPUs), on H20 hosts (configs/clusters/h20.json).
std::vector<WeightsCase> weights_moe_suite();

enum class WeightsMethod { joint, per_tensor, full_broadcast, gather_broadcast };
std::string_view to_string(WeightsMethod method);
std::vector<WeightsMethod> all_weights_methods();

// Broadcast chunk of the middleware baselines: a pipelined chain of fixed 256 KiB chunks, as
// collective libraries chunk their broadcasts (the whole message when smaller).
inline constexpr int64_t kBaselineChunkBytes = 256 << 10;

// full_broadcast: for each tensor, each distinct source shard broadcast whole, by the first
// device holding it, to every destination device in mesh order (a chain), which keeps its slice.
// gather_broadcast: for each tensor, every shard sent to the first device of the source mesh,
// which then broadcasts the whole tensor to every destination device. Tensor after tensor. A
// shard (a whole tensor) is one message of pieces, its unit tasks in task order; a receiver gets
// more than its tile, stages it and keeps its slice (docs/concepts.md#staging-memory), so these
// are valid plans that every executor plays.
Plan full_broadcast_plan(const Batch& batch);
Plan gather_broadcast_plan(const Batch& batch);

struct WeightsRow {
  std::string label;
  std::string description;
  WeightsMethod method = WeightsMethod::joint;
  int64_t tensors = 0;
  int64_t model_bytes = 0;
  int64_t ops = 0;
  double time_s = 0;         // simulated
  double lower_bound_s = 0;  // of the whole batch, the same for every method
  int64_t network_bytes = 0;
  double plan_s = 0;         // wall-clock seconds planning took
  double predicted_s = 0;    // real backends: the simulator's time of the same plans (else 0)
  double joint_speedup = 0;  // this method's time / joint's time; 0 when joint was not run

  double ratio() const { return time_s / lower_bound_s; }
};

// Plans `weights_case` with `method` and simulates it; with an executor, measures the same plans
// on real buffers (time_s: the measured median, predicted_s: the simulated time; with
// measure.verify every element of every tensor is checked, and a wrong one throws). per_tensor
// plans each tensor alone (make_plan of a batch of one) and plays the plans one after another:
// its simulated time and bytes are the sums over the plans, its measured time that of one run of
// the whole sequence (measure() of the plans). Collective over the executor's processes.
WeightsRow weights_row(const WeightsCase& weights_case, WeightsMethod method,
                       Executor* executor = nullptr, const MeasureOptions& measure = {});

// Fills joint_speedup of every row from the joint row of its case.
void fill_joint_speedups(std::vector<WeightsRow>& rows);

}  // namespace meshcast
