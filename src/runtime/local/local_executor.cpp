#include "meshcast/runtime/local/local_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "meshcast/error.h"
#include "meshcast/runtime/buffer_table.h"
#include "meshcast/runtime/placement.h"
#include "meshcast/runtime/strided_copy.h"

namespace meshcast {
namespace {

using Clock = std::chrono::steady_clock;

class LocalPlan;

// Worker threads that run the copies of ready ops, from any compiled plan of the executor. The
// queue is a ring whose capacity compile() reserves, so a run never allocates.
class WorkerPool {
 public:
  struct Job {
    LocalPlan* plan = nullptr;
    int step = 0;
  };

  // When a thread cannot be started, the ones already running are stopped and joined before the
  // error leaves (a constructor that throws runs no destructor).
  explicit WorkerPool(int threads) {
    try {
      for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::exception& e) {
      const int started = static_cast<int>(workers_.size());
      stop();
      throw Error(fmt::format("cannot start {} worker threads (started {}): {}", threads, started,
                              e.what()));
    }
  }
  ~WorkerPool() { stop(); }
  int threads() const { return static_cast<int>(workers_.size()); }

  // Each step of a compiled plan is queued at most once per run.
  void reserve(int64_t steps) {
    std::lock_guard lock(mutex_);
    reserved_ += steps;
    if (reserved_ <= static_cast<int64_t>(ring_.size())) return;
    std::vector<Job> bigger(reserved_);
    for (int64_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
    ring_ = std::move(bigger);
    head_ = 0;
  }
  void release(int64_t steps) {
    std::lock_guard lock(mutex_);
    reserved_ -= steps;
  }

  void push(LocalPlan* plan, int first_step, int end_step) {
    {
      std::lock_guard lock(mutex_);
      for (int s = first_step; s < end_step; ++s)
        ring_[(head_ + count_++) % ring_.size()] = {plan, s};
    }
    if (end_step - first_step == 1)
      ready_.notify_one();
    else
      ready_.notify_all();
  }

 private:
  void work();
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    workers_.clear();  // joins
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<Job> ring_;
  int64_t head_ = 0;
  int64_t count_ = 0;
  int64_t reserved_ = 0;
  bool stopping_ = false;
  std::vector<std::jthread> workers_;  // last: joined before the queue goes away
};

// Where a copy reads or writes: a tile buffer given at start(), or staging memory of the plan.
struct BufferRef {
  DeviceId device = 0;
  int tensor = 0;
  BufferKind kind = BufferKind::src;
  std::byte* staging = nullptr;
};

// A copy of `region` between two places; `copy` is planned for the strides the places are bound
// with (BufferTable::view).
struct Step {
  int op = 0;
  Box region;
  Place from_place;
  Place to_place;
  BufferRef from;
  BufferRef to;
  StridedCopy copy;
};

class LocalPlan final : public CompiledPlan {
 public:
  LocalPlan(const Plan& plan, WorkerPool& pool, const LocalOptions& options)
      : pool_(pool), tiles_(plan.batch, mesh_devices(plan.batch)) {
    const Placement placement = place_plan(plan);
    for (const auto& t : plan.batch.tensors) elem_size_.push_back(dtype_size(t.tensor.dtype));
    devices_here_ = tiles_.devices();
    allocate_staging(placement, options);
    build_steps(plan, placement, options);
    plan_copies();
    build_dependencies(execution_dependencies(plan, placement));
    pool_.reserve(static_cast<int64_t>(steps_.size()));
  }
  ~LocalPlan() override {
    if (running_) wait();
    pool_.release(static_cast<int64_t>(steps_.size()));
  }

  const std::vector<DeviceId>& devices_here() const override { return devices_here_; }
  int64_t staging_bytes() const override { return static_cast<int64_t>(staging_memory_.size()); }

  void start(std::span<const DeviceBuffers> buffers) override {
    // Claimed before anything else, so that two threads starting at once cannot both run.
    if (running_.exchange(true))
      throw InvalidArgument("start() while the previous run is in flight: wait() first");
    done_.store(false);
    try {
      if (tiles_.bind(buffers)) plan_copies();
    } catch (...) {
      running_ = false;
      throw;
    }
    for (size_t k = 0; k < initial_deps_.size(); ++k) {
      deps_[k].store(initial_deps_[k], std::memory_order_relaxed);
      steps_left_[k].store(op_steps_[k + 1] - op_steps_[k], std::memory_order_relaxed);
    }
    ops_left_.store(static_cast<int>(initial_deps_.size()));
    in_flight_.store(0, std::memory_order_relaxed);
    peak_in_flight_.store(0, std::memory_order_relaxed);
    count_in_flight(static_cast<int>(roots_.size()));
    started_ = Clock::now();
    if (initial_deps_.empty()) finish();
    for (int k : roots_) make_ready(k);
  }

  RunTiming wait() override {
    if (!running_) throw InvalidArgument("wait() without a run in flight: start() first");
    done_.wait(false);
    running_ = false;
    return {std::chrono::duration<double>(finished_ - started_).count(),
            peak_in_flight_.load(std::memory_order_relaxed)};
  }

  void run_step(int s) {
    const Step& step = steps_[s];
    run_strided_copy(step.copy, resolve(step.from), resolve(step.to));
    if (steps_left_[step.op].fetch_sub(1, std::memory_order_acq_rel) == 1) complete(step.op);
  }

 private:
  std::byte* resolve(const BufferRef& ref) const {
    switch (ref.kind) {
      case BufferKind::src:
        return const_cast<std::byte*>(tiles_.src(ref.device, ref.tensor));
      case BufferKind::dst:
        return tiles_.dst(ref.device, ref.tensor);
      case BufferKind::staging:
        return ref.staging;
    }
    return nullptr;
  }

  // Every device's staging memory (place_plan's reuse within a device) in one allocation.
  void allocate_staging(const Placement& placement, const LocalOptions& options) {
    int64_t total = 0;
    for (int64_t bytes : placement.staging_bytes) total += bytes;
    check_staging_limit(total, options.max_staging_bytes, "in this process (all its devices)");
    staging_memory_.resize(total);
    staging_.resize(placement.staging.size());
    int64_t base = 0;
    for (size_t d = 0; d < placement.staging.size(); ++d) {
      for (const StagedBox& b : placement.staging[d])
        staging_[d].push_back(staging_memory_.data() + base + b.offset);
      base += placement.staging_bytes[d];
    }
  }

  BufferRef ref(const Place& place) const {
    return {place.device, place.tensor, place.kind,
            place.kind == BufferKind::staging ? staging_[place.device][place.staging] : nullptr};
  }

  // One copy of `region`, cut into pieces along its first dimension that has enough of them so
  // that the workers share a large copy.
  void add_copy(int op, const Box& region, const Place& from, const Place& to,
                const LocalOptions& options) {
    if (region.empty() || from == to) return;
    const int elem_size = elem_size_[from.tensor];
    const int64_t bytes = region.volume() * elem_size;
    int64_t pieces =
        std::min<int64_t>(pool_.threads(), bytes / std::max<int64_t>(1, options.split_bytes));
    int dim = 0;
    while (dim < region.rank() && region.dims[dim].size() < std::max<int64_t>(pieces, 2)) ++dim;
    if (dim == region.rank()) pieces = 1;
    for (int64_t i = 0; i < std::max<int64_t>(pieces, 1); ++i) {
      Box piece = region;
      if (pieces > 1) {
        const Interval part = chunk_part(region.dims[dim].size(), pieces, i);
        piece.dims[dim] = {region.dims[dim].lo + part.lo, region.dims[dim].lo + part.hi};
      }
      steps_.push_back({op, piece, from, to, ref(from), ref(to), {}});
    }
  }

  // Plans every step's copy for the strides its buffers are bound with.
  void plan_copies() {
    for (Step& step : steps_)
      step.copy = plan_strided_copy(step.region, tiles_.view(step.from_place),
                                    tiles_.view(step.to_place), elem_size_[step.from_place.tensor]);
  }

  void build_steps(const Plan& plan, const Placement& placement, const LocalOptions& options) {
    op_steps_.push_back(0);
    for (size_t k = 0; k < plan.ops.size(); ++k) {
      const Op& op = plan.ops[k];
      const int n = static_cast<int>(op.receivers.size());
      // In one process a bucket needs no packing: each piece is copied straight from where its
      // sender holds it, and the op completes when all its pieces' copies have.
      for (size_t p = 0; p < op.pieces.size(); ++p) {
        const Piece& piece = op.pieces[p];
        const PiecePlacement& placed = placement.ops[k].pieces[p];
        for (int i = 0; i < n; ++i) {
          const DeviceId r = op.receivers[i];
          const Place dst{r, BufferKind::dst, -1, placement.tiles[piece.tensor][r].dst,
                          piece.tensor};
          // What receiver i gets and from where: the whole piece from the sender, or every
          // member's part of an allgather.
          for (int j = 0; j < (op.kind == OpKind::allgather ? n : 1); ++j) {
            const Box region =
                op.kind == OpKind::allgather ? allgather_part(piece, n, j) : piece.slice;
            const Place& from =
                op.kind == OpKind::allgather ? placed.part_sources[j] : *placed.source;
            add_copy(static_cast<int>(k), region, from, placed.targets[i], options);
            if (placed.spills[i])
              add_copy(static_cast<int>(k), intersect(region, *placed.spills[i]), from, dst,
                       options);
          }
        }
      }
      op_steps_.push_back(static_cast<int>(steps_.size()));
    }
  }

  // Op k is released when every op it waits for (execution_dependencies: the plan's rule of
  // docs/concepts.md and staging-memory reuse) is complete.
  void build_dependencies(const std::vector<std::vector<int>>& deps) {
    const int ops = static_cast<int>(deps.size());
    initial_deps_.assign(ops, 0);
    std::vector<std::vector<int>> successors(ops);
    for (int k = 0; k < ops; ++k) {
      for (int b : deps[k]) successors[b].push_back(k);
      initial_deps_[k] = static_cast<int>(deps[k].size());
      if (deps[k].empty()) roots_.push_back(k);
    }
    successor_begin_.push_back(0);
    for (const auto& s : successors) {
      successors_.insert(successors_.end(), s.begin(), s.end());
      successor_begin_.push_back(static_cast<int>(successors_.size()));
    }
    deps_ = std::make_unique<std::atomic<int>[]>(ops);
    steps_left_ = std::make_unique<std::atomic<int>[]>(ops);
  }

  // An op is in flight from its release until its last copy is done.
  void count_in_flight(int delta) {
    const int now = in_flight_.fetch_add(delta, std::memory_order_relaxed) + delta;
    int peak = peak_in_flight_.load(std::memory_order_relaxed);
    while (now > peak && !peak_in_flight_.compare_exchange_weak(peak, now)) {
    }
  }

  void make_ready(int k) {
    if (op_steps_[k] == op_steps_[k + 1])
      complete(k);
    else
      pool_.push(this, op_steps_[k], op_steps_[k + 1]);
  }

  void complete(int k) {
    count_in_flight(-1);
    for (int i = successor_begin_[k]; i < successor_begin_[k + 1]; ++i)
      if (deps_[successors_[i]].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        count_in_flight(1);
        make_ready(successors_[i]);
      }
    if (ops_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) finish();
  }

  void finish() {
    finished_ = Clock::now();
    done_.store(true);
    done_.notify_all();
  }

  WorkerPool& pool_;
  BufferTable tiles_;
  std::vector<int> elem_size_;  // per tensor
  std::vector<DeviceId> devices_here_;
  std::vector<std::byte> staging_memory_;
  std::vector<std::vector<std::byte*>> staging_;  // per device, per staging box
  std::vector<Step> steps_;
  std::vector<int> op_steps_;  // steps of op k: [op_steps_[k], op_steps_[k + 1])
  std::vector<int> initial_deps_;
  std::vector<int> roots_;
  std::vector<int> successors_;
  std::vector<int> successor_begin_;
  std::unique_ptr<std::atomic<int>[]> deps_;
  std::unique_ptr<std::atomic<int>[]> steps_left_;
  std::atomic<int> ops_left_ = 0;
  std::atomic<int> in_flight_ = 0;
  std::atomic<int> peak_in_flight_ = 0;
  std::atomic<bool> done_ = false;
  std::atomic<bool> running_ = false;
  Clock::time_point started_;
  Clock::time_point finished_;
};

void WorkerPool::work() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || count_ > 0; });
      if (count_ == 0) return;
      job = ring_[head_];
      head_ = (head_ + 1) % static_cast<int64_t>(ring_.size());
      --count_;
    }
    job.plan->run_step(job.step);
  }
}

class LocalExecutor final : public Executor {
 public:
  explicit LocalExecutor(const LocalOptions& options)
      : options_(options), pool_(options.threads > 0 ? options.threads : default_threads()) {}

  std::string_view backend() const override { return "local"; }
  std::unique_ptr<CompiledPlan> compile(const Plan& plan) override {
    return std::make_unique<LocalPlan>(plan, pool_, options_);
  }
  void barrier() override {}
  double max_over_processes(double value) override { return value; }
  int64_t sum_over_processes(int64_t value) override { return value; }
  bool is_leader() const override { return true; }
  std::string share_from_leader(std::string text) override { return text; }

 private:
  static int default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

  LocalOptions options_;
  WorkerPool pool_;
};

}  // namespace

std::unique_ptr<Executor> make_local_executor(const LocalOptions& options) {
  if (options.threads < 0)
    throw InvalidArgument(fmt::format(
        "bad thread count {}: expected >= 0 (0: one per hardware thread)", options.threads));
  if (options.max_staging_bytes < 0)
    throw InvalidArgument(fmt::format("bad staging limit {} bytes: expected >= 0 (0: no limit)",
                                      options.max_staging_bytes));
  if (options.split_bytes <= 0)
    throw InvalidArgument(
        fmt::format("bad split size {} bytes: expected > 0", options.split_bytes));
  return std::make_unique<LocalExecutor>(options);
}

}  // namespace meshcast
