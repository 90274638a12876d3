#include "balance.h"

#include "meshcast/plan/dependencies.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "meshcast/sim/simulator.h"
#include "timeline.h"

namespace meshcast::detail {
namespace {

// Part i of a transfer split into `senders.size()` parts, each sent by its own device.
std::vector<Op> split_ops(const Transfer& transfer, const Job& job,
                          const std::vector<DeviceId>& senders, const Batch& batch,
                          int64_t chunk_bytes) {
  std::vector<Op> ops;
  const int parts = static_cast<int>(senders.size());
  for (int i = 0; i < parts; ++i)
    ops.push_back(transfer_op(transfer.receivers, transfer.host_turn,
                              allgather_part(transfer.slice, parts, i), job, senders[i], batch,
                              chunk_bytes));
  return ops;
}

int holder_hosts(const Transfer& transfer, const Cluster& cluster) {
  return static_cast<int>(hosts_of(transfer.candidates, cluster).size());
}

// Whether balance order with split may cut `transfer` between its holders and its helpers.
bool helped(const Transfer& transfer, Helpers helpers) {
  return helpers == Helpers::used && transfer.helpable();
}

void append_then(std::vector<Op>& ops, const Job& job) {
  ops.insert(ops.end(), job.then.begin(), job.then.end());
}

// ---- size ----------------------------------------------------------------------------------

// Bytes each host NIC and each device have sent so far, over the jobs' candidate senders.
class Loads {
 public:
  Loads(const std::vector<Job>& jobs, const Cluster& cluster) : cluster_(cluster) {
    std::vector<int64_t> devices;
    std::vector<int64_t> hosts;
    for (const Job& job : jobs)
      for (const Transfer& t : job.transfers)
        for (DeviceId d : t.candidates) {
          devices.push_back(d);
          hosts.push_back(cluster.host_of(d));
        }
    devices_ = DenseIndex(std::move(devices));
    hosts_ = DenseIndex(std::move(hosts));
    device_.assign(devices_.size(), 0);
    host_.assign(hosts_.size(), 0);
  }
  int64_t host(int h) const { return host_[hosts_.index_of(h)]; }
  int64_t device(DeviceId d) const { return device_[devices_.index_of(d)]; }
  // `d` sends `bytes` of `transfer`: its host's NIC carries them when a receiver is elsewhere.
  void add(const Transfer& transfer, DeviceId d, int64_t bytes) {
    const int h = cluster_.host_of(d);
    if (leaves_host(transfer, h)) host_[hosts_.index_of(h)] += bytes;
    device_[devices_.index_of(d)] += bytes;
  }
  bool leaves_host(const Transfer& transfer, int host) const {
    return std::any_of(transfer.receivers.begin(), transfer.receivers.end(),
                       [&](DeviceId r) { return cluster_.host_of(r) != host; });
  }

 private:
  const Cluster& cluster_;
  DenseIndex devices_;
  DenseIndex hosts_;
  std::vector<int64_t> device_;
  std::vector<int64_t> host_;
};

// The holder on the least-loaded host after sending `bytes` (ties: least-loaded device, then mesh
// order), skipping `used` hosts.
DeviceId pick_least_loaded(const Transfer& transfer, int64_t bytes, const std::vector<int>& used,
                           const Loads& loads, const Cluster& cluster) {
  DeviceId best = -1;
  std::pair<int64_t, int64_t> best_key;
  for (DeviceId d : transfer.candidates) {
    const int h = cluster.host_of(d);
    if (std::find(used.begin(), used.end(), h) != used.end()) continue;
    const int64_t out = loads.leaves_host(transfer, h) ? bytes : 0;
    const std::pair key{loads.host(h) + out, loads.device(d)};
    if (best < 0 || key < best_key) {
      best = d;
      best_key = key;
    }
  }
  return best;
}

// The most bytes any of `hosts` will have sent once each of `senders` sends its `bytes`.
int64_t max_load_after(const Loads& loads, const std::vector<int>& hosts, const Transfer& transfer,
                       const std::vector<DeviceId>& senders, const std::vector<int64_t>& bytes,
                       const Cluster& cluster) {
  int64_t most = 0;
  for (int h : hosts) {
    int64_t load = loads.host(h);
    for (size_t i = 0; i < senders.size(); ++i)
      if (cluster.host_of(senders[i]) == h && loads.leaves_host(transfer, h)) load += bytes[i];
    most = std::max(most, load);
  }
  return most;
}

// ---- order ---------------------------------------------------------------------------------

// The search's budget is counted in work units, not time, so that a plan never depends on the
// machine's speed or load. A unit is about what probing one device of a candidate op costs:
// some 40 ns on the 2026 development machine, where effort 1 searches for about 10 ms (as long
// as the wall-clock budget this replaced).
constexpr double kSearchWork = 250'000;

enum class SplitChoice : int8_t { automatic, no, yes };

struct Genome {
  std::vector<int> order;          // job indices in scheduling order
  std::vector<SplitChoice> split;  // per job
};

// The ops placed so far, in placing order, with when each starts.
class Placed {
 public:
  void add(Slot slot, Op op) {
    starts_.emplace_back(slot.start, static_cast<int>(ops_.size()));
    ops_.push_back(std::move(op));
  }
  // The ops in start order (ties: placing order), rearranged where they are: a second array of a
  // quarter of a million ops would be as many fresh pages again.
  std::vector<Op> in_start_order() && {
    std::sort(starts_.begin(), starts_.end());
    // Position i takes the op at starts_[i].second: each cycle of that permutation is followed
    // once, and its positions marked done (-1).
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (starts_[i].second < 0) continue;
      Op first = std::move(ops_[i]);
      size_t to = i;
      for (auto from = static_cast<size_t>(starts_[to].second); from != i;
           from = static_cast<size_t>(starts_[to].second)) {
        ops_[to] = std::move(ops_[from]);
        starts_[to].second = -1;
        to = from;
      }
      ops_[to] = std::move(first);
      starts_[to].second = -1;
    }
    return std::move(ops_);
  }

 private:
  std::vector<Op> ops_;
  std::vector<std::pair<double, int>> starts_;  // (start, index into ops_)
};

struct Decoded {
  std::vector<Op> ops;             // in start order
  std::vector<SplitChoice> split;  // what each job did
  double makespan = 0;  // the simulated time of `ops` (what estimate() reports), once timed
  int64_t work = 0;     // what decoding (and timing) cost, in work units (kSearchWork)
};

// Every device the jobs may name: candidate senders and helpers, receivers and their follow-up
// ops' devices.
std::vector<DeviceId> devices_of(const std::vector<Job>& jobs) {
  std::vector<DeviceId> devices;
  for (const Job& job : jobs) {
    for (const Transfer& t : job.transfers) {
      devices.insert(devices.end(), t.candidates.begin(), t.candidates.end());
      devices.insert(devices.end(), t.receivers.begin(), t.receivers.end());
      devices.insert(devices.end(), t.stages.begin(), t.stages.end());
      devices.insert(devices.end(), t.helpers.begin(), t.helpers.end());
    }
    for (const Op& op : job.then)
      devices.insert(devices.end(), op.receivers.begin(), op.receivers.end());
  }
  return devices;
}

// Bytes each host must send over its NIC as the only host holding them: what it sends in any
// plan (the only(h) of docs/concepts.md#lower-bound, over the jobs' transfers).
class Duties {
 public:
  Duties(const std::vector<Job>& jobs, const Cluster& cluster) {
    std::vector<std::pair<int64_t, int64_t>> sole;  // (host, bytes)
    for (const Job& job : jobs)
      for (const Transfer& t : job.transfers) {
        const int h = cluster.host_of(t.candidates[0]);
        const auto on_h = [&](DeviceId d) { return cluster.host_of(d) == h; };
        if (std::all_of(t.candidates.begin(), t.candidates.end(), on_h) &&
            !std::all_of(t.receivers.begin(), t.receivers.end(), on_h))
          sole.emplace_back(h, t.bytes);
      }
    std::vector<int64_t> hosts;
    for (const auto& [h, bytes] : sole) hosts.push_back(h);
    hosts_ = DenseIndex(std::move(hosts));
    bytes_.assign(hosts_.size(), 0);
    for (const auto& [h, bytes] : sole) bytes_[hosts_.index_of(h)] += static_cast<double>(bytes);
  }
  double of(int host) const { return hosts_.contains(host) ? bytes_[hosts_.index_of(host)] : 0; }

 private:
  DenseIndex hosts_;
  std::vector<double> bytes_;
};

class OrderPlanner {
 public:
  OrderPlanner(const Batch& batch, const std::vector<Job>& jobs, const PlanOptions& options,
               Shape shape, Receipts receipts, Helpers helpers)
      : batch_(batch),
        jobs_(jobs),
        options_(options),
        shape_(shape),
        helpers_(helpers),
        bucket_bytes_(default_bucket_bytes(batch.cluster)),
        model_(batch, devices_of(jobs), receipts == Receipts::over_nics_at_once),
        duties_(jobs, batch.cluster),
        own_begin_(jobs.size() + 1, 0) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      for (const Transfer& t : jobs[j].transfers)
        if (t.candidates.size() == 1)
          own_.emplace_back(model_.device_index(t.candidates[0]), static_cast<double>(t.bytes));
      own_begin_[j + 1] = static_cast<int>(own_.size());
    }
  }

  Decoded decode(const Genome& genome) const {
    Schedule schedule(model_);
    Placed placed;
    Decoded out;
    out.split = genome.split;
    // Copies first: each holds both ports of its device for about one latency, from data in the
    // device's source tile, so it delays nothing at the start, while placed between two transfers
    // it would join them into one chain of waits.
    for (int j : genome.order)
      for (const Op& op : jobs_[j].then)
        if (op.kind == OpKind::copy) record(schedule.insert(model_.cost_of(op), 0), op, placed);
    // Bytes each device must still send as the only holder, in the jobs not placed yet.
    std::vector<double> own_left(model_.devices(), 0);
    for (const auto& [d, bytes] : own_) own_left[d] += bytes;
    for (int j : genome.order) {
      const Job& job = jobs_[j];
      bool did_split = false;
      double done = 0;  // an allgather waits for the transfers of its parts
      for (int k = own_begin_[j]; k < own_begin_[j + 1]; ++k)
        own_left[own_[k].first] -= own_[k].second;
      for (const Transfer& t : job.transfers)
        did_split |=
            place_transfer(t, job, genome.split[j], schedule, own_left, placed, done, out.work);
      if (genome.split[j] == SplitChoice::automatic)
        out.split[j] = did_split ? SplitChoice::yes : SplitChoice::no;
      for (const Op& op : job.then)
        if (op.kind != OpKind::copy) record(schedule.insert(model_.cost_of(op), done), op, placed);
    }
    out.ops = std::move(placed).in_start_order();
    // Recording and sorting the ops: a unit per op and level of the sort.
    const auto ops = static_cast<int64_t>(out.ops.size());
    out.work += ops * std::bit_width(static_cast<uint64_t>(ops));
    return out;
  }

  // The decoded plan's simulated time (what estimate() reports), its steps added to its work.
  void time(Decoded& decoded) const {
    const SimTime simulated = simulate_time(batch_, decoded.ops);
    decoded.makespan = simulated.time_s;
    decoded.work += simulated.steps;
  }

  // Decodes and times.
  Decoded timed(const Genome& genome) const {
    Decoded decoded = decode(genome);
    time(decoded);
    return decoded;
  }

 private:
  static void record(Slot slot, Op op, Placed& placed) { placed.add(slot, std::move(op)); }

  // The ops that deliver one transfer (or one part of it) from one sender, placed in order.
  struct Candidate {
    std::vector<Op> ops;
    // Per op: the op (an index into ops) whose receipt it forwards, or -1; empty: all -1.
    std::vector<int> after;
    // Per op: its cost, and where it goes, after the ones before it (one vector for both: a
    // candidate is built for every holder probed, and each vector is an allocation).
    struct Placing {
      CostModel::Cost cost;
      Slot slot;
    };
    std::vector<Placing> placings;
    double finish = 0;  // when the last of them ends
  };

  // Where `ops` would go, one after the other, in `schedule` as it is (which is left so: all but
  // the last are inserted while the next is probed, then removed).
  Candidate probe(std::vector<Op> ops, std::vector<int> after, Schedule& schedule) const {
    Candidate c;
    c.ops = std::move(ops);
    c.after = std::move(after);
    for (size_t i = 0; i < c.ops.size(); ++i) {
      Candidate::Placing& p = c.placings.emplace_back();
      p.cost = model_.cost_of(c.ops[i]);
      const bool last = i + 1 == c.ops.size();
      const double release = release_of(c, i);
      p.slot = last ? schedule.probe(p.cost, release) : schedule.insert(p.cost, release);
      c.finish = std::max(c.finish, p.slot.finish);
    }
    for (size_t i = c.ops.size() - 1; i-- > 0;)
      schedule.remove(c.placings[i].cost, c.placings[i].slot);
    return c;
  }

  // `ops` in a vector, moved (a braced list would copy each).
  template <typename... Ops>
  static std::vector<Op> ops_of(Ops&&... ops) {
    std::vector<Op> out;
    out.reserve(sizeof...(ops));
    (out.push_back(std::forward<Ops>(ops)), ...);
    return out;
  }

  // When op `i` of `c` may start: once the receipt it forwards has ended.
  static double release_of(const Candidate& c, size_t i) {
    return c.after.empty() || c.after[i] < 0 ? 0 : c.placings[c.after[i]].slot.finish;
  }

  static void insert(Candidate& c, Schedule& schedule) {
    c.finish = 0;
    for (size_t i = 0; i < c.ops.size(); ++i) {
      Candidate::Placing& p = c.placings[i];
      p.slot = schedule.insert(p.cost, release_of(c, i));
      c.finish = std::max(c.finish, p.slot.finish);
    }
  }

  static void remove(const Candidate& c, Schedule& schedule) {
    for (size_t i = c.ops.size(); i-- > 0;) schedule.remove(c.placings[i].cost, c.placings[i].slot);
  }

  static void record(Candidate&& c, Placed& placed) {
    for (size_t i = 0; i < c.ops.size(); ++i)
      record(c.placings[i].slot, std::move(c.ops[i]), placed);
  }

  // The ops from the holder (not on `used` hosts) that finish soonest, among the kProbed holders
  // whose send port and NIC are idle for good the soonest (all of them on small problems; a slice
  // replicated on thousands of hosts is not chained thousands of times). Each holder is probed
  // with one chain to every receiver and, when some receivers share its host and some do not, with
  // a chain to the others followed by one to those on its host: a chain moves at its slowest
  // (NIC) hop's rate, holding every relay on it (a device sends one op at a time), while the device
  // link delivers to a device of the sender's host in a tenth of that. Adds to `work` a unit per
  // holder ranked, two per op probed (building it) and one per device of each op.
  Candidate soonest(const Transfer& t, const Box& slice, const Job& job,
                    const std::vector<int>& used, Schedule& schedule,
                    const std::vector<double>& own_left, int64_t& work) const {
    constexpr size_t kProbed = 8;
    // (idle from, index into candidates), kept from transfer to transfer (one per thread): a
    // problem of a quarter of a million transfers would allocate it as many times.
    thread_local std::vector<std::pair<double, int>> ranked;
    // Of `devices` not on `used` hosts, the kProbed whose send port and NIC are idle soonest (all
    // of them where there are no more), in the order of `devices`.
    const auto rank = [&](const std::vector<DeviceId>& devices) {
      ranked.clear();
      for (int i = 0; i < static_cast<int>(devices.size()); ++i) {
        const DeviceId d = devices[i];
        if (std::find(used.begin(), used.end(), batch_.cluster.host_of(d)) != used.end()) continue;
        ranked.emplace_back(std::max(schedule.idle_from(model_.port(d, /*in=*/false)),
                                     schedule.idle_from(model_.nic(d, /*in=*/false))),
                            i);
      }
      work += static_cast<int64_t>(ranked.size());
      if (ranked.size() > kProbed) {
        std::partial_sort(ranked.begin(), ranked.begin() + kProbed, ranked.end());
        ranked.resize(kProbed);
        std::sort(ranked.begin(), ranked.end(),
                  [](const auto& a, const auto& b) { return a.second < b.second; });
      }
    };
    rank(t.candidates);
    // Which device's sending ends soonest decides between devices that are otherwise alike, but
    // only for a slice of at least a bucket: a smaller one costs about a latency, and from the
    // first holder along the same chain as the others it fuses with them into one bucket. A
    // device's sending ends after its busy send port and then its own slices still to place (the
    // bytes only it holds, at its NIC's rate).
    const bool spread = slice_bytes(batch_, job, slice) >= bucket_bytes_;
    const auto sending_ends = [&](DeviceId d) {
      return spread ? schedule.idle_from(model_.port(d, /*in=*/false)) +
                          own_left[model_.device_index(d)] /
                              batch_.cluster.single_nic_bandwidth_of(batch_.cluster.host_of(d))
                    : 0.0;
    };
    // A host is entered where its NIC frees soonest (on ties its first NIC: with several NICs the
    // chains spread over them in turn, as transfer_op orders the rest of the host), at the device
    // of that NIC whose sending ends soonest: every device of a chain but the last relays, and a
    // relay sends one op at a time, so a device with slices of its own to send would send them
    // only after the chain. For the same reason the last host's device whose sending ends last
    // ends the chain, where it only receives.
    const auto entry_key = [&](DeviceId r) {
      return std::tuple(schedule.idle_from(model_.nic(r, /*in=*/true)), batch_.cluster.nic_of(r),
                        sending_ends(r));
    };
    // The keys refer to the lambdas rather than copy them: a std::function allocates for a copy
    // of a lambda this large, for every transfer placed.
    const ChainKeys keys{
        std::cref(entry_key),
        t.hosts_in_turn ? std::function<double(int)>{}
                        : std::function<double(int)>([this](int host) { return duties_.of(host); }),
        spread ? std::function<double(DeviceId)>(std::cref(sending_ends))
               : std::function<double(DeviceId)>{}};
    // The keys with the receivers beside the sender last in the chain (made only where asked:
    // each copy of a std::function costs, for every transfer placed).
    const auto home_last = [&] {
      ChainKeys back = keys;
      back.home_last = true;
      return back;
    };
    const auto op_to = [&](std::vector<DeviceId> receivers, DeviceId sender,
                           const ChainKeys& chain_keys) {
      work += 2 + static_cast<int64_t>(receivers.size());
      return transfer_op(std::move(receivers), t.host_turn, slice, job, sender, batch_,
                         options_.chunk_bytes, chain_keys);
    };
    // Ties (holders on one host, whose NIC the timeline holds whole for each op) go to the holder
    // whose sending ends soonest: the simulator, like the rule, runs sends of different devices
    // at once, sharing the NIC, while one device's sends wait for each other. A slice with a delay
    // line (an idle device beside its holders, delay_line_jobs) first goes, on ties, the way whose
    // first op starts soonest: the timeline holds a send until its receiver is free, but a device
    // starts its next op as soon as its last one ends, so the slice should wait on the idle device.
    const bool delay_line = !t.stages.empty() && t.within_holding_hosts(batch_.cluster);
    std::optional<Candidate> best;
    double best_sending = 0;
    double best_start = 0;
    const auto consider = [&](std::vector<Op> ops, std::vector<int> after) {
      Candidate c = probe(std::move(ops), std::move(after), schedule);
      const double sending = sending_ends(*c.ops[0].sender);
      const double start = delay_line ? c.placings[0].slot.start : 0.0;
      if (!best || c.finish < best->finish ||
          (c.finish == best->finish &&
           (start < best_start || (start == best_start && sending < best_sending)))) {
        best = std::move(c);
        best_sending = sending;
        best_start = start;
      }
    };
    const Cluster& cluster = batch_.cluster;
    for (const auto& [idle, i] : ranked) {
      const DeviceId sender = t.candidates[i];
      const int home_host = cluster.host_of(sender);
      if (t.through_stage) {
        const DeviceId stage = t.stages[0];
        consider(ops_of(op_to({stage}, sender, keys), t.home_back
                                                          ? op_to(t.receivers, stage, home_last())
                                                          : op_to(t.receivers, stage, keys)),
                 {-1, 0});
        continue;
      }
      if (t.home_back) {
        consider(ops_of(op_to(t.receivers, sender, home_last())), {});
        continue;
      }
      if (shape_ == Shape::chains) {
        consider(ops_of(op_to(t.receivers, sender, keys)), {});
        // Handed over the device link to the stage first, the slice leaves by the stage's NIC
        // while the holder's send port is free again after a tenth of the time or so.
        if (const auto stage = t.stage_on(home_host, cluster))
          consider(ops_of(op_to({*stage}, sender, keys), op_to(t.receivers, *stage, keys)),
                   {-1, 0});
        if (t.receivers.size() < 2) continue;  // (one receiver is on the home host or away)
        std::vector<DeviceId> home, away;
        for (DeviceId r : t.receivers) (cluster.host_of(r) == home_host ? home : away).push_back(r);
        if (!home.empty() && !away.empty()) {
          consider(
              ops_of(op_to(std::move(away), sender, keys), op_to(std::move(home), sender, keys)),
              {});
          // Or the receivers beside the sender last in the one chain, which brings the slice
          // back to them over NICs that may have nothing else to carry.
          consider(ops_of(op_to(t.receivers, sender, home_last())), {});
        }
        continue;
      }
      // The receivers by host: the sender's host first, then the others in cyclic order of host
      // id from the sender's (for relayed_down, the other way round), so that holders on
      // different hosts start on different hosts.
      std::map<int, std::vector<DeviceId>> by_host;
      for (DeviceId r : t.receivers) by_host[cluster.host_of(r)].push_back(r);
      std::vector<std::vector<DeviceId>> groups;
      if (auto it = by_host.find(home_host); it != by_host.end()) groups.push_back(it->second);
      const auto others = groups.size();
      for (auto it = by_host.upper_bound(home_host); it != by_host.end(); ++it)
        groups.push_back(it->second);
      for (auto it = by_host.begin(); it != by_host.end() && it->first < home_host; ++it)
        groups.push_back(it->second);
      if (shape_ == Shape::relayed_down) std::reverse(groups.begin() + others, groups.end());
      const bool relay = shape_ == Shape::relayed || shape_ == Shape::relayed_down;
      std::vector<Op> ops;
      std::vector<int> after;
      DeviceId from = sender;
      int from_op = -1;
      for (std::vector<DeviceId>& group : groups) {
        const bool home = cluster.host_of(group[0]) == home_host;
        ops.push_back(op_to(std::move(group), home ? sender : from, keys));
        after.push_back(home ? -1 : from_op);
        if (relay && !home) {
          from = ops.back().receivers.back();
          from_op = static_cast<int>(ops.size()) - 1;
        }
      }
      consider(std::move(ops), std::move(after));
    }
    // A slice under a bucket costs about a latency whichever link it crosses, so where its
    // receivers' host holds it, the holders on other hosts (the transfer's helpers) may send it
    // too: the holders beside the receivers may be busy with their own copies (two bytes that a
    // device needed from the one holder beside it, which copied its own slice first: 10 us
    // against a bound of 5, random suite seed 3005 r13).
    // (Ranked as the holders are, then probed idle soonest first.)
    if (!spread && !t.helpers.empty()) {
      rank(t.helpers);
      std::sort(ranked.begin(), ranked.end());
      for (const auto& [idle, i] : ranked)
        consider(ops_of(op_to(t.receivers, t.helpers[i], keys)), {});
    }
    return std::move(*best);
  }

  // A transfer to devices beside its holders (`whole`: the slice from them), cut in two: the
  // holders' part over device links and the helpers' part (from holders on other hosts) over the
  // receivers' host's NICs, where a holder that serves several devices beside it takes longer
  // than its host's NICs would (docs/concepts.md#lower-bound, near(d)). The helpers' share is
  // the one at which both parts would end together, each sent from when its sender is free at
  // its rate for the whole slice. Places the two parts (into `parts` and `schedule`) and returns
  // when the later ends; places nothing where either part would be under a fiftieth.
  double place_helped(const Transfer& t, const Job& job, const Candidate& whole, Schedule& schedule,
                      const std::vector<double>& own_left, std::vector<Candidate>& parts,
                      int64_t& work) const {
    constexpr double kLeastShare = 0.02;
    Transfer from_helpers = t;
    from_helpers.candidates = t.helpers;
    const Candidate away = soonest(from_helpers, t.slice, job, {}, schedule, own_left, work);
    const auto start_of = [](const Candidate& c) {
      double start = c.finish;
      for (const auto& placing : c.placings) start = std::min(start, placing.slot.start);
      return start;
    };
    const double away_start = start_of(away);
    const double share =
        (whole.finish - away_start) / (whole.finish - start_of(whole) + away.finish - away_start);
    if (!(share >= kLeastShare && share <= 1 - kLeastShare)) return 0;
    const std::vector<Box> cut = cut_at_weights(t.slice, {1 - share, share});
    if (cut[0].empty() || cut[1].empty()) return 0;
    double finish = 0;
    for (int i : {0, 1}) {
      Candidate part =
          soonest(i == 0 ? t : from_helpers, cut[i], job, {}, schedule, own_left, work);
      insert(part, schedule);
      finish = std::max(finish, part.finish);
      parts.push_back(std::move(part));
    }
    return finish;
  }

  // Places one transfer whole or split; returns whether it was split. `done` grows to the
  // latest finish, `work` by the probes.
  bool place_transfer(const Transfer& t, const Job& job, SplitChoice choice, Schedule& schedule,
                      const std::vector<double>& own_left, Placed& placed, double& done,
                      int64_t& work) const {
    const int parts = options_.split && choice != SplitChoice::no
                          ? split_parts(t, holder_hosts(t, batch_.cluster))
                          : 1;
    Candidate whole = soonest(t, t.slice, job, {}, schedule, own_left, work);
    std::vector<Candidate> pieces;
    double finish = 0;
    if (options_.split && choice != SplitChoice::no && helped(t, helpers_)) {
      finish = place_helped(t, job, whole, schedule, own_left, pieces, work);
    } else if (parts > 1) {
      std::vector<int> used;
      for (int i = 0; i < parts; ++i) {
        Candidate piece =
            soonest(t, allgather_part(t.slice, parts, i), job, used, schedule, own_left, work);
        used.push_back(batch_.cluster.host_of(*piece.ops[0].sender));
        insert(piece, schedule);
        finish = std::max(finish, piece.finish);
        pieces.push_back(std::move(piece));
      }
    }
    if (!pieces.empty() && (choice == SplitChoice::yes || finish < whole.finish)) {
      for (Candidate& piece : pieces) record(std::move(piece), placed);
      done = std::max(done, finish);
      return true;
    }
    for (size_t i = pieces.size(); i-- > 0;) remove(pieces[i], schedule);
    insert(whole, schedule);
    done = std::max(done, whole.finish);
    record(std::move(whole), placed);
    return false;
  }

  const Batch& batch_;
  const std::vector<Job>& jobs_;
  const PlanOptions& options_;
  Shape shape_;
  Helpers helpers_;
  int64_t bucket_bytes_;  // the default bucket size (a slice below it costs about a latency)
  CostModel model_;
  Duties duties_;
  // (device index, bytes) of each slice that one device alone holds: job j's are own_[k] for k
  // in [own_begin_[j], own_begin_[j + 1]).
  std::vector<std::pair<int, double>> own_;
  std::vector<int> own_begin_;
};

// Every job's transfers as ops from the senders `choose(job, transfer, parts)` picks (one per part
// of a split transfer), each job followed by its own follow-up ops: balance none and size differ
// only in that choice.
template <typename ChooseSenders>
std::vector<Op> ops_from_senders(const Batch& batch, const std::vector<Job>& jobs,
                                 const PlanOptions& options, ChooseSenders choose) {
  std::vector<Op> ops;
  for (const Job& job : jobs) {
    for (const Transfer& t : job.transfers) {
      const int parts = options.split ? split_parts(t, holder_hosts(t, batch.cluster)) : 1;
      for (Op& op : split_ops(t, job, choose(job, t, parts), batch, options.chunk_bytes))
        ops.push_back(std::move(op));
    }
    append_then(ops, job);
  }
  return ops;
}

// The hosts `job` sends to over NICs: those of its receivers where no holder of their slice is.
std::set<int> receiving_hosts(const Job& job, const Cluster& cluster) {
  std::set<int> hosts;
  for (const Transfer& t : job.transfers) {
    const auto holders = hosts_of(t.candidates, cluster);
    for (DeviceId r : t.receivers)
      if (std::find(holders.begin(), holders.end(), cluster.host_of(r)) == holders.end())
        hosts.insert(cluster.host_of(r));
  }
  return hosts;
}

// The jobs of one round in [first, last), each holder host's (the host of its first transfer's
// first holder) reordered so that the j-th jobs of different holder hosts go to different
// receiving hosts where they can: holders on different hosts whose jobs go to the same receiving
// hosts in the same order would all send into one receiving NIC at once, sharing it while the
// others idle (a device sends its ops in plan order). Position by position, each holder host in
// turn takes its first job left whose receiving hosts no holder host before it took there, else
// its first job left, so jobs that do not collide keep their order; `rotated`, the k-th holder
// host's jobs are first rotated by k, as in the rounds of an open shop (which finds rounds without
// collisions where the first fit does not, and the other way round where the holder hosts' jobs go
// to different receiving hosts).
template <typename It>
void spread_receivers(It first, It last, bool rotated, const Cluster& cluster) {
  using JobPtr = typename std::iterator_traits<It>::value_type;
  std::map<int, int> rank_of;       // holder host -> rank, in order of first appearance
  std::vector<std::vector<It>> at;  // per rank: the positions of its jobs
  // Per rank: its jobs not placed yet, each with its receiving hosts.
  std::vector<std::vector<std::pair<JobPtr, std::set<int>>>> left;
  for (It it = first; it != last; ++it) {
    if ((*it)->transfers.empty()) continue;  // a gather only: it sends nothing over a NIC
    const int host = cluster.host_of((*it)->transfers[0].candidates[0]);
    const auto [entry, added] = rank_of.try_emplace(host, static_cast<int>(at.size()));
    if (added) {
      at.emplace_back();
      left.emplace_back();
    }
    at[entry->second].push_back(it);
    left[entry->second].emplace_back(*it, receiving_hosts(**it, cluster));
  }
  if (at.size() < 2) return;
  if (rotated)
    for (size_t rank = 1; rank < at.size(); ++rank)
      std::rotate(left[rank].begin(),
                  left[rank].begin() + static_cast<std::ptrdiff_t>(rank % left[rank].size()),
                  left[rank].end());
  std::vector<size_t> placed(at.size(), 0);
  for (bool more = true; more;) {
    more = false;
    std::set<int> taken;  // receiving hosts of this position's jobs so far
    for (size_t rank = 0; rank < at.size(); ++rank) {
      auto& jobs = left[rank];
      if (jobs.empty()) continue;
      auto pick = std::find_if(jobs.begin(), jobs.end(), [&](const auto& job) {
        return std::none_of(job.second.begin(), job.second.end(),
                            [&](int h) { return taken.contains(h); });
      });
      if (pick == jobs.end()) pick = jobs.begin();
      taken.insert(pick->second.begin(), pick->second.end());
      *at[rank][placed[rank]++] = pick->first;
      jobs.erase(pick);
      more |= !jobs.empty();
    }
  }
}

}  // namespace

std::vector<Op> balance_none(const Batch& batch, const std::vector<Job>& jobs,
                             const PlanOptions& options) {
  return ops_from_senders(batch, jobs, options, [&](const Job&, const Transfer& t, int parts) {
    std::vector<DeviceId> senders;  // the first holder of each of the first `parts` hosts
    for (int h : hosts_of(t.candidates, batch.cluster)) {
      if (static_cast<int>(senders.size()) == parts) break;
      senders.push_back(*std::find_if(t.candidates.begin(), t.candidates.end(),
                                      [&](DeviceId d) { return batch.cluster.host_of(d) == h; }));
    }
    return senders;
  });
}

std::vector<Op> balance_size(const Batch& batch, const std::vector<Job>& jobs,
                             const PlanOptions& options) {
  const Cluster& cluster = batch.cluster;
  Loads loads(jobs, cluster);
  return ops_from_senders(batch, jobs, options, [&](const Job& job, const Transfer& t, int parts) {
    const int element = dtype_size(batch.tensors[job.tensor].tensor.dtype);
    std::vector<DeviceId> senders{pick_least_loaded(t, t.bytes, {}, loads, cluster)};
    std::vector<int64_t> bytes{t.bytes};
    if (parts > 1) {
      // Each part goes to a host not used yet, so one part's pick never changes another's loads.
      std::vector<DeviceId> split_senders;
      std::vector<int64_t> split_bytes;
      std::vector<int> used;
      for (int i = 0; i < parts; ++i) {
        split_bytes.push_back(allgather_part(t.slice, parts, i).volume() * element);
        split_senders.push_back(pick_least_loaded(t, split_bytes.back(), used, loads, cluster));
        used.push_back(cluster.host_of(split_senders.back()));
      }
      const auto holders = hosts_of(t.candidates, cluster);
      if (max_load_after(loads, holders, t, split_senders, split_bytes, cluster) <
          max_load_after(loads, holders, t, senders, bytes, cluster)) {
        senders = std::move(split_senders);
        bytes = std::move(split_bytes);
      }
    }
    for (size_t i = 0; i < senders.size(); ++i) loads.add(t, senders[i], bytes[i]);
    return senders;
  });
}

std::vector<Op> balance_rounds(const Batch& batch, const std::vector<Job>& jobs,
                               const PlanOptions& options, bool rotated, Deferral deferral) {
  const Cluster& cluster = batch.cluster;
  Loads loads(jobs, cluster);
  std::vector<const Job*> order;
  for (const Job& job : jobs) order.push_back(&job);
  std::stable_sort(order.begin(), order.end(),
                   [](const Job* a, const Job* b) { return a->round < b->round; });
  // The holder of `t` on `host` that has sent the fewest bytes so far.
  const auto least_loaded_on = [&](const Transfer& t, int host) {
    DeviceId sender = -1;
    for (DeviceId d : t.candidates)
      if (cluster.host_of(d) == host && (sender < 0 || loads.device(d) < loads.device(sender)))
        sender = d;
    return sender;
  };
  std::map<std::pair<int, int>, int64_t> nic_out;  // bytes sent per (host, NIC)
  std::vector<Op> ops;    // the round's hand-overs to stages, then its sends
  std::vector<Op> sends;  // the round's transfers from their senders or stages
  // Per round: its hand-overs and sends, and its follow-ups (gathers, copies).
  std::vector<std::pair<std::vector<Op>, std::vector<Op>>> rounds;
  // Transfers into hosts that hold their slice, over device links only: after every round, so
  // that a holder's hand-overs to its stages, each a fraction of a rail's time on the NIC, never
  // wait for them.
  std::vector<std::pair<const Job*, const Transfer*>> local;
  // Devices that send over a NIC or hand over to a stage in some round: a transfer into a holding
  // host whose sender is none of them goes with its round's gathers instead, as it delays nothing
  // that leaves a host (a holder whose own half goes to a device beside it while the other half
  // arrives from another host's holder would otherwise copy it only after the last round).
  std::set<DeviceId> leaving;
  for (const Job& job : jobs)
    for (const Transfer& t : job.transfers)
      if (!t.within_holding_hosts(cluster))
        leaving.insert(t.candidates.begin(), t.candidates.end());
  for (auto first = order.begin(); first != order.end();) {
    const auto last = std::find_if(first, order.end(),
                                   [&](const Job* job) { return job->round != (*first)->round; });
    spread_receivers(first, last, rotated, cluster);
    // The round's transfers wave by wave: the first of each job, then the second, ...: a job's
    // rails from one holder leave one after another, and a device plays its ops in plan order, so
    // job by job the second job's first rail would wait for the first job's last.
    std::vector<Op> next;
    size_t waves = 0;
    for (auto it = first; it != last; ++it) {
      waves = std::max(waves, (*it)->transfers.size());
      next.insert(next.end(), (*it)->then.begin(), (*it)->then.end());
    }
    // Where several hosts hold a job's slice, each sends a run of its rails, the runs starting on
    // different rails at once (a job's rails start at its holders' NIC: rail_jobs), and
    // the jobs of a round start their runs on different hosts. A device plays its ops in plan order
    // but devices do not wait for each other, so a holder's later rails start as soon as its
    // earlier ones end: runs keep two holders from sending into one receiving NIC at once.
    for (size_t wave = 0; wave < waves; ++wave)
      for (auto it = first; it != last; ++it) {
        const Job& job = **it;
        if (wave >= job.transfers.size()) continue;
        const Transfer& t = job.transfers[wave];
        if (t.within_holding_hosts(cluster)) {
          const DeviceId sender = least_loaded_on(t, cluster.host_of(t.receivers[0]));
          if (leaving.contains(sender)) {
            local.emplace_back(&job, &t);
          } else {
            loads.add(t, sender, t.bytes);
            next.push_back(transfer_op(t.receivers, t.host_turn, t.slice, job, sender, batch,
                                       options.chunk_bytes));
          }
          continue;
        }
        // Where a job has staged rails, each of its rails leaves by the holding host whose NIC
        // for it (its stage's, else its holder's) has sent the fewest bytes so far (on ties the
        // host of the run): runs alternate hosts job by job, which loads the NICs of holders that
        // stage unevenly. Other jobs keep the runs.
        const bool staged = std::any_of(job.transfers.begin(), job.transfers.end(),
                                        [](const Transfer& r) { return !r.stages.empty(); });
        const auto hosts = hosts_of(t.candidates, cluster);
        const auto run = wave * hosts.size() / job.transfers.size();
        DeviceId sender = -1;
        int64_t least = 0;
        for (size_t turn = 0; turn < hosts.size(); ++turn) {
          const int host = hosts[(run + static_cast<size_t>(it - first) + turn) % hosts.size()];
          const DeviceId holder = least_loaded_on(t, host);
          const int64_t sent =
              nic_out[{host, cluster.nic_of(t.stage_on(host, cluster).value_or(holder))}];
          if (sender < 0 || (sent < least && staged)) {
            sender = holder;
            least = sent;
          }
        }
        loads.add(t, sender, t.bytes);
        const auto stage = t.stage_on(cluster.host_of(sender), cluster);
        nic_out[{cluster.host_of(sender), cluster.nic_of(stage.value_or(sender))}] += t.bytes;
        if (stage)
          ops.push_back(
              transfer_op({*stage}, t.host_turn, t.slice, job, sender, batch, options.chunk_bytes));
        sends.push_back(transfer_op(t.receivers, t.host_turn, t.slice, job, stage.value_or(sender),
                                    batch, options.chunk_bytes, {.home_last = t.home_back}));
      }
    // The round's hand-overs before its sends: a holder that sends a rail over its own NIC too
    // would otherwise keep its stages waiting for that send (a device sends one op at a time).
    ops.insert(ops.end(), sends.begin(), sends.end());
    sends.clear();
    rounds.emplace_back(std::move(ops), std::move(next));
    ops.clear();
    first = last;
  }
  // A follow-up that gathers what a transfer into a holding host brings waits for those, which
  // go last.
  std::set<std::tuple<int, int, DeviceId>> brought_last;  // (tensor, task, receiver)
  for (const auto& [job, t] : local)
    for (DeviceId r : t->receivers) brought_last.emplace(job->tensor, job->task, r);
  std::vector<Op> after_local;
  const auto needs_local = [&](const Op& op) {
    return std::any_of(op.pieces.begin(), op.pieces.end(), [&](const Piece& p) {
      return std::any_of(op.receivers.begin(), op.receivers.end(), [&](DeviceId r) {
        return brought_last.contains({p.tensor, p.task, r});
      });
    });
  };
  for (auto& [transfers, follow_ups] : rounds)
    for (Op& op : std::exchange(follow_ups, {}))
      (needs_local(op) ? after_local : follow_ups).push_back(std::move(op));
  // Per round, and an empty one after the last: the devices that send in it, and (for
  // Deferral::until_idle_or_never) those that send in it and in every round after it.
  std::vector<std::set<DeviceId>> sending(rounds.size() + 1);
  std::vector<std::set<DeviceId>> sending_from(rounds.size() + 1);
  if (deferral != Deferral::none)
    for (size_t r = rounds.size(); r-- > 0;) {
      for (const Op& op : rounds[r].first)
        for_each_sending_device(op, [&](DeviceId d) { sending[r].insert(d); });
      if (deferral == Deferral::until_idle_or_never)
        for (DeviceId d : sending[r])
          if (r + 1 == rounds.size() || sending_from[r + 1].contains(d)) sending_from[r].insert(d);
    }
  std::vector<Op> waiting;  // follow-ups not placed yet
  for (size_t r = 0; r < rounds.size(); ++r) {
    auto& [transfers, follow_ups] = rounds[r];
    ops.insert(ops.end(), transfers.begin(), transfers.end());
    if (deferral == Deferral::none) {
      ops.insert(ops.end(), waiting.begin(), waiting.end());
      waiting = std::move(follow_ups);
      continue;
    }
    const std::set<DeviceId>& busy = sending[r + 1];  // the devices that send in the next round
    const auto idle_later = [&](DeviceId d) {
      return deferral == Deferral::until_idle || !sending_from[r + 1].contains(d);
    };
    const auto sends_next = [&](const Op& op) {
      bool any = false;
      for_each_sending_device(op, [&](DeviceId d) { any |= busy.contains(d) && idle_later(d); });
      return any;
    };
    waiting.insert(waiting.end(), std::make_move_iterator(follow_ups.begin()),
                   std::make_move_iterator(follow_ups.end()));
    std::vector<Op> still;
    for (Op& op : waiting) (sends_next(op) ? still : ops).push_back(std::move(op));
    waiting = std::move(still);
  }
  ops.insert(ops.end(), waiting.begin(), waiting.end());
  for (const auto& [job, t] : local) {
    const DeviceId sender = least_loaded_on(*t, cluster.host_of(t->receivers[0]));
    loads.add(*t, sender, t->bytes);
    ops.push_back(transfer_op(t->receivers, t->host_turn, t->slice, *job, sender, batch,
                              options.chunk_bytes));
  }
  ops.insert(ops.end(), after_local.begin(), after_local.end());
  return ops;
}

std::vector<Op> balance_order(const Batch& batch, const std::vector<Job>& jobs,
                              const PlanOptions& options, Shape shape, Receipts receipts,
                              Helpers helpers) {
  const OrderPlanner planner(batch, jobs, options, shape, receipts, helpers);
  const int n = static_cast<int>(jobs.size());

  // Two greedy seeds: largest jobs first, and task order; keep the better (ties: the first). A
  // problem whose first greedy alone costs more than the budget (at least effort 1's) keeps it
  // without timing it: comparing seeds would cost more than the search may.
  Genome natural{std::vector<int>(n), std::vector<SplitChoice>(n, SplitChoice::automatic)};
  std::iota(natural.order.begin(), natural.order.end(), 0);
  Genome largest = natural;
  std::vector<int64_t> bytes(n);
  for (int j = 0; j < n; ++j) bytes[j] = jobs[j].bytes();
  std::stable_sort(largest.order.begin(), largest.order.end(),
                   [&](int a, int b) { return bytes[a] > bytes[b]; });
  const double budget = options.search_effort * kSearchWork;
  Decoded best = planner.decode(largest);
  if (static_cast<double>(best.work) > std::max(budget, kSearchWork)) return std::move(best.ops);
  planner.time(best);
  Genome current{largest.order, best.split};
  if (Decoded other = planner.timed(natural); other.makespan < best.makespan) {
    best = std::move(other);
    current = {natural.order, best.split};
  }

  // Bounded local search: swap or move jobs, flip split choices; accept moves that are no
  // worse (to cross plateaus), remember the best. A fixed seed and a budget of counted work make
  // the plan the same on every run and machine. The search stops at 20 steps per pair of jobs,
  // where small problems have converged, or before a step that, costing what the last decode
  // did, would overrun the budget (so a problem whose decode alone exceeds it is not searched).
  std::vector<int> splittable;
  for (int j = 0; j < n; ++j)
    for (const Transfer& t : jobs[j].transfers)
      if (options.split &&
          (split_parts(t, holder_hosts(t, batch.cluster)) > 1 || helped(t, helpers))) {
        splittable.push_back(j);
        break;
      }
  const int64_t max_steps = std::max<int64_t>(100, 20LL * n * n);
  double spent = 0;
  int64_t next_work = best.work;
  std::mt19937 rng(20230529);
  double current_makespan = best.makespan;
  if (n >= 2 || !splittable.empty()) {
    for (int64_t step = 0; step < max_steps && spent + next_work <= budget; ++step) {
      Genome trial = current;
      const auto move = rng() % 3;
      if (move == 2 && !splittable.empty()) {
        const int j = splittable[rng() % splittable.size()];
        trial.split[j] = trial.split[j] == SplitChoice::yes ? SplitChoice::no : SplitChoice::yes;
      } else if (n >= 2) {
        const int a = static_cast<int>(rng() % n);
        const int b = static_cast<int>(rng() % n);
        if (move == 0) {
          std::swap(trial.order[a], trial.order[b]);
        } else {
          const int job = trial.order[a];
          trial.order.erase(trial.order.begin() + a);
          trial.order.insert(trial.order.begin() + b, job);
        }
      }
      Decoded result = planner.timed(trial);
      spent += result.work;
      next_work = result.work;
      if (result.makespan <= current_makespan) {
        current_makespan = result.makespan;
        current = std::move(trial);
        if (result.makespan < best.makespan) best = std::move(result);
      }
    }
  }

  return std::move(best.ops);
}

}  // namespace meshcast::detail
