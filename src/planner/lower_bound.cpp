#include "meshcast/planner/lower_bound.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <ranges>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshcast/dense_index.h"

namespace meshcast {

std::vector<double> host_in_bytes(const Resharding& problem, const std::vector<UnitTask>& tasks) {
  const Cluster& cluster = problem.cluster;
  std::vector<double> in(cluster.hosts, 0);
  for (const UnitTask& t : tasks) {
    std::set<int> hs;
    std::set<int> hr;
    for (DeviceId d : t.senders) hs.insert(cluster.host_of(d));
    for (DeviceId d : t.receivers) hr.insert(cluster.host_of(d));
    for (int h : hr)
      if (!hs.contains(h)) in[h] += static_cast<double>(t.bytes);
  }
  return in;
}

namespace {

// Whether no other device of `d`'s host is on its NIC (local device l on NIC l mod K).
bool alone_on_its_nic(const Cluster& cluster, DeviceId d) {
  const int nics = cluster.nics_of(cluster.host_of(d));
  return cluster.local_of(d) % nics + nics >= cluster.devices_per_host;
}

// A device of a host that every byte the host takes in over its NICs lands on, unless it lands on
// a device that needs it (forwarded(h) of docs/concepts.md#lower-bound): the others' NICs take in
// at most `rate` per second, so in time T it passes on at least bytes - rate x T of them.
struct Forwarder {
  int local = -1;
  double bytes = 0;
  double rate = 0;
};

// capacity(T) of docs/concepts.md#lower-bound (which has the proof): the most bytes host `host`
// can send over its NICs in time T that cross a NIC for the first time, each having reached its
// NIC from a holder of the host over device links only. `holders` are the host's devices that hold
// a slice, by local index, each with the seconds of its send port that bytes only it holds and
// only devices beside it need take. In time T a holder has P = T - those seconds of its port for
// the host's bytes, which it sends over its own NIC at n = min(nic, dev) or hands over its device
// link at dev to a device on a NIC without holders, which sends them on. Continuous, and grows
// with T.
class SendCapacity {
 public:
  // `busy_stages`: devices that hold none of the bytes counted, by local index, with the seconds of
  // their send ports that bytes only they hold and only devices beside them need take.
  // `forwarder`: a device (local index) that in time T also passes on max(0, bytes - rate x T) of
  // what its host takes in, over its link (Forwarder).
  SendCapacity(const Cluster& cluster, int host, const std::map<int, double>& holders,
               const std::map<int, double>& busy_stages = {}, const Forwarder& forwarder = {})
      : nics_(std::min(cluster.nics_of(host), cluster.devices_per_host)),
        nic_(cluster.single_nic_bandwidth_of(host)),
        dev_(cluster.device_bandwidth_of(cluster.device_id(host, 0))),
        own_(std::min(nic_, dev_)),
        all_nics_(cluster.nic_bandwidth_of(host)),
        others_(static_cast<size_t>(nics_)),
        busy_(static_cast<size_t>(nics_)),
        stages_busy_(static_cast<size_t>(nics_)),
        forwarder_(forwarder) {
    for (int n = 0; n < nics_; ++n) others_[n] = cluster.devices_on_nic(host, n);
    for (const auto& [local, seconds] : holders) {
      busy_[local % nics_].emplace_back(local, seconds);
      --others_[local % nics_];
    }
    for (const auto& [local, seconds] : busy_stages)
      if (!holders.contains(local)) stages_busy_[local % nics_].emplace_back(local, seconds);
    if (forwarder_.local >= 0 && !holders.contains(forwarder_.local) &&
        !busy_stages.contains(forwarder_.local))
      stages_busy_[forwarder_.local % nics_].emplace_back(forwarder_.local, 0);
  }

  double operator()(double t) const { return capacity(t, -1, 0); }

  // max over x in [0, bytes] of capacity(T) with the port of holder `local` (whose link moves
  // `dev` per second) busy x / dev seconds longer, plus x, less `bytes`: the most the host sends in
  // T that crosses a NIC for the first time, less what of `bytes` it does not hand to devices
  // beside `local` over its link (served(S) of docs/concepts.md#lower-bound). Taken on a grid of
  // kServedSteps and raised by the most the function can gain between two points (capacity moves
  // at most (3 own + dev_) bytes a port second), so never below the true maximum; and no more than
  // capacity(T), which it cannot exceed. Grows with T.
  double serving(double t, int local, double dev, double bytes) const {
    const double unserved = capacity(t, -1, 0);
    const double step = bytes / kServedSteps;
    double most = unserved - bytes;  // x = 0
    for (int k = 1; k <= kServedSteps; ++k) {
      const double x = step * k;
      most = std::max(most, capacity(t, local, x / dev) + x - bytes);
    }
    const double slope = 1 + (3 * own_ + dev_) / dev;
    return std::min(unserved, most + slope * step / 2);
  }

  // What the host's NICs carry per second at most (capacity(T) <= this x T).
  double nics() const { return all_nics_; }

 private:
  static constexpr int kServedSteps = 128;

  // capacity(T) with holder `local`'s port busy `more` seconds longer.
  double capacity(double t, int local, double more) const {
    const double forwarding = std::max(0.0, forwarder_.bytes - forwarder_.rate * t) / dev_;
    const auto busy = [&](int device, double seconds) {
      return seconds + (device == local ? more : 0) + (device == forwarder_.local ? forwarding : 0);
    };
    double direct = 0;  // bytes the holders' NICs carry, their holders' ports all theirs
    double staged = 0;  // what NICs without holders can carry, all of it handed over
    double free = 0;    // holders' port seconds their NICs cannot use (full, or shared)
    double port = 0;    // holders' port seconds in all
    for (int n = 0; n < nics_; ++n) {
      double held = 0;  // port seconds of the NIC's holders
      for (const auto& [holder, seconds] : busy_[n])
        held += std::max(0.0, t - busy(holder, seconds));
      port += held;
      double stage = others_[n] * t;  // port seconds of the NIC's other devices
      for (const auto& [device, seconds] : stages_busy_[n])
        stage -= std::min(t, busy(device, seconds));
      if (busy_[n].empty()) {
        staged += std::min(nic_ * t, own_ * stage);
      } else if (others_[n] == 0) {
        direct += std::min(nic_ * t, own_ * held);
        free += std::max(0.0, held - nic_ * t / own_);
      } else {  // a NIC shared with devices that hold nothing: their hand-overs are not charged
        direct += std::min(nic_ * t, own_ * (held + stage));
        free += held;
      }
    }
    // Handed-over bytes take a holder's port at dev, less than their NIC time: the more the
    // better, first from port time the holders' own NICs cannot use.
    const double handed = std::min(staged, dev_ * port);
    return direct + handed - own_ * std::max(0.0, handed / dev_ - free);
  }

  int nics_;
  double nic_, dev_, own_, all_nics_;
  std::vector<int> others_;                                // per NIC: its devices that hold nothing
  std::vector<std::vector<std::pair<int, double>>> busy_;  // per NIC: holders, busy seconds
  std::vector<std::vector<std::pair<int, double>>> stages_busy_;  // per NIC: others, busy seconds
  Forwarder forwarder_;
};

// What holder `local` of a host must serve beside it (ServedBeside), with its link's rate.
struct Served {
  int local = -1;
  double dev = 0;
  double bytes = 0;
};

// served(S) of docs/concepts.md#lower-bound: the bytes of tasks held on two or more hosts and
// needed on one of them alone, by a device there that does not hold them, whose only holder on
// that host is one device; by HS(t), that host (an index of a DenseIndex) and that holder.
class ServedBeside {
 public:
  void add(const std::vector<int>& hs, int host, int local, double dev, double bytes) {
    auto& [sum, rate] = groups_[{hs, host, local}];
    sum += bytes;
    rate = dev;
  }
  size_t size() const { return groups_.size(); }
  // Per host index (of `hosts`): the bytes of the groups with HS(t) inside `set` (ascending) and
  // their holder. A host with two such holders gets none: leaving bytes out keeps a true bound.
  std::vector<Served> within(const std::vector<int>& set, int hosts) const {
    std::vector<Served> served(static_cast<size_t>(groups_.empty() ? 0 : hosts));
    std::vector<bool> mixed(served.size(), false);
    for (const auto& [key, value] : groups_) {
      const auto& [hs, host, local] = key;
      if (!std::includes(set.begin(), set.end(), hs.begin(), hs.end())) continue;
      Served& at = served[static_cast<size_t>(host)];
      mixed[static_cast<size_t>(host)] =
          mixed[static_cast<size_t>(host)] || (at.bytes > 0 && at.local != local);
      at = {local, value.second, at.bytes + value.first};
    }
    for (size_t h = 0; h < served.size(); ++h)
      if (mixed[h]) served[h] = {};
    return served;
  }

 private:
  std::map<std::tuple<std::vector<int>, int, int>, std::pair<double, double>> groups_;
};

// The least time in which the hosts of `senders` (indices into `capacity`) together send `bytes`
// that cross a NIC for the first time, each host also serving beside a holder what `served` (by
// host index; empty: nothing) gives it, or sending that too: the sum of their capacities is
// continuous and grows with T, so bisection finds where it reaches `bytes`, and the lower end is
// returned.
double least_send_time(const std::vector<SendCapacity>& capacity, const std::vector<int>& senders,
                       double bytes, const std::vector<Served>& served = {}) {
  if (bytes <= 0) return 0;
  double nics = 0;
  for (int h : senders) nics += capacity[h].nics();
  const auto sent = [&](double t) {
    double sum = 0;
    for (int h : senders)
      if (const Served* s = served.empty() ? nullptr : &served[static_cast<size_t>(h)];
          s && s->bytes > 0)
        sum += capacity[h].serving(t, s->local, s->dev, s->bytes);
      else
        sum += capacity[h](t);
    return sum;
  };
  double lo = bytes / nics;  // capacity(T) <= nic(h) T, and serving() <= capacity(T)
  double hi = 2 * lo;
  for (int doubled = 0; sent(hi) < bytes && doubled < 64; ++doubled) hi *= 2;
  for (double mid = lo + (hi - lo) / 2; lo < mid && mid < hi; mid = lo + (hi - lo) / 2)
    (sent(mid) < bytes ? lo : hi) = mid;
  return lo;
}

// Σ b over tasks of N and the hosts ∪ HS(t) that can send them (indices of a DenseIndex), with
// served(∪ HS(t)).
class Pooled {
 public:
  explicit Pooled(int hosts) : sender_(hosts, false) {}
  void add(double bytes, const std::vector<int>& senders) {
    bytes_ += bytes;
    for (int h : senders) sender_[h] = true;
  }
  ServedBeside& served() { return served_; }
  // The least time in which the senders together send the bytes (`capacity`, per host index).
  double bound(const std::vector<SendCapacity>& capacity) const {
    std::vector<int> senders;
    for (size_t h = 0; h < sender_.size(); ++h)
      if (sender_[h]) senders.push_back(static_cast<int>(h));
    return least_send_time(capacity, senders, bytes_,
                           served_.within(senders, static_cast<int>(sender_.size())));
  }

 private:
  double bytes_ = 0;
  std::vector<bool> sender_;
  ServedBeside served_;
};

// Adds `bytes` to local(d) (docs/concepts.md#lower-bound) of each sender d of `t` that is the only
// sender on its host while another device of that host receives t: those devices get t through
// d's out-link or their host's NICs. `by_host` is scratch space.
template <typename LocalOf>
void add_local(const UnitTask& t, double bytes, const DenseIndex& hosts, const Cluster& cluster,
               std::vector<std::pair<int, DeviceId>>& by_host, LocalOf local_of) {
  by_host.clear();
  for (DeviceId d : t.receivers) by_host.emplace_back(hosts.index_of(cluster.host_of(d)), d);
  std::sort(by_host.begin(), by_host.end());
  const size_t receivers = by_host.size();
  for (DeviceId d : t.senders) by_host.emplace_back(hosts.index_of(cluster.host_of(d)), d);
  std::sort(by_host.begin() + static_cast<std::ptrdiff_t>(receivers), by_host.end());
  const auto received = by_host.begin() + static_cast<std::ptrdiff_t>(receivers);
  for (auto s = received; s != by_host.end();) {
    const auto group_end =
        std::find_if(s, by_host.end(), [&](const auto& e) { return e.first != s->first; });
    if (group_end - s == 1) {
      const auto [first, last] =
          std::equal_range(by_host.begin(), received, *s,
                           [](const auto& a, const auto& b) { return a.first < b.first; });
      if (std::any_of(first, last, [&](const auto& r) { return r.second != s->second; }))
        local_of(s->second) += bytes;
    }
    s = group_end;
  }
}

// held(S) of docs/concepts.md#lower-bound for each distinct set S of two or more hosts that hold
// a task: the least time in which S's hosts together send the bytes of tasks held only inside S
// that a host outside S receives (first(S, B), least_send_time). Tasks are grouped by (HS, HR)
// first; a batch of more than kMostTasks tasks, or more than kMostChecks subset checks, is not
// looked at further (the term only raises the bound, so leaving it out keeps a true bound): its
// cost grows with the distinct holder sets.
class HeldInside {
 public:
  static constexpr size_t kMostTasks = 4096;
  static constexpr int64_t kMostChecks = int64_t{1} << 20;

  void add(double bytes, const std::vector<int>& hs, const std::vector<int>& hr) {
    if (hs.size() < 2) return;  // only(h) covers one host
    groups_[{hs, hr}] += bytes;
  }
  ServedBeside& served() { return served_; }
  // held(S): first(S, held(S)).
  double bound(const std::vector<SendCapacity>& capacity) const {
    return most(served_.size(), [&](const std::vector<int>& set, double bytes) {
      return least_send_time(capacity, set, bytes, served_.within(set, std::ssize(capacity)));
    });
  }
  // The largest `term(S, held(S))` over the sets S (hosts by index, ascending), within the checks
  // allowed, each set costing `extra` checks besides the groups.
  template <class Term>
  double most(size_t extra, const Term& term) const {
    std::set<std::vector<int>> sets;
    for (const auto& [key, bytes] : groups_) sets.insert(key.first);
    double most = 0;
    int64_t checks = 0;
    for (const std::vector<int>& set : sets) {
      if (checks > kMostChecks) break;
      checks += static_cast<int64_t>(groups_.size() + extra);
      double bytes = 0;
      for (const auto& [key, b] : groups_)
        if (std::includes(set.begin(), set.end(), key.first.begin(), key.first.end()) &&
            !std::includes(set.begin(), set.end(), key.second.begin(), key.second.end()))
          bytes += b;
      most = std::max(most, term(set, bytes));
    }
    return most;
  }

 private:
  std::map<std::pair<std::vector<int>, std::vector<int>>, double> groups_;
  ServedBeside served_;
};

// dev_held(S) of docs/concepts.md#lower-bound for each distinct set S of two or more devices that
// hold a task: the bytes of tasks whose senders are all in S and that a device which does not hold
// them receives leave some device of S by its out-link at least once, so S's links together need
// them / Σ dev. Under the same limits as HeldInside (the singletons are dev_only's).
class HeldByDevices {
 public:
  // `senders` as ascending indices of devices whose links carry `dev` each (a DenseIndex's).
  void add(double bytes, const std::vector<int>& senders) { groups_[senders] += bytes; }
  double bound(const std::vector<double>& dev) const {
    double most = 0;
    int64_t checks = 0;
    for (const auto& [set, ignored] : groups_) {
      if (checks > HeldInside::kMostChecks) break;
      if (set.size() < 2) continue;
      checks += static_cast<int64_t>(groups_.size());
      double bytes = 0;
      for (const auto& [senders, b] : groups_)
        if (std::includes(set.begin(), set.end(), senders.begin(), senders.end())) bytes += b;
      double links = 0;
      for (int d : set) links += dev[static_cast<size_t>(d)];
      most = std::max(most, bytes / links);
    }
    return most;
  }

 private:
  std::map<std::vector<int>, double> groups_;
};

// A rail of a host for ports_time: what its NIC takes in per second, its devices' receipts (and
// stay) with the device link's rate, and what a byte of stay that comes in over the NIC saves.
struct PortRail {
  double rate = 0;
  double receipts = 0;
  double stay = 0;
  double dev = 0;
  double stay_saves = 0;
};

// What a byte a device of `host` sends over its NIC costs its send port at least, per second: the
// NIC's or the device link's rate, whichever is lower.
double own_rate(const Cluster& cluster, int host) {
  return std::min(cluster.single_nic_bandwidth_of(host),
                  cluster.device_bandwidth_of(cluster.device_id(host, 0)));
}

// The rails of host `host` for ports_time, from its `receipts` and `stay` by rail (at most
// `stay_takers` devices take each slice of stay): a receipt that comes in over its rail's NIC saves
// its dev-second; one of stay only what exceeds the port time of the byte's leaving the host first.
void add_port_rails(const Cluster& cluster, int host, const std::vector<double>& receipts,
                    const std::vector<double>& stay, int stay_takers,
                    std::vector<PortRail>& rails) {
  const double dev = cluster.device_bandwidth_of(cluster.device_id(host, 0));
  const double own = own_rate(cluster, host);
  const double stay_saves = stay_takers > 0 ? std::max(0.0, 1 / dev - 1 / (stay_takers * own)) : 0;
  const auto at = [](const std::vector<double>& v, int n) {
    return n < std::ssize(v) ? v[static_cast<size_t>(n)] : 0.0;
  };
  for (int n = 0; n < cluster.nics_of(host); ++n)
    rails.push_back({.rate = cluster.rail_bandwidth_of(host, n),
                     .receipts = at(receipts, n),
                     .stay = at(stay, n),
                     .dev = dev,
                     .stay_saves = stay_saves});
}

// ports(h) of docs/concepts.md#lower-bound (which has the proof), and ports(S) for a set S of
// hosts: the least time in which the send ports of `devices` devices, one op at a time each, spend
// `leaving` port seconds sending bytes out of their hosts and pass on over device links what they
// take in (`rails`' receipts and stay) but what comes in over the rails' NICs.
double ports_time(double leaving, double devices, const std::vector<PortRail>& rails) {
  double work = leaving;  // port seconds, none of the receipts over the NICs
  for (const PortRail& r : rails) work += (r.receipts + r.stay) / r.dev;
  // The port seconds the rails' intake saves in T, and how fast that grows: per rail 1 / dev a
  // byte up to its receipts, then stay_saves a byte up to its stay.
  const auto saved = [&](double t) {
    double sum = 0;
    for (const PortRail& r : rails)
      sum += std::min(r.rate * t, r.receipts) / r.dev +
             r.stay_saves * std::clamp(r.rate * t - r.receipts, 0.0, r.stay);
    return sum;
  };
  const auto growth = [&](double t) {
    double sum = devices;
    for (const PortRail& r : rails)
      sum += r.rate * t < r.receipts            ? r.rate / r.dev
             : r.rate * t < r.receipts + r.stay ? r.stay_saves * r.rate
                                                : 0;
    return sum;
  };
  // devices × T + saved(T) grows with T, linearly between the points where a rail's intake passes
  // its receipts and then its stay: the least T where it reaches `work` lies after the last point
  // below it.
  std::vector<double> points;
  for (const PortRail& r : rails)
    if (r.rate > 0)
      points.insert(points.end(), {r.receipts / r.rate, (r.receipts + r.stay) / r.rate});
  std::sort(points.begin(), points.end());
  double from = 0;
  double to = -1;
  for (double point : points) {
    if (devices * point + saved(point) >= work) {
      to = point;
      break;
    }
    from = point;
  }
  return from +
         (work - devices * from - saved(from)) / growth(to > from ? (from + to) / 2 : from + 1);
}

// near(d) of docs/concepts.md#lower-bound (which has the proof): the least time in which the
// devices beside `d` get the `local` bytes only `d` holds on their host (local(d)), through `d`'s
// send port or over the host's NICs, which also take in the host's `in` bytes. A byte that enters
// by a NIC no other device is on lands at `d` and leaves it by the same port, so where `d` is alone
// on its NIC only the host's other NICs help it.
double near_time(const Cluster& cluster, DeviceId d, double local, double in) {
  const int host = cluster.host_of(d);
  const double dev = cluster.device_bandwidth_of(d);
  const double nic = cluster.nic_bandwidth_of(host);
  const double own =
      alone_on_its_nic(cluster, d) ? std::min(cluster.single_nic_bandwidth_of(host), dev) : 0;
  const double helped = local / (dev + nic - own);
  return own * helped >= in ? helped : (local + in) / (dev + nic);
}

}  // namespace

LowerBound explain_lower_bound(const Batch& batch,
                               const std::vector<std::vector<UnitTask>>& tasks) {
  const Cluster& cluster = batch.cluster;
  // Tables over the hosts and devices the tasks name, not the whole cluster.
  std::vector<int64_t> device_ids;
  size_t named = 0;
  for (const UnitTask& t : std::views::join(tasks)) named += t.senders.size() + t.receivers.size();
  device_ids.reserve(named);
  for (const UnitTask& t : std::views::join(tasks)) {
    device_ids.insert(device_ids.end(), t.senders.begin(), t.senders.end());
    device_ids.insert(device_ids.end(), t.receivers.begin(), t.receivers.end());
  }
  std::vector<int64_t> host_ids;
  host_ids.reserve(device_ids.size());
  for (int64_t d : device_ids) host_ids.push_back(cluster.host_of(static_cast<DeviceId>(d)));
  const DenseIndex devices(std::move(device_ids));
  const DenseIndex hosts(std::move(host_ids));
  std::vector<double> dev(static_cast<size_t>(devices.size()));  // each device's link, bytes/s
  for (int d = 0; d < devices.size(); ++d)
    dev[static_cast<size_t>(d)] =
        cluster.device_bandwidth_of(static_cast<DeviceId>(devices.id_at(d)));
  std::vector<double> in(hosts.size(), 0);           // in(h) of docs/concepts.md, bytes
  std::vector<double> beside(hosts.size(), 0);       // beside(h)
  std::vector<double> holders_out(hosts.size(), 0);  // Σ dev(d) over the devices of holders(h)
  double taken = 0;                                  // taken(R): the tasks some device takes
  std::vector<bool> takes(hosts.size(), false);      // h is in R
  std::vector<bool> feeds(static_cast<size_t>(devices.size()), false);  // holds a task of taken(R)
  std::vector<bool> holder_counted(static_cast<size_t>(devices.size()), false);  // in holders_out
  std::vector<double> only(hosts.size(), 0);                                     // only(h)
  std::vector<bool> holds_only(static_cast<size_t>(devices.size()), false);      // holds of only(h)
  std::vector<int> in_tasks(hosts.size(), 0);                                    // tasks of in(h)
  std::vector<int> in_taken(devices.size(), 0);  // of those, what each device receives
  // Receipts on each host by the receiver's rail (receipts(h, n) of docs/concepts.md): of slices
  // only that host holds and only it needs (stay), and of all others; how many devices take a
  // slice of stay at most.
  std::vector<std::vector<double>> receipts(hosts.size());
  std::vector<std::vector<double>> stay(hosts.size());
  std::vector<int> stay_takers(hosts.size(), 0);
  const auto on_rail = [&](std::vector<std::vector<double>>& table, int h, DeviceId d) -> double& {
    std::vector<double>& rails = table[h];
    if (rails.empty()) rails.assign(static_cast<size_t>(cluster.nics_of(cluster.host_of(d))), 0);
    return rails[cluster.nic_of(d)];
  };
  std::vector<double> dev_in(devices.size(), 0);
  std::vector<double> dev_only(devices.size(), 0);   // dev_only(d)
  std::vector<double> home_only(devices.size(), 0);  // home(d): what only d has, for its host
  // Of copy(t), tensor by tensor: whether d alone holds a slice of it that it needs itself, the
  // bytes of those it holds with others and needs itself (mine(d)), and the tasks a holder must
  // send (some receiver does not hold them).
  std::vector<bool> sole_self(static_cast<size_t>(devices.size()), false);
  std::vector<double> mine(devices.size(), 0);
  std::vector<int> marked;  // the devices of this tensor whose sole_self or mine was set
  std::vector<const UnitTask*> sent;
  // copy(s): some holder s of a task that must be sent spends an op on it, and one on its own
  // slices or takes them in over its link (docs/concepts.md#lower-bound has the proof).
  const auto copy = [&](int s) {
    return sole_self[s] ? cluster.latency : std::min(cluster.latency, mine[s] / dev[s]);
  };
  double copies = 0;                              // the largest copy(t)
  std::vector<double> local(devices.size(), 0);   // local(d)
  std::vector<std::pair<int, DeviceId>> by_host;  // a task's senders or receivers, by host
  // The pooled term of the whole batch, and of each tensor's tasks alone: the bytes that must
  // leave some host of a set, over that set's bandwidth, bound any subset of the tasks, and one
  // tensor's can be the larger (a tensor held on one host, pooled with tensors held on many).
  Pooled batch_pooled(hosts.size());
  size_t task_count = 0;
  for (const auto& of_tensor : tasks) task_count += of_tensor.size();
  HeldInside held;
  HeldByDevices device_held;
  std::vector<int> senders;  // a task's senders as device indices, ascending
  std::vector<int> needing;  // holding hosts (indices) where a device that does not hold t needs it
  const bool hold_sets = task_count <= HeldInside::kMostTasks;
  std::vector<Pooled> tensor_bounds;
  // A task's sending and receiving hosts (indices into `hosts`), ascending without repeats: sorted
  // vectors kept from task to task, where sets cost an allocation per host of every task.
  std::vector<int> hs;
  std::vector<int> hr;
  const auto hosts_of = [&](const std::vector<DeviceId>& devices, std::vector<int>& out) {
    out.clear();
    for (DeviceId d : devices) out.push_back(hosts.index_of(cluster.host_of(d)));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  };
  const auto sends = [&](int h) { return std::binary_search(hs.begin(), hs.end(), h); };
  // hops of docs/concepts.md#lower-bound (which has the proof): the send-port seconds every plan
  // spends, over the devices of the tasks' hosts (a plan moves bytes through no other host). A hop
  // over the NICs moves at most `across` per second, one inside a host at most `inside`.
  double across = 0;
  double inside = 0;
  for (int h = 0; h < hosts.size(); ++h) {
    const auto host = static_cast<int>(hosts.id_at(h));
    across = std::max(across, own_rate(cluster, host));
    inside = std::max(inside, cluster.device_bandwidth_of(cluster.device_id(host, 0)));
  }
  double port_seconds = 0;
  for (const auto& of_tensor : tasks) {
    Pooled tensor_pooled(hosts.size());
    for (const UnitTask& t : of_tensor) {
      const auto b = static_cast<double>(t.bytes);
      hosts_of(t.senders, hs);
      hosts_of(t.receivers, hr);
      int entries = 0;  // receiving hosts that do not hold t
      for (int h : hr)
        if (!sends(h)) {
          in[h] += b;
          ++in_tasks[h];
          ++entries;
        }
      // Held and needed on one host alone (HS(t) = HR(t) = {h}).
      const bool stays = hs.size() == 1 && hr.size() == 1 && hr[0] == hs[0];
      if (hs.size() == 1 && !stays) {
        only[hs[0]] += b;
        for (DeviceId d : t.senders) holds_only[devices.index_of(d)] = true;
      }
      if (hold_sets) held.add(b, hs, hr);
      if (!std::includes(hs.begin(), hs.end(), hr.begin(), hr.end())) {  // t is in N
        batch_pooled.add(b, hs);
        tensor_pooled.add(b, hs);
      } else if (hs.size() >= 2 && hr.size() == 1) {  // served(S), where one device holds it there
        const auto on_host = [&](DeviceId d) {
          return hosts.index_of(cluster.host_of(d)) == hr[0];
        };
        const auto holder = std::find_if(t.senders.begin(), t.senders.end(), on_host);
        if (std::count_if(t.senders.begin(), t.senders.end(), on_host) == 1 &&
            std::any_of(t.receivers.begin(), t.receivers.end(), [&](DeviceId r) {
              return std::find(t.senders.begin(), t.senders.end(), r) == t.senders.end();
            })) {
          const int local = cluster.local_of(*holder);
          const double rate = dev[devices.index_of(*holder)];
          batch_pooled.served().add(hs, hr[0], local, rate, b);
          tensor_pooled.served().add(hs, hr[0], local, rate, b);
          if (hold_sets) held.served().add(hs, hr[0], local, rate, b);
        }
      }
      int taking = 0;  // receivers that do not hold t
      needing.clear();
      for (DeviceId d : t.receivers)
        if (std::find(t.senders.begin(), t.senders.end(), d) == t.senders.end()) {
          ++taking;
          const int h = hosts.index_of(cluster.host_of(d));
          takes[h] = true;
          dev_in[devices.index_of(d)] += b;
          if (!sends(h)) ++in_taken[devices.index_of(d)];
          on_rail(stays ? stay : receipts, h, d) += b;
          if (sends(h)) needing.push_back(h);
        } else {
          const int i = devices.index_of(d);
          marked.push_back(i);
          if (t.senders.size() == 1)
            sole_self[i] = true;
          else
            mine[i] += b;
        }
      // beside(h): t's bytes once for each holding host where a device that does not hold t
      // needs it; holders(h): t's senders there.
      std::sort(needing.begin(), needing.end());
      needing.erase(std::unique(needing.begin(), needing.end()), needing.end());
      for (int h : needing) beside[h] += b;
      for (DeviceId d : t.senders)
        if (const int i = devices.index_of(d);
            !holder_counted[i] && std::binary_search(needing.begin(), needing.end(),
                                                     hosts.index_of(cluster.host_of(d)))) {
          holder_counted[i] = true;
          holders_out[hosts.index_of(cluster.host_of(d))] += dev[i];
        }
      if (taking > 0) {
        taken += b;
        for (DeviceId d : t.senders) feeds[devices.index_of(d)] = true;
      }
      if (stays) stay_takers[hs[0]] = std::max(stay_takers[hs[0]], taking);
      if (hold_sets && taking > 0) {
        senders.clear();
        for (DeviceId d : t.senders) senders.push_back(devices.index_of(d));
        std::sort(senders.begin(), senders.end());
        device_held.add(b, senders);
      }
      port_seconds += b * (entries / across + (taking - entries) / inside);
      // A sole holder sends every byte some other receiver needs at least once.
      if (t.senders.size() == 1 && std::any_of(t.receivers.begin(), t.receivers.end(),
                                               [&](DeviceId r) { return r != t.senders[0]; })) {
        dev_only[devices.index_of(t.senders[0])] += b;
        if (stays) home_only[devices.index_of(t.senders[0])] += b;
      }
      if (taking > 0) sent.push_back(&t);
      add_local(t, b, hosts, cluster, by_host,
                [&](DeviceId d) -> double& { return local[devices.index_of(d)]; });
    }
    tensor_bounds.push_back(std::move(tensor_pooled));
    for (const UnitTask* t : sent) {
      double least = cluster.latency;
      for (DeviceId d : t->senders) least = std::min(least, copy(devices.index_of(d)));
      copies = std::max(copies, least);
    }
    sent.clear();
    for (int i : marked) {
      sole_self[i] = false;
      mine[i] = 0;
    }
    marked.clear();
  }
  // capacity(T) of each host (out(h) and the terms over sets of hosts): its holders and what of
  // their ports serves devices beside them.
  std::vector<std::map<int, double>> busy(hosts.size());
  for (const UnitTask& t : std::views::join(tasks))
    for (DeviceId d : t.senders)
      busy[hosts.index_of(cluster.host_of(d))][cluster.local_of(d)] =
          home_only[devices.index_of(d)] / dev[devices.index_of(d)];
  std::vector<SendCapacity> capacity;
  capacity.reserve(static_cast<size_t>(hosts.size()));
  for (int h = 0; h < hosts.size(); ++h)
    capacity.emplace_back(cluster, static_cast<int>(hosts.id_at(h)), busy[h]);
  // forwarded(h): where every device of host h but one receives every task of in(h), what enters
  // by the NICs and does not land on a device that needs it lands on that one, which passes it on.
  const auto forwarder_of = [&](int h) {
    const auto host = static_cast<int>(hosts.id_at(h));
    if (in[h] <= 0) return Forwarder{};
    std::vector<int> short_of;  // devices that do not receive every task of in(h), by local index
    for (int l = 0; l < cluster.devices_per_host; ++l)
      if (const DeviceId d = cluster.device_id(host, l);
          !devices.contains(d) || in_taken[devices.index_of(d)] < in_tasks[h])
        short_of.push_back(l);
    if (short_of.size() != 1) return Forwarder{};
    const int nic = cluster.nic_of(cluster.device_id(host, short_of[0]));
    double rate = 0;  // what the NICs take in at most, landing on the other devices
    for (int n = 0; n < cluster.nics_of(host); ++n)
      rate += std::min(cluster.single_nic_bandwidth_of(host),
                       cluster.device_bandwidth_of(cluster.device_id(host, 0)) *
                           (cluster.devices_on_nic(host, n) - (n == nic ? 1 : 0)));
    return Forwarder{short_of[0], in[h], rate};
  };
  // For out(h), the holders of only(h)'s bytes alone; the host's other holders are stages for those
  // bytes, whose ports serve their own neighbours too; and the device that forwards what the host
  // takes in, where one must.
  const auto only_capacity = [&](int h) {
    std::map<int, double> holders;
    std::map<int, double> stages;
    for (const auto& [local, seconds] : busy[h])
      (holds_only[devices.index_of(cluster.device_id(static_cast<int>(hosts.id_at(h)), local))]
           ? holders
           : stages)[local] = seconds;
    return std::vector{
        SendCapacity(cluster, static_cast<int>(hosts.id_at(h)), holders, stages, forwarder_of(h))};
  };
  // Each term in the order of BoundTerm, so that of equal terms the first is named; equal but for
  // rounding too (a bisection's lower end against a closed form), while the bound is the largest.
  LowerBound bound;
  double named_seconds = 0;
  const auto consider = [&](double seconds, BoundTerm term, int64_t at = -1) {
    if (seconds > named_seconds * (1 + 1e-9)) {
      named_seconds = seconds;
      bound.term = term;
      bound.at = at;
    }
    bound.seconds = std::max(bound.seconds, seconds);
  };
  const auto host_id = [&](int h) { return hosts.id_at(h); };
  for (int h = 0; h < hosts.size(); ++h)
    consider(in[h] / cluster.nic_bandwidth_of(static_cast<int>(host_id(h))), BoundTerm::in,
             host_id(h));
  for (int h = 0; h < hosts.size(); ++h)
    consider((beside[h] + in[h]) /
                 (holders_out[h] + cluster.nic_bandwidth_of(static_cast<int>(host_id(h)))),
             BoundTerm::beside, host_id(h));
  for (int h = 0; h < hosts.size(); ++h)
    if (only[h] > 0)
      consider(std::max(least_send_time(capacity, {h}, only[h]),
                        least_send_time(only_capacity(h), {0}, only[h])),
               BoundTerm::out, host_id(h));
  // ports(S) for a set of hosts (by index, ascending), `bytes` of which leave it; ports(h) is
  // ports({h}) with only(h).
  const auto ports_of = [&](const std::vector<int>& set, double bytes) {
    double own = 0;  // the cheapest way out of S, per port second
    std::vector<PortRail> rails;
    for (int h : set) {
      const auto host = static_cast<int>(host_id(h));
      own = std::max(own, own_rate(cluster, host));
      add_port_rails(cluster, host, receipts[h], stay[h], stay_takers[h], rails);
    }
    return ports_time(bytes / own, static_cast<double>(std::ssize(set)) * cluster.devices_per_host,
                      rails);
  };
  for (int h = 0; h < hosts.size(); ++h)
    if (only[h] > 0 || !receipts[h].empty() || !stay[h].empty())
      consider(ports_of({h}, only[h]), BoundTerm::ports, host_id(h));
  consider(batch_pooled.bound(capacity), BoundTerm::first);
  for (size_t i = 0; i < tensor_bounds.size(); ++i)
    consider(tensor_bounds[i].bound(capacity), BoundTerm::first_tensor, static_cast<int64_t>(i));
  consider(held.bound(capacity), BoundTerm::held);
  // ports(S): held(S) leaves S by its devices' ports, which also pass on what S's devices take in.
  consider(held.most(0, ports_of), BoundTerm::held_ports);
  consider(port_seconds / (static_cast<double>(hosts.size()) * cluster.devices_per_host),
           BoundTerm::hops);
  for (int d = 0; d < devices.size(); ++d)
    consider(dev_in[d] / dev[d], BoundTerm::dev_in, devices.id_at(d));
  for (int d = 0; d < devices.size(); ++d)
    consider(dev_only[d] / dev[d], BoundTerm::dev_only, devices.id_at(d));
  consider(device_held.bound(dev), BoundTerm::dev_held);
  for (int d = 0; d < devices.size(); ++d) {
    const auto id = static_cast<DeviceId>(devices.id_at(d));
    consider(near_time(cluster, id, local[d], in[hosts.index_of(cluster.host_of(id))]),
             BoundTerm::near, id);
  }
  consider(copies, BoundTerm::copy);
  // taken(R) over the links of R's holders and what the NICs of the tasks' other hosts can send
  // into it.
  if (taken > 0) {
    double links = 0;
    for (int d = 0; d < devices.size(); ++d)
      if (feeds[d] &&
          takes[hosts.index_of(cluster.host_of(static_cast<DeviceId>(devices.id_at(d))))])
        links += dev[d];
    double nic_inside = 0;
    double nic_outside = 0;
    for (int h = 0; h < hosts.size(); ++h)
      (takes[h] ? nic_inside : nic_outside) +=
          cluster.nic_bandwidth_of(static_cast<int>(hosts.id_at(h)));
    consider(taken / (links + std::min(nic_inside, nic_outside)), BoundTerm::taken);
  }
  // Whatever has to move travels in messages, and the first byte of the busiest resource's
  // first message waits one latency: no plan beats the bandwidth term plus one latency.
  if (bound.seconds > 0) bound.seconds += cluster.latency;
  return bound;
}

double lower_bound(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks) {
  return explain_lower_bound(batch, tasks).seconds;
}

std::optional<LowerBound> explain_plan_bound(const Plan& plan) {
  LowerBound bound = explain_lower_bound(plan.batch, decompose(plan.batch));
  if (bound.seconds != plan.lower_bound_s) return std::nullopt;
  return bound;
}

std::string_view to_string(BoundTerm term) {
  switch (term) {
    case BoundTerm::none:
      return "none";
    case BoundTerm::in:
      return "in";
    case BoundTerm::beside:
      return "beside";
    case BoundTerm::out:
      return "out";
    case BoundTerm::ports:
      return "ports";
    case BoundTerm::first:
      return "first";
    case BoundTerm::first_tensor:
      return "first_tensor";
    case BoundTerm::held:
      return "held";
    case BoundTerm::held_ports:
      return "held_ports";
    case BoundTerm::hops:
      return "hops";
    case BoundTerm::dev_in:
      return "dev_in";
    case BoundTerm::dev_only:
      return "dev_only";
    case BoundTerm::dev_held:
      return "dev_held";
    case BoundTerm::near:
      return "near";
    case BoundTerm::copy:
      return "copy";
    case BoundTerm::taken:
      return "taken";
  }
  return "?";
}

std::string describe(const LowerBound& bound, const Batch& batch) {
  const auto tensor = [&] {
    const auto i = static_cast<size_t>(bound.at);
    return i < batch.tensors.size() && !batch.tensors[i].name.empty()
               ? fmt::format("tensor '{}'", batch.tensors[i].name)
               : fmt::format("tensor {}", bound.at);
  };
  switch (bound.term) {
    case BoundTerm::none:
      return "nothing has to move";
    case BoundTerm::in:
      return fmt::format("in(h) of host {}: what it takes in over its NICs, at their bandwidth",
                         bound.at);
    case BoundTerm::beside:
      return fmt::format(
          "beside(h) of host {}: what its devices need of slices held beside them, and what it "
          "takes in, over its holders' links and its NICs",
          bound.at);
    case BoundTerm::out:
      return fmt::format("out(h) of host {}: what only it holds, sent out over its NICs", bound.at);
    case BoundTerm::ports:
      return fmt::format(
          "ports(h) of host {}: its devices' send ports, one op at a time, carry what leaves it "
          "and what its devices pass to each other",
          bound.at);
    case BoundTerm::first:
      return "first(S, B): what must cross a NIC leaves its holders' hosts at most at their rate";
    case BoundTerm::first_tensor:
      return fmt::format(
          "first(S, B) of {}: what must cross a NIC leaves its holders' hosts at most at their "
          "rate",
          tensor());
    case BoundTerm::held:
      return "held(S): what only a set of hosts holds leaves it at most at its hosts' rate";
    case BoundTerm::held_ports:
      return "ports(S): the send ports of a set of hosts' devices, one op at a time, carry what "
             "only the set holds out of it and what its devices pass to each other";
    case BoundTerm::hops:
      return "hops: every hop holds a device's send port, and the devices of the tasks' hosts "
             "have one each";
    case BoundTerm::dev_in:
      return fmt::format("dev_in(d) of device {}: what it takes in over its link", bound.at);
    case BoundTerm::dev_only:
      return fmt::format("dev_only(d) of device {}: what only it holds, sent over its link",
                         bound.at);
    case BoundTerm::dev_held:
      return "dev_held(S): what only a set of devices holds leaves it over their links";
    case BoundTerm::near:
      return fmt::format(
          "near(d) of device {}: what it alone holds on its host, passed to the devices beside it "
          "over its link or its host's other NICs",
          bound.at);
    case BoundTerm::copy:
      return "copy(t): a holder spends an op on its own slices before it sends";
    case BoundTerm::taken:
      return "taken(R): what the devices of the hosts that take bytes need and do not hold, over "
             "their holders' links and the NICs into them from the other hosts";
  }
  return "?";
}

double lower_bound(const Resharding& problem, const std::vector<UnitTask>& tasks) {
  return lower_bound(Batch::of_one(problem), {tasks});
}

}  // namespace meshcast
