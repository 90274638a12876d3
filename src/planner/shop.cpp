#include "shop.h"

#include "meshcast/dense_index.h"
#include "meshcast/sim/fair_share.h"
#include "source_tiles.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <tuple>
#include <utility>

namespace meshcast::detail {
namespace {

// A slice's bytes by device (or NIC index while levelled by bytes), in the order they were added.
using Shares = std::vector<std::pair<int, double>>;

// One slice crossing hosts: from `holders` (the chosen host's devices that hold it, or, laid by
// ports from any host, every device that holds it) to `receivers`, all on one host.
struct Flow {
  const Job* job = nullptr;
  const Transfer* transfer = nullptr;
  std::vector<DeviceId> holders = {};
  std::vector<DeviceId> candidates = {};  // the devices of every host that hold it
  std::vector<DeviceId> receivers = {};
  // Devices that receive the slice by another transfer: none may stage or forward it, as it would
  // take those elements twice.
  std::vector<DeviceId> barred = {};
  Shares out = {};  // by the device of the holders' host that sends it over its NIC
  Shares in = {};   // by the device of the receivers' host it enters at
  double bytes() const { return static_cast<double>(transfer->bytes); }
  int home(const Cluster& c) const { return c.host_of(receivers[0]); }
  bool receives(DeviceId d) const {
    return std::find(receivers.begin(), receivers.end(), d) != receivers.end();
  }
  // The receiver on NIC `nic` of the receivers' host, if any.
  std::optional<DeviceId> receiver_on(const Cluster& c, int nic) const {
    for (DeviceId r : receivers)
      if (c.nic_of(r) == nic) return r;
    return std::nullopt;
  }
  // How many receivers a piece entering at `d` is forwarded to over the device link.
  double forwards(DeviceId d) const {
    return static_cast<double>(receivers.size()) - (receives(d) ? 1 : 0);
  }
  bool holds(DeviceId d) const {
    return std::find(holders.begin(), holders.end(), d) != holders.end();
  }
  bool bars(DeviceId d) const { return std::find(barred.begin(), barred.end(), d) != barred.end(); }
  // The holders laid to hand the slice to stages (Feeds::least_busy_holder), by stage.
  std::map<DeviceId, DeviceId> fed_by = {};
  // The holder that hands the slice to a stage `d` (or sends it, where `d` holds it): the one laid
  // to, else the first of `holders` on `d`'s host.
  DeviceId holder_beside(const Cluster& c, DeviceId d) const {
    if (const auto it = fed_by.find(d); it != fed_by.end()) return it->second;
    return *std::find_if(holders.begin(), holders.end(),
                         [&](DeviceId h) { return c.host_of(h) == c.host_of(d); });
  }
  // The holder that hands the slice to stage `d`: the one laid to, else by `feeds` the first on
  // `d`'s host or the one there whose port (`port`: seconds taken, by device) is least busy.
  DeviceId feeder(const Cluster& c, DeviceId d, const std::vector<double>& port,
                  Feeds feeds) const {
    if (feeds == Feeds::first_holder || fed_by.contains(d)) return holder_beside(c, d);
    std::optional<DeviceId> least;
    for (DeviceId h : holders)
      if (c.host_of(h) == c.host_of(d) && (!least || port[h] < port[*least])) least = h;
    return *least;
  }
};

void add_share(Shares& shares, int to, double bytes) {
  for (auto& [d, b] : shares)
    if (d == to) {
      b += bytes;
      return;
    }
  shares.emplace_back(to, bytes);
}

// The seconds `bytes` take on one NIC of device `d`'s host.
double nic_seconds(const Cluster& c, DeviceId d, double bytes) {
  return bytes / c.single_nic_bandwidth_of(c.host_of(d));
}

// Each NIC's id across the cluster: host * (the most NICs of a host) + its index on its host.
class NicIds {
 public:
  explicit NicIds(const Cluster& c) : c_(c) {
    for (int h = 0; h < c.hosts; ++h) stride_ = std::max(stride_, c.nics_of(h));
  }
  int operator()(DeviceId d) const { return c_.host_of(d) * stride_ + c_.nic_of(d); }

 private:
  const Cluster& c_;
  int stride_ = 1;
};

// The NICs of `host` that have devices: only they carry traffic.
int used_nics(const Cluster& c, int host) {
  return std::min(c.nics_of(host), c.devices_per_host);
}

// The largest flow from a source to a sink through edges of real capacities (Dinic's: shortest
// augmenting paths, layer by layer), for the small graphs of a shop's slices and hosts.
class MaxFlow {
 public:
  explicit MaxFlow(int nodes) : out_(nodes), level_(nodes), next_(nodes) {}
  // The new edge's index.
  int add(int from, int to, double capacity) {
    out_[from].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, capacity});
    out_[to].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0});
    return static_cast<int>(edges_.size()) - 2;
  }
  double run(int source, int sink) {
    double total = 0;
    while (layer(source, sink)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (const double pushed = push(source, sink, kInfinite)) total += pushed;
    }
    return total;
  }
  double flow(int edge) const { return edges_[edge ^ 1].capacity; }
  // Per node, whether more could still flow from it to `sink` through edges with more than
  // `least` left.
  std::vector<bool> reaching(int sink, double least) const {
    std::vector<bool> reaches(out_.size(), false);
    std::deque<int> queue = {sink};
    reaches[sink] = true;
    while (!queue.empty()) {
      const int n = queue.front();
      queue.pop_front();
      for (int e : out_[n])  // e ^ 1 runs from edges_[e].to into n
        if (const int from = edges_[e].to; !reaches[from] && edges_[e ^ 1].capacity > least) {
          reaches[from] = true;
          queue.push_back(from);
        }
    }
    return reaches;
  }

 private:
  static constexpr double kInfinite = std::numeric_limits<double>::infinity();
  // Capacities left below this are taken as none: bytes, so far below a byte.
  static constexpr double kNone = 1e-6;
  struct Edge {
    int to;
    double capacity;  // what is left of it
  };
  bool layer(int source, int sink) {
    std::fill(level_.begin(), level_.end(), -1);
    std::deque<int> queue = {source};
    level_[source] = 0;
    while (!queue.empty()) {
      const int n = queue.front();
      queue.pop_front();
      for (int e : out_[n])
        if (edges_[e].capacity > kNone && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[n] + 1;
          queue.push_back(edges_[e].to);
        }
    }
    return level_[sink] >= 0;
  }
  double push(int n, int sink, double most) {
    if (n == sink) return most;
    for (; next_[n] < std::ssize(out_[n]); ++next_[n]) {
      const int e = out_[n][next_[n]];
      if (edges_[e].capacity <= kNone || level_[edges_[e].to] != level_[n] + 1) continue;
      if (const double pushed = push(edges_[e].to, sink, std::min(most, edges_[e].capacity));
          pushed > 0) {
        edges_[e].capacity -= pushed;
        edges_[e ^ 1].capacity += pushed;
        return pushed;
      }
    }
    return 0;
  }
  std::vector<Edge> edges_;
  std::vector<std::vector<int>> out_;
  std::vector<int> level_;
  std::vector<std::ptrdiff_t> next_;
};

// Sources::levelled_hosts: the flows cut between the hosts that hold their slices so that the
// hosts' NICs send for the least time, lexicographically: first the busiest host's, then with
// the hosts that cannot send less settled, the busiest of the others', and so on (where every
// host that feeds a receiver sends at the bound, its sends have no room to take turns). Each level
// is a bisection on the time, each of its steps a max flow from the slices to the hosts, a host
// taking at most the time times its NICs' rate; the hosts that cannot send less are those from
// which no flow can move to a host with time left. A flow's part on a host is cut from its slice
// along the longest dimension, and parts under kLeastHostShare of a slice are left to the others.
// Returns false, leaving `flows` as they were, where the busiest host saves under kLeastHostGain.
constexpr double kLeastHostShare = 0.01;
constexpr double kLeastHostGain = 0.001;
constexpr int kBisections = 30;
bool level_hosts(const Batch& batch, std::vector<Flow>& flows, std::deque<Transfer>& parts) {
  const Cluster& c = batch.cluster;
  const auto rate = [&](int h) { return used_nics(c, h) * c.single_nic_bandwidth_of(h); };
  double total = 0, chosen = 0;  // the bytes, and the busiest host's time as chosen
  std::vector<double> out(c.hosts, 0);
  for (const Flow& f : flows) {
    total += f.bytes();
    out[c.host_of(f.holders[0])] += f.bytes();
  }
  for (int h = 0; h < c.hosts; ++h) chosen = std::max(chosen, out[h] / rate(h));
  // Nodes: 0 the source, 1 the sink, one per flow from 2, then one per host.
  const int first_host = 2 + static_cast<int>(flows.size());
  std::vector<std::vector<std::pair<int, int>>> edges(flows.size());  // per flow: (host, edge)
  std::vector<double> settled(c.hosts, -1);  // per host, its time once settled
  const auto solve = [&](double time) {
    MaxFlow graph(first_host + c.hosts);
    for (size_t i = 0; i < flows.size(); ++i) {
      graph.add(0, 2 + static_cast<int>(i), flows[i].bytes());
      edges[i].clear();
      for (int h : hosts_of(flows[i].candidates, c))
        edges[i].emplace_back(h, graph.add(2 + static_cast<int>(i), first_host + h, total));
    }
    for (int h = 0; h < c.hosts; ++h)
      graph.add(first_host + h, 1, (settled[h] >= 0 ? settled[h] : time) * rate(h));
    const bool fits = graph.run(0, 1) >= total * (1 - 1e-9);
    return std::pair{fits, std::move(graph)};
  };
  double high = chosen * (1 - kLeastHostGain);
  if (!solve(high).first) return false;
  std::vector<bool> sending(c.hosts, false);
  for (const Flow& f : flows)
    for (DeviceId d : f.candidates) sending[c.host_of(d)] = true;
  // The last level's flow at its time, which settling its hosts at that time leaves as it is.
  std::optional<MaxFlow> graph;
  for (bool unsettled = true; unsettled;) {
    double low = 0;
    for (int step = 0; step < kBisections; ++step) {
      const double mid = (low + high) / 2;
      (solve(mid).first ? high : low) = mid;
    }
    graph = solve(high).second;
    const std::vector<bool> reaches = graph->reaching(1, 1e-9 * total);
    unsettled = false;
    for (int h = 0; h < c.hosts; ++h) {
      if (!sending[h] || settled[h] >= 0) continue;
      if (!reaches[first_host + h])
        settled[h] = high;
      else
        unsettled = true;
    }
  }
  std::vector<Flow> levelled;
  for (size_t i = 0; i < flows.size(); ++i) {
    const Flow& f = flows[i];
    std::vector<int> hosts;
    std::vector<double> weights;
    for (const auto& [h, e] : edges[i])
      if (graph->flow(e) >= kLeastHostShare * f.bytes()) {
        hosts.push_back(h);
        weights.push_back(graph->flow(e));
      }
    const auto on = [&](int h) {
      Flow part = f;
      part.holders.clear();
      for (DeviceId d : f.candidates)
        if (c.host_of(d) == h) part.holders.push_back(d);
      return part;
    };
    if (hosts.size() == 1) {
      levelled.push_back(on(hosts[0]));
      continue;
    }
    const std::vector<Box> cut = cut_at_weights(f.transfer->slice, weights);
    for (size_t p = 0; p < cut.size(); ++p) {
      if (cut[p].empty()) continue;
      parts.push_back({.slice = cut[p],
                       .bytes = slice_bytes(batch, *f.job, cut[p]),
                       .receivers = f.transfer->receivers,
                       .candidates = f.transfer->candidates});
      levelled.push_back(on(hosts[p]));
      levelled.back().transfer = &parts.back();
    }
  }
  flows = std::move(levelled);
  return true;
}

// Moves bytes of `shares` (one list per slice, (NIC index, bytes), all on one host of `nics` NICs)
// from the NICs above their mean to those below it, largest slices first, only to NICs where
// `can_take(slice, nic)`; first only to those where `free_on(slice, nic)` says the slice needs no
// stage, then anywhere.
template <typename CanTake, typename FreeOn>
void level_bytes(std::vector<Shares*> shares, int nics, CanTake can_take, FreeOn free_on) {
  std::vector<double> load(nics, 0);
  std::vector<double> total(shares.size(), 0);
  for (size_t i = 0; i < shares.size(); ++i)
    for (const auto& [n, bytes] : *shares[i]) {
      load[n] += bytes;
      total[i] += bytes;
    }
  double mean = 0;
  for (double l : load) mean += l / nics;
  std::vector<size_t> order(shares.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return total[a] > total[b]; });
  for (bool anywhere : {false, true})
    for (size_t i : order)
      for (int from = 0; from < nics; ++from)
        for (int to = 0; to < nics; ++to) {
          double on = 0;
          for (const auto& [n, bytes] : *shares[i])
            if (n == from) on = bytes;
          const double move = std::min({on, load[from] - mean, mean - load[to]});
          if (to == from || move <= 0 || !can_take(i, to) || (!anywhere && !free_on(i, to)))
            continue;
          add_share(*shares[i], from, -move);
          add_share(*shares[i], to, move);
          load[from] -= move;
          load[to] += move;
        }
  for (Shares* s : shares) std::erase_if(*s, [](const auto& share) { return share.second <= 0; });
}

// Per flow, the other flows of its job whose slices overlap its own (one slice into several hosts):
// a device that stages one of them may not stage the others, or it would take those elements twice.
std::vector<std::vector<size_t>> overlapping(const std::vector<Flow>& flows) {
  std::map<const Job*, std::vector<size_t>> by_job;
  for (size_t i = 0; i < flows.size(); ++i) by_job[flows[i].job].push_back(i);
  std::vector<std::vector<size_t>> out(flows.size());
  for (const auto& [job, of] : by_job)
    for (size_t i : of)
      for (size_t j : of)
        if (i != j && !intersect(flows[i].transfer->slice, flows[j].transfer->slice).empty())
          out[i].push_back(j);
  return out;
}

// Whether device `d` stages one of the flows `others` (sends a share of it without holding it).
bool stages_any(const std::vector<Flow>& flows, const std::vector<size_t>& others, DeviceId d) {
  return std::any_of(others.begin(), others.end(), [&](size_t j) {
    const Flow& g = flows[j];
    return !g.holds(d) && std::any_of(g.out.begin(), g.out.end(),
                                      [&](const auto& share) { return share.first == d; });
  });
}

// Whether device `d` stages or enters one of the flows `others` without holding or receiving it.
bool takes_any(const std::vector<Flow>& flows, const std::vector<size_t>& others, DeviceId d) {
  return stages_any(flows, others, d) || std::any_of(others.begin(), others.end(), [&](size_t j) {
           const Flow& g = flows[j];
           return !g.receives(d) && std::any_of(g.in.begin(), g.in.end(), [&](const auto& share) {
             return share.first == d;
           });
         });
}

// The flows' shares by device, levelled by bytes (ShopLevel::bytes).
void lay_by_bytes(const Cluster& c, std::vector<Flow>& flows) {
  std::map<int, std::vector<Flow*>> by_sender, by_receiver;
  std::map<std::pair<int, int>, double> nic_out;  // (host, NIC index) -> bytes so far
  for (Flow& f : flows) {
    // The holder on the NIC with the least to send so far.
    const int host = c.host_of(f.holders[0]);
    auto first = f.holders.begin();
    for (auto it = f.holders.begin(); it != f.holders.end(); ++it)
      if (nic_out[{host, c.nic_of(*it)}] < nic_out[{host, c.nic_of(*first)}]) first = it;
    std::rotate(f.holders.begin(), first, std::next(first));
    nic_out[{host, c.nic_of(f.holders[0])}] += f.bytes();
    f.out = {{c.nic_of(f.holders[0]), f.bytes()}};
    f.in = {{c.nic_of(f.receivers[0]), f.bytes()}};
    by_sender[host].push_back(&f);
    by_receiver[f.home(c)].push_back(&f);
  }
  // Each NIC's share to a holder on it, else to its device with the least to send that may stage
  // the slice (-1 where none may).
  std::vector<double> sending(c.devices(), 0);
  const auto stage = [&](const Flow& f, int host, int nic) {
    DeviceId best = -1;
    for (int l = nic; l < c.devices_per_host; l += c.nics_of(host))
      if (const DeviceId d = c.device_id(host, l);
          !f.bars(d) && (best < 0 || sending[d] < sending[best]))
        best = d;
    return best;
  };
  for (auto& [host, of] : by_sender) {
    std::vector<Shares*> shares;
    for (Flow* f : of) shares.push_back(&f->out);
    const auto holder_on = [&](size_t i, int nic) {
      return std::any_of(of[i]->holders.begin(), of[i]->holders.end(),
                         [&](DeviceId d) { return c.nic_of(d) == nic; });
    };
    level_bytes(
        shares, used_nics(c, host),
        [&](size_t i, int nic) { return holder_on(i, nic) || stage(*of[i], host, nic) >= 0; },
        holder_on);
  }
  for (auto& [host, of] : by_receiver) {
    std::vector<Shares*> shares;
    for (Flow* f : of) shares.push_back(&f->in);
    level_bytes(
        shares, used_nics(c, host),
        [&](size_t i, int nic) {
          return of[i]->receiver_on(c, nic) || stage(*of[i], host, nic) >= 0;
        },
        [](size_t, int) { return false; });
  }
  for (const Flow& f : flows)
    for (const auto& [n, bytes] : f.out)
      for (DeviceId d : f.holders)
        if (c.nic_of(d) == n) {
          sending[d] += bytes;
          break;
        }
  // Flow by flow, each NIC's share to a holder on it, else to its stage, else (where that stage
  // stages an overlapping flow laid before) to the first holder.
  const auto overlaps = overlapping(flows);
  for (size_t i = 0; i < flows.size(); ++i) {
    Flow& f = flows[i];
    std::vector<size_t> before;
    for (size_t j : overlaps[i])
      if (j < i) before.push_back(j);
    for (auto& [n, bytes] : f.out) {
      const int nic = n;
      n = stage(f, c.host_of(f.holders[0]), nic);
      for (DeviceId d : f.holders)
        if (c.nic_of(d) == nic) n = d;
      if (!f.holds(n) && stages_any(flows, before, n)) n = f.holders[0];
    }
    for (auto& [n, bytes] : f.in) n = f.receiver_on(c, n).value_or(stage(f, f.home(c), n));
  }
}

// Each pair of a sending NIC and a receiving host taken by one device: a NIC's shares into one host
// go through the device of that NIC that sends most of them (a holder hands it the others over the
// device link), a different device for each receiving host where the NIC has enough. A NIC is
// shared fairly among the flows that cross it, so two devices of a host sending into one host at
// once took two shares of that host's NICs from the others that feed them. With `spares`, a pair
// whose NIC has no sender left takes a device of that NIC that sends nothing (a stage), so that
// one device does not send into several hosts one after another: its ops cannot wait, and the
// other hosts' sends took half of each receiving NIC it needed. A device that does not hold a
// slice stages it for one flow of its job at most (it would take it twice). Whether any share
// moved (with `spares`, to such a stage).
bool funnel(const Cluster& c, std::vector<Flow>& flows, bool spares) {
  std::map<std::pair<DeviceId, int>, double> sends;  // (device, receiving host) -> bytes
  for (const Flow& f : flows)
    for (const auto& [d, bytes] : f.out) sends[{d, f.home(c)}] += bytes;
  std::vector<std::pair<double, std::pair<DeviceId, int>>> by_bytes;
  for (const auto& [key, bytes] : sends) by_bytes.emplace_back(bytes, key);
  std::stable_sort(by_bytes.begin(), by_bytes.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // (sending host, NIC, receiving host) -> its device: first one that sends into no other host.
  std::map<std::tuple<int, int, int>, DeviceId> chosen;
  std::set<DeviceId> taken, spare;
  std::set<DeviceId> senders;
  for (const auto& [key, bytes] : sends) senders.insert(key.first);
  for (bool shared : {false, true})
    for (const auto& [bytes, key] : by_bytes) {
      const auto [d, to] = key;
      const std::tuple pair{c.host_of(d), c.nic_of(d), to};
      if (chosen.contains(pair) || (!shared && taken.contains(d))) continue;
      DeviceId e = d;
      for (int l = 0; spares && shared && l < c.devices_per_host && e == d; ++l)
        if (const DeviceId idle = c.device_id(c.host_of(d), l);
            c.nic_of(idle) == c.nic_of(d) && !taken.contains(idle) && !senders.contains(idle)) {
          e = idle;
          spare.insert(idle);
        }
      chosen[pair] = e;
      taken.insert(e);
    }
  // Per job and device: how many of the job's flows (but the one being laid) the device sends for.
  std::map<std::pair<const Job*, DeviceId>, int> flows_sent;
  const auto count = [&](const Flow& f, int delta) {
    std::set<DeviceId> senders;
    for (const auto& [d, bytes] : f.out) senders.insert(d);
    for (DeviceId d : senders) flows_sent[{f.job, d}] += delta;
  };
  for (const Flow& f : flows) count(f, 1);
  bool moved = false;
  for (Flow& f : flows) {
    count(f, -1);
    Shares out;
    for (const auto& [d, bytes] : f.out) {
      const DeviceId e = chosen.at({c.host_of(d), c.nic_of(d), f.home(c)});
      const bool may = e == d || (!f.bars(e) && (f.holds(e) || flows_sent[{f.job, e}] == 0));
      moved = moved || (may && e != d && (!spares || spare.contains(e)));
      add_share(out, may ? e : d, bytes);
    }
    f.out = std::move(out);
    count(f, 1);
  }
  return moved;
}

// The quanta of each flow laid by the ports (Quanta::per_flow), and those of all the flows
// together that Quanta::fine cuts them into at least.
constexpr int kQuantaPerFlow = 32;
constexpr int kFineQuanta = 256;

// The flows' shares by device, laid `quanta` quanta of each flow at a time where each ends soonest
// (ShopLevel::ports), from any of each flow's holders, each stage fed by the first holder on its
// host or by `feeds`. `port` holds the seconds of each device's send port already taken.
void lay_by_ports(const Cluster& c, std::vector<Flow>& flows, std::vector<double> port,
                  bool beside_holders, Feeds feeds, int quanta) {
  // Three passes: sending, receiving knowing what each port sends, and both again knowing what
  // each port forwards.
  constexpr int kPasses = 3;
  const NicIds nic_id(c);
  const auto link_time = [&](DeviceId d, double bytes) { return bytes / c.device_bandwidth_of(d); };
  std::map<int, double> out, in;  // seconds of each NIC taken
  const auto overlaps = overlapping(flows);
  const auto send_quantum = [&](size_t i, double q) {
    Flow& f = flows[i];
    double best_time = 0;
    DeviceId best = -1;
    for (int host : hosts_of(f.holders, c))
      for (int l = 0; l < c.devices_per_host; ++l) {
        const DeviceId d = c.device_id(host, l);
        // A device stages a NIC with a holder of the slice only where `beside_holders`.
        if (!f.holds(d) &&
            (f.bars(d) || stages_any(flows, overlaps[i], d) ||
             (!beside_holders && std::any_of(f.holders.begin(), f.holders.end(), [&](DeviceId h) {
               return c.host_of(h) == host && c.nic_of(h) == c.nic_of(d);
             }))))
          continue;
        double time = std::max(out[nic_id(d)], port[d]) + nic_seconds(c, d, q);
        if (!f.holds(d)) {
          const DeviceId h = f.feeder(c, d, port, feeds);
          time = std::max(time, port[h] + link_time(h, q));
        }
        if (best < 0 || time < best_time) {
          best_time = time;
          best = d;
        }
      }
    add_share(f.out, best, q);
    out[nic_id(best)] += nic_seconds(c, best, q);
    port[best] += nic_seconds(c, best, q);
    if (!f.holds(best)) {
      const DeviceId h = f.feeder(c, best, port, feeds);
      if (feeds == Feeds::least_busy_holder) f.fed_by.try_emplace(best, h);
      port[h] += link_time(best, q);
    }
  };
  const auto take_quantum = [&](size_t i, double q) {
    Flow& f = flows[i];
    const int host = f.home(c);
    double best_time = 0;
    DeviceId best = -1;
    for (int l = 0; l < c.devices_per_host; ++l) {
      const DeviceId d = c.device_id(host, l);
      // A NIC is entered at a receiver, which forwards to the others, or at a device that takes
      // nothing of the slice otherwise, which forwards to them all: where the receivers on a NIC
      // send slices of their own over it, their ports are busy, and entered at them alone, that
      // NIC took in less than the others (random suite seed 3108 r20 with two NICs: 43.9 MiB into
      // NIC 0 of each receiving host and 39.4 into NIC 1, 1.172x -> 1.129x).
      if (!f.receives(d) && (f.bars(d) || takes_any(flows, overlaps[i], d))) continue;
      double time = in[nic_id(d)] + nic_seconds(c, d, q);
      if (f.forwards(d) > 0) time = std::max(time, port[d] + f.forwards(d) * link_time(d, q));
      if (best < 0 || time < best_time) {
        best_time = time;
        best = d;
      }
    }
    add_share(f.in, best, q);
    in[nic_id(best)] += nic_seconds(c, best, q);
    port[best] += f.forwards(best) * link_time(best, q);
  };
  for (int pass = 0; pass < kPasses; ++pass) {
    for (Flow& f : flows) {
      for (const auto& [d, bytes] : f.out) {
        out[nic_id(d)] -= nic_seconds(c, d, bytes);
        port[d] -= nic_seconds(c, d, bytes);
        if (!f.holds(d)) port[f.holder_beside(c, d)] -= link_time(d, bytes);
      }
      f.out.clear();
      f.fed_by.clear();
    }
    for (int i = 0; i < quanta; ++i)
      for (size_t f = 0; f < flows.size(); ++f) send_quantum(f, flows[f].bytes() / quanta);
    for (Flow& f : flows) {
      for (const auto& [d, bytes] : f.in) {
        in[nic_id(d)] -= nic_seconds(c, d, bytes);
        port[d] -= f.forwards(d) * link_time(d, bytes);
      }
      f.in.clear();
    }
    for (int i = 0; i < quanta; ++i)
      for (size_t f = 0; f < flows.size(); ++f) take_quantum(f, flows[f].bytes() / quanta);
  }
}

// Each flow's entries moved to the NICs its shares leave by (Entries::mirrored): each sending share
// enters its receiving host as a share of its own at a receiver on the NIC of the same index, else
// at a device there that the flow does not bar, so that the pairs (paired in order) go NIC to NIC.
// False, with the flows as they were, where such a NIC has no such device, where a receiving NIC
// would then take in for longer than the busiest sending NIC sends, or where no entry moves.
bool mirror_entries(const Cluster& c, std::vector<Flow>& flows) {
  const NicIds nic_id(c);
  std::map<int, double> out, in;  // seconds of each NIC
  std::vector<Shares> entries;
  for (const Flow& f : flows) {
    const int host = f.home(c);
    Shares& shares = entries.emplace_back();
    for (const auto& [d, bytes] : f.out) {
      out[nic_id(d)] += nic_seconds(c, d, bytes);
      const int nic = c.nic_of(d);
      std::optional<DeviceId> entry = f.receiver_on(c, nic);
      for (int l = 0; !entry && l < c.devices_per_host; ++l)
        if (const DeviceId e = c.device_id(host, l); c.nic_of(e) == nic && !f.bars(e)) entry = e;
      if (!entry) return false;
      shares.emplace_back(*entry, bytes);
      in[nic_id(*entry)] += nic_seconds(c, *entry, bytes);
    }
  }
  double busiest_out = 0, busiest_in = 0;
  for (const auto& [nic, seconds] : out) busiest_out = std::max(busiest_out, seconds);
  for (const auto& [nic, seconds] : in) busiest_in = std::max(busiest_in, seconds);
  if (busiest_in > busiest_out * (1 + 1e-9)) return false;
  bool moved = false;
  for (size_t i = 0; i < flows.size(); ++i) {
    moved = moved || entries[i] != flows[i].in;
    flows[i].in = std::move(entries[i]);
  }
  return moved;
}

// The receivers of `t` by host: on hosts that do not hold its slice (`away`, which take it over
// their NICs), and on hosts that do (`beside`, which take it from a holder over device links).
struct ReceiversByHost {
  std::map<int, std::vector<DeviceId>> away;
  std::map<int, std::vector<DeviceId>> beside;
};
ReceiversByHost receivers_by_host(const Transfer& t, const Cluster& c) {
  const std::vector<int> holding = hosts_of(t.candidates, c);
  ReceiversByHost out;
  for (DeviceId r : t.receivers) {
    const int h = c.host_of(r);
    const bool held = std::find(holding.begin(), holding.end(), h) != holding.end();
    (held ? out.beside : out.away)[h].push_back(r);
  }
  return out;
}

// The phases of an open shop that may cut its work anywhere: `load[a][b]`, what sending NIC `a`
// sends into receiving NIC `b`, cut into matchings (each sending NIC into at most one receiving NIC
// at a time, each receiving NIC from at most one) whose lengths add up to the busiest NIC's load,
// so that no NIC waits for another (Birkhoff and von Neumann: the load, padded to a square whose
// every row and column adds up to that busiest load, is a sum of perfect matchings). Per pair, the
// phases it is matched in, in order, with their lengths.
std::map<std::pair<int, int>, std::vector<std::pair<int, double>>> shop_phases(
    const std::map<std::pair<int, int>, double>& load) {
  std::map<int, int> row_of, column_of;
  for (const auto& [pair, bytes] : load) {
    row_of.try_emplace(pair.first, static_cast<int>(row_of.size()));
    column_of.try_emplace(pair.second, static_cast<int>(column_of.size()));
  }
  const int n = static_cast<int>(row_of.size()), m = static_cast<int>(column_of.size());
  const int size = n + m;
  // The padded square: the load (rows of sending NICs, columns of receiving ones), each row's and
  // each column's idle time on the diagonal of a block of its own, and the load again, mirrored.
  std::vector<std::vector<double>> a(size, std::vector<double>(size, 0));
  std::vector<double> row(n, 0), column(m, 0);
  for (const auto& [pair, bytes] : load) {
    const int r = row_of.at(pair.first), k = column_of.at(pair.second);
    a[r][k] = a[n + k][m + r] = bytes;
    row[r] += bytes;
    column[k] += bytes;
  }
  double busiest = 0;
  for (double b : row) busiest = std::max(busiest, b);
  for (double b : column) busiest = std::max(busiest, b);
  for (int r = 0; r < n; ++r) a[r][m + r] = busiest - row[r];
  for (int k = 0; k < m; ++k) a[n + k][k] = busiest - column[k];
  const double tiny = 1e-9 * busiest;
  for (auto& line : a)
    for (double& x : line)
      if (x <= tiny) x = 0;
  // A perfect matching on the positive entries, kept from phase to phase: only the rows whose
  // entry ran out look for another (Kuhn's augmenting paths, real pairs before idle time).
  std::vector<int> match_of_row(size, -1), match_of_column(size, -1);
  std::vector<char> seen(size);
  const auto augment = [&](auto& self, int r) -> bool {
    for (bool idle : {false, true})
      for (int k = 0; k < size; ++k) {
        if (a[r][k] <= 0 || seen[k] || ((r < n && k < m) || (r >= n && k >= m)) == idle) continue;
        seen[k] = 1;
        if (match_of_column[k] < 0 || self(self, match_of_column[k])) {
          match_of_row[r] = k;
          match_of_column[k] = r;
          return true;
        }
      }
    return false;
  };
  std::map<std::pair<int, int>, std::vector<std::pair<int, double>>> phases;
  std::vector<int> row_id(n), column_id(m);
  for (const auto& [id, r] : row_of) row_id[r] = id;
  for (const auto& [id, k] : column_of) column_id[k] = id;
  for (int phase = 0; busiest > tiny; ++phase) {
    for (int r = 0; r < size; ++r) {
      if (match_of_row[r] >= 0) continue;
      std::fill(seen.begin(), seen.end(), 0);
      if (!augment(augment, r)) return phases;  // (rounding left no perfect matching: done)
    }
    double length = busiest;
    for (int r = 0; r < size; ++r) length = std::min(length, a[r][match_of_row[r]]);
    for (int r = 0; r < size; ++r) {
      const int k = match_of_row[r];
      if (r < n && k < m) phases[{row_id[r], column_id[k]}].emplace_back(phase, length);
      a[r][k] -= length;
      if (a[r][k] <= tiny) {
        a[r][k] = 0;
        match_of_row[r] = match_of_column[k] = -1;
      }
    }
    busiest -= length;
  }
  return phases;
}

}  // namespace

std::optional<Shop> nic_shop(const Batch& batch, const std::vector<Job>& jobs, int rounds,
                             int64_t min_piece_bytes, const ShopRules& rules) {
  const auto [level, sources, funnelled, stages_beside_holders, pieces, beside_rule, feeds, entries,
              quanta] = rules;
  const bool from_any_host = sources == Sources::any_host;
  const Cluster& c = batch.cluster;
  // Each transfer as one per receiving host: each receiver on a holding host takes the slice from
  // a holder beside it; the receivers of another host take it from the holders as one flow.
  std::deque<Transfer> per_host;  // the transfers cut so, which `order` points at
  std::vector<std::pair<const Job*, const Transfer*>> order;
  std::set<DeviceId> holding;  // every device that holds a slice to send, where relayed
  if (beside_rule != Beside::from_holders)
    for (const Job& job : jobs)
      for (const Transfer& t : job.transfers)
        holding.insert(t.candidates.begin(), t.candidates.end());
  // Where relayed by non-senders, the devices that send over the NICs in the shop laid relayed.
  std::set<DeviceId> senders;
  if (beside_rule == Beside::relayed_by_non_senders) {
    ShopRules relayed = rules;
    relayed.beside = Beside::relayed;
    const auto shop = nic_shop(batch, jobs, rounds, min_piece_bytes, relayed);
    if (!shop) return std::nullopt;
    for (const ShopPiece& p : shop->across) senders.insert(p.sender);
  }
  // The receivers beside a holder that relay its pieces to the others (Beside::relayed and its
  // kin); whether a sender was left out.
  bool any_sender_left_out = false;
  const auto relays_of = [&](const std::vector<DeviceId>& receivers) {
    std::vector<DeviceId> relays;
    if (beside_rule == Beside::from_holders) return relays;
    for (DeviceId r : receivers)
      if (beside_rule == Beside::relayed_by_all || !holding.contains(r)) relays.push_back(r);
    if (relays.size() < 2) return std::vector<DeviceId>{};
    if (std::erase_if(relays, [&](DeviceId r) { return senders.contains(r); }) > 0)
      any_sender_left_out = true;
    return relays;
  };
  // Whether a slice is relayed, and relayed by a receiver that holds slices of its own.
  bool any_relayed = false, any_by_holders = false;
  for (const Job& job : jobs) {
    if (!job.only_copies_follow()) return std::nullopt;
    for (const Transfer& t : job.transfers) {
      if (t.receivers.size() == 1) {
        order.emplace_back(&job, &t);
        continue;
      }
      const auto [away, beside] = receivers_by_host(t, c);
      const auto add = [&](std::vector<DeviceId> receivers) {
        per_host.push_back(t);
        per_host.back().receivers = std::move(receivers);
        order.emplace_back(&job, &per_host.back());
      };
      for (int h : hosts_of(t.receivers, c))  // in host order
        if (const auto it = away.find(h); it != away.end())
          add(it->second);
        else if (const auto relays = relays_of(beside.at(h)); !relays.empty()) {
          add(beside.at(h));
          any_relayed = true;
          any_by_holders =
              any_by_holders || std::any_of(relays.begin(), relays.end(),
                                            [&](DeviceId r) { return holding.contains(r); });
        } else {
          for (DeviceId r : beside.at(h)) add({r});
        }
    }
  }
  if ((beside_rule == Beside::relayed && !any_relayed) ||
      (beside_rule == Beside::relayed_by_all && !any_by_holders) ||
      (beside_rule == Beside::relayed_by_non_senders && !(any_relayed && any_sender_left_out)))
    return std::nullopt;
  // Each slice from its receiver's host where that holds it (over the device link, from the
  // holder with the least to send beside it), else from the holding host with the least to send
  // per NIC so far, largest slices first.
  Shop shop;
  std::vector<Flow> flows;
  std::vector<double> host_out(c.hosts, 0);
  std::vector<double> port(c.devices(), 0);  // seconds of the ports sending beside them
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second->bytes > b.second->bytes; });
  // The flow of `t` from `candidates` on the holding host with the least to send per NIC so far.
  const auto add_flow = [&](const Job* job, const Transfer* t,
                            const std::vector<DeviceId>& candidates) {
    int host = -1;
    for (DeviceId d : candidates)
      if (const int h = c.host_of(d);
          host < 0 || host_out[h] / used_nics(c, h) < host_out[host] / used_nics(c, host))
        host = h;
    Flow f{.job = job, .transfer = t, .candidates = candidates, .receivers = t->receivers};
    for (DeviceId d : candidates)
      if (c.host_of(d) == host) f.holders.push_back(d);
    // Every other receiver of the job's slices (those of `t` on other hosts too).
    for (const Transfer& u : job->transfers)
      for (DeviceId r : u.receivers)
        if (!f.receives(r)) f.barred.push_back(r);
    host_out[host] += f.bytes();
    flows.push_back(std::move(f));
  };
  SourceTiles tiles(batch);
  // Per beside slice (by index) that other hosts hold too: its transfer and those holders.
  std::map<size_t, std::pair<const Transfer*, std::vector<DeviceId>>> afar;
  for (const auto& [job, t] : order) {
    const DeviceId receiver = t->receivers[0];
    const int home = c.host_of(receiver);
    std::optional<DeviceId> beside;
    for (DeviceId d : t->candidates)
      if (c.host_of(d) == home && (!beside || port[d] < port[*beside])) beside = d;
    if (!beside) {
      add_flow(job, t, t->candidates);
      continue;
    }
    port[*beside] += static_cast<double>(t->bytes) / c.device_bandwidth_of(*beside);
    if (from_any_host) {
      std::vector<DeviceId> others = tiles.holders(job->tensor, t->slice);
      std::erase_if(others, [&](DeviceId d) { return c.host_of(d) == home; });
      if (!others.empty()) afar[shop.beside.size()] = {t, std::move(others)};
    }
    shop.beside.push_back({.job = job,
                           .slice = t->slice,
                           .bytes = t->bytes,
                           .holder = *beside,
                           .sender = *beside,
                           .entry = receiver,
                           .receivers = t->receivers});
  }
  std::deque<Transfer> levelled;  // the parts cut between hosts, which `flows` point at
  if (sources == Sources::levelled_hosts && !level_hosts(batch, flows, levelled))
    return std::nullopt;
  // A slice into its holder's own host that other hosts hold too is helped from afar: a part of
  // it enters by the host's NICs whose devices serve nothing beside them, so that the holders' send
  // ports end with those NICs, after what other flows bring into the host, or with the helping
  // hosts' NICs, after what they send besides, whichever ends later. The same share of each such
  // slice, cut from the end of its longest dimension.
  std::deque<Transfer> helped;  // the parts from afar, which `flows` point at
  // At most one flow per job: a device staging one flow's slice could enter another's of the same
  // elements, and take them twice.
  std::set<const Job*> crossing;
  for (const Flow& f : flows) crossing.insert(f.job);
  std::erase_if(afar, [&](const auto& entry) {
    return !crossing.insert(shop.beside[entry.first].job).second;
  });
  if (!afar.empty()) {
    std::vector<double> host_in(c.hosts, 0);
    for (const Flow& f : flows) host_in[f.home(c)] += f.bytes();
    struct Home {
      std::set<DeviceId> holders;
      std::set<int> helpers;
      double helpable = 0;
    };
    std::map<int, Home> homes;
    for (const auto& [i, help] : afar) {
      const ShopPiece& p = shop.beside[i];
      Home& home = homes[c.host_of(p.entry)];
      home.holders.insert(p.holder);
      for (DeviceId d : help.second) home.helpers.insert(c.host_of(d));
      home.helpable += static_cast<double>(p.bytes);
    }
    std::map<int, double> share;
    for (const auto& [h, home] : homes) {
      double near = 0, near_bytes = 0;
      for (DeviceId d : home.holders) {
        near += c.device_bandwidth_of(d);
        near_bytes += port[d] * c.device_bandwidth_of(d);
      }
      double entry = 0;  // the NICs with a device that serves nothing beside it
      for (int nic = 0; nic < used_nics(c, h); ++nic)
        for (int l = nic; l < c.devices_per_host; l += c.nics_of(h))
          if (!home.holders.contains(c.device_id(h, l))) {
            entry += c.single_nic_bandwidth_of(h);
            break;
          }
      // The helping hosts' NICs that have devices, which also send what was laid on them above.
      double helping = 0, helping_out = 0;
      for (int g : home.helpers) {
        helping += c.single_nic_bandwidth_of(g) * used_nics(c, g);
        helping_out += host_out[g];
      }
      // The holders' ports end with what enters by those NICs, or what leaves the helping hosts,
      // whichever ends later.
      const auto ending_together = [&](double nics, double before) {
        return (near_bytes * nics - before * near) / (nics + near);
      };
      const double bytes =
          std::min(ending_together(entry, host_in[h]), ending_together(helping, helping_out));
      share[h] = std::clamp(bytes / home.helpable, 0.0, 1.0);
    }
    for (const auto& [i, help] : afar) {
      const auto& [t, others] = help;
      ShopPiece& p = shop.beside[i];
      const int longest = longest_dimension(p.slice);
      const Interval whole = p.slice.dims[longest];
      const int64_t at =
          whole.hi - std::llround(static_cast<double>(whole.size()) * share.at(c.host_of(p.entry)));
      if (at >= whole.hi) continue;
      Transfer part{.slice = p.slice, .receivers = p.receivers, .candidates = others};
      part.slice.dims[longest].lo = at;
      part.bytes = slice_bytes(batch, *p.job, part.slice);
      p.slice.dims[longest].hi = at;
      p.bytes = slice_bytes(batch, *p.job, p.slice);
      port[p.holder] -= static_cast<double>(part.bytes) / c.device_bandwidth_of(p.holder);
      helped.push_back(std::move(part));
      add_flow(p.job, &helped.back(), others);
      // Nor may the slice enter its host at a device that holds it.
      flows.back().barred.insert(flows.back().barred.end(), t->candidates.begin(),
                                 t->candidates.end());
    }
    std::erase_if(shop.beside, [](const ShopPiece& p) { return p.slice.empty(); });
  }
  // From any host, a shop that would be the one of the chosen hosts is not laid again.
  if (from_any_host && helped.empty() &&
      (level == ShopLevel::bytes || std::none_of(flows.begin(), flows.end(), [&](const Flow& f) {
         return hosts_of(f.candidates, c).size() > 1;
       })))
    return std::nullopt;
  // The slices into their holders' own hosts cut into pieces of the busiest holder's bytes /
  // `rounds` too, so that a play can turn each holder from receiver to receiver; relayed, into a
  // piece per relay at least, entering at the relays in turn.
  std::map<DeviceId, double> beside_bytes;
  for (const ShopPiece& p : shop.beside) beside_bytes[p.holder] += static_cast<double>(p.bytes);
  double most_beside = 0;
  for (const auto& [d, bytes] : beside_bytes) most_beside = std::max(most_beside, bytes);
  const double beside_piece = std::max(static_cast<double>(min_piece_bytes), most_beside / rounds);
  std::vector<ShopPiece> beside;
  for (const ShopPiece& p : shop.beside) {
    const std::vector<DeviceId> relays = relays_of(p.receivers);
    const auto least = static_cast<double>(std::max<size_t>(relays.size(), 1));
    const auto parts =
        static_cast<int>(std::clamp(std::round(static_cast<double>(p.bytes) / beside_piece), least,
                                    std::max(least, static_cast<double>(rounds))));
    for (int i = 0; i < parts; ++i) {
      ShopPiece part = p;
      if (!relays.empty()) part.entry = relays[i % relays.size()];
      part.slice = allgather_part(p.slice, parts, i);
      part.bytes = slice_bytes(batch, *p.job, part.slice);
      part.round = i;
      if (!part.slice.empty()) beside.push_back(std::move(part));
    }
  }
  shop.beside = std::move(beside);
  if (flows.empty() && shop.beside.empty()) return std::nullopt;
  // Laid by the ports from any host, a slice may leave by every device that holds it.
  if (level == ShopLevel::ports && from_any_host)
    for (Flow& f : flows) f.holders = f.candidates;
  // Stages beside the holders need a device that holds nothing on a holder's NIC: else the shop
  // is the one without them.
  if (stages_beside_holders && std::none_of(flows.begin(), flows.end(), [&](const Flow& f) {
        return std::any_of(f.holders.begin(), f.holders.end(), [&](DeviceId h) {
          for (int l = c.nic_of(h); l < c.devices_per_host; l += c.nics_of(c.host_of(h)))
            if (const DeviceId d = c.device_id(c.host_of(h), l); !f.holds(d) && !f.bars(d))
              return true;
          return false;
        });
      }))
    return std::nullopt;
  // Stages fed by the least busy holder need a host with two holders of a slice, laid by ports.
  if (feeds == Feeds::least_busy_holder &&
      (level != ShopLevel::ports || std::none_of(flows.begin(), flows.end(), [&](const Flow& f) {
         std::set<int> hosts;
         for (DeviceId h : f.holders)
           if (!hosts.insert(c.host_of(h)).second) return true;
         return false;
       })))
    return std::nullopt;
  // Fine quanta are finer only laid by the ports, and only where the flows are few.
  const int flow_count = std::max(static_cast<int>(flows.size()), 1);
  const int quanta_per_flow =
      quanta == Quanta::fine ? std::max(kQuantaPerFlow, (kFineQuanta + flow_count - 1) / flow_count)
                             : kQuantaPerFlow;
  if (quanta == Quanta::fine && (level == ShopLevel::bytes || quanta_per_flow == kQuantaPerFlow))
    return std::nullopt;
  if (level == ShopLevel::bytes)
    lay_by_bytes(c, flows);
  else
    lay_by_ports(c, flows, port, stages_beside_holders, feeds, quanta_per_flow);
  if (funnelled != Funnel::none && !funnel(c, flows, funnelled == Funnel::with_spares))
    return std::nullopt;
  if (entries == Entries::mirrored && !mirror_entries(c, flows)) return std::nullopt;

  // The pieces: each flow's sending and receiving shares paired in order, cut into pieces of
  // `piece` bytes and the rest, so that the pieces that take turns on a NIC end together, or at
  // the phases of the NICs' open shop (Pieces::by_phases).
  const NicIds nic_id(c);
  std::map<int, double> out_bytes, in_bytes;
  for (const Flow& f : flows) {
    for (const auto& [d, bytes] : f.out) out_bytes[nic_id(d)] += bytes;
    for (const auto& [d, bytes] : f.in) in_bytes[nic_id(d)] += bytes;
  }
  double busiest = 0;
  for (const auto& [nic, bytes] : out_bytes) busiest = std::max(busiest, bytes);
  for (const auto& [nic, bytes] : in_bytes) busiest = std::max(busiest, bytes);
  const double piece = std::max(static_cast<double>(min_piece_bytes), busiest / rounds);
  // Each flow's (sender, entry) pairs, by the north-west corner rule, with the bytes of each.
  struct Pairing {
    std::vector<std::pair<DeviceId, DeviceId>> pairs;
    std::vector<double> weights;
  };
  std::vector<Pairing> pairings;
  std::map<std::pair<int, int>, double> nic_load;  // bytes of each pair of NICs
  for (const Flow& f : flows) {
    Pairing& pairing = pairings.emplace_back();
    const double tiny = 1e-9 * f.bytes();
    size_t a = 0, b = 0;
    double left_out = f.out[0].second, left_in = f.in[0].second;
    while (a < f.out.size() && b < f.in.size()) {
      const double take = std::min(left_out, left_in);
      pairing.pairs.emplace_back(f.out[a].first, f.in[b].first);
      pairing.weights.push_back(take);
      nic_load[{nic_id(f.out[a].first), nic_id(f.in[b].first)}] += take;
      left_out -= take;
      left_in -= take;
      if (left_out <= tiny && ++a < f.out.size()) left_out = f.out[a].second;
      if (left_in <= tiny && ++b < f.in.size()) left_in = f.in[b].second;
    }
  }
  // With Pieces::by_phases, what each pair of NICs has left of each phase, consumed in order.
  auto phases_left = pieces == Pieces::by_phases
                         ? shop_phases(nic_load)
                         : std::map<std::pair<int, int>, std::vector<std::pair<int, double>>>();
  const auto piece_sizes = [&](std::pair<int, int> nics, double bytes) {
    std::vector<double> sizes;
    if (pieces == Pieces::even) {
      const auto whole = static_cast<size_t>(std::floor(bytes / piece));
      sizes.assign(whole, piece);
      if (bytes > piece * static_cast<double>(whole))
        sizes.push_back(bytes - piece * static_cast<double>(whole));
      return sizes;
    }
    auto& phases = phases_left[nics];
    const double tiny = 1e-9 * bytes;
    double left = bytes;
    for (auto phase = phases.begin(); left > tiny && phase != phases.end(); ++phase) {
      if (phase->second <= tiny) continue;  // used up by the pieces before
      const double take = std::min(left, phase->second);
      sizes.push_back(take);
      left -= take;
      phase->second -= take;
    }
    if (left > tiny) sizes.push_back(left);  // rounding past the last phase
    return sizes;
  };
  std::map<std::pair<int, int>, std::vector<ShopPiece>> by_nics;
  for (size_t i = 0; i < flows.size(); ++i) {
    const Flow& f = flows[i];
    const auto& [pairs, weights] = pairings[i];
    const std::vector<Box> cut = cut_at_weights(f.transfer->slice, weights);
    for (size_t p = 0; p < pairs.size(); ++p) {
      const auto [sender, entry] = pairs[p];
      ShopPiece part{.job = f.job,
                     .holder = sender,
                     .sender = sender,
                     .entry = entry,
                     .receivers = f.receivers};
      if (!f.holds(sender)) part.holder = f.holder_beside(c, sender);
      const std::pair nics{nic_id(sender), nic_id(entry)};
      const auto bytes = static_cast<double>(slice_bytes(batch, *f.job, cut[p]));
      auto& pieces_of_nics = by_nics[nics];
      for (const Box& slice : cut_at_weights(cut[p], piece_sizes(nics, bytes))) {
        if (slice.empty()) continue;
        part.slice = slice;
        part.bytes = slice_bytes(batch, *f.job, slice);
        part.round = static_cast<int>(pieces_of_nics.size());
        pieces_of_nics.push_back(part);
      }
    }
  }
  for (auto& [nics, of_nics] : by_nics)
    shop.across.insert(shop.across.end(), of_nics.begin(), of_nics.end());
  return shop;
}

std::vector<Job> shop_jobs(const Batch& batch, const Shop& shop, const std::vector<Job>& jobs) {
  std::vector<Job> out;
  // The forward of piece `p` from its entry to its other receivers, after `job`.
  const auto forward = [&](const ShopPiece& p, Job& job) {
    std::vector<DeviceId> onward = p.receivers;
    std::erase(onward, p.entry);
    if (!onward.empty())
      job.then.push_back(transfer_op(std::move(onward), 0, p.slice, *p.job, p.entry, batch, 0));
  };
  for (const ShopPiece& p : shop.beside) {
    out.push_back({.tensor = p.job->tensor,
                   .task = p.job->task,
                   .transfers = {{.slice = p.slice,
                                  .bytes = p.bytes,
                                  .receivers = {p.entry},
                                  .candidates = {p.holder}}}});
    forward(p, out.back());
  }
  for (const ShopPiece& p : shop.across) {
    Transfer t{
        .slice = p.slice, .bytes = p.bytes, .receivers = {p.entry}, .candidates = {p.holder}};
    if (p.holder != p.sender) {
      t.stages = {p.sender};
      t.through_stage = true;
    }
    Job job{.tensor = p.job->tensor, .task = p.job->task, .transfers = {t}, .round = p.round};
    forward(p, job);
    out.push_back(std::move(job));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Job& a, const Job& b) { return a.round < b.round; });
  for (const Job& job : jobs)
    if (!job.then.empty())
      out.push_back({.tensor = job.tensor, .task = job.task, .then = job.then});
  return out;
}

std::vector<PlayStep> shop_steps(const Shop& shop) {
  std::vector<PlayStep> steps;
  for (const std::vector<ShopPiece>* pieces : {&shop.beside, &shop.across})
    for (const ShopPiece& p : *pieces) {
      const PlayStep step{.job = p.job, .slice = p.slice, .bytes = p.bytes};
      int after = -1;
      if (p.holder != p.sender) {
        steps.push_back(step);
        steps.back().from = p.holder;
        steps.back().to = p.sender;
        steps.back().hand_over = true;
        after = static_cast<int>(steps.size()) - 1;
      }
      steps.push_back(step);
      steps.back().from = p.sender;
      steps.back().to = p.entry;
      steps.back().after = after;
      after = static_cast<int>(steps.size()) - 1;
      for (DeviceId r : p.receivers)
        if (r != p.entry) {
          steps.push_back(step);
          steps.back().from = p.entry;
          steps.back().to = r;
          steps.back().after = after;
        }
    }
  return steps;
}

namespace {

// The transfers rails lay, each with its job: spread, a job's transfers of one slice as one (a
// broadcast's receivers on other hosts, and those on each holding host), whose receivers beside
// the holders may then stage pieces and pass them on. Nullopt where a job has ops after its
// transfers other than copies.
std::optional<std::vector<std::pair<const Job*, Transfer>>> rail_work(const std::vector<Job>& jobs,
                                                                      bool spread) {
  std::vector<std::pair<const Job*, Transfer>> work;
  for (const Job& job : jobs) {
    if (!job.only_copies_follow()) return std::nullopt;
    const auto first = static_cast<std::ptrdiff_t>(work.size());
    for (const Transfer& t : job.transfers) {
      const auto same = std::find_if(work.begin() + first, work.end(),
                                     [&](const auto& w) { return w.second.slice == t.slice; });
      if (!spread || same == work.end()) {
        work.emplace_back(&job, t);
        continue;
      }
      Transfer& merged = same->second;
      merged.receivers.insert(merged.receivers.end(), t.receivers.begin(), t.receivers.end());
      std::sort(merged.receivers.begin(), merged.receivers.end());
      for (DeviceId d : t.candidates)
        if (std::find(merged.candidates.begin(), merged.candidates.end(), d) ==
            merged.candidates.end())
          merged.candidates.push_back(d);
    }
  }
  return work;
}

// What the busiest host's NICs send away from the holders' hosts or take in from them: bytes per
// NIC, and seconds.
struct BusiestHost {
  double bytes_per_nic = 0;
  double seconds = 0;
};

// Nullopt where nothing leaves its holders' hosts.
std::optional<BusiestHost> busiest_host(const Cluster& c,
                                        const std::vector<std::pair<const Job*, Transfer>>& work) {
  std::map<int, double> host_in, host_out;  // bytes into hosts that do not hold them, and out
  for (const auto& [job, t] : work) {
    const auto holding = hosts_of(t.candidates, c);
    bool leaves = false;
    for (int h : hosts_of(t.receivers, c))
      if (std::find(holding.begin(), holding.end(), h) == holding.end()) {
        host_in[h] += static_cast<double>(t.bytes);
        leaves = true;
      }
    if (leaves)
      for (int h : holding)
        host_out[h] += static_cast<double>(t.bytes) / static_cast<double>(holding.size());
  }
  if (host_in.empty()) return std::nullopt;
  BusiestHost busiest;
  for (const auto& side : {host_in, host_out})
    for (const auto& [h, bytes] : side) {
      busiest.bytes_per_nic = std::max(busiest.bytes_per_nic, bytes / used_nics(c, h));
      busiest.seconds = std::max(busiest.seconds, bytes / c.nic_bandwidth_of(h));
    }
  return busiest;
}

// How near the least busy chain a levelled chain's busiest port or NIC may end (RailLevel): within
// 0% or 5% more cases played worse than within 2%.
constexpr double kLevelledWithin = 1.02;

// A slice of `work` as the rails lay it.
struct RailSlice {
  const Job* job = nullptr;
  const Transfer* t = nullptr;
  std::vector<int> holding = {};                     // the hosts that hold it
  std::map<int, std::vector<DeviceId>> away = {};    // receivers on hosts that do not hold it
  std::map<int, std::vector<DeviceId>> beside = {};  // the others, by host
  int pieces = 1;
  Box piece(int j) const { return allgather_part(t->slice, pieces, j); }
};

// A step of a piece's chain, before it is added: `after` indexes the chain's own steps.
struct Hop {
  DeviceId from = -1, to = -1;
  int after = -1;
  bool hand_over = false;
};

// The steps rails lay, and the seconds each device's port sends and each NIC takes in, which the
// choices of the later steps weigh.
class RailLayer {
 public:
  RailLayer(const Batch& batch, double busiest_seconds)
      : batch_(batch),
        c_(batch.cluster),
        nic_id_(batch.cluster),
        busiest_seconds_(busiest_seconds),
        port_(static_cast<size_t>(batch.cluster.devices()), 0) {}

  // Returning, a device that alone holds a slice to send away is charged with it at its NIC's rate
  // until it is laid: a piece handed to it early would keep its own slice waiting.
  double charge_own(const Transfer& t) {
    if (t.candidates.size() != 1 || t.within_holding_hosts(c_)) return 0;
    const DeviceId d = t.candidates[0];
    const double own = nic_seconds(c_, d, static_cast<double>(t.bytes));
    port_[d] += own;
    return own;
  }
  void release_own(const Transfer& t, double own) {
    if (own > 0) port_[t.candidates[0]] -= own;
  }

  // A slice that leaves the one host that holds it is owed by that host's NICs until it is laid
  // (RailRelays::least_due_first).
  void owe(const Transfer& t, double sign) {
    if (t.within_holding_hosts(c_)) return;
    const auto holding = hosts_of(t.candidates, c_);
    if (holding.size() == 1)
      owed_[holding[0]] += sign * static_cast<double>(t.bytes) / c_.nic_bandwidth_of(holding[0]);
  }

  // A slice that stays on its holders' hosts goes to each receiver beside a holder from it, or
  // where that would keep the holder's port busier than the busiest host's NICs, in a chain of
  // pieces through them, so that each port carries it once.
  void lay_home(const RailSlice& s) {
    for (const auto& [h, receivers] : s.beside) {
      const DeviceId holder = holder_on(*s.t, h);
      const double fan_out = static_cast<double>(receivers.size()) *
                             static_cast<double>(s.t->bytes) / c_.device_bandwidth_of(holder);
      if (fan_out <= busiest_seconds_) {
        for (DeviceId r : receivers) add(*s.job, s.t->slice, holder, r, -1);
        continue;
      }
      for (int j = 0; j < s.pieces; ++j) {
        const Box slice = s.piece(j);
        if (slice.empty()) continue;
        DeviceId from = holder;
        int after = -1;
        for (DeviceId r : receivers) {
          after = add(*s.job, slice, from, r, after);
          from = r;
        }
      }
    }
  }

  // Lays slice `s`, which leaves its holders' hosts, piece by piece on the rails (the choices of
  // `rail_steps`); `barred` may not stage it.
  void lay_leaving(const RailSlice& s, const std::vector<DeviceId>& barred,
                   const RailRules& rules) {
    const Job& job = *s.job;
    const Transfer& t = *s.t;
    const bool spread = rules.how != RailSpread::none;
    // Unless spread, each receiver beside the holders takes the whole slice from one of them (a
    // receiver that stages pieces, below, the other pieces only).
    std::map<DeviceId, int> whole;  // the step that brings it the slice
    if (!spread)
      for (const auto& [h, receivers] : s.beside)
        for (DeviceId r : receivers) whole[r] = add(job, t.slice, holder_on(t, h), r, -1);
    // A chain's hosts but the last relay it: those whose NICs have sent least so far come first,
    // or (least_due_first) those with the least to send, counting what they must still send of
    // their own. Seconds, by receiving host.
    std::map<int, double> sending_before;
    for (const auto& [h, receivers] : s.away)
      sending_before[h] =
          sent_away_[h] + (rules.relays == RailRelays::least_due_first ? owed_[h] : 0);
    // Handing, a holder's port hands each piece to its host's receivers once (below): counted
    // while the pieces choose their senders, so that a holder serving its host hands rails over.
    std::map<DeviceId, double> serving;
    if (rules.how == RailSpread::handing)
      for (const auto& [h, receivers] : s.beside) {
        const DeviceId holder = holder_on(t, h);
        serving[holder] += static_cast<double>(t.bytes) / c_.device_bandwidth_of(holder);
        port_[holder] += static_cast<double>(t.bytes) / c_.device_bandwidth_of(holder);
      }
    // Per piece, per holding host: the step that handed it to a stage there.
    std::map<std::pair<int, int>, int> handed;
    // Per piece: the steps that brought it to devices of the receiving hosts.
    std::vector<std::vector<int>> arrived(static_cast<size_t>(s.pieces));
    for (int j = 0; j < s.pieces; ++j) {
      const Box slice = s.piece(j);
      if (slice.empty()) continue;
      std::vector<int> added;
      for (const Hop& hop : best_chain(s, barred, sending_before, j, slice, rules)) {
        added.push_back(add(job, slice, hop.from, hop.to, hop.after < 0 ? -1 : added[hop.after],
                            hop.hand_over));
        if (s.away.contains(c_.host_of(hop.to)))
          arrived[static_cast<size_t>(j)].push_back(added.back());
        if (hop.hand_over && s.beside.contains(c_.host_of(hop.to)))
          handed[{j, c_.host_of(hop.to)}] = added.back();
      }
    }
    if (!spread) {
      take_staged_pieces_from_whole(s, whole, handed);
      return;
    }
    for (const auto& [holder, seconds] : serving) port_[holder] -= seconds;
    if (rules.how == RailSpread::returning_in_turn) {
      returns_.push_back({s, std::move(handed), std::move(arrived)});
      return;
    }
    serve_beside(s, handed, arrived, rules.how == RailSpread::returning);
  }

  // Returning in turn, the receivers beside the holders take their pieces once every slice has
  // left, the slices' pieces in turn (RailSpread::returning_in_turn).
  void serve_returns() {
    int most = 0;
    for (const Return& r : returns_) most = std::max(most, r.s.pieces);
    for (int j = 0; j < most; ++j)
      for (const Return& r : returns_)
        if (j < r.s.pieces) serve_piece(r.s, j, r.handed, r.arrived, true);
    returns_.clear();
  }

  std::vector<PlayStep> steps() && { return std::move(steps_); }

 private:
  // Of `candidates` (or else of the devices of `host` but those `barred`) on NIC `nic`, the one
  // with the least to send; -1 where none.
  DeviceId least_on(const std::vector<DeviceId>& candidates, int host, int nic,
                    const std::vector<DeviceId>& barred = {}) const {
    DeviceId best = -1;
    const auto consider = [&](DeviceId d) {
      if (c_.host_of(d) == host && c_.nic_of(d) == nic && (best < 0 || port_[d] < port_[best]) &&
          std::find(barred.begin(), barred.end(), d) == barred.end())
        best = d;
    };
    for (DeviceId d : candidates) consider(d);
    if (best < 0 && candidates.empty())
      for (int l = 0; l < c_.devices_per_host; ++l) consider(c_.device_id(host, l));
    return best;
  }

  // The seconds a step of `bytes` from `from` to `to` takes of the sender's port, and of the
  // receiving NIC (0 inside a host).
  double port_seconds(DeviceId from, DeviceId to, double bytes) const {
    return c_.host_of(from) != c_.host_of(to) ? nic_seconds(c_, from, bytes)
                                              : bytes / c_.device_bandwidth_of(from);
  }
  double in_seconds(DeviceId from, DeviceId to, double bytes) const {
    return c_.host_of(from) != c_.host_of(to) ? nic_seconds(c_, to, bytes) : 0.0;
  }

  int add(const Job& job, const Box& slice, DeviceId from, DeviceId to, int after,
          bool hand_over = false) {
    const int64_t bytes = slice_bytes(batch_, job, slice);
    port_[from] += port_seconds(from, to, static_cast<double>(bytes));
    if (const int h = c_.host_of(from); h != c_.host_of(to))
      sent_away_[h] += static_cast<double>(bytes) / c_.nic_bandwidth_of(h);
    if (const double in = in_seconds(from, to, static_cast<double>(bytes)); in > 0)
      nic_in_[nic_id_(to)] += in;
    steps_.push_back({.job = &job,
                      .slice = slice,
                      .bytes = bytes,
                      .from = from,
                      .to = to,
                      .after = after,
                      .hand_over = hand_over});
    return static_cast<int>(steps_.size()) - 1;
  }

  // The ports and receiving NICs a chain uses, once it is added: the seconds of the busiest, and
  // what it adds to the sum of the squares of their seconds.
  struct ChainLoad {
    double busiest = 0;
    double squares = 0;
  };
  ChainLoad load_after(std::span<const Hop> hops, double bytes) const {
    std::map<int, double> added;  // devices as id, receiving NICs as -1 - id
    for (const Hop& hop : hops) {
      added[hop.from] += port_seconds(hop.from, hop.to, bytes);
      if (const double in = in_seconds(hop.from, hop.to, bytes); in > 0)
        added[-1 - nic_id_(hop.to)] += in;
    }
    ChainLoad load;
    for (const auto& [key, seconds] : added) {
      const auto taken = nic_in_.find(-1 - key);
      const double before = key >= 0 ? port_[key] : (taken == nic_in_.end() ? 0 : taken->second);
      const double after = seconds + before;
      load.busiest = std::max(load.busiest, after);
      load.squares += after * after - before * before;
    }
    return load;
  }

  // Whether `d` is a receiver of `s` on a host that holds its slice.
  static bool receives_beside(const RailSlice& s, DeviceId d) {
    for (const auto& [h, receivers] : s.beside)
      if (std::find(receivers.begin(), receivers.end(), d) != receivers.end()) return true;
    return false;
  }

  // The holder of `t` on host `h` with the least to send.
  DeviceId holder_on(const Transfer& t, int h) const {
    DeviceId from = -1;
    for (DeviceId d : t.candidates)
      if (c_.host_of(d) == h && (from < 0 || port_[d] < port_[from])) from = d;
    return from;
  }

  // The chain piece `j` of `s` goes by. A holder's port also hands its pieces over, and a
  // receiver's port forwards to the receivers beside it, so equal rails can leave the other ports
  // waiting for theirs; but choosing piece by piece can also crowd a rail that pays off only later.
  std::vector<Hop> best_chain(const RailSlice& s, const std::vector<DeviceId>& barred,
                              const std::map<int, double>& sending_before, int j, const Box& slice,
                              const RailRules& rules) const {
    const Transfer& t = *s.t;
    const bool spread = rules.how != RailSpread::none;
    const bool handing = rules.how == RailSpread::handing;
    const RailPick pick = rules.pick;
    const auto piece_bytes = static_cast<double>(slice_bytes(batch_, *s.job, slice));
    std::vector<int> order;  // the hosts after the holding host, cyclic
    for (const auto& [h, receivers] : s.away) order.push_back(h);
    std::vector<Hop> best;
    double best_load = -1, best_squares = 0;
    // Least busy, the piece may also leave another holding host than j's (cyclic), where that
    // leaves the busiest port or NIC less busy by more than twice the piece's time on a NIC: a
    // host that serves its own receivers sends less away (without the margin, pieces went back
    // and forth between equal hosts and played worse; with one piece's time, 14 cases of four
    // seed sets played worse and 5 better than with two).
    for (size_t f = 0; f < s.holding.size(); ++f) {
      if (pick == RailPick::cyclic && f > 0) break;
      const int from_host = s.holding[(static_cast<size_t>(j) + f) % s.holding.size()];
      const double margin = f == 0 ? 0 : piece_bytes / c_.single_nic_bandwidth_of(from_host) * 2;
      std::sort(order.begin(), order.end());
      std::stable_partition(order.begin(), order.end(), [&](int h) { return h > from_host; });
      if (rules.relays == RailRelays::least_sent_first ||
          rules.relays == RailRelays::least_due_first)
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return sending_before.at(a) < sending_before.at(b); });
      // Turned: by two places per round of pieces (piece j leaves by rail j mod the holding host's
      // NICs, in round j / NICs), so that hop i of round q enters order[(i + 2q) mod n]. A rail's
      // rounds follow one another down their chains, so round q - i takes hop i while round q
      // takes hop 0, and these enter order[(2q - i) mod n], a different host for each i: each host
      // takes in one round at a time on a rail. Turned by one place, they all entered one host at
      // once. With n odd, each host is also the last of a chain (which relays nothing) in one
      // round of n. With n even, two places a round reach only every other host (with two hosts,
      // the same one every round): turned through all, the turn moves one place more every n / 2
      // rounds, so that each host is the last in one round of n too (random suite seed 1805 r17
      // with eight NICs, four receiving hosts: the hosts that always relayed had 80 ms of sends on
      // their ports and the last one 17-34 ms, 1.722x -> 1.581x). Not instead of turned, as
      // neither wins everywhere (laid instead, seed 1805 r21 with two NICs 1.044x -> 1.099x).
      if ((rules.relays == RailRelays::turned || rules.relays == RailRelays::turned_through_all) &&
          !order.empty()) {
        const auto n = static_cast<int>(order.size());
        const int round = j / used_nics(c_, from_host);
        int turn = 2 * round;
        if (rules.relays == RailRelays::turned_through_all && n % 2 == 0) turn += 2 * round / n;
        std::rotate(order.begin(), order.begin() + turn % n, order.end());
      }
      // Turned least busy: every turn of the hosts, each with another host last, the chain's
      // least busy one taken (levelled on ties): a host whose receivers take much from its relays
      // should relay less (random suite seed 2907 r11 with eight NICs, five receiving hosts with
      // one to four receivers: in host order the relays of the hosts with three and four
      // receivers sent 240-300 MiB each besides their NICs' share, 1.458x -> 1.387x).
      std::vector<std::vector<int>> turns = {order};
      if (rules.relays == RailRelays::turned_least_busy)
        for (auto turn = std::next(order.begin()); turn < order.end(); ++turn) {
          turns.emplace_back(order);
          std::rotate(turns.back().begin(), turns.back().begin() + (turn - order.begin()),
                      turns.back().end());
        }
      const bool levelled =
          rules.level == RailLevel::levelled || rules.relays == RailRelays::turned_least_busy;
      for (int k = 0; k < used_nics(c_, from_host); ++k) {
        if (pick == RailPick::cyclic && !best.empty()) break;
        const int rail = (j + k) % used_nics(c_, from_host);
        // The piece leaves by a holder on the rail's NIC, else handed over to a stage there;
        // handing, also by a stage where a holder is there, whose port may serve its host
        // meanwhile.
        std::vector<std::pair<DeviceId, std::vector<Hop>>> starts;  // first sender, hand-over
        const DeviceId holder = least_on(t.candidates, from_host, rail);
        if (holder >= 0) starts.push_back({holder, {}});
        if (holder < 0 || handing) {
          std::vector<DeviceId> not_stages = barred;
          not_stages.insert(not_stages.end(), t.candidates.begin(), t.candidates.end());
          if (const DeviceId stage = least_on({}, from_host, rail, not_stages); stage >= 0)
            starts.push_back({stage, {{holder_on(t, from_host), stage, -1, true}}});
        }
        // The receiving hosts in `segments` chains, each fed by the holding host: one ring has
        // its hosts forward all but the last host's share, while the holding host's NICs idle.
        const auto hosts = static_cast<int>(order.size());
        for (const std::vector<int>& turned : turns)
          for (const auto& [first_sender, start] : starts)
            for (int segments = 1; segments <= (spread ? hosts : 1); ++segments) {
              std::vector<Hop> hops = start;
              for (int g = 0; g < segments; ++g) {
                DeviceId sender = first_sender;
                int after = start.empty() ? -1 : 0;
                for (int i = g * hosts / segments; i < (g + 1) * hosts / segments; ++i) {
                  const int h = turned[static_cast<size_t>(i)];
                  const std::vector<DeviceId>& receivers = s.away.at(h);
                  const int nic = rail % used_nics(c_, h);
                  DeviceId entry = least_on(receivers, h, nic);
                  if (entry < 0) entry = least_on({}, h, nic);
                  hops.push_back({sender, entry, after, false});
                  after = static_cast<int>(hops.size()) - 1;
                  for (DeviceId r : receivers)
                    if (r != entry) hops.push_back({entry, r, after, false});
                  sender = entry;
                }
              }
              // Handing, the holder's port is charged with handing the piece to a receiver beside
              // it already (`serving` in lay_leaving): where that receiver stages the piece, the
              // hand-over is that one.
              const bool served = handing && !start.empty() && receives_beside(s, start[0].to);
              const auto [load, squares] =
                  load_after(std::span(hops).subspan(served ? 1 : 0), piece_bytes);
              if (best_load < 0 || load < best_load - 1e-12 - margin ||
                  (levelled && margin == 0 && load <= best_load * kLevelledWithin &&
                   squares < best_squares)) {
                best_load = load;
                best_squares = squares;
                best = std::move(hops);
              }
            }
      }
    }
    return best;
  }

  // Not spread: a receiver beside the holders that staged pieces takes the others from the holder
  // that was to send it the whole slice, instead of the whole slice.
  void take_staged_pieces_from_whole(const RailSlice& s, std::map<DeviceId, int>& whole,
                                     const std::map<std::pair<int, int>, int>& handed) {
    std::map<DeviceId, std::vector<int>> pieces_of;  // the pieces each receiver staged
    for (const auto& [key, step] : handed)
      if (const DeviceId stage = steps_[static_cast<size_t>(step)].to; whole.contains(stage))
        pieces_of[stage].push_back(key.first);
    for (const auto& [r, pieces] : pieces_of) {
      const int index = whole[r];
      const PlayStep step = steps_[static_cast<size_t>(index)];
      port_[step.from] -= static_cast<double>(step.bytes) / c_.device_bandwidth_of(step.from);
      steps_.erase(steps_.begin() + index);
      for (auto& [other, later] : whole)
        if (later > index) --later;
      for (PlayStep& later : std::span(steps_).subspan(static_cast<size_t>(index)))
        if (later.after > index) --later.after;
      for (int j = 0; j < s.pieces; ++j)
        if (std::find(pieces.begin(), pieces.end(), j) == pieces.end())
          if (const Box slice = s.piece(j); !slice.empty()) add(*s.job, slice, step.from, r, -1);
    }
  }

  // Spread, the receivers beside the holders take each piece from one of them, which has it as a
  // stage or else from a holder or the stage it was handed to, so that a holder's port carries
  // each piece once per host.
  void serve_beside(const RailSlice& s, const std::map<std::pair<int, int>, int>& handed,
                    const std::vector<std::vector<int>>& arrived, bool returning) {
    for (int j = 0; j < s.pieces; ++j) serve_piece(s, j, handed, arrived, returning);
  }

  // Piece `j` of `s` to its receivers beside the holders (serve_beside).
  void serve_piece(const RailSlice& s, int j, const std::map<std::pair<int, int>, int>& handed,
                   const std::vector<std::vector<int>>& arrived, bool returning) {
    const Box slice = s.piece(j);
    if (slice.empty()) return;
    for (const auto& [h, receivers] : s.beside) {
      int step = -1;   // the step that brought it to the receiver that passes it on
      int stage = -1;  // the step that handed it to a stage there that receives nothing of it
      if (const auto it = handed.find({j, h}); it != handed.end()) {
        if (receives_beside(s, steps_[static_cast<size_t>(it->second)].to))
          step = it->second;
        else
          stage = it->second;
      }
      if (step < 0) step = bring_piece(s, slice, j, h, receivers, arrived, stage, returning);
      const DeviceId distributor = steps_[static_cast<size_t>(step)].to;
      for (DeviceId r : receivers)
        if (r != distributor) add(*s.job, slice, distributor, r, step);
    }
  }

  // The step that brings piece `j` (`slice`) to the receiver of `receivers` (on holding host `h`)
  // with the least to send: from a holder there, or from the stage there that step `stage` (>= 0)
  // handed it to, or returning, from the receiving hosts' device that has it and sends least,
  // whichever leaves the ports and the receiving NIC least busy; the last piece reaches the
  // receiving hosts when the NICs have sent everything, so it comes back a piece's time on a NIC
  // after that at the earliest. From the stage, the holder's port carries the piece once (a single
  // holder that fed seven stages also sent each of their pieces to a receiver beside it, 705 MiB
  // of 512: random suite seed 2909 r7 with eight NICs, 1.452x -> 1.370x).
  int bring_piece(const RailSlice& s, const Box& slice, int j, int h,
                  const std::vector<DeviceId>& receivers,
                  const std::vector<std::vector<int>>& arrived, int stage, bool returning) {
    DeviceId first = receivers[0];
    for (DeviceId r : receivers)
      if (port_[r] < port_[first]) first = r;
    const DeviceId holder = holder_on(*s.t, h);
    const auto bytes = static_cast<double>(slice_bytes(batch_, *s.job, slice));
    int back = -1;
    if (returning)
      for (int a : arrived[static_cast<size_t>(j)])
        if (back < 0 ||
            port_[steps_[static_cast<size_t>(a)].to] < port_[steps_[static_cast<size_t>(back)].to])
          back = a;
    const auto back_load = [&] {
      const DeviceId from = steps_[static_cast<size_t>(back)].to;
      const Hop hop{from, first, -1, false};
      const double load = load_after({&hop, 1}, bytes).busiest;
      return j + 1 < s.pieces ? load
                              : std::max(load, busiest_seconds_ + nic_seconds(c_, from, bytes));
    };
    DeviceId from = holder;
    int after = -1;
    double load = port_[holder] + bytes / c_.device_bandwidth_of(holder);
    if (stage >= 0) {
      const Hop hop{steps_[static_cast<size_t>(stage)].to, first, -1, false};
      if (const double staged = load_after({&hop, 1}, bytes).busiest; staged < load) {
        from = hop.from;
        after = stage;
        load = staged;
      }
    }
    if (back >= 0 && back_load() < load) {
      from = steps_[static_cast<size_t>(back)].to;
      after = back;
    }
    return add(*s.job, slice, from, first, after);
  }

  const Batch& batch_;
  const Cluster& c_;
  const NicIds nic_id_;
  const double busiest_seconds_;
  std::vector<double> port_;         // seconds each device sends
  std::map<int, double> nic_in_;     // seconds each NIC takes in
  std::map<int, double> sent_away_;  // seconds of each host's NICs sending so far
  std::map<int, double> owed_;       // seconds of each host's NICs sending slices not yet laid
  std::vector<PlayStep> steps_;
  // Returning in turn: the slices whose receivers beside the holders are still to be served.
  struct Return {
    RailSlice s;
    std::map<std::pair<int, int>, int> handed;
    std::vector<std::vector<int>> arrived;
  };
  std::vector<Return> returns_;
};

}  // namespace

std::optional<std::vector<PlayStep>> rail_steps(const Batch& batch, const std::vector<Job>& jobs,
                                                int rounds, int64_t min_piece_bytes,
                                                const RailRules& rules) {
  const Cluster& c = batch.cluster;
  // Only where some transfer has several receivers: merged, one receiver's slices (send_recv's)
  // would be relayed.
  const bool several = std::any_of(jobs.begin(), jobs.end(), [](const Job& job) {
    return std::any_of(job.transfers.begin(), job.transfers.end(),
                       [](const Transfer& t) { return t.receivers.size() > 1; });
  });
  const auto work = rail_work(jobs, rules.how != RailSpread::none);
  if (!work || !several) return std::nullopt;
  const auto busiest = busiest_host(c, *work);
  if (!busiest) return std::nullopt;
  const double piece =
      std::max(static_cast<double>(min_piece_bytes), busiest->bytes_per_nic / rounds);

  RailLayer layer(batch, busiest->seconds);
  std::vector<double> own(work->size(), 0);
  if (rules.how == RailSpread::returning || rules.how == RailSpread::returning_in_turn)
    for (size_t w = 0; w < work->size(); ++w) own[w] = layer.charge_own((*work)[w].second);
  // Slices that stay on their holders' hosts first, so that the rails see the ports they use.
  std::vector<size_t> sequence(work->size());
  std::iota(sequence.begin(), sequence.end(), size_t{0});
  std::stable_partition(sequence.begin(), sequence.end(),
                        [&](size_t w) { return (*work)[w].second.within_holding_hosts(c); });
  for (const auto& [job, t] : *work) layer.owe(t, 1);
  for (size_t w : sequence) {
    const auto& [job, t] = (*work)[w];
    layer.release_own(t, own[w]);
    layer.owe(t, -1);
    auto [away, beside] = receivers_by_host(t, c);
    RailSlice s{.job = job,
                .t = &t,
                .holding = hosts_of(t.candidates, c),
                .away = std::move(away),
                .beside = std::move(beside),
                .pieces = static_cast<int>(
                    std::max<double>(1, std::ceil(static_cast<double>(t.bytes) / piece)))};
    if (s.away.empty()) {
      layer.lay_home(s);
      continue;
    }
    // A receiver of the job's other transfers may not stage this one (spread, those of the same
    // slice are this one; a job's entries in `work` are consecutive).
    std::vector<DeviceId> barred;
    for (size_t u = w; u-- > 0 && (*work)[u].first == job;)
      barred.insert(barred.end(), (*work)[u].second.receivers.begin(),
                    (*work)[u].second.receivers.end());
    for (size_t u = w + 1; u < work->size() && (*work)[u].first == job; ++u)
      barred.insert(barred.end(), (*work)[u].second.receivers.begin(),
                    (*work)[u].second.receivers.end());
    layer.lay_leaving(s, barred, rules);
  }
  layer.serve_returns();
  return std::move(layer).steps();
}

std::vector<PlayStep> passed_in_rings(const Cluster& c, std::vector<PlayStep> steps) {
  std::vector<bool> waited_for(steps.size(), false);
  for (const PlayStep& step : steps)
    if (step.after >= 0) waited_for[static_cast<size_t>(step.after)] = true;
  // The steps of each piece's fan, by what they wait for, their sender and their piece.
  std::map<std::tuple<int, DeviceId, const Job*, Box>, std::vector<size_t>> fans;
  for (size_t i = 0; i < steps.size(); ++i)
    if (const PlayStep& step = steps[i];
        !waited_for[i] && !step.hand_over && c.host_of(step.from) == c.host_of(step.to))
      fans[{step.after, step.from, step.job, step.slice}].push_back(i);
  const int g = c.devices_per_host;
  for (const auto& [key, fan] : fans) {
    if (fan.size() < 2) continue;
    const DeviceId sender = std::get<1>(key);
    const auto after_sender = [&](DeviceId d) {
      return (c.local_of(d) - c.local_of(sender) + g) % g;
    };
    std::vector<DeviceId> ring;
    for (size_t i : fan) ring.push_back(steps[i].to);
    std::sort(ring.begin(), ring.end(),
              [&](DeviceId a, DeviceId b) { return after_sender(a) < after_sender(b); });
    for (size_t j = 1; j < fan.size(); ++j) {  // fan is ascending: each waits for an earlier step
      PlayStep& step = steps[fan[j]];
      step.from = ring[j - 1];
      step.after = static_cast<int>(fan[j - 1]);
    }
    for (size_t j = 0; j < fan.size(); ++j) steps[fan[j]].to = ring[j];
  }
  return steps;
}

std::vector<Op> play_steps(const Batch& batch, const std::vector<PlayStep>& plays,
                           const std::vector<Job>& jobs, const PlayRules& rules) {
  const Cluster& c = batch.cluster;
  const NicIds nic_id(c);
  // The links a step shares with others, as the simulator shares them: its receiver's device
  // link, and across hosts the two NICs (a sender's own link carries its one step, and limits its
  // rate). By key: a receiving device link as its device id, a sending NIC as devices + its index
  // in `nic` below, a receiving NIC as -1 - that index; each with its bandwidth.
  using Links = std::vector<std::pair<int64_t, double>>;
  struct Step {
    const PlayStep* play = nullptr;
    int from = 0, to = 0;          // the play's devices, as indices of `device` below
    int nic_from = 0, nic_to = 0;  // their NICs, as indices of `nic` below
    bool across = false;           // over the NICs
    Links links = {};
  };
  // The devices the steps name, densely: a play follows the problem, not the cluster.
  std::vector<int64_t> named;
  named.reserve(2 * plays.size());
  for (const PlayStep& p : plays) {
    named.push_back(p.from);
    named.push_back(p.to);
  }
  const DenseIndex device(std::move(named));
  // Their NICs, densely, and each device's.
  std::vector<int64_t> nic_ids(static_cast<size_t>(device.size()));
  for (int d = 0; d < device.size(); ++d)
    nic_ids[static_cast<size_t>(d)] = nic_id(static_cast<DeviceId>(device.id_at(d)));
  const DenseIndex nic(nic_ids);
  std::vector<int> nic_of(static_cast<size_t>(device.size()));
  for (int d = 0; d < device.size(); ++d)
    nic_of[static_cast<size_t>(d)] = nic.index_of(nic_ids[static_cast<size_t>(d)]);
  std::vector<Step> steps;
  std::vector<std::vector<int>> waiting(plays.size());               // the steps that wait for each
  std::vector<double> in_left(static_cast<size_t>(nic.size()), 0);   // bytes each NIC has still
  std::vector<double> out_left(static_cast<size_t>(nic.size()), 0);  // to take in, to send
  for (const PlayStep& p : plays) {
    const bool across = c.host_of(p.from) != c.host_of(p.to);
    const int from = device.index_of(p.from);
    const int to = device.index_of(p.to);
    const int nic_from = nic_of[static_cast<size_t>(from)];
    const int nic_to = nic_of[static_cast<size_t>(to)];
    Links links{{p.to, c.device_bandwidth_of(p.to)}};
    if (across) {
      in_left[static_cast<size_t>(nic_to)] += static_cast<double>(p.bytes);
      out_left[static_cast<size_t>(nic_from)] += static_cast<double>(p.bytes);
      links.emplace_back(int64_t{c.devices()} + nic_from,
                         c.single_nic_bandwidth_of(c.host_of(p.from)));
      links.emplace_back(-1 - int64_t{nic_to}, c.single_nic_bandwidth_of(c.host_of(p.to)));
    }
    if (p.after >= 0) waiting[p.after].push_back(static_cast<int>(steps.size()));
    steps.push_back({.play = &p,
                     .from = from,
                     .to = to,
                     .nic_from = nic_from,
                     .nic_to = nic_to,
                     .across = across,
                     .links = std::move(links)});
  }
  // Step s is flow s of the shared links' rates, on the links densely.
  std::vector<int64_t> link_keys;
  for (const Step& st : steps)
    for (const auto& [link, bandwidth] : st.links) link_keys.push_back(link);
  const DenseIndex link_index(std::move(link_keys));
  std::vector<double> capacity(static_cast<size_t>(link_index.size()));
  std::vector<sim::LinkUse> uses;
  std::vector<size_t> first{0};
  std::vector<double> limits;
  uses.reserve(3 * steps.size());
  first.reserve(steps.size() + 1);
  limits.reserve(steps.size());
  for (const Step& st : steps) {
    const size_t from = uses.size();
    for (const auto& [link, bandwidth] : st.links) {
      const int l = link_index.index_of(link);
      capacity[static_cast<size_t>(l)] = bandwidth;
      uses.push_back({l});
    }
    std::sort(uses.begin() + static_cast<std::ptrdiff_t>(from), uses.end(),
              [](const sim::LinkUse& a, const sim::LinkUse& b) { return a.link < b.link; });
    first.push_back(uses.size());
    // A step goes no faster than its sender's link, and the receiver's, which it crosses, holds it
    // to that already unless the sender's is the slower.
    const double sender = c.device_bandwidth_of(st.play->from);
    limits.push_back(sender < c.device_bandwidth_of(st.play->to)
                         ? sender
                         : std::numeric_limits<double>::infinity());
  }
  sim::FairShare rates(std::move(capacity), std::move(uses), std::move(first), std::move(limits));
  // Per device: its steps that are ready and not started, in step order, and how many of them
  // cross hosts (what a stage has in stock).
  std::vector<std::vector<int>> pending(device.size());
  std::vector<int> stocked(device.size(), 0);
  std::vector<int> coming(device.size(), 0);  // hand-overs on their way to each device
  const auto make_ready = [&](int s) {
    const Step& st = steps[s];
    auto& of = pending[st.from];
    of.insert(std::lower_bound(of.begin(), of.end(), s), s);
    stocked[st.from] += st.across;
  };
  for (int s = 0; s < static_cast<int>(steps.size()); ++s)
    if (plays[s].after < 0) make_ready(s);
  // Each step across hosts in the phase of its pair of NICs where its middle byte falls.
  std::vector<int> phase_of(steps.size(), 0);
  if (rules.sends == Sends::in_phases) {
    std::map<std::pair<int, int>, double> load;
    for (const Step& st : steps)
      if (st.across)
        load[{nic_id(st.play->from), nic_id(st.play->to)}] += static_cast<double>(st.play->bytes);
    const auto phases = shop_phases(load);
    // Per pair: the index of its phase so far, where that phase ends, and its bytes laid so far.
    struct Place {
      size_t phase = 0;
      double end = 0, laid = 0;
    };
    std::map<std::pair<int, int>, Place> at;
    for (size_t s = 0; s < steps.size(); ++s) {
      if (!steps[s].across) continue;
      const std::pair pair{nic_id(steps[s].play->from), nic_id(steps[s].play->to)};
      const auto it = phases.find(pair);
      if (it == phases.end()) continue;
      const auto& list = it->second;
      Place& place = at.try_emplace(pair, Place{.end = list[0].second}).first->second;
      const auto bytes = static_cast<double>(steps[s].play->bytes);
      while (place.laid + bytes / 2 > place.end && place.phase + 1 < list.size())
        place.end += list[++place.phase].second;
      place.laid += bytes;
      phase_of[s] = list[place.phase].first;
    }
  }

  // Each step waits the cluster's latency before its bytes move (PlayRules::latency).
  struct Flow {
    int step = 0;
    double left = 0;  // bytes
    double wait = 0;  // seconds of latency still to pass
  };
  std::vector<Flow> active;
  std::vector<bool> busy(device.size(), false);
  std::vector<int> flows_in(static_cast<size_t>(nic.size()), 0);   // active sends into each NIC
  std::vector<int> flows_out(static_cast<size_t>(nic.size()), 0);  // and out of it
  std::vector<int> flows_to(device.size(), 0);                     // active steps into each device
  std::vector<int> inside_to(device.size(), 0);                    // those of them inside its host
  std::vector<double> to_left(device.size(), 0);  // bytes each device has still to take in
  for (const Step& st : steps) to_left[st.to] += static_cast<double>(st.play->bytes);
  // Per step, with Ties::longest_chain: the seconds of the longest chain of steps from it to a
  // step that none waits for, each at its bottleneck link's rate with the latency (a step waits
  // only for an earlier one, so one pass from the last step back).
  std::vector<double> chain(rules.ties == Ties::longest_chain ? steps.size() : 0, 0);
  if (rules.ties == Ties::longest_chain)
    for (size_t s = steps.size(); s-- > 0;) {
      const Step& st = steps[s];
      double after = 0;
      for (int next : waiting[s]) after = std::max(after, chain[static_cast<size_t>(next)]);
      const double rate = st.across ? c.single_nic_bandwidth_of(c.host_of(st.play->from))
                                    : c.device_bandwidth_of(st.play->from);
      chain[s] = static_cast<double>(st.play->bytes) / rate + c.latency + after;
    }
  const auto choose = [&](int d) {  // an index of `device`
    int best = -1;
    std::tuple<int, int, int, double> best_key;
    for (int s : pending[d]) {
      const Step& st = steps[s];
      std::tuple<int, int, int, double> key;
      if (st.play->hand_over) {
        // First while its stage has fewer than `stock` sends it could start: a stage whose
        // hand-overs come only when it idles leaves its NIC idle for each.
        int flows = 0;
        double to_take = 0;
        for (int next : waiting[s])
          if (rules.hand_overs == HandOvers::to_idle_nics && steps[next].across) {
            const auto in = static_cast<size_t>(steps[next].nic_to);
            flows = flows_in[in];
            to_take = in_left[in];
            break;
          }
        const bool low =
            stocked[st.to] + (rules.stock_counts_coming ? coming[st.to] : 0) < rules.stock;
        key = {low ? 0 : 3, low && rules.in_turn ? stocked[st.to] : 0, flows, -to_take};
      } else if (st.across) {
        const auto in = static_cast<size_t>(st.nic_to);
        const int n =
            flows_in[in] +
            (rules.sends == Sends::to_idle_pairs ? flows_out[static_cast<size_t>(st.nic_from)] : 0);
        key = rules.sends == Sends::in_phases
                  ? std::tuple{n == 0 ? 1 : 4, 0, phase_of[s], static_cast<double>(n)}
                  : std::tuple{n == 0 ? 1 : 4, 0, n, -in_left[in]};
      } else {
        // Into the device that takes in least now, then has the most still to take in; with
        // Forwards::between_sends, before sends over the NICs where nothing else inside the host
        // goes into that device now.
        const bool between = rules.forwards == Forwards::between_sends && inside_to[st.to] == 0;
        key = {between ? 0 : 2, 0, flows_to[st.to], -to_left[st.to]};
      }
      if (rules.ties == Ties::longest_chain) std::get<3>(key) = -chain[static_cast<size_t>(s)];
      if (best < 0 || key < best_key) {
        best = s;
        best_key = key;
      }
    }
    return best;
  };
  std::vector<Op> ops;
  std::vector<std::pair<int, double>> free;
  const auto start_free_devices = [&] {
    free.clear();  // with what each one's NIC has left to send
    for (int i = 0; i < device.size(); ++i)
      if (!busy[i]) free.emplace_back(i, out_left[static_cast<size_t>(nic_of[i])]);
    std::stable_sort(free.begin(), free.end(), [&](const auto& a, const auto& b) {
      return rules.turns == Turns::most_left_first ? a.second > b.second : a.second < b.second;
    });
    for (const auto& [d, ignored] : free) {
      const int s = choose(d);
      if (s < 0) continue;
      const Step& st = steps[s];
      const auto bytes = static_cast<double>(st.play->bytes);
      busy[d] = true;
      std::erase(pending[d], s);
      stocked[d] -= st.across;
      coming[st.to] += st.play->hand_over;
      ++flows_to[st.to];
      inside_to[st.to] += !st.across;
      to_left[st.to] -= bytes;
      if (st.across) {
        ++flows_in[static_cast<size_t>(st.nic_to)];
        ++flows_out[static_cast<size_t>(st.nic_from)];
        in_left[static_cast<size_t>(st.nic_to)] -= bytes;
        out_left[static_cast<size_t>(st.nic_from)] -= bytes;
      }
      active.push_back({s, bytes, rules.latency ? c.latency : 0});
      if (active.back().wait <= 0) rates.start(s);
      ops.push_back(
          transfer_op({st.play->to}, 0, st.play->slice, *st.play->job, st.play->from, batch, 0));
    }
  };
  start_free_devices();
  while (!active.empty()) {
    rates.fill();
    double dt = -1;
    for (const Flow& f : active)
      if (const double t = f.wait > 0 ? f.wait : f.left / rates.rate(f.step); dt < 0 || t < dt)
        dt = t;
    std::vector<Flow> still;
    for (Flow& f : active) {
      if (f.wait > 0) {
        if ((f.wait -= dt) <= 0) rates.start(f.step);
        still.push_back(f);
        continue;
      }
      f.left -= rates.rate(f.step) * dt;
      if (f.left > 1e-9 * static_cast<double>(steps[f.step].play->bytes)) {
        still.push_back(f);
        continue;
      }
      const Step& st = steps[f.step];
      rates.end(f.step);
      busy[st.from] = false;
      coming[st.to] -= st.play->hand_over;
      --flows_to[st.to];
      inside_to[st.to] -= !st.across;
      if (st.across) {
        --flows_in[static_cast<size_t>(st.nic_to)];
        --flows_out[static_cast<size_t>(st.nic_from)];
      }
      for (int next : waiting[f.step]) make_ready(next);
    }
    active = std::move(still);
    start_free_devices();
  }
  for (const Job& job : jobs) ops.insert(ops.end(), job.then.begin(), job.then.end());
  return ops;
}

}  // namespace meshcast::detail
