#include "meshcast/runtime/mpi/mpi_executor.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/runtime/buffer_table.h"
#include "meshcast/runtime/placement.h"
#include "meshcast/runtime/strided_copy.h"

namespace meshcast {
namespace {

using Clock = std::chrono::steady_clock;

// MPI counts are ints: larger messages go in pieces of this size.
constexpr int64_t kMaxMessage = int64_t{1} << 30;
// Chunk sends a chain hop keeps posted at once. Open MPI's TCP transport progresses all pending
// sends to one peer together, so with every chunk posted the next hop gets its first chunk only
// when nearly the whole message has arrived and the chain does not pipeline across relays
// (docs/testbed.md). Two keeps the wire busy while bounding that.
constexpr int kChainSendsInFlight = 2;

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool mpi_alive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void ensure_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    std::atexit(finalize_mpi);
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  // start()/wait() run the plan on a worker thread while the caller's thread may call MPI
  // between runs.
  if (provided < MPI_THREAD_SERIALIZED)
    throw Error(
        fmt::format("the MPI library provides thread level {}, but the mpi backend needs "
                    "MPI_THREAD_SERIALIZED ({}) or better",
                    provided, MPI_THREAD_SERIALIZED));
}

// Where a rank reads or writes: its tile buffers (given at start), staging memory that holds
// boxes for later ops, or scratch memory that packs one op's message.
enum class Memory { src, dst, staging, scratch };
struct BufferRef {
  Memory memory = Memory::src;
  int64_t offset = 0;
  int tensor = 0;  // src, dst: whose tile
};

struct LocalCopy {
  BufferRef from;
  BufferRef to;
  StridedCopy copy;
};

enum class Action { chain, bcast, allgather, local };

// One op as this rank plays it: copies before, the message, copies after.
struct RankOp {
  Action action = Action::local;
  int tag = 0;
  std::vector<LocalCopy> before;  // pack into the message buffer
  std::vector<LocalCopy> after;   // unpack from it, copy into the destination tile
  BufferRef message;
  int64_t bytes = 0;
  int64_t chunk = 0;  // chain: bytes per pipelined piece
  int prev = -1;      // chain neighbours, -1 at the ends
  int next = -1;
  MPI_Comm comm = MPI_COMM_NULL;    // bcast, allgather
  std::vector<int> counts, displs;  // allgather: bytes of each member's part in the message
};

class MpiExecutor;

class MpiPlan final : public CompiledPlan {
 public:
  MpiPlan(const Plan& plan, MpiExecutor& executor, int slot);
  ~MpiPlan() override;

  const std::vector<DeviceId>& devices_here() const override { return tiles_.devices(); }
  int64_t staging_bytes() const override {
    return static_cast<int64_t>(staging_memory_.size() + scratch_.size());
  }
  void start(std::span<const DeviceBuffers> buffers) override;
  RunTiming wait() override;
  RunTiming run(std::span<const DeviceBuffers> buffers) override;

  // Plays this rank's ops in plan order; each completes before the next.
  void execute();
  void mark_done() {
    finished_ = Clock::now();
    done_.store(true);
    done_.notify_all();
  }

 private:
  BufferRef ref(const Place& place) const;
  BufferRef scratch(int64_t offset, int64_t bytes) {
    scratch_bytes_ = std::max(scratch_bytes_, offset + bytes);
    return {Memory::scratch, offset};
  }
  std::byte* resolve(const BufferRef& r) const;
  void add_copy(std::vector<LocalCopy>& list, const Box& region, const Place& from,
                const Place& to);
  void compile_op(const Op& op, const OpPlacement& placed, const Placement& placement, int index);
  void play_chain(RankOp& op);
  void run_copies(const std::vector<LocalCopy>& copies) const;

  MpiExecutor& executor_;
  int slot_;
  int rank_;
  std::vector<int> elem_size_;  // per tensor
  BufferTable tiles_;
  std::vector<std::byte> staging_memory_;
  std::vector<int64_t> staging_offsets_;  // of this rank's staging boxes
  std::vector<std::byte> scratch_;
  int64_t scratch_bytes_ = 0;
  std::vector<RankOp> ops_;
  std::vector<MPI_Request> requests_;
  bool running_ = false;
  std::atomic<bool> done_ = false;
  Clock::time_point started_, finished_;
};

class MpiExecutor final : public Executor {
 public:
  explicit MpiExecutor(const MpiOptions& options) : options_(options) {
    ensure_mpi();
    MPI_Comm_dup(MPI_COMM_WORLD, &data_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_rank(data_, &rank_);
    MPI_Comm_size(data_, &size_);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    tag_ub_ = found ? *tag_ub : 32767;  // the least the standard guarantees
    worker_ = std::jthread([this] { work(); });
  }
  ~MpiExecutor() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
    if (!mpi_alive()) return;
    for (auto& [members, comm] : groups_) MPI_Comm_free(&comm);
    MPI_Comm_free(&data_);
    MPI_Comm_free(&control_);
  }

  std::string_view backend() const override { return "mpi"; }

  // Every check that can refuse the plan comes before any byte moves, and every rank reaches the
  // same verdict: a rank that refused alone would leave the others waiting on it.
  std::unique_ptr<CompiledPlan> compile(const Plan& plan) override {
    check_idle("compile()");
    check_same_plan_everywhere(plan);
    const Cluster& c = plan.batch.cluster;
    if (c.devices() != size_)
      throw InvalidArgument(fmt::format(
          "the plan's cluster has {} devices ({} hosts x {} per host), but MPI started {} ranks: "
          "launch with mpirun -np {}",
          c.devices(), c.hosts, c.devices_per_host, size_, c.devices()));
    check_hosts_match_machines(c);
    auto slot = std::find(slots_.begin(), slots_.end(), false) - slots_.begin();
    if (slot == static_cast<ptrdiff_t>(slots_.size())) slots_.push_back(false);
    auto compiled = std::make_unique<MpiPlan>(plan, *this, static_cast<int>(slot));
    slots_[slot] = true;
    // Every rank refuses the plan together when one would exceed the bound.
    check_staging_limit(
        static_cast<int64_t>(max_over_processes(static_cast<double>(compiled->staging_bytes()))),
        options_.max_staging_bytes, "on the rank that needs the most");
    return compiled;
  }

  void barrier() override {
    check_idle("barrier()");
    MPI_Barrier(control_);
  }
  double max_over_processes(double value) override {
    check_idle("max_over_processes()");
    double out = 0;
    MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, control_);
    return out;
  }
  int64_t sum_over_processes(int64_t value) override {
    check_idle("sum_over_processes()");
    int64_t out = 0;
    MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, control_);
    return out;
  }
  bool is_leader() const override { return rank_ == 0; }
  std::string share_from_leader(std::string text) override {
    check_idle("share_from_leader()");
    int64_t size = static_cast<int64_t>(text.size());
    MPI_Bcast(&size, 1, MPI_INT64_T, 0, control_);
    text.resize(size);
    for (int64_t at = 0; at < size; at += kMaxMessage)
      MPI_Bcast(text.data() + at, static_cast<int>(std::min(kMaxMessage, size - at)), MPI_CHAR, 0,
                control_);
    return text;
  }

  int rank() const { return rank_; }
  MPI_Comm data() const { return data_; }
  const MpiOptions& options() const { return options_; }

  // Tag of op `index` of the plan in `slot`: slots keep the tags of plans that are alive apart.
  int tag(int slot, int index, int64_t ops) const {
    int bits = 0;
    while ((int64_t{1} << bits) < ops) ++bits;
    const int64_t last = (int64_t{slot + 1} << bits) - 1;
    if (last > tag_ub_)
      throw InvalidArgument(
          fmt::format("plan slot {} with {} ops needs MPI tags up to {}, but MPI_TAG_UB is {}",
                      slot, ops, last, tag_ub_));
    return static_cast<int>((int64_t{slot} << bits) | index);
  }

  // A communicator of `members` (rank i = members[i]), created by exactly those ranks the first
  // time and cached: every member asked for it at the same op, so every member caches it.
  MPI_Comm group(const std::vector<int>& members, int tag) {
    if (auto it = groups_.find(members); it != groups_.end()) return it->second;
    MPI_Group world = MPI_GROUP_NULL, subset = MPI_GROUP_NULL;
    MPI_Comm_group(control_, &world);
    MPI_Group_incl(world, static_cast<int>(members.size()), members.data(), &subset);
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_create_group(control_, subset, tag, &comm);
    MPI_Group_free(&subset);
    MPI_Group_free(&world);
    return groups_[members] = comm;
  }

  void release(int slot) { slots_[slot] = false; }

  void submit(MpiPlan* plan) {
    std::lock_guard lock(mutex_);
    if (job_) throw InvalidArgument("start() while another run of this executor is in flight");
    job_ = plan;
    wake_.notify_all();
  }
  void check_idle(std::string_view what) {
    std::lock_guard lock(mutex_);
    if (job_ || busy_)
      throw InvalidArgument(fmt::format("{} while a run is in flight: wait() first", what));
  }
  void set_busy(bool busy) {
    std::lock_guard lock(mutex_);
    if (busy && (job_ || busy_))
      throw InvalidArgument("run() while another run of this executor is in flight");
    busy_ = busy;
  }

 private:
  // Ranks given different plans would wait on each other's different ops forever.
  void check_same_plan_everywhere(const Plan& plan) {
    // FNV-1a of the plan document: the same on every rank whatever its build.
    uint64_t digest = 14695981039346656037ull;
    for (const char ch : plan_to_json(plan).dump())
      digest = (digest ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    uint64_t least = 0, most = 0;
    MPI_Allreduce(&digest, &least, 1, MPI_UINT64_T, MPI_MIN, control_);
    MPI_Allreduce(&digest, &most, 1, MPI_UINT64_T, MPI_MAX, control_);
    if (least != most)
      throw InvalidArgument(fmt::format(
          "the {} ranks were given different plans (rank {} has plan digest {:016x}, others "
          "{:016x}): expected every rank to play the same plan",
          size_, rank_, digest, digest == least ? most : least));
  }

  // Device d runs on rank d. The devices of one cluster host must run on one machine (its local
  // copies and allgathers assume shared memory, its NIC figures one machine's NICs); several
  // cluster hosts on one machine are fine (a test on one machine).
  void check_hosts_match_machines(const Cluster& c) {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(name, &length);
    std::vector<char> names(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                  MPI_CHAR, control_);
    const auto machine = [&](int rank) {
      return std::string(names.data() + static_cast<size_t>(rank) * MPI_MAX_PROCESSOR_NAME);
    };
    for (int rank = 0; rank < size_; ++rank) {
      const int first = rank - rank % c.devices_per_host;
      if (machine(rank) != machine(first))
        throw InvalidArgument(fmt::format(
            "the plan's cluster puts devices {}..{} on host {}, but MPI started rank {} on "
            "machine '{}' and rank {} on '{}': expected the ranks of one host on one machine "
            "(a hostfile with slots={} per machine, ranks placed by slot)",
            first, first + c.devices_per_host - 1, rank / c.devices_per_host, first, machine(first),
            rank, machine(rank), c.devices_per_host));
    }
  }

  void work() {
    while (true) {
      MpiPlan* plan = nullptr;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || job_; });
        if (!job_) return;
        plan = job_;
      }
      plan->execute();
      {
        std::lock_guard lock(mutex_);
        job_ = nullptr;
      }
      plan->mark_done();
    }
  }

  MpiOptions options_;
  MPI_Comm data_ = MPI_COMM_NULL;     // messages of the plans
  MPI_Comm control_ = MPI_COMM_NULL;  // group creation and the collectives of reports
  int rank_ = 0;
  int size_ = 0;
  int64_t tag_ub_ = 0;
  std::map<std::vector<int>, MPI_Comm> groups_;
  std::vector<bool> slots_;
  std::mutex mutex_;
  std::condition_variable wake_;
  MpiPlan* job_ = nullptr;
  bool busy_ = false;
  bool stopping_ = false;
  std::jthread worker_;
};

MpiPlan::MpiPlan(const Plan& plan, MpiExecutor& executor, int slot)
    : executor_(executor),
      slot_(slot),
      rank_(executor.rank()),
      tiles_(plan.batch, {executor.rank()}) {
  for (const auto& t : plan.batch.tensors) elem_size_.push_back(dtype_size(t.tensor.dtype));
  const Placement placement = place_plan(plan);
  for (const StagedBox& b : placement.staging[rank_]) staging_offsets_.push_back(b.offset);
  staging_memory_.resize(placement.staging_bytes[rank_]);
  for (int k : placement.ops_of[rank_]) compile_op(plan.ops[k], placement.ops[k], placement, k);
  scratch_.resize(scratch_bytes_);
  size_t requests = 0;
  for (const RankOp& op : ops_)
    if (op.action == Action::chain)
      requests = std::max<size_t>(requests, 2 * ((op.bytes + op.chunk - 1) / op.chunk));
  requests_.resize(requests);
}

MpiPlan::~MpiPlan() {
  if (running_) wait();
  executor_.release(slot_);
}

BufferRef MpiPlan::ref(const Place& place) const {
  switch (place.kind) {
    case BufferKind::src:
      return {Memory::src, 0, place.tensor};
    case BufferKind::dst:
      return {Memory::dst, 0, place.tensor};
    case BufferKind::staging:
      return {Memory::staging, staging_offsets_[place.staging]};
  }
  return {};
}

std::byte* MpiPlan::resolve(const BufferRef& r) const {
  switch (r.memory) {
    case Memory::src:
      return const_cast<std::byte*>(tiles_.src(rank_, r.tensor)) + r.offset;
    case Memory::dst:
      return tiles_.dst(rank_, r.tensor) + r.offset;
    case Memory::staging:
      return const_cast<std::byte*>(staging_memory_.data()) + r.offset;
    case Memory::scratch:
      return const_cast<std::byte*>(scratch_.data()) + r.offset;
  }
  return nullptr;
}

void MpiPlan::add_copy(std::vector<LocalCopy>& list, const Box& region, const Place& from,
                       const Place& to) {
  if (region.empty() || from == to) return;
  list.push_back(
      {ref(from), ref(to), plan_strided_copy(region, from.box, to.box, elem_size_[from.tensor])});
}

void MpiPlan::compile_op(const Op& op, const OpPlacement& placed, const Placement& placement,
                         int index) {
  RankOp out;
  out.tag = executor_.tag(slot_, index, static_cast<int64_t>(placement.ops.size()));
  out.bytes = op.bytes;
  const int n = static_cast<int>(op.receivers.size());
  const int pieces = static_cast<int>(op.pieces.size());
  // This rank's position among the receivers; n for the sender of a send or broadcast.
  const int me = static_cast<int>(std::find(op.receivers.begin(), op.receivers.end(), rank_) -
                                  op.receivers.begin());
  const auto dst_of = [&](const Piece& piece) {
    return Place{rank_, BufferKind::dst, -1, placement.tiles[piece.tensor][rank_].dst,
                 piece.tensor};
  };

  if (op.kind == OpKind::copy) {
    out.action = Action::local;
    for (int p = 0; p < pieces; ++p) {
      const PiecePlacement& at = placed.pieces[p];
      add_copy(out.after, op.pieces[p].slice, *at.source, at.targets[0]);
      if (at.spills[0]) add_copy(out.after, *at.spills[0], *at.source, dst_of(op.pieces[p]));
    }
  } else if (op.kind == OpKind::allgather) {
    // The message is every member's parts packed one after the other (member-major; within a
    // member, piece by piece), which is what MPI_Allgatherv exchanges; own parts packed before,
    // the others unpacked after.
    out.action = n > 1 ? Action::allgather : Action::local;
    int64_t offset = 0;
    for (int j = 0; j < n; ++j) {
      const int64_t member_offset = offset;
      for (int p = 0; p < pieces; ++p) {
        const Piece& piece = op.pieces[p];
        const PiecePlacement& at = placed.pieces[p];
        const Place& target = at.targets[me];
        const int elem_size = elem_size_[piece.tensor];
        const Box part = allgather_part(piece, n, j);
        const int64_t bytes = part.volume() * elem_size;
        if (n == 1) {
          add_copy(out.after, part, at.part_sources[j], target);
        } else if (bytes > 0) {
          const Place& held = at.part_sources[j];
          if (j == me)
            out.before.push_back({ref(held), scratch(offset, bytes),
                                  plan_strided_copy(part, held.box, part, elem_size)});
          if (j != me || held != target)
            out.after.push_back({scratch(offset, bytes), ref(target),
                                 plan_strided_copy(part, part, target.box, elem_size)});
        }
        offset += bytes;
      }
      out.counts.push_back(static_cast<int>(std::min<int64_t>(offset - member_offset, INT_MAX)));
      out.displs.push_back(static_cast<int>(std::min<int64_t>(member_offset, INT_MAX)));
    }
    if (offset > INT_MAX)
      throw InvalidArgument(
          fmt::format("plan op id {}: an allgather of {} bytes is more than one "
                      "MPI collective can count ({})",
                      op.id, offset, INT_MAX));
    if (n > 1) {
      out.message = scratch(0, offset);
      out.comm = executor_.group({op.receivers.begin(), op.receivers.end()}, out.tag);
    }
    for (int p = 0; p < pieces; ++p)
      if (placed.pieces[p].spills[me])
        add_copy(out.after, *placed.pieces[p].spills[me], placed.pieces[p].targets[me],
                 dst_of(op.pieces[p]));
  } else {  // send or broadcast: a chain sender -> receivers, or MPI_Bcast on their group
    const bool bcast = op.kind == OpKind::broadcast && n > 1 &&
                       executor_.options().broadcast == MpiBroadcast::mpi_bcast;
    out.action = bcast ? Action::bcast : Action::chain;
    const auto holder = [&](int p) -> const Place& {
      return me == n ? *placed.pieces[p].source : placed.pieces[p].targets[me];
    };
    const Box& first = op.pieces[0].slice;
    if (pieces == 1 && is_contiguous_in(first, holder(0).box)) {
      // One piece that lies contiguously where it is held: sent or received in place.
      out.message = ref(holder(0));
      out.message.offset += offset_in(first, holder(0).box, elem_size_[op.pieces[0].tensor]);
    } else {
      // The pieces packed one after the other in the op's order (a bucket).
      out.message = scratch(0, out.bytes);
      int64_t offset = 0;
      for (int p = 0; p < pieces; ++p) {
        const Piece& piece = op.pieces[p];
        const int elem_size = elem_size_[piece.tensor];
        const Place& held = holder(p);
        const BufferRef packed = scratch(offset, piece.bytes);
        if (me == n)
          out.before.push_back({ref(held), packed,
                                plan_strided_copy(piece.slice, held.box, piece.slice, elem_size)});
        else
          out.after.push_back({packed, ref(held),
                               plan_strided_copy(piece.slice, piece.slice, held.box, elem_size)});
        offset += piece.bytes;
      }
    }
    if (me < n)
      for (int p = 0; p < pieces; ++p)
        if (placed.pieces[p].spills[me])
          add_copy(out.after, *placed.pieces[p].spills[me], holder(p), dst_of(op.pieces[p]));
    const int64_t chunk =
        op.kind == OpKind::broadcast && op.chunk_bytes > 0 ? op.chunk_bytes : out.bytes;
    out.chunk = std::clamp<int64_t>(chunk, 1, kMaxMessage);
    out.prev = me == n ? -1 : (me == 0 ? *op.sender : op.receivers[me - 1]);
    out.next = me == n ? op.receivers[0] : (me + 1 < n ? op.receivers[me + 1] : -1);
    if (bcast) {
      std::vector<int> members{*op.sender};
      members.insert(members.end(), op.receivers.begin(), op.receivers.end());
      out.comm = executor_.group(members, out.tag);
    }
  }
  ops_.push_back(std::move(out));
}

void MpiPlan::run_copies(const std::vector<LocalCopy>& copies) const {
  for (const LocalCopy& c : copies) run_strided_copy(c.copy, resolve(c.from), resolve(c.to));
}

void MpiPlan::play_chain(RankOp& op) {
  std::byte* message = resolve(op.message);
  const int chunks = static_cast<int>((op.bytes + op.chunk - 1) / op.chunk);
  MPI_Request* received = requests_.data();
  MPI_Request* sent = requests_.data() + chunks;
  const auto piece = [&](int c) {
    return std::pair{message + c * op.chunk,
                     static_cast<int>(std::min(op.chunk, op.bytes - c * op.chunk))};
  };
  const MPI_Comm comm = executor_.data();
  if (op.prev >= 0)
    for (int c = 0; c < chunks; ++c) {
      auto [at, len] = piece(c);
      MPI_Irecv(at, len, MPI_BYTE, op.prev, op.tag, comm, &received[c]);
    }
  // A relay forwards each chunk as soon as it has it: the chain is pipelined.
  for (int c = 0; c < chunks; ++c) {
    if (op.prev >= 0) MPI_Wait(&received[c], MPI_STATUS_IGNORE);
    if (op.next >= 0) {
      if (c >= kChainSendsInFlight) MPI_Wait(&sent[c - kChainSendsInFlight], MPI_STATUS_IGNORE);
      auto [at, len] = piece(c);
      MPI_Isend(at, len, MPI_BYTE, op.next, op.tag, comm, &sent[c]);
    }
  }
  if (op.next >= 0) MPI_Waitall(chunks, sent, MPI_STATUSES_IGNORE);
}

void MpiPlan::execute() {
  for (RankOp& op : ops_) {
    run_copies(op.before);
    switch (op.action) {
      case Action::chain:
        play_chain(op);
        break;
      case Action::bcast:
        for (int64_t at = 0; at < op.bytes; at += kMaxMessage)
          MPI_Bcast(resolve(op.message) + at,
                    static_cast<int>(std::min(kMaxMessage, op.bytes - at)), MPI_BYTE, 0, op.comm);
        break;
      case Action::allgather:
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, resolve(op.message), op.counts.data(),
                       op.displs.data(), MPI_BYTE, op.comm);
        break;
      case Action::local:
        break;
    }
    run_copies(op.after);
  }
}

void MpiPlan::start(std::span<const DeviceBuffers> buffers) {
  if (running_) throw InvalidArgument("start() while the previous run is in flight: wait() first");
  tiles_.bind(buffers);
  done_.store(false);
  started_ = Clock::now();
  executor_.submit(this);
  running_ = true;
}

RunTiming MpiPlan::wait() {
  if (!running_) throw InvalidArgument("wait() without a run in flight: start() first");
  done_.wait(false);
  running_ = false;
  return {std::chrono::duration<double>(finished_ - started_).count()};
}

RunTiming MpiPlan::run(std::span<const DeviceBuffers> buffers) {
  if (running_) throw InvalidArgument("run() while a run is in flight: wait() first");
  tiles_.bind(buffers);
  executor_.set_busy(true);
  started_ = Clock::now();
  try {
    execute();
  } catch (...) {
    executor_.set_busy(false);
    throw;
  }
  finished_ = Clock::now();
  executor_.set_busy(false);
  return {std::chrono::duration<double>(finished_ - started_).count()};
}

}  // namespace

std::unique_ptr<Executor> make_mpi_executor(const MpiOptions& options) {
  return std::make_unique<MpiExecutor>(options);
}

}  // namespace meshcast
