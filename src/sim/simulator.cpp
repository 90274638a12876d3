#include "meshcast/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <queue>

#include "meshcast/dense_index.h"
#include "meshcast/error.h"
#include "meshcast/plan/chain_window.h"
#include "meshcast/plan/dependencies.h"
#include "meshcast/sim/fair_share.h"
#include "network.h"

namespace meshcast {
namespace {

using sim::Network;

// One link an op's flow crosses: `weight` times (a chain through the same link twice moves its
// data twice) and `bytes` of real data over the whole op.
struct Usage {
  int link = 0;
  double weight = 0;
  int64_t bytes = 0;
};

// Everything about one op that does not change while it runs.
struct OpModel {
  std::vector<Usage> usages;  // empty: the op moves nothing over links
  double latency_s = 0;       // paid before data moves: per hop or ring step, and a chain's fill
  double work_bytes = 0;      // bytes the flow moves at its (shared) rate
  double max_rate = std::numeric_limits<double>::infinity();  // a chain's message rate, see below
};

void check_device(const Op& op, DeviceId d, const Cluster& cluster) {
  if (d < 0 || d >= cluster.devices())
    throw InvalidArgument(fmt::format("op {}: device {} is outside the cluster of {} devices",
                                      op.id, d, cluster.devices()));
}

void check_shape(const Op& op) {
  const auto fail = [&](std::string_view expected) {
    throw InvalidArgument(fmt::format("op {} ({}): {} sender and {} receivers, expected {}", op.id,
                                      to_string(op.kind), op.sender ? "a" : "no",
                                      op.receivers.size(), expected));
  };
  if (op.bytes < 0)
    throw InvalidArgument(fmt::format("op {}: bad byte count {}: expected >= 0", op.id, op.bytes));
  switch (op.kind) {
    case OpKind::send:
      if (!op.sender || op.receivers.size() != 1) fail("a sender and one receiver");
      break;
    case OpKind::copy:
      if (!op.sender || op.receivers.size() != 1) fail("a sender and one receiver");
      if (*op.sender != op.receivers[0])
        throw InvalidArgument(fmt::format("op {} (copy): sender {} differs from receiver {}", op.id,
                                          *op.sender, op.receivers[0]));
      break;
    case OpKind::broadcast:
      if (!op.sender || op.receivers.empty()) fail("a sender and at least one receiver");
      break;
    case OpKind::allgather:
      if (op.receivers.empty()) fail("at least one receiver");
      break;
  }
  const auto n = static_cast<int>(op.receivers.size());
  for (const Piece& p : op.pieces)
    if (!holder_fits(op, p))
      throw InvalidArgument(
          fmt::format("op {} ({}): piece holder {}: expected -1, or a receiver index 0..{} of an "
                      "allgather",
                      op.id, to_string(op.kind), p.holder, n - 1));
}

// Builds the flow of one op (docs/simulator.md): a send is one hop; a broadcast a chain
// sender -> r0 -> r1 ... moving at its slowest hop's rate after the pipeline fill; an allgather
// a ring r0 -> r1 -> ... -> r0 of n-1 steps, each moving the largest part.
// Fills `m` (whose vectors keep their memory: a caller that models op after op reuses one).
void model_op(const Op& op, const Network& net, const Cluster& cluster, const Batch& batch,
              OpModel& m) {
  check_shape(op);
  m.usages.clear();
  m.latency_s = 0;
  m.work_bytes = 0;
  m.max_rate = std::numeric_limits<double>::infinity();
  if (op.sender) check_device(op, *op.sender, cluster);
  for (DeviceId r : op.receivers) check_device(op, r, cluster);

  // Each hop's links are listed as it is added, as keys (link << 32 | hop) that sort by link, so
  // that repeated links merge into one usage: integers sort faster than usages, and a chain
  // through hundreds of devices has a thousand link uses, in each of the thousands of ops the
  // planner prices. The lists are kept from op to op (one set per thread): allocating them
  // afresh for each cost as much again.
  struct Scratch {
    std::vector<double> hop_capacities;  // per hop: its slowest link's (infinite: no link)
    std::vector<int64_t> hop_bytes;
    std::vector<uint64_t> uses;
    std::vector<int> route;
  };
  thread_local Scratch scratch;
  std::vector<double>& hop_capacities = scratch.hop_capacities;
  std::vector<int64_t>& hop_bytes = scratch.hop_bytes;
  std::vector<uint64_t>& uses = scratch.uses;
  std::vector<int>& route = scratch.route;
  hop_capacities.clear();
  hop_bytes.clear();
  uses.clear();
  const auto add_hop = [&](DeviceId from, DeviceId to, int64_t bytes) {
    route.clear();
    net.append_route(from, to, route);
    double hop_capacity = std::numeric_limits<double>::infinity();
    for (int link : route) {
      uses.push_back(static_cast<uint64_t>(link) << 32 | hop_bytes.size());
      hop_capacity = std::min(hop_capacity, net.capacity(link));
    }
    hop_capacities.push_back(hop_capacity);
    hop_bytes.push_back(bytes);
  };
  const double bytes = static_cast<double>(op.bytes);
  const int n = static_cast<int>(op.receivers.size());
  switch (op.kind) {
    case OpKind::copy:
      m.latency_s = cluster.latency;
      break;
    case OpKind::send:
      add_hop(*op.sender, op.receivers[0], op.bytes);
      m.latency_s = cluster.latency;
      m.work_bytes = bytes;
      break;
    case OpKind::broadcast: {
      DeviceId from = *op.sender;
      for (DeviceId r : op.receivers) {
        add_hop(from, r, op.bytes);
        from = r;
      }
      m.work_bytes = bytes;  // latency and rate limit: chain_pipeline, below
      break;
    }
    case OpKind::allgather: {
      if (n == 1) break;
      int64_t largest = 0;
      for (int i = 0; i < n; ++i) {
        // Device i forwards every part but its successor's own.
        const int64_t next_part = allgather_part_bytes(op, batch, (i + 1) % n);
        largest = std::max(largest, allgather_part_bytes(op, batch, i));
        add_hop(op.receivers[i], op.receivers[(i + 1) % n], op.bytes - next_part);
      }
      m.latency_s = (n - 1) * cluster.latency;
      m.work_bytes = static_cast<double>(n - 1) * static_cast<double>(largest);
      break;
    }
  }
  if (op.kind == OpKind::broadcast) {
    const ChainPipeline chain =
        chain_pipeline(op.bytes, op.chunk_bytes, hop_capacities, cluster.latency);
    m.latency_s = chain.delay_s;
    m.max_rate = chain.max_rate;
  }
  // What the executors do with a message the plan does not chunk (a send, or a broadcast without
  // a chunk, across hosts): chunks of kCrossHostChunk, a window of them per round trip.
  if (op.kind == OpKind::send || op.kind == OpKind::broadcast)
    m.max_rate = std::min(m.max_rate, chain_window_limit(op.bytes, chain_chunk(op, cluster),
                                                         hop_capacities, cluster.latency));
  // One usage per link, in link order, a repeated link's weight and bytes summed.
  std::sort(uses.begin(), uses.end());
  m.usages.reserve(uses.size());
  for (const uint64_t use : uses) {
    const auto link = static_cast<int>(use >> 32);
    const int64_t use_bytes = hop_bytes[use & 0xffffffffU];
    if (!m.usages.empty() && m.usages.back().link == link) {
      m.usages.back().weight += 1;
      m.usages.back().bytes += use_bytes;
    } else {
      m.usages.push_back({link, 1, use_bytes});
    }
  }
  if (m.work_bytes <= 0) m.usages.clear();
}

// The event-driven player: ops start when the ops they depend on have ended (op_dependencies:
// full-duplex devices), and flows share links max-min fairly (sim::FairShare).
class Engine {
 public:
  // Plays `ops` of `batch` on `cluster`; with `report`, also keeps what SimResult reports per link.
  Engine(const Batch& batch, const std::vector<Op>& ops, const Cluster& cluster,
         const SimOptions& options, bool report)
      : ops_(ops), net_(cluster), options_(options), report_(report) {
    const size_t n = ops.size();
    const auto& tensors = batch.tensors;
    // Every op's flow over its links, op after op (sim::FairShare's flat arrays: no allocation
    // per op).
    std::vector<sim::LinkUse> uses;
    std::vector<size_t> first{0};
    std::vector<double> limits;
    first.reserve(n + 1);
    limits.reserve(n);
    latency_s_.reserve(n);
    work_bytes_.reserve(n);
    OpModel m;  // its usages' memory kept from op to op
    for (const Op& op : ops) {
      for (const Piece& piece : op.pieces)
        if (piece.tensor < 0 || piece.tensor >= static_cast<int>(tensors.size()))
          throw InvalidArgument(
              fmt::format("op {}: tensor {} does not exist: the batch has {} tensors", op.id,
                          piece.tensor, tensors.size()));
      model_op(op, net_, cluster, batch, m);
      for (const Usage& u : m.usages) {
        uses.push_back({u.link, u.weight});
        if (report_) use_bytes_.push_back(u.bytes);
      }
      first.push_back(uses.size());
      limits.push_back(m.max_rate);
      latency_s_.push_back(m.latency_s);
      work_bytes_.push_back(m.work_bytes);
      steps_ += 1 + static_cast<int64_t>(m.usages.size());
    }
    state_.resize(n);
    // Each op waits for its dependencies to end; dependents_ lists, per op, the ops waiting on it.
    const auto deps = op_dependencies(batch, ops);
    dependents_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      state_[i].waiting_for = static_cast<int>(deps[i].size());
      for (int d : deps[i]) dependents_[d].push_back(static_cast<int>(i));
      steps_ += static_cast<int64_t>(deps[i].size());
    }
    // Tables are indexed by the links the ops use, not by all of the cluster's.
    std::vector<int64_t> ids;
    ids.reserve(uses.size());
    for (const sim::LinkUse& u : uses) ids.push_back(u.link);
    links_ = DenseIndex(std::move(ids));
    // The map is increasing, so each op's uses stay sorted by link.
    for (sim::LinkUse& u : uses) u.link = links_.index_of(u.link);
    const int links = links_.size();
    busy_since_.assign(links, 0);
    std::vector<double> capacity(links);
    for (int l = 0; l < links; ++l) capacity[l] = net_.capacity(static_cast<int>(links_.id_at(l)));
    fair_ =
        sim::FairShare(std::move(capacity), std::move(uses), std::move(first), std::move(limits));
    if (report_) stats_.resize(links);
    last_rate_.assign(links, 0);
  }

  SimResult run() {
    for (int i = 0; i < static_cast<int>(ops_.size()); ++i)
      if (state_[i].waiting_for == 0) start(i);
    drain();
    recompute();
    while (!events_.empty()) {
      now_ = events_.top().time;
      ++result_.events;
      ++steps_;
      const double horizon = now_ + 1e-12 * now_;  // equal times up to rounding are one step
      while (!events_.empty() && events_.top().time <= horizon) {
        const Event e = events_.top();
        events_.pop();
        if (e.kind == Event::latency_done) {
          activate(e.op);
        } else if (state_[e.op].version == e.version && state_[e.op].active) {
          deactivate(e.op);
          done_.push_back(e.op);
        }
        drain();
      }
      recompute();
    }
    result_.time_s = 0;
    if (report_) result_.ops.reserve(ops_.size());
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (!state_[i].finished) throw Error(fmt::format("simulator: op {} never ran", ops_[i].id));
      if (report_) result_.ops.push_back({ops_[i].id, state_[i].start_s, state_[i].end_s});
      result_.time_s = std::max(result_.time_s, state_[i].end_s);
    }
    if (report_) {
      // Every link of the cluster, those no op used idle.
      result_.links.resize(net_.links());
      for (int l = 0; l < net_.links(); ++l)
        result_.links[l] = LinkStats{
            .name = net_.name(l), .host = net_.host_of_nic(l), .bandwidth = net_.capacity(l)};
      for (int l = 0; l < links_.size(); ++l) {
        LinkStats& to = result_.links[links_.id_at(l)];
        to.busy_s = stats_[l].busy_s;
        to.bytes = stats_[l].bytes;
      }
    }
    return std::move(result_);
  }

  // Elementary steps run() took: ops and flow-link usages set up, flows and links rated.
  int64_t steps() const { return steps_; }

 private:
  struct OpState {
    int waiting_for = 0;  // dependencies that have not ended yet
    bool active = false;
    bool finished = false;
    double start_s = 0, end_s = 0;
    double remaining = 0, rate = 0, last = 0;  // bytes left, bytes/s since `last`
    int version = 0;                           // bumps when the rate changes
  };
  struct Event {
    enum Kind { latency_done, flow_done };
    double time;
    int op;
    Kind kind;
    int version;
    bool operator>(const Event& o) const { return time > o.time; }
  };

  // Op i's dependencies have all ended.
  void start(int i) {
    OpState& s = state_[i];
    s.start_s = now_;
    if (latency_s_[i] > 0)
      events_.push({now_ + latency_s_[i], i, Event::latency_done, 0});
    else
      activate(i);
  }

  void activate(int i) {
    if (fair_.uses(i).empty()) {
      done_.push_back(i);
      return;
    }
    OpState& s = state_[i];
    s.active = true;
    s.remaining = work_bytes_[i];
    s.rate = 0;
    s.last = now_;
    ++result_.flows;
    if (report_)
      for (const sim::LinkUse& u : fair_.uses(i))
        if (fair_.flows_on(u.link).empty()) busy_since_[u.link] = now_;
    fair_.start(i);
  }

  void deactivate(int i) {
    state_[i].active = false;
    fair_.end(i);
    if (report_) {
      const int64_t* bytes = use_bytes_.data() + fair_.first_use(i);
      for (const sim::LinkUse& u : fair_.uses(i)) {
        if (fair_.flows_on(u.link).empty()) stats_[u.link].busy_s += now_ - busy_since_[u.link];
        stats_[u.link].bytes += *bytes++;
      }
    }
  }

  // Finishes the ops in done_, and everything that becomes ready and finishes at once.
  void drain() {
    while (!done_.empty()) {
      const int i = done_.back();
      done_.pop_back();
      OpState& s = state_[i];
      s.finished = true;
      s.end_s = now_;
      for (int j : dependents_[i])
        if (--state_[j].waiting_for == 0) start(j);
    }
  }

  // Rates the flows a start or end reached again, each flow's bytes moved so far counted first.
  void recompute() {
    fair_.fill();
    steps_ += static_cast<int64_t>(fair_.filled_links().size());
    for (int f : fair_.filled()) {
      steps_ += static_cast<int64_t>(fair_.uses(f).size());
      OpState& s = state_[f];
      s.remaining = std::max(0.0, s.remaining - s.rate * (now_ - s.last));
      s.last = now_;
      set_rate(f, fair_.rate(f));
    }
    if (options_.record_link_rates)
      for (int l : fair_.filled_links()) {
        double rate = 0;
        for (int f : fair_.flows_on(l)) rate += state_[f].rate * fair_.weight_on(f, l);
        if (rate != last_rate_[l])
          result_.link_rates.push_back({static_cast<int>(links_.id_at(l)), now_, rate});
        last_rate_[l] = rate;
      }
  }

  void set_rate(int f, double rate) {
    OpState& s = state_[f];
    if (rate == s.rate) return;  // its pending finish event stays right
    s.rate = rate;
    ++s.version;
    events_.push({now_ + s.remaining / rate, f, Event::flow_done, s.version});
  }

  const std::vector<Op>& ops_;
  Network net_;
  SimOptions options_;
  bool report_;
  int64_t steps_ = 0;
  std::vector<double> latency_s_;   // per op: paid before its data moves
  std::vector<double> work_bytes_;  // per op: what its flow moves at its shared rate
  std::vector<int64_t> use_bytes_;  // with report_: per use of a link (FairShare's order), bytes
  std::vector<OpState> state_;
  std::vector<std::vector<int>> dependents_;  // per op, the ops that wait for it
  DenseIndex links_;                          // the links the ops use
  sim::FairShare fair_;                       // their flows' rates, op i's flow i
  std::vector<double> busy_since_;
  std::vector<LinkStats> stats_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<int> done_;
  double now_ = 0;
  SimResult result_;
  std::vector<double> last_rate_;  // per link, for options_.record_link_rates
};

}  // namespace

ChainPipeline chain_pipeline(int64_t bytes, int64_t chunk,
                             const std::vector<double>& hop_capacities, double latency) {
  const int64_t message = chunk > 0 ? std::min(chunk, bytes) : bytes;
  // The first chunk crosses every hop at that hop's own speed; the rest stream at the chain's
  // (shared) rate behind the slowest hop. So the fill is each other hop's chunk time, not
  // (hops-1) chunks at the slowest rate: fast intra-host hops of a chain add little.
  double fill_s = 0, slowest = 0;
  for (double capacity : hop_capacities) {
    const double t = static_cast<double>(message) / capacity;
    fill_s += t;
    slowest = std::max(slowest, t);
  }
  ChainPipeline chain{
      .delay_s = static_cast<double>(hop_capacities.size()) * latency + fill_s - slowest,
      .max_rate = std::numeric_limits<double>::infinity()};
  // Each chunk is one message, and each hop keeps its window of them in flight (the executors'
  // rule): a window per round trip, at least the hop's rate when the window covers its bandwidth x
  // round trip, less where it cannot.
  chain.max_rate = chain_window_limit(bytes, message, hop_capacities, latency);
  return chain;
}

double chain_window_limit(int64_t bytes, int64_t chunk, const std::vector<double>& hop_capacities,
                          double latency) {
  if (hop_capacities.empty()) return std::numeric_limits<double>::infinity();
  // A hop's window never shrinks as its capacity grows, nor its rate as its window grows, so the
  // slowest hop's rate is the lowest: one window for the chain, not one per hop (a chain through
  // a model's serving replicas has hundreds of hops, and the planner prices it a dozen times).
  const double slowest = *std::min_element(hop_capacities.begin(), hop_capacities.end());
  return chain_window_rate(bytes, chunk, chain_window(chunk, slowest, latency), latency);
}

SimResult simulate(const Plan& plan) {
  return simulate(plan, plan.batch.cluster);
}

SimResult simulate(const Plan& plan, const Cluster& cluster, const SimOptions& options) {
  cluster.validate();
  Engine engine(plan.batch, plan.ops, cluster, options, /*report=*/true);
  return engine.run();
}

SimTime simulate_time(const Batch& batch, const std::vector<Op>& ops) {
  Engine engine(batch, ops, batch.cluster, {}, /*report=*/false);
  const double time = engine.run().time_s;
  return {time, engine.steps()};
}

OpTimer::OpTimer(const Batch& batch)
    : batch_(&batch), net_(std::make_unique<sim::Network>(batch.cluster)) {}

OpTimer::~OpTimer() = default;

double OpTimer::time_of(const Op& op) const {
  thread_local OpModel m;  // its usages' memory kept from op to op
  model_op(op, *net_, batch_->cluster, *batch_, m);
  double rate = m.max_rate;
  for (const Usage& u : m.usages) rate = std::min(rate, net_->capacity(u.link) / u.weight);
  return m.usages.empty() ? m.latency_s : m.latency_s + m.work_bytes / rate;
}

std::vector<const LinkStats*> busiest_links(const SimResult& sim, int top) {
  std::vector<const LinkStats*> links;
  for (const auto& l : sim.links)
    if (l.bytes > 0) links.push_back(&l);
  const auto load = [](const LinkStats* l) { return static_cast<double>(l->bytes) / l->bandwidth; };
  const auto n = std::min<size_t>(links.size(), std::max(top, 0));
  std::partial_sort(links.begin(), links.begin() + n, links.end(),
                    [&](const LinkStats* a, const LinkStats* b) {
                      return load(a) != load(b) ? load(a) > load(b) : a->name < b->name;
                    });
  links.resize(n);
  return links;
}

}  // namespace meshcast
