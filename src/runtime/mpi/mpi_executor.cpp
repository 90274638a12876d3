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
#include <utility>

#include "meshcast/error.h"
#include "meshcast/plan/dependencies.h"
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
//
// It is also the most chunks a hop sends before the next hop has started the op: the first chunk
// goes by MPI_Issend, which completes once the next hop has posted its receive, and later chunks
// wait for that. Small chunks are eager messages, whose MPI_Isend completes as soon as the bytes
// are with the transport: without this a sender would push all its ops into the network at
// once. A relay takes its ops one after another (it sends in each), so the bytes of its later
// ops, from other senders, would share its host's NIC with the op it needs now and crowd it out,
// while the relays that forward that op idle and fall behind (docs/executors.md).
constexpr int kChainSendsInFlight = 2;
// Chunk receives a chain hop keeps posted at once: every chunk of a planned chain (the planner
// cuts a broadcast into about 64), while a long message in small chunks does not fill the
// request array that every poll scans.
constexpr int kChainReceivesPosted = 64;
// Chunk of a message that crosses hosts when the plan gives none: below Open MPI's TCP eager limit
// (64 KiB), so that no chunk needs a rendezvous handshake. A device that sends and receives over
// one TCP connection at once queues its handshake replies behind its own data, and with large
// messages one direction then waits for the other about half the time (an exchange of 8 MiB each
// way over 300 Mbit/s: 0.23 s or 0.46 s); with chunks this size every run overlaps (0.23 s).
constexpr int64_t kCrossHostChunk = 63 * 1024;

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

// Idle polling backs off up to this long, so that a rank waiting on its peers leaves the CPU to
// the ranks that move bytes (an emulated cluster runs many ranks on few cores).
constexpr auto kLongestBackoff = std::chrono::microseconds(50);

// A poller's pause when it found nothing to do: first a yield, then sleeps of 1 us doubling up to
// kLongestBackoff; progress starts it over.
class Backoff {
 public:
  void progressed() { pause_ = std::chrono::microseconds(0); }
  void idle() {
    if (pause_.count() == 0) {
      pause_ = std::chrono::microseconds(1);
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause_);
      pause_ = std::min(pause_ * 2, kLongestBackoff);
    }
  }

 private:
  std::chrono::microseconds pause_{0};
};

// MPI_Wait without spinning a core: a rank that waits for the slowest one at a control collective
// leaves the CPU to the ranks still moving bytes.
void wait_idly(MPI_Request& request) {
  Backoff backoff;
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done) backoff.idle();
}

// Where a rank reads or writes: its tile buffers (given at start), staging memory that holds
// boxes for later ops, or scratch memory that packs one op's message.
enum class Memory { src, dst, staging, scratch };
// Scratch memory is in areas: one for the ops this rank sends from (a send's or broadcast's
// sender), one for those it forwards or gathers in (relays, allgather members), and one per peer
// for those it only receives in from that peer (a send's receiver, a broadcast's last receiver,
// the peer being the previous device of the chain). The ops of the first two each wait for the
// previous op this device sends in (op_dependencies). Receipts are not ordered by the plan on the
// receiver, which takes from several peers at once; but a peer sends in one op at a time, so an
// op that receives from it into its area waits only for the previous one there
// (compile_dependencies), which the peer's own order makes finish first anyway: two ops in flight
// at once never share scratch memory, and receipts from different peers never wait for each
// other (nor for a gather).
enum ScratchArea { kSendScratch = 0, kForwardScratch = 1, kFirstReceiptScratch = 2 };
struct BufferRef {
  Memory memory = Memory::src;
  int64_t offset = 0;
  int tensor = 0;           // src, dst: whose tile
  int area = kSendScratch;  // scratch: which area
};

struct LocalCopy {
  BufferRef from;
  BufferRef to;
  StridedCopy copy;
};

enum class Action { chain, bcast, allgather, local };

// One op as this rank plays it: copies before, the message, copies after.
struct RankOp {
  int index = 0;  // in the plan
  Action action = Action::local;
  int tag = 0;
  std::vector<LocalCopy> before;  // pack into the message buffer
  std::vector<LocalCopy> after;   // unpack from it, copy into the destination tile
  BufferRef message;
  int64_t bytes = 0;
  int64_t chunk = 0;  // chain: bytes per pipelined piece
  int prev = -1;      // chain neighbours, -1 at the ends
  int next = -1;
  bool next_remote = false;         // chain: the next device is on another host
  MPI_Comm comm = MPI_COMM_NULL;    // bcast, allgather
  std::vector<int> counts, displs;  // allgather: bytes of each member's part in the message
  int receipt_area = -1;            // the peer's receipt scratch area it receives into, if any
  int chunks() const { return static_cast<int>((bytes + chunk - 1) / chunk); }
  int chunk_count(int c) const { return static_cast<int>(std::min(chunk, bytes - c * chunk)); }
};

// Where one op of this rank is in a run.
struct Progress {
  int deps_left = 0;     // ops it waits for that are not finished
  int received = 0;      // chain: chunks received
  int next_receive = 0;  // chain: the next chunk whose receive to post
  int next_send = 0;     // chain: the next chunk to forward (chunks are sent in order)
  int sends_in_flight = 0;
  bool next_hop_started = false;  // chain: the next hop has matched the first chunk
  int sent = 0;                   // chain: chunks whose send completed
  int pending = 0;                // bcast, allgather: collective requests not complete
  bool finished = false;
};

// What a posted request belongs to: a chain's received chunk, a chain's send (its first chunk's
// apart), or a collective.
struct RequestOwner {
  static constexpr int kSend = -1;
  static constexpr int kCollective = -2;
  static constexpr int kFirstSend = -3;
  int op = 0;  // index into ops_
  int chunk = kSend;
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

  // Plays this rank's ops: each starts when the ops it waits for are finished on this rank, and
  // every op in flight progresses at once (nonblocking requests polled together).
  void execute();
  void mark_done() {
    finished_ = Clock::now();
    done_.store(true);
    done_.notify_all();
  }

 private:
  BufferRef ref(const Place& place) const;
  BufferRef scratch(int area, int64_t offset, int64_t bytes) {
    if (scratch_bytes_.size() <= static_cast<size_t>(area)) scratch_bytes_.resize(area + 1, 0);
    scratch_bytes_[area] = std::max(scratch_bytes_[area], offset + bytes);
    return {Memory::scratch, offset, 0, area};
  }
  std::byte* resolve(const BufferRef& r) const;
  void add_copy(std::vector<LocalCopy>& list, const Box& region, const Place& from,
                const Place& to);
  void compile_op(const Op& op, const OpPlacement& placed, const Placement& placement, int index);
  void compile_dependencies(const Plan& plan, const Placement& placement);
  void run_copies(const std::vector<LocalCopy>& copies) const;
  void post(MPI_Request request, int op, int chunk);
  void start_op(int i);
  void pump_chain(int i);
  void on_complete(RequestOwner owner);
  void finish_if_done(int i);

  MpiExecutor& executor_;
  int slot_;
  int rank_;
  int devices_per_host_;
  std::vector<int> elem_size_;  // per tensor
  BufferTable tiles_;
  std::vector<std::byte> staging_memory_;
  std::vector<int64_t> staging_offsets_;  // of this rank's staging boxes
  std::vector<std::byte> scratch_;
  std::vector<int64_t> scratch_bytes_ = std::vector<int64_t>(kFirstReceiptScratch, 0);  // per area
  std::vector<int64_t> scratch_at_;     // where each area begins in scratch_
  std::map<int, int> receipt_area_of_;  // peer rank -> its receipt scratch area
  std::vector<RankOp> ops_;
  // The dependency engine: built by compile, reset by every run, which then allocates nothing.
  std::vector<int> initial_deps_;  // per op: ops of this rank it waits for
  std::vector<int> successor_begin_, successors_;
  std::vector<int> chunk_begin_;  // per op: its flags in chunk_received_
  std::vector<Progress> progress_;
  std::vector<uint8_t> chunk_received_;
  std::vector<int> ready_;  // ops whose dependencies are met, not yet started
  std::vector<MPI_Request> active_;
  std::vector<RequestOwner> owners_;  // of active_
  std::vector<int> completed_;        // MPI_Testsome's indices
  int finished_ops_ = 0;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
  std::atomic<bool> running_ = false;
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
    MPI_Request request;
    MPI_Ibarrier(control_, &request);
    wait_idly(request);
  }
  double max_over_processes(double value) override {
    check_idle("max_over_processes()");
    double out = 0;
    MPI_Request request;
    MPI_Iallreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, control_, &request);
    wait_idly(request);
    return out;
  }
  int64_t sum_over_processes(int64_t value) override {
    check_idle("sum_over_processes()");
    int64_t out = 0;
    MPI_Request request;
    MPI_Iallreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, control_, &request);
    wait_idly(request);
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
      devices_per_host_(plan.batch.cluster.devices_per_host),
      tiles_(plan.batch, {executor.rank()}) {
  for (const auto& t : plan.batch.tensors) elem_size_.push_back(dtype_size(t.tensor.dtype));
  const Placement placement = place_plan(plan);
  for (const StagedBox& b : placement.staging[rank_]) staging_offsets_.push_back(b.offset);
  staging_memory_.resize(placement.staging_bytes[rank_]);
  for (int k : placement.ops_of[rank_]) compile_op(plan.ops[k], placement.ops[k], placement, k);
  constexpr int64_t kAlign = 64;
  int64_t end = 0;
  scratch_at_.assign(scratch_bytes_.size(), 0);
  for (size_t area = 0; area < scratch_bytes_.size(); ++area) {
    if (scratch_bytes_[area] == 0) continue;
    scratch_at_[area] = (end + kAlign - 1) / kAlign * kAlign;
    end = scratch_at_[area] + scratch_bytes_[area];
  }
  scratch_.resize(end);
  compile_dependencies(plan, placement);
}

// Op k of this rank waits for the ops of execution_dependencies (the plan's rule and staging
// reuse) that this rank takes part in: the others do not touch its memory, and they finish on
// the ranks that play them. Its collectives (MPI_Ibcast, MPI_Iallgatherv) also wait for its
// previous collective, so that every member starts the collectives of one communicator in the
// same order (plan order), and an op that only receives, into scratch memory, waits for the
// previous one that does from the same peer (ScratchArea). Every wait points to an earlier op, so
// the earliest unfinished op of the plan has started on all its ranks and finishes: no deadlock.
void MpiPlan::compile_dependencies(const Plan& plan, const Placement& placement) {
  const auto deps = execution_dependencies(plan, placement);
  const int ops = static_cast<int>(ops_.size());
  std::vector<int> local(plan.ops.size(), -1);
  for (int i = 0; i < ops; ++i) local[ops_[i].index] = i;
  std::vector<std::vector<int>> successors(ops);
  initial_deps_.assign(ops, 0);
  int previous_collective = -1;
  std::vector<int> previous_receipt(scratch_bytes_.size(), -1);  // per receipt scratch area
  size_t requests = 0, chunks = 0;
  for (int i = 0; i < ops; ++i) {
    std::vector<int> waits;
    for (int k : deps[ops_[i].index])
      if (local[k] >= 0) waits.push_back(local[k]);
    const RankOp& op = ops_[i];
    const auto follow = [&](bool applies, int& previous) {
      if (!applies) return;
      if (previous >= 0 && std::find(waits.begin(), waits.end(), previous) == waits.end())
        waits.push_back(previous);
      previous = i;
    };
    follow(op.action == Action::bcast || op.action == Action::allgather, previous_collective);
    if (op.receipt_area >= 0) follow(true, previous_receipt[op.receipt_area]);
    for (int w : waits) successors[w].push_back(i);
    initial_deps_[i] = static_cast<int>(waits.size());
    chunk_begin_.push_back(static_cast<int>(chunks));
    switch (op.action) {
      case Action::chain:
        chunks += op.chunks();
        requests += (op.prev >= 0 ? std::min(op.chunks(), kChainReceivesPosted) : 0) +
                    (op.next >= 0 ? kChainSendsInFlight : 0);
        break;
      case Action::bcast:
        requests += (op.bytes + kMaxMessage - 1) / kMaxMessage;
        break;
      case Action::allgather:
        requests += 1;
        break;
      case Action::local:
        break;
    }
  }
  successor_begin_.push_back(0);
  for (const auto& s : successors) {
    successors_.insert(successors_.end(), s.begin(), s.end());
    successor_begin_.push_back(static_cast<int>(successors_.size()));
  }
  progress_.resize(ops);
  chunk_received_.resize(chunks);
  ready_.reserve(ops);
  // While a poll's completed requests are handled they stay in active_ beside the ones their
  // handlers post: at most twice the requests that can be in flight at once.
  active_.reserve(2 * requests);
  owners_.reserve(2 * requests);
  completed_.resize(requests);
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
      return const_cast<std::byte*>(scratch_.data()) + scratch_at_[r.area] + r.offset;
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
  out.index = index;
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
            out.before.push_back({ref(held), scratch(kForwardScratch, offset, bytes),
                                  plan_strided_copy(part, held.box, part, elem_size)});
          if (j != me || held != target)
            out.after.push_back({scratch(kForwardScratch, offset, bytes), ref(target),
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
      out.message = scratch(kForwardScratch, 0, offset);
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
      int area = me == n ? kSendScratch : kForwardScratch;
      if (me + 1 == n) {  // receives only: the area of the peer it receives from
        const int peer = me == 0 ? *op.sender : op.receivers[me - 1];
        const int next_area = kFirstReceiptScratch + static_cast<int>(receipt_area_of_.size());
        area = out.receipt_area = receipt_area_of_.try_emplace(peer, next_area).first->second;
      }
      out.message = scratch(area, 0, out.bytes);
      int64_t offset = 0;
      for (int p = 0; p < pieces; ++p) {
        const Piece& piece = op.pieces[p];
        const int elem_size = elem_size_[piece.tensor];
        const Place& held = holder(p);
        const BufferRef packed = scratch(area, offset, piece.bytes);
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
    const auto host = [&](DeviceId d) { return d / devices_per_host_; };
    const bool crosses_hosts = std::any_of(op.receivers.begin(), op.receivers.end(),
                                           [&](DeviceId r) { return host(r) != host(*op.sender); });
    const int64_t chunk = op.kind == OpKind::broadcast && op.chunk_bytes > 0 ? op.chunk_bytes
                          : crosses_hosts ? std::min(out.bytes, kCrossHostChunk)
                                          : out.bytes;
    out.chunk = std::clamp<int64_t>(chunk, 1, kMaxMessage);
    out.prev = me == n ? -1 : (me == 0 ? *op.sender : op.receivers[me - 1]);
    out.next = me == n ? op.receivers[0] : (me + 1 < n ? op.receivers[me + 1] : -1);
    out.next_remote = out.next >= 0 && host(out.next) != host(rank_);
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

void MpiPlan::post(MPI_Request request, int op, int chunk) {
  active_.push_back(request);
  owners_.push_back({op, chunk});
}

void MpiPlan::start_op(int i) {
  RankOp& op = ops_[i];
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  run_copies(op.before);
  std::byte* message = op.action == Action::local ? nullptr : resolve(op.message);
  switch (op.action) {
    case Action::chain:
      pump_chain(i);
      break;
    case Action::bcast:
      for (int64_t at = 0; at < op.bytes; at += kMaxMessage) {
        MPI_Request request = MPI_REQUEST_NULL;
        MPI_Ibcast(message + at, static_cast<int>(std::min(kMaxMessage, op.bytes - at)), MPI_BYTE,
                   0, op.comm, &request);
        post(request, i, RequestOwner::kCollective);
        ++progress_[i].pending;
      }
      break;
    case Action::allgather: {
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, message, op.counts.data(),
                      op.displs.data(), MPI_BYTE, op.comm, &request);
      post(request, i, RequestOwner::kCollective);
      ++progress_[i].pending;
      break;
    }
    case Action::local:
      break;
  }
  finish_if_done(i);
}

// Posts what a chain hop may post now: the receives of the next chunks, up to
// kChainReceivesPosted ahead of those received, and the sends of the chunks it has, in order (the
// next hop's receives match them in order), at most kChainSendsInFlight at once and, until the
// next hop has started the op, none past the first kChainSendsInFlight. A relay forwards each
// chunk as soon as it has it: the chain is pipelined.
void MpiPlan::pump_chain(int i) {
  const RankOp& op = ops_[i];
  Progress& p = progress_[i];
  std::byte* message = resolve(op.message);
  while (op.prev >= 0 && p.next_receive < op.chunks() &&
         p.next_receive - p.received < kChainReceivesPosted) {
    const int c = p.next_receive++;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Irecv(message + c * op.chunk, op.chunk_count(c), MPI_BYTE, op.prev, op.tag,
              executor_.data(), &request);
    post(request, i, c);
  }
  while (op.next >= 0 && p.next_send < op.chunks() && p.sends_in_flight < kChainSendsInFlight &&
         (p.next_hop_started || p.next_send < kChainSendsInFlight) &&
         (op.prev < 0 || chunk_received_[chunk_begin_[i] + p.next_send])) {
    const int c = p.next_send++;
    std::byte* chunk = message + c * op.chunk;
    const int count = op.chunk_count(c);
    MPI_Request request = MPI_REQUEST_NULL;
    // The first chunk waits for the next hop to start the op (below: senders wait for their
    // receivers). The last chunk of a hop to another host goes by MPI_Issend too, so the hop ends
    // when the next device has matched it, as an op of the plan ends when its bytes have arrived
    // (docs/executors.md): an eager send completes once its bytes are in the socket, so without it
    // a rank's next op started at once and a host's ranks put every flow of the plan on its NIC
    // together (send_recv's 16 flows between two hosts of 4 devices lost ~1000 packets per run at
    // the emulated NIC's queue, docs/pipeline.md). One handshake per hop, not per chunk.
    if (c == 0) {
      MPI_Issend(chunk, count, MPI_BYTE, op.next, op.tag, executor_.data(), &request);
      post(request, i, RequestOwner::kFirstSend);
    } else {
      const bool ends_the_hop = op.next_remote && c == op.chunks() - 1;
      (ends_the_hop ? MPI_Issend : MPI_Isend)(chunk, count, MPI_BYTE, op.next, op.tag,
                                              executor_.data(), &request);
      post(request, i, RequestOwner::kSend);
    }
    ++p.sends_in_flight;
  }
}

void MpiPlan::on_complete(RequestOwner owner) {
  Progress& p = progress_[owner.op];
  if (owner.chunk == RequestOwner::kCollective) {
    --p.pending;
  } else if (owner.chunk == RequestOwner::kSend || owner.chunk == RequestOwner::kFirstSend) {
    if (owner.chunk == RequestOwner::kFirstSend) p.next_hop_started = true;
    --p.sends_in_flight;
    ++p.sent;
    pump_chain(owner.op);
  } else {
    chunk_received_[chunk_begin_[owner.op] + owner.chunk] = 1;
    ++p.received;
    pump_chain(owner.op);
  }
  finish_if_done(owner.op);
}

void MpiPlan::finish_if_done(int i) {
  const RankOp& op = ops_[i];
  Progress& p = progress_[i];
  const bool done = op.action == Action::chain ? (op.prev < 0 || p.received == op.chunks()) &&
                                                     (op.next < 0 || p.sent == op.chunks())
                                               : p.pending == 0;
  if (!done || p.finished) return;
  run_copies(op.after);
  p.finished = true;
  --in_flight_;
  ++finished_ops_;
  for (int s = successor_begin_[i]; s < successor_begin_[i + 1]; ++s)
    if (--progress_[successors_[s]].deps_left == 0) ready_.push_back(successors_[s]);
}

void MpiPlan::execute() {
  const int ops = static_cast<int>(ops_.size());
  for (int i = 0; i < ops; ++i) progress_[i] = {.deps_left = initial_deps_[i]};
  std::fill(chunk_received_.begin(), chunk_received_.end(), uint8_t{0});
  ready_.clear();
  active_.clear();
  owners_.clear();
  for (int i = 0; i < ops; ++i)
    if (initial_deps_[i] == 0) ready_.push_back(i);
  finished_ops_ = in_flight_ = peak_in_flight_ = 0;
  Backoff backoff;
  while (finished_ops_ < ops) {
    bool progressed = !ready_.empty();
    // Starting an op may finish it (a local copy) and make more ready.
    for (size_t next = 0; next < ready_.size(); ++next) start_op(ready_[next]);
    ready_.clear();
    if (!active_.empty()) {
      int count = 0;
      MPI_Testsome(static_cast<int>(active_.size()), active_.data(), &count, completed_.data(),
                   MPI_STATUSES_IGNORE);
      if (count != MPI_UNDEFINED && count > 0) {
        progressed = true;
        // Handlers append new requests after the ones tested: the indices stay valid.
        for (int c = 0; c < count; ++c) on_complete(owners_[completed_[c]]);
        size_t kept = 0;
        for (size_t r = 0; r < active_.size(); ++r)
          if (active_[r] != MPI_REQUEST_NULL) {
            active_[kept] = active_[r];
            owners_[kept++] = owners_[r];
          }
        active_.resize(kept);
        owners_.resize(kept);
      }
    }
    if (progressed)
      backoff.progressed();
    else
      backoff.idle();
  }
}

void MpiPlan::start(std::span<const DeviceBuffers> buffers) {
  // Claimed before anything else, so that two threads starting at once cannot both run.
  if (running_.exchange(true))
    throw InvalidArgument("start() while the previous run is in flight: wait() first");
  done_.store(false);
  try {
    tiles_.bind(buffers);
    started_ = Clock::now();
    executor_.submit(this);
  } catch (...) {
    running_ = false;
    throw;
  }
}

RunTiming MpiPlan::wait() {
  if (!running_) throw InvalidArgument("wait() without a run in flight: start() first");
  done_.wait(false);
  running_ = false;
  return {std::chrono::duration<double>(finished_ - started_).count(), peak_in_flight_};
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
  return {std::chrono::duration<double>(finished_ - started_).count(), peak_in_flight_};
}

}  // namespace

std::unique_ptr<Executor> make_mpi_executor(const MpiOptions& options) {
  return std::make_unique<MpiExecutor>(options);
}

}  // namespace meshcast
