// The executor over a transport (meshcast/runtime/transport.h): the ordering rules, written once.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "meshcast/plan/chain_window.h"
#include "meshcast/plan/dependencies.h"
#include "meshcast/plan/json.h"
#include "meshcast/runtime/buffer_table.h"
#include "meshcast/runtime/placement.h"
#include "meshcast/runtime/transport.h"
#include "meshcast/runtime/watchdog.h"

namespace meshcast {
namespace {

using Clock = std::chrono::steady_clock;

// The chunk sends a chain hop keeps posted at once, its window, follow the link's bandwidth x
// round trip (chain_window in meshcast/plan/chain_window.h, which the simulator charges too):
// fewer leave the wire idle while the hop waits for completions, a hop then moving only a window
// per round trip. Not every chunk either: Open MPI's TCP transport progresses all pending sends
// to one peer together, so with every chunk posted the next hop gets its first chunk only when
// nearly the whole message has arrived and the chain does not pipeline across relays
// (docs/testbed.md).
//
// The window is also the most chunks a hop sends before the next hop has started the op: the
// first chunk goes by a synchronous send, which completes once the next hop has posted its
// receive, and later chunks wait for that. Small chunks are eager messages, whose send completes
// as soon as the bytes are with the transport: without this a sender would push all its ops into
// the network at once. A relay takes its ops one after another (it sends in each), so the bytes
// of its later ops, from other senders, would share its host's NIC with the op it needs now and
// crowd it out, while the relays that forward that op idle and fall behind (docs/executors.md).
//
// A hop keeps kChainMaxWindow chunk receives posted (every chunk of a planned chain, which the
// planner cuts into about 64), so that every chunk in flight lands in a posted receive.

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

// bcast and allgather run as the transport's group collectives; p2p_allgather as messages
// between every two members.
enum class Action { chain, bcast, allgather, p2p_allgather, local };

// One op as this rank plays it: copies before, the message, copies after.
struct RankOp {
  int index = 0;  // in the plan
  Action action = Action::local;
  int tag = 0;
  std::vector<LocalCopy> before;  // pack into the message buffer
  std::vector<LocalCopy> after;   // unpack from it, copy into the destination tile
  BufferRef message;
  int64_t bytes = 0;
  int64_t chunk = 0;             // chain: bytes per pipelined piece
  int window = kChainMinWindow;  // chain: chunk sends in flight at once
  int prev = -1;                 // chain neighbours, -1 at the ends
  int next = -1;
  bool next_remote = false;             // chain: the next device is on another host
  int group = -1;                       // bcast, allgather: the transport's group, if it has them
  std::vector<int> members;             // allgather: its devices
  std::vector<int64_t> counts, displs;  // allgather: bytes of each member's part in the message
  int receipt_area = -1;                // the peer's receipt scratch area it receives into, if any
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
  int pending = 0;                // bcast, allgather: requests not complete
  bool finished = false;
};

// What a posted request belongs to: a chain's received chunk, a chain's send (its first chunk's
// apart), or a collective's request; the transport's cookie packs it.
struct RequestOwner {
  static constexpr int kSend = -1;
  static constexpr int kCollective = -2;
  static constexpr int kFirstSend = -3;
  int op = 0;  // index into ops_
  int chunk = kSend;

  uint64_t cookie() const {
    return (uint64_t(static_cast<uint32_t>(op)) << 32) | static_cast<uint32_t>(chunk);
  }
  static RequestOwner of(uint64_t cookie) {
    return {static_cast<int>(cookie >> 32), static_cast<int>(static_cast<uint32_t>(cookie))};
  }
};

class TransportExecutor;

class TransportPlan final : public CompiledPlan {
 public:
  TransportPlan(const Plan& plan, TransportExecutor& executor, int slot);
  ~TransportPlan() override;

  const std::vector<DeviceId>& devices_here() const override { return tiles_.devices(); }
  int64_t staging_bytes() const override { return staging_bytes_ + scratch_bytes_total_; }
  void start(std::span<const DeviceBuffers> buffers) override;
  RunTiming wait() override;
  RunTiming run(std::span<const DeviceBuffers> buffers) override;

  // Plays this rank's ops: each starts when the ops it waits for are finished on this rank, and
  // every op in flight progresses at once (nonblocking requests polled together). Throws Timeout
  // when the run lasts longer than the executor's timeout, and what the transport throws (a peer
  // that died).
  void execute();
  // The end of a run on the executor's thread: `error` is what it threw, if anything.
  void mark_done(std::exception_ptr error) {
    finished_ = Clock::now();
    failed_ = failed_ || error != nullptr;
    error_ = std::move(error);
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
  // What depends on the strides the tiles are bound with (which messages go in place, the copies,
  // the scratch areas): compiled again when a run binds other strides (no communication).
  void compile_ops();
  void compile_op(const Op& op, const OpPlacement& placed, int index);
  void compile_dependencies();
  void run_copies(const std::vector<LocalCopy>& copies) const;
  void start_op(int i);
  void post_p2p_allgather(int i, std::byte* message);
  void pump_chain(int i);
  void on_complete(RequestOwner owner);
  void finish_if_done(int i);
  void play(const Deadline& deadline);
  void check_not_failed() const;
  // Throws Timeout naming what this rank waits for, once `deadline` has passed.
  void check_deadline(const Deadline& deadline) const;

  TransportExecutor& executor_;
  Transport& transport_;
  bool copies_itself_;  // the transport copies (device memory)
  int slot_;
  int rank_;
  Cluster cluster_;             // the plan's: hosts, and each hop's bandwidth x round trip
  std::vector<int> elem_size_;  // per tensor
  BufferTable tiles_;
  // Staging boxes, then the scratch areas, in one block of the transport's memory.
  std::byte* memory_ = nullptr;
  int64_t staging_bytes_ = 0;
  int64_t scratch_bytes_total_ = 0;
  std::vector<int64_t> staging_offsets_;  // of this rank's staging boxes
  std::vector<int64_t> scratch_bytes_ = std::vector<int64_t>(kFirstReceiptScratch, 0);  // per area
  std::vector<int64_t> scratch_at_;     // where each area begins in memory_
  std::map<int, int> receipt_area_of_;  // peer rank -> its receipt scratch area
  // This rank's ops of the plan in plan order, where their pieces are, and the ops of this rank
  // each waits for by execution_dependencies (indices into rank_ops_).
  struct PlacedOp {
    Op op;
    OpPlacement placed;
    int index = 0;  // in the plan
  };
  std::vector<PlacedOp> rank_ops_;
  std::vector<std::vector<int>> rank_waits_;
  int64_t plan_ops_ = 0;
  std::vector<RankOp> ops_;
  // The dependency engine: built by compile, reset by every run, which then allocates nothing.
  std::vector<int> initial_deps_;  // per op: ops of this rank it waits for
  std::vector<int> successor_begin_, successors_;
  std::vector<int> chunk_begin_;  // per op: its flags in chunk_received_
  std::vector<Progress> progress_;
  std::vector<uint8_t> chunk_received_;
  std::vector<int> ready_;           // ops whose dependencies are met, not yet started
  std::vector<uint64_t> completed_;  // cookies of the requests a poll found complete
  int finished_ops_ = 0;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
  int runs_ = 0;
  std::atomic<bool> running_ = false;
  // A run threw: requests of it may still be posted, and its peers are gone or out of step.
  bool failed_ = false;
  std::atomic<bool> done_ = false;
  std::exception_ptr error_;
  Clock::time_point started_, finished_;
};

class TransportExecutor final : public Executor {
 public:
  TransportExecutor(std::shared_ptr<Transport> transport, const TransportOptions& options)
      : transport_(std::move(transport)), options_(options) {
    if (options_.group_broadcast && !transport_->has_group_collectives())
      throw InvalidArgument(fmt::format(
          "group broadcasts on {}: this transport has no group collectives, expected chains",
          transport_->name()));
    check_timeout(options_.timeout_s);
    worker_ = std::jthread([this] { work(); });
  }
  ~TransportExecutor() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  std::string_view backend() const override { return options_.backend; }

  // Every check that can refuse the plan comes before any byte moves, and every rank reaches the
  // same verdict: a rank that refused alone would leave the others waiting on it.
  std::unique_ptr<CompiledPlan> compile(const Plan& plan) override {
    check_idle("compile()");
    const Deadline deadline("compiling the plan", 0, options_.timeout_s);
    check_same_plan_everywhere(plan, deadline);
    const Cluster& c = plan.batch.cluster;
    if (c.devices() != transport_->size())
      throw InvalidArgument(fmt::format(
          "the plan's cluster has {} devices ({} hosts x {} per host), but {} started {} ranks: "
          "{}",
          c.devices(), c.hosts, c.devices_per_host, transport_->name(), transport_->size(),
          transport_->launch_hint(c.devices())));
    check_hosts_match_machines(c, deadline);
    auto slot = std::find(slots_.begin(), slots_.end(), false) - slots_.begin();
    if (slot == static_cast<ptrdiff_t>(slots_.size())) slots_.push_back(false);
    auto compiled = std::make_unique<TransportPlan>(plan, *this, static_cast<int>(slot));
    slots_[slot] = true;
    // Every rank refuses the plan together when one would exceed the bound.
    check_staging_limit(
        static_cast<int64_t>(reduce(static_cast<double>(compiled->staging_bytes()), deadline,
                                    [](double a, double b) { return std::max(a, b); })),
        options_.max_staging_bytes, "on the rank that needs the most");
    return compiled;
  }

  void barrier() override {
    check_idle("barrier()");
    transport_->allgather(std::string(1, '\0'), control_deadline("barrier()"));
  }
  double max_over_processes(double value) override {
    check_idle("max_over_processes()");
    return reduce(value, control_deadline("max_over_processes()"),
                  [](double a, double b) { return std::max(a, b); });
  }
  int64_t sum_over_processes(int64_t value) override {
    check_idle("sum_over_processes()");
    return reduce(value, control_deadline("sum_over_processes()"), std::plus<int64_t>());
  }
  bool is_leader() const override { return transport_->rank() == 0; }
  std::string share_from_leader(std::string text) override {
    check_idle("share_from_leader()");
    return transport_->broadcast(std::move(text), control_deadline("share_from_leader()"));
  }

  Transport& transport() const { return *transport_; }
  const TransportOptions& options() const { return options_; }

  // Tag of op `index` of the plan in `slot`: slots keep the tags of plans that are alive apart.
  // The transport's max_tag() is the control collectives'.
  int tag(int slot, int index, int64_t ops) const {
    int bits = 0;
    while ((int64_t{1} << bits) < ops) ++bits;
    const int64_t last = (int64_t{slot + 1} << bits) - 1;
    if (last >= transport_->max_tag())
      throw InvalidArgument(
          fmt::format("plan slot {} with {} ops needs {} tags up to {}, but the largest is {}",
                      slot, ops, transport_->name(), last, transport_->max_tag() - 1));
    return static_cast<int>((int64_t{slot} << bits) | index);
  }

  void release(int slot) { slots_[slot] = false; }

  void submit(TransportPlan* plan) {
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
  Deadline control_deadline(std::string_view what) const {
    return Deadline(what, 0, options_.timeout_s);
  }

  // `value` combined over every rank with `combine`, through the transport's allgather.
  template <typename T, typename Combine>
  T reduce(T value, const Deadline& deadline, Combine combine) {
    std::string mine(sizeof(T), '\0');
    std::memcpy(mine.data(), &value, sizeof(T));
    const auto all = transport_->allgather(mine, deadline);
    const auto of = [&](int rank) {
      T v{};
      std::memcpy(&v, all[rank].data(), sizeof(T));
      return v;
    };
    T out = of(0);
    for (int rank = 1; rank < static_cast<int>(all.size()); ++rank) out = combine(out, of(rank));
    return out;
  }

  // Ranks given different plans would wait on each other's different ops forever.
  void check_same_plan_everywhere(const Plan& plan, const Deadline& deadline) {
    // FNV-1a of the plan document: the same on every rank whatever its build.
    uint64_t digest = 14695981039346656037ull;
    for (const char ch : plan_to_json(plan).dump())
      digest = (digest ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    const uint64_t least =
        reduce(digest, deadline, [](uint64_t a, uint64_t b) { return std::min(a, b); });
    const uint64_t most =
        reduce(digest, deadline, [](uint64_t a, uint64_t b) { return std::max(a, b); });
    if (least != most)
      throw InvalidArgument(fmt::format(
          "the {} ranks were given different plans (rank {} has plan digest {:016x}, others "
          "{:016x}): expected every rank to play the same plan",
          transport_->size(), transport_->rank(), digest, digest == least ? most : least));
  }

  // Device d runs on rank d. The devices of one cluster host must run on one machine (its local
  // copies and allgathers assume shared memory, its NIC figures one machine's NICs); several
  // cluster hosts on one machine are fine (a test on one machine).
  void check_hosts_match_machines(const Cluster& c, const Deadline& deadline) {
    constexpr size_t kNameBytes = 256;
    std::string mine = transport_->machine().substr(0, kNameBytes);
    mine.resize(kNameBytes, '\0');
    const auto names = transport_->allgather(mine, deadline);
    const auto machine = [&](int rank) { return std::string(names[rank].c_str()); };
    for (int rank = 0; rank < transport_->size(); ++rank) {
      const int first = rank - rank % c.devices_per_host;
      if (machine(rank) != machine(first))
        throw InvalidArgument(fmt::format(
            "the plan's cluster puts devices {}..{} on host {}, but {} started rank {} on "
            "machine '{}' and rank {} on '{}': expected the ranks of one host on one machine "
            "(a hostfile with slots={} per machine, ranks placed by slot)",
            first, first + c.devices_per_host - 1, rank / c.devices_per_host, transport_->name(),
            first, machine(first), rank, machine(rank), c.devices_per_host));
    }
  }

  void work() {
    while (true) {
      TransportPlan* plan = nullptr;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || job_; });
        if (!job_) return;
        plan = job_;
      }
      std::exception_ptr error;
      try {
        plan->execute();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        job_ = nullptr;
      }
      plan->mark_done(std::move(error));
    }
  }

  std::shared_ptr<Transport> transport_;
  TransportOptions options_;
  std::vector<bool> slots_;
  std::mutex mutex_;
  std::condition_variable wake_;
  TransportPlan* job_ = nullptr;
  bool busy_ = false;
  bool stopping_ = false;
  std::jthread worker_;
};

TransportPlan::TransportPlan(const Plan& plan, TransportExecutor& executor, int slot)
    : executor_(executor),
      transport_(executor.transport()),
      copies_itself_(transport_.copies_itself()),
      slot_(slot),
      rank_(transport_.rank()),
      cluster_(plan.batch.cluster),
      tiles_(plan.batch, {transport_.rank()}) {
  for (const auto& t : plan.batch.tensors) elem_size_.push_back(dtype_size(t.tensor.dtype));
  const Placement placement = place_plan(plan);
  for (const StagedBox& b : placement.staging[rank_]) staging_offsets_.push_back(b.offset);
  staging_bytes_ = placement.staging_bytes[rank_];
  plan_ops_ = static_cast<int64_t>(plan.ops.size());
  const auto deps = execution_dependencies(plan, placement);
  std::vector<int> local(plan.ops.size(), -1);
  for (int k : placement.ops_of[rank_]) {
    local[k] = static_cast<int>(rank_ops_.size());
    rank_ops_.push_back({plan.ops[k], placement.ops[k], k});
    auto& waits = rank_waits_.emplace_back();
    for (int w : deps[k])
      if (local[w] >= 0) waits.push_back(local[w]);
  }
  compile_ops();
}

void TransportPlan::compile_ops() {
  ops_.clear();
  scratch_bytes_.assign(kFirstReceiptScratch, 0);
  scratch_bytes_total_ = 0;
  receipt_area_of_.clear();
  for (const PlacedOp& o : rank_ops_) compile_op(o.op, o.placed, o.index);
  constexpr int64_t kAlign = 64;
  int64_t end = (staging_bytes_ + kAlign - 1) / kAlign * kAlign;
  scratch_at_.assign(scratch_bytes_.size(), 0);
  for (size_t area = 0; area < scratch_bytes_.size(); ++area) {
    if (scratch_bytes_[area] == 0) continue;
    scratch_at_[area] = (end + kAlign - 1) / kAlign * kAlign;
    end = scratch_at_[area] + scratch_bytes_[area];
  }
  for (int64_t bytes : scratch_bytes_) scratch_bytes_total_ += bytes;
  if (memory_) transport_.release(memory_);
  memory_ = transport_.allocate(end);
  compile_dependencies();
}

// Op k of this rank waits for the ops of execution_dependencies (the plan's rule and staging
// reuse) that this rank takes part in: the others do not touch its memory, and they finish on
// the ranks that play them. Its group collectives also wait for its previous one, so that every
// member starts the collectives of one group in the same order (plan order), and an op that only
// receives, into scratch memory, waits for the previous one that does from the same peer
// (ScratchArea). In ordered mode every op waits for this rank's previous op. Every wait points to
// an earlier op, so the earliest unfinished op of the plan has started on all its ranks and
// finishes: no deadlock.
void TransportPlan::compile_dependencies() {
  const int ops = static_cast<int>(ops_.size());
  std::vector<std::vector<int>> successors(ops);
  initial_deps_.assign(ops, 0);
  chunk_begin_.clear();
  successor_begin_.clear();
  successors_.clear();
  int previous_collective = -1;
  std::vector<int> previous_receipt(scratch_bytes_.size(), -1);  // per receipt scratch area
  size_t requests = 0, chunks = 0;
  for (int i = 0; i < ops; ++i) {
    std::vector<int> waits = rank_waits_[i];
    const RankOp& op = ops_[i];
    const auto follow = [&](bool applies, int& previous) {
      if (!applies) return;
      if (previous >= 0 && std::find(waits.begin(), waits.end(), previous) == waits.end())
        waits.push_back(previous);
      previous = i;
    };
    follow(op.action == Action::bcast || op.action == Action::allgather, previous_collective);
    if (executor_.options().ordered && i > 0 &&
        std::find(waits.begin(), waits.end(), i - 1) == waits.end())
      waits.push_back(i - 1);
    if (op.receipt_area >= 0) follow(true, previous_receipt[op.receipt_area]);
    for (int w : waits) successors[w].push_back(i);
    initial_deps_[i] = static_cast<int>(waits.size());
    chunk_begin_.push_back(static_cast<int>(chunks));
    switch (op.action) {
      case Action::chain:
        chunks += op.chunks();
        requests += (op.prev >= 0 ? std::min(op.chunks(), kChainMaxWindow) : 0) +
                    (op.next >= 0 ? op.window : 0);
        break;
      case Action::bcast:
      case Action::allgather:
        requests += 1;
        break;
      case Action::p2p_allgather:
        requests += 2 * static_cast<int64_t>(op.members.size());
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
  progress_.assign(ops, {});
  chunk_received_.assign(chunks, 0);
  ready_.reserve(ops);
  completed_.reserve(requests);
  transport_.reserve(static_cast<int64_t>(requests));
}

TransportPlan::~TransportPlan() {
  if (running_) done_.wait(false);  // a failed run's error goes with the plan
  transport_.release(memory_);
  executor_.release(slot_);
}

BufferRef TransportPlan::ref(const Place& place) const {
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

std::byte* TransportPlan::resolve(const BufferRef& r) const {
  switch (r.memory) {
    case Memory::src:
      return const_cast<std::byte*>(tiles_.src(rank_, r.tensor)) + r.offset;
    case Memory::dst:
      return tiles_.dst(rank_, r.tensor) + r.offset;
    case Memory::staging:
      return memory_ + r.offset;
    case Memory::scratch:
      return memory_ + scratch_at_[r.area] + r.offset;
  }
  return nullptr;
}

void TransportPlan::add_copy(std::vector<LocalCopy>& list, const Box& region, const Place& from,
                             const Place& to) {
  if (region.empty() || from == to) return;
  list.push_back(
      {ref(from), ref(to),
       plan_strided_copy(region, tiles_.view(from), tiles_.view(to), elem_size_[from.tensor])});
}

void TransportPlan::compile_op(const Op& op, const OpPlacement& placed, int index) {
  RankOp out;
  out.index = index;
  out.tag = executor_.tag(slot_, index, plan_ops_);
  out.bytes = op.bytes;
  const int n = static_cast<int>(op.receivers.size());
  const int pieces = static_cast<int>(op.pieces.size());
  // This rank's position among the receivers; n for the sender of a send or broadcast.
  const int me = static_cast<int>(std::find(op.receivers.begin(), op.receivers.end(), rank_) -
                                  op.receivers.begin());
  const auto dst_of = [&](const Piece& piece) {
    return Place{rank_, BufferKind::dst, -1, tiles_.tiles(rank_, piece.tensor).dst, piece.tensor};
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
    // member, piece by piece), which is what a group allgather exchanges; own parts packed
    // before, the others unpacked after.
    const bool group = transport_.has_group_collectives();
    out.action = n == 1 ? Action::local : group ? Action::allgather : Action::p2p_allgather;
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
                                  plan_strided_copy(part, tiles_.view(held),
                                                    row_major_view(part, elem_size), elem_size)});
          if (j != me || held != target)
            out.after.push_back({scratch(kForwardScratch, offset, bytes), ref(target),
                                 plan_strided_copy(part, row_major_view(part, elem_size),
                                                   tiles_.view(target), elem_size)});
        }
        offset += bytes;
      }
      out.counts.push_back(offset - member_offset);
      out.displs.push_back(member_offset);
    }
    if (group && offset > INT_MAX)
      throw InvalidArgument(
          fmt::format("plan op id {}: an allgather of {} bytes is more than one "
                      "{} collective can count ({})",
                      op.id, offset, transport_.name(), INT_MAX));
    if (n > 1) {
      out.message = scratch(kForwardScratch, 0, offset);
      out.members.assign(op.receivers.begin(), op.receivers.end());
      if (group) out.group = transport_.make_group(out.members, out.tag);
    }
    for (int p = 0; p < pieces; ++p)
      if (placed.pieces[p].spills[me])
        add_copy(out.after, *placed.pieces[p].spills[me], placed.pieces[p].targets[me],
                 dst_of(op.pieces[p]));
  } else {  // send or broadcast: a chain sender -> receivers, or a group broadcast
    const bool bcast = op.kind == OpKind::broadcast && n > 1 && executor_.options().group_broadcast;
    out.action = bcast ? Action::bcast : Action::chain;
    const auto holder = [&](int p) -> const Place& {
      return me == n ? *placed.pieces[p].source : placed.pieces[p].targets[me];
    };
    const Box& first = op.pieces[0].slice;
    const int first_elem = elem_size_[op.pieces[0].tensor];
    // In place only where the piece is one byte range through the strides its tile is bound with.
    if (pieces == 1 && is_contiguous_in(first, tiles_.view(holder(0)), first_elem)) {
      // One piece that lies contiguously where it is held: sent or received in place.
      out.message = ref(holder(0));
      out.message.offset += offset_in(first, tiles_.view(holder(0)));
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
          out.before.push_back(
              {ref(held), packed,
               plan_strided_copy(piece.slice, tiles_.view(held),
                                 row_major_view(piece.slice, elem_size), elem_size)});
        else
          out.after.push_back(
              {packed, ref(held),
               plan_strided_copy(piece.slice, row_major_view(piece.slice, elem_size),
                                 tiles_.view(held), elem_size)});
        offset += piece.bytes;
      }
    }
    if (me < n)
      for (int p = 0; p < pieces; ++p)
        if (placed.pieces[p].spills[me])
          add_copy(out.after, *placed.pieces[p].spills[me], holder(p), dst_of(op.pieces[p]));
    out.chunk = std::clamp<int64_t>(chain_chunk(op, cluster_), 1, transport_.max_message());
    out.prev = me == n ? -1 : (me == 0 ? *op.sender : op.receivers[me - 1]);
    out.next = me == n ? op.receivers[0] : (me + 1 < n ? op.receivers[me + 1] : -1);
    out.next_remote = out.next >= 0 && cluster_.host_of(out.next) != cluster_.host_of(rank_);
    if (out.next >= 0)
      out.window = transport_.rendezvous_sends()
                       ? kChainMaxWindow
                       : chain_window(out.chunk, chain_hop_bandwidth(cluster_, rank_, out.next),
                                      cluster_.latency);
    if (bcast) {
      std::vector<int> members{*op.sender};
      members.insert(members.end(), op.receivers.begin(), op.receivers.end());
      out.members = members;
      out.group = transport_.make_group(members, out.tag);
    }
  }
  ops_.push_back(std::move(out));
}

void TransportPlan::run_copies(const std::vector<LocalCopy>& copies) const {
  for (const LocalCopy& c : copies)
    if (copies_itself_)
      transport_.copy(c.copy, resolve(c.from), resolve(c.to));
    else
      run_strided_copy(c.copy, resolve(c.from), resolve(c.to));
}

void TransportPlan::start_op(int i) {
  RankOp& op = ops_[i];
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  run_copies(op.before);
  std::byte* message = op.action == Action::local ? nullptr : resolve(op.message);
  const uint64_t collective = RequestOwner{i, RequestOwner::kCollective}.cookie();
  switch (op.action) {
    case Action::chain:
      pump_chain(i);
      break;
    case Action::bcast:
      progress_[i].pending +=
          transport_.post_group_broadcast(op.group, message, op.bytes, collective);
      break;
    case Action::allgather:
      progress_[i].pending +=
          transport_.post_group_allgather(op.group, message, op.counts, op.displs, collective);
      break;
    case Action::p2p_allgather:
      post_p2p_allgather(i, message);
      break;
    case Action::local:
      break;
  }
  finish_if_done(i);
}

// Every member sends its part to every other member and receives theirs. With each pair the lower
// device sends first and the higher one receives first, so that a transport that matches
// messages by order (NCCL) pairs them up.
void TransportPlan::post_p2p_allgather(int i, std::byte* message) {
  const RankOp& op = ops_[i];
  const uint64_t cookie = RequestOwner{i, RequestOwner::kCollective}.cookie();
  const int n = static_cast<int>(op.members.size());
  const int me =
      static_cast<int>(std::find(op.members.begin(), op.members.end(), rank_) - op.members.begin());
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    const int peer = op.members[j];
    const auto send = [&] {
      if (op.counts[me] == 0) return;
      transport_.post_send(peer, op.tag, message + op.displs[me], op.counts[me], false, cookie);
      ++progress_[i].pending;
    };
    const auto receive = [&] {
      if (op.counts[j] == 0) return;
      transport_.post_receive(peer, op.tag, message + op.displs[j], op.counts[j], cookie);
      ++progress_[i].pending;
    };
    if (rank_ < peer) {
      send();
      receive();
    } else {
      receive();
      send();
    }
  }
}

// Posts what a chain hop may post now: the receives of the next chunks, up to kChainMaxWindow
// ahead of those received, and the sends of the chunks it has, in order (the next hop's receives
// match them in order), at most its window at once and, until the next hop has started the op,
// none past the first window. A relay forwards each
// chunk as soon as it has it: the chain is pipelined.
void TransportPlan::pump_chain(int i) {
  const RankOp& op = ops_[i];
  Progress& p = progress_[i];
  std::byte* message = resolve(op.message);
  while (op.prev >= 0 && p.next_receive < op.chunks() &&
         p.next_receive - p.received < kChainMaxWindow) {
    const int c = p.next_receive++;
    transport_.post_receive(op.prev, op.tag, message + c * op.chunk, op.chunk_count(c),
                            RequestOwner{i, c}.cookie());
  }
  while (op.next >= 0 && p.next_send < op.chunks() && p.sends_in_flight < op.window &&
         (p.next_hop_started || p.next_send < op.window) &&
         (op.prev < 0 || chunk_received_[chunk_begin_[i] + p.next_send])) {
    const int c = p.next_send++;
    // The first chunk waits for the next hop to start the op (below: senders wait for their
    // receivers). The last chunk of a hop to another host is a synchronous send too, so the hop
    // ends when the next device has matched it, as an op of the plan ends when its bytes have
    // arrived (docs/executors.md): an eager send completes once its bytes are in the socket, so
    // without it a rank's next op started at once and a host's ranks put every flow of the plan
    // on its NIC together (send_recv's 16 flows between two hosts of 4 devices lost ~1000
    // packets per run at the emulated NIC's queue, docs/pipeline.md). One handshake per hop, not
    // per chunk.
    const bool first = c == 0;
    const bool ends_the_hop = op.next_remote && c == op.chunks() - 1;
    transport_.post_send(
        op.next, op.tag, message + c * op.chunk, op.chunk_count(c), first || ends_the_hop,
        RequestOwner{i, first ? RequestOwner::kFirstSend : RequestOwner::kSend}.cookie());
    ++p.sends_in_flight;
  }
}

void TransportPlan::on_complete(RequestOwner owner) {
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

void TransportPlan::finish_if_done(int i) {
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

void TransportPlan::check_deadline(const Deadline& deadline) const {
  if (!deadline.passed()) return;
  // The first op of this rank, in plan order, that is not finished: what everything else waits
  // for.
  std::string waiting = "its earlier ops";
  for (size_t i = 0; i < ops_.size(); ++i) {
    const RankOp& op = ops_[i];
    const Progress& p = progress_[i];
    if (p.finished) continue;
    if (p.deps_left > 0)
      waiting = fmt::format("the ops op {} of the plan waits for", op.index);
    else if (op.action == Action::chain && op.prev >= 0 && p.received < op.chunks())
      waiting = fmt::format("device {} to send op {} of the plan (chunk {} of {})", op.prev,
                            op.index, p.received + 1, op.chunks());
    else if (op.action == Action::chain)
      waiting = fmt::format("device {} to receive op {} of the plan (chunk {} of {})", op.next,
                            op.index, p.sent + 1, op.chunks());
    else
      waiting = fmt::format("devices {} in op {} of the plan (an allgather or broadcast)",
                            fmt::join(op.members, ","), op.index);
    break;
  }
  deadline.check(rank_, waiting);
}

void TransportPlan::execute() {
  const Deadline deadline("run", runs_, executor_.options().timeout_s);
  try {
    play(deadline);
  } catch (const Timeout&) {
    throw;
  } catch (const Error& e) {  // the transport's: a peer's connection closed
    throw Error(fmt::format("{} failed on device {}: {}", deadline.phase(), rank_, e.what()));
  }
}

void TransportPlan::play(const Deadline& deadline) {
  const int ops = static_cast<int>(ops_.size());
  for (int i = 0; i < ops; ++i) progress_[i] = {.deps_left = initial_deps_[i]};
  std::fill(chunk_received_.begin(), chunk_received_.end(), uint8_t{0});
  ready_.clear();
  for (int i = 0; i < ops; ++i)
    if (initial_deps_[i] == 0) ready_.push_back(i);
  finished_ops_ = in_flight_ = peak_in_flight_ = 0;
  Backoff backoff;
  while (finished_ops_ < ops) {
    bool progressed = !ready_.empty();
    // Starting an op may finish it (a local copy) and make more ready.
    for (size_t next = 0; next < ready_.size(); ++next) start_op(ready_[next]);
    ready_.clear();
    if (in_flight_ > 0) {
      completed_.clear();
      transport_.poll(completed_);
      // Handlers may post new requests; their completions come with a later poll.
      for (const uint64_t cookie : completed_) on_complete(RequestOwner::of(cookie));
      progressed = progressed || !completed_.empty();
    }
    if (progressed) {
      backoff.progressed();
    } else {
      check_deadline(deadline);
      backoff.idle();
    }
  }
}

void TransportPlan::check_not_failed() const {
  if (failed_)
    throw Error(
        "an earlier run of this plan failed (a peer died or a timeout passed): expected a new "
        "group and executor, not another run");
}

void TransportPlan::start(std::span<const DeviceBuffers> buffers) {
  // Claimed before anything else, so that two threads starting at once cannot both run.
  if (running_.exchange(true))
    throw InvalidArgument("start() while the previous run is in flight: wait() first");
  done_.store(false);
  try {
    check_not_failed();
    if (tiles_.bind(buffers)) compile_ops();
    error_ = nullptr;
    ++runs_;
    started_ = Clock::now();
    executor_.submit(this);
  } catch (...) {
    running_ = false;
    throw;
  }
}

RunTiming TransportPlan::wait() {
  if (!running_) throw InvalidArgument("wait() without a run in flight: start() first");
  done_.wait(false);
  running_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return {std::chrono::duration<double>(finished_ - started_).count(), peak_in_flight_};
}

RunTiming TransportPlan::run(std::span<const DeviceBuffers> buffers) {
  if (running_) throw InvalidArgument("run() while a run is in flight: wait() first");
  check_not_failed();
  if (tiles_.bind(buffers)) compile_ops();
  executor_.set_busy(true);
  ++runs_;
  started_ = Clock::now();
  try {
    execute();
  } catch (...) {
    failed_ = true;
    executor_.set_busy(false);
    throw;
  }
  finished_ = Clock::now();
  executor_.set_busy(false);
  return {std::chrono::duration<double>(finished_ - started_).count(), peak_in_flight_};
}

}  // namespace

std::unique_ptr<Executor> make_transport_executor(std::shared_ptr<Transport> transport,
                                                  const TransportOptions& options) {
  return std::make_unique<TransportExecutor>(std::move(transport), options);
}

}  // namespace meshcast
