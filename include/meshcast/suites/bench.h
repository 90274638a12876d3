// The suites of `meshcast bench`: their cases, the strategies they compare, and one row per
// (case, strategy) with the time a backend gives it. Library code, so that the command line and
// the Python package run the same suites.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/planner/lower_bound.h"
#include "meshcast/planner/planner.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/measure.h"

namespace meshcast {

struct BenchCase {
  std::string label;  // "1".."8" for the paper suite, "1x4" for single-sender, "r3" for random
  std::string description;
  Resharding problem;
  bool split = false;  // planned with PlanOptions::split (--split)
};

// The paper's cases (docs/paper-cases.md), all or those numbered in `numbers`.
std::vector<BenchCase> paper_suite(const std::vector<int>& numbers);
// the paper's single-sender cases: one device broadcasts an int32 vector to (hosts, devices)
// meshes, at 1 GiB and at 1, 16 and 64 MB.
std::vector<BenchCase> single_sender_suite();
// `count` random reshardings, reproducible from `seed`, that reach what planners and executors
// must get right: every dtype; 1-3 dims of about `bytes` in all whose sizes split unevenly and
// leave some parts empty; 1-D and 2-D meshes placed by default on disjoint hosts, overlapping
// (sharing devices), or on explicit shuffled device lists; specs splitting a dim over one or two
// axes in either order or nested (S0/1); half the cases planned with `split`. Clusters of the
// paper's link figures with 4, 2 or 1 devices per host (what divides `max_devices`), or with
// `devices_per_host` each where that is given (> 0; it must divide `max_devices`), at most 8 hosts
// and `max_devices` devices.
inline constexpr int64_t kRandomSuiteBytes = int64_t{512} << 20;  // the simulated size
std::vector<BenchCase> random_suite(unsigned seed, int count, int max_devices = 32,
                                    int64_t bytes = kRandomSuiteBytes, int devices_per_host = 0);
// The paper's cases with both meshes grown so that a 2-host mesh becomes `hosts` hosts of 8
// devices, and dim 0 grown with them (same bytes per host); then, whatever `numbers` holds, case
// "s": `(hosts,8) S0RS1 -> (hosts,8) S01RR` of a float16 tensor `8*hosts x 1024 x 512` (64 * hosts
// unit tasks, one holder and one receiver each).
std::vector<BenchCase> grown_paper_suite(const std::vector<int>& numbers, int hosts);

// A strategy with its balance mode: "send_recv", "allgather", "broadcast/none", ...
struct StrategyChoice {
  Strategy strategy = Strategy::broadcast;
  Balance balance = Balance::order;

  std::string name() const;
  bool operator==(const StrategyChoice&) const = default;
};

// send_recv, allgather, broadcast/none, broadcast/size, broadcast/order: the paper's comparison.
std::vector<StrategyChoice> all_strategies();
// Comma-separated names as printed by StrategyChoice::name ("broadcast" alone means
// broadcast/order). Throws InvalidArgument naming the bad entry.
std::vector<StrategyChoice> parse_strategies(std::string_view text);
// "1,7" -> {1, 7}; throws InvalidArgument unless every entry is in 1..8.
std::vector<int> parse_case_numbers(std::string_view text);

// At most this many unit tasks: the product over dims of (source parts + destination parts - 1).
int64_t task_upper_bound(const Resharding& problem);

// `topology`'s hosts and devices with the NIC, intra-host and latency figures and the NICs per
// host of `links` (a calibrated cluster applied to a suite whose cases have their own hosts).
Cluster with_links(Cluster topology, const Cluster& links);

// Where a row's time comes from: "sim" (the flow-level simulator), or "local" / "mpi", which
// play the plan for real (measure_row then gets their executor).
void check_backend(std::string_view backend);

struct BenchRow {
  std::string label;
  std::string description;
  StrategyChoice choice;
  int64_t tensor_bytes = 0;
  int64_t ops = 0;
  double time_s = 0;  // from the backend
  double lower_bound_s = 0;
  double plan_s = 0;     // wall-clock seconds make_plan took
  double measure_s = 0;  // wall-clock seconds the backend took
  double speedup = 0;    // send_recv's time / this row's time; 0 when send_recv was not run
  // local/mpi: the simulator's time for the same plan on the case's cluster, on the leader
  // (0 with the sim backend, whose time is the prediction).
  double predicted_s = 0;
  double nic_in_bytes = 0;  // the most bytes one host must take in over its NICs (host_in_bytes)
  int64_t checked = 0;      // local/mpi with verify: destination elements checked (all were right)
  // The term that decides lower_bound_s (explain_plan_bound).
  BoundTerm bound_term = BoundTerm::none;

  double ratio() const { return time_s / lower_bound_s; }
  double measured_over_predicted() const { return time_s / predicted_s; }
  // Tensor bits over time, as the paper reports it (docs/results.md).
  double effective_gbps() const;
  // In GB/s (1e9 B/s): algbw = tensor bytes / time, as nccl-tests defines it; nicbw =
  // nic_in_bytes / time, comparable with a host's NIC bandwidth (equal to it when the busiest
  // receiving host's NICs carry only what they must, all the time). nicbw is not nccl-tests'
  // busbw, which scales algbw by a factor fixed per collective (docs/concepts.md).
  double algbw_gbs() const { return static_cast<double>(tensor_bytes) / time_s / 1e9; }
  double nicbw_gbs() const { return nic_in_bytes / time_s / 1e9; }
};

// Plans `bench_case` with `choice` and times it on `backend`: the one place a row's time is
// obtained. With an executor the plan is made on its leader and played for real: the time is
// the median of `measure`'s iterations, the leader simulates the same plan for predicted_s, and
// a failed verification throws std::runtime_error.
// With an executor, the plan is refused before any byte moves when its tiles need more than
// `max_memory` bytes on this machine (0: the memory available; check_tile_memory).
BenchRow measure_row(const BenchCase& bench_case, const StrategyChoice& choice,
                     std::string_view backend, Executor* executor = nullptr,
                     const MeasureOptions& measure = {}, int64_t max_memory = 0);

// The plan `make` returns on the leader, on every process: all ranks must play the same ops, even
// ranks built differently (another compiler or libm may round the cost model differently). An
// error the leader meets is thrown on every process.
Plan plan_on_leader(Executor& executor, const std::function<Plan()>& make);

// Throws InvalidArgument when the tile buffers of the processes on this machine would need more
// than `max_memory` bytes (0: the memory this machine has available, MemAvailable or the cgroup's
// limit if lower), saying how much they need and how to shrink it (`shrink`: the options that
// make tensors smaller). The local backend holds every device's tiles; under mpi a rank holds its
// device's, and the ranks on this machine are counted (Open MPI's local size). Call it inside
// plan_on_leader's `make`, so that every rank stops before a byte is allocated.
void check_tile_memory(const Batch& batch, std::string_view backend, int64_t max_memory,
                       std::string_view shrink);
// The devices whose buffers the processes on this machine hold: every device of `cluster` on the
// local backend; under mpi one per rank Open MPI started here (its local size).
std::vector<DeviceId> devices_on_this_machine(const Cluster& cluster, std::string_view backend);
// The check check_tile_memory makes, for any buffers: throws InvalidArgument "<holder> need
// <needed> (<detail>), more than the <available>: expected <expected>" when `needed` bytes are more
// than `max_memory` (0: the memory this machine has available).
void check_memory(double needed, std::string_view holder, std::string_view detail,
                  int64_t max_memory, std::string_view expected);

// Grows `problem`'s cluster with idle hosts to exactly `devices` devices. Returns why it cannot
// (more devices than that, or a count that is not a multiple of the devices per host).
std::optional<std::string> fit_cluster(Resharding& problem, int devices);
std::optional<std::string> fit_cluster(Batch& batch, int devices);

// Shrinks dim 0 of the tensor so that it has about `bytes` bytes (never below one row); no-op
// when it is already that small.
void shrink_tensor(Resharding& problem, int64_t bytes);
// Shrinks dim 0 of every tensor by one factor so that the batch has about `bytes` bytes (each
// tensor keeps at least one row, and a dim 0 that both layouts split evenly into parts stays a
// multiple of those parts, so that its shards stay even); no-op when it is already that small.
// Regions bound into a buffer along a dim 0 move with the rows before them, so that the buffers
// shrink with their tensors.
void shrink_batch(Batch& batch, int64_t bytes);

// Fills each row's speedup from the send_recv row of its case.
void fill_speedups(std::vector<BenchRow>& rows);

}  // namespace meshcast
