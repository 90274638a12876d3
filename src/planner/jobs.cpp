#include "jobs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "meshcast/layout/layout.h"
#include "meshcast/plan/chain_window.h"
#include "meshcast/sim/simulator.h"
#include "source_tiles.h"
#include "timeline.h"

namespace meshcast::detail {
namespace {

bool holds(const std::vector<DeviceId>& devices, DeviceId d) {
  return std::find(devices.begin(), devices.end(), d) != devices.end();
}

int element_size(const Batch& batch, int tensor) {
  return dtype_size(batch.tensors[tensor].tensor.dtype);
}

// Alpa's local allgather for the receivers of one host: part i of the slice to device i, then
// an allgather among them. It applies when at least two devices share the host and every part
// has an element; otherwise each device gets the whole slice by a send.
void add_host_group(Job& job, const UnitTask& task, const std::vector<DeviceId>& group,
                    const Batch& batch) {
  const int k = static_cast<int>(group.size());
  const bool applies = k >= 2 && !allgather_part(task.slice, k, k - 1).empty();
  if (!applies) {
    for (DeviceId r : group)
      job.transfers.push_back({task.slice, task.bytes, {r}, task.senders, /*splittable=*/true});
    return;
  }
  for (int i = 0; i < k; ++i) {
    const Box part = allgather_part(task.slice, k, i);
    job.transfers.push_back({part,
                             slice_bytes(batch, job, part),
                             {group[i]},
                             task.senders,
                             /*splittable=*/false});
  }
  job.then.push_back(make_op(OpKind::allgather, {{job.tensor, job.task, task.slice, task.bytes}},
                             std::nullopt, group));
}

// The job of task `index` of `tensor`; receivers in `gathered` get the slice from a gather (see
// below) and are left out here.
Job make_job(const Batch& batch, int tensor, int index, const UnitTask& task, Strategy strategy,
             const std::vector<DeviceId>& gathered) {
  Job job{.tensor = tensor, .task = index};
  std::vector<DeviceId> others;  // receivers that do not hold the slice yet
  for (DeviceId r : task.receivers) {
    if (holds(task.senders, r))
      job.then.push_back(make_op(OpKind::copy, {{tensor, index, task.slice, task.bytes}}, r, {r}));
    else if (!holds(gathered, r))
      others.push_back(r);
  }
  std::sort(others.begin(), others.end());
  switch (strategy) {
    case Strategy::send_recv:
      for (DeviceId r : others)
        job.transfers.push_back({task.slice, task.bytes, {r}, task.senders, true});
      break;
    case Strategy::broadcast: {
      // When several hosts hold the slice, a receiver on one of them gets it from a holder there
      // over device links: a chain from another holder through that host would carry the slice
      // over its NIC for nothing. (With one holding host the chain starts there anyway.)
      const int first_host = batch.cluster.host_of(task.senders[0]);
      const bool several_holders =
          std::any_of(task.senders.begin(), task.senders.end(),
                      [&](DeviceId d) { return batch.cluster.host_of(d) != first_host; });
      std::vector<DeviceId> remote;
      std::map<int, std::vector<DeviceId>> local;  // by host
      if (several_holders) {
        for (DeviceId r : others) {
          const int h = batch.cluster.host_of(r);
          const bool held = std::any_of(task.senders.begin(), task.senders.end(),
                                        [&](DeviceId d) { return batch.cluster.host_of(d) == h; });
          (held ? local[h] : remote).push_back(r);
        }
      } else {
        remote = std::move(others);
      }
      if (!remote.empty())
        job.transfers.push_back({task.slice, task.bytes, std::move(remote), task.senders, true});
      for (const auto& [host, receivers] : local) {
        std::vector<DeviceId> holders, helpers;  // on the receivers' host, and on others
        for (DeviceId d : task.senders)
          (batch.cluster.host_of(d) == host ? holders : helpers).push_back(d);
        job.transfers.push_back({task.slice, task.bytes, receivers, holders, true, helpers});
      }
      break;
    }
    case Strategy::allgather: {
      std::map<int, std::vector<DeviceId>> by_host;
      for (DeviceId r : others) by_host[batch.cluster.host_of(r)].push_back(r);
      for (const auto& [host, group] : by_host) add_host_group(job, task, group, batch);
      break;
    }
  }
  return job;
}

// Gathers among devices that already hold parts (same-device redistributions: Shard ->
// Replicate, partial replication). Take the receivers of a task on one host, `group`; when
// exactly one of them holds the slice already (is a sender) and the others do not, the slice is
// a piece of an allgather over `group`, held whole by that member. Every task with the same group
// joins one allgather: each member gives its pieces and takes the rest, all device links busy at
// once, where chained broadcasts from each holder would run one after another (every member takes
// part in each of them). A group of one task keeps its broadcast (a chain is as fast for one
// piece). With two holders in the group the other holder would get the piece a second time, so
// such tasks keep their broadcasts too.
class Gathers {
 public:
  Gathers(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks) {
    const Cluster& cluster = batch.cluster;
    std::map<std::vector<DeviceId>, std::vector<Candidate>> by_group;
    for (int tensor = 0; tensor < static_cast<int>(tasks.size()); ++tensor)
      for (int index = 0; index < static_cast<int>(tasks[tensor].size()); ++index) {
        const UnitTask& task = tasks[tensor][index];
        // (Most tasks have no receiver that holds the slice: they are not grouped by host.)
        if (std::none_of(task.receivers.begin(), task.receivers.end(),
                         [&](DeviceId r) { return holds(task.senders, r); }))
          continue;
        std::map<int, std::vector<DeviceId>> by_host;
        for (DeviceId r : task.receivers) by_host[cluster.host_of(r)].push_back(r);
        for (auto& [host, group] : by_host) {
          const auto held = std::count_if(group.begin(), group.end(),
                                          [&](DeviceId r) { return holds(task.senders, r); });
          if (held != 1 || group.size() < 2) continue;
          std::sort(group.begin(), group.end());
          by_group[group].push_back({tensor, index});
        }
      }
    for (const auto& [group, members] : by_group)
      if (members.size() >= 2) add_gather(batch, tasks, group, members);
  }

  // Receivers of task `index` of `tensor` that a gather serves.
  const std::vector<DeviceId>& gathered(int tensor, int index) const {
    static const std::vector<DeviceId> none;
    const auto it = gathered_.find({tensor, index});
    return it == gathered_.end() ? none : it->second;
  }
  std::vector<Job>& jobs() { return jobs_; }

 private:
  struct Candidate {
    int tensor, index;
  };

  void add_gather(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks,
                  const std::vector<DeviceId>& group, const std::vector<Candidate>& members) {
    const int n = static_cast<int>(group.size());
    std::vector<Piece> pieces;
    std::vector<int64_t> gives(n, 0);  // bytes each member contributes
    int64_t total = 0;
    for (const Candidate& c : members) {
      const UnitTask& task = tasks[c.tensor][c.index];
      Piece piece = make_piece(batch, c.tensor, c.index, task.slice);
      piece.holder =
          static_cast<int>(std::find_if(group.begin(), group.end(),
                                        [&](DeviceId r) { return holds(task.senders, r); }) -
                           group.begin());
      gives[piece.holder] += piece.bytes;
      total += piece.bytes;
      pieces.push_back(piece);
    }
    // The allgather moves in n-1 ring steps of the largest contribution; one broadcast per task
    // moves each slice once, one after another. Gather only where it is the faster of the two.
    const int64_t largest = *std::max_element(gives.begin(), gives.end());
    if ((n - 1) * largest >= total) return;
    for (const Candidate& c : members) {
      auto& served = gathered_[{c.tensor, c.index}];
      for (DeviceId r : group)
        if (!holds(tasks[c.tensor][c.index].senders, r)) served.push_back(r);
    }
    Job job{.tensor = members[0].tensor, .task = members[0].index};
    job.then.push_back(make_op(OpKind::allgather, std::move(pieces), std::nullopt, group));
    jobs_.push_back(std::move(job));
  }

  std::map<std::pair<int, int>, std::vector<DeviceId>> gathered_;
  std::vector<Job> jobs_;
};

// A receiving host of a transfer laid on rails: the device that takes each rail (part) into the
// host, and the host's receivers.
struct RailHost {
  std::vector<DeviceId> rails;
  std::vector<DeviceId> receivers;
};

// Whether a device of `host` holds the slice of `t`.
bool host_holds(const Transfer& t, int host, const Cluster& cluster) {
  return std::any_of(t.candidates.begin(), t.candidates.end(),
                     [&](DeviceId d) { return cluster.host_of(d) == host; });
}

// The receiving hosts of `t` that do not hold its slice (hosts ascending) when the slice can go
// to them by rails, else empty. Where every such host has g >= 2 NICs with devices (g: the fewest),
// its rails are a device on each of its first g NICs (rails rule: local device l on NIC l mod K):
// a receiver on that NIC where there is one (the `turn(host)`-th of them, cyclic, so that the
// slices a host takes in over one NIC land on different devices and leave them again at once;
// with `relays` the NIC's devices that receive nothing of it take their turns too), else the
// NIC's first device, which only relays (with `relays`, each of the NIC's devices in turn: one
// device relaying every round both sends each on over the NIC and hands it to the receivers, one
// op at a time, and the next round's chain waits for those hand-overs). So a host with more
// receivers than NICs takes one rail per NIC (two rails on one NIC from one holder would run one
// after the other, and the planner's greedy packs such halves unevenly), and one with fewer takes
// every NIC's share. Where every host has the same number g >= 2 of receivers, they are the rails
// `per_receiver`, or where a host has one NIC.
std::vector<RailHost> rail_hosts(const Transfer& t, const Cluster& cluster, bool per_receiver,
                                 bool relays, const std::function<int(int)>& turn) {
  std::map<int, std::vector<DeviceId>> by_host;
  for (DeviceId r : t.receivers) by_host[cluster.host_of(r)].push_back(r);
  std::vector<RailHost> hosts;
  bool equal = true;
  int nics = std::numeric_limits<int>::max();  // the fewest NICs with devices of a host
  for (auto& [host, group] : by_host) {
    if (host_holds(t, host, cluster)) continue;
    std::sort(group.begin(), group.end());
    equal &= group.size() >= 2 && group.size() == by_host.begin()->second.size();
    nics = std::min(nics, std::min(cluster.nics_of(host), cluster.devices_per_host));
    hosts.push_back({group, group});
  }
  if (equal && (per_receiver || nics < 2)) return hosts;
  if (nics < 2) return {};
  for (RailHost& h : hosts) {
    const int host = cluster.host_of(h.receivers[0]);
    h.rails.clear();
    for (int nic = 0; nic < nics; ++nic) {
      std::vector<DeviceId> on_nic;
      std::copy_if(h.receivers.begin(), h.receivers.end(), std::back_inserter(on_nic),
                   [&](DeviceId r) { return cluster.nic_of(r) == nic; });
      if (relays)
        for (int l = nic; l < cluster.devices_per_host; l += cluster.nics_of(host))
          if (const DeviceId d = cluster.device_id(host, l); !holds(h.receivers, d))
            on_nic.push_back(d);
      h.rails.push_back(on_nic.empty()
                            ? static_cast<DeviceId>(host * cluster.devices_per_host + nic)
                            : on_nic[turn(host) % on_nic.size()]);
    }
  }
  return hosts;
}

// The ops that give every receiver of `host` the whole `slice` once `parts[i]` has reached rail i:
// an allgather where the rails are the receivers (of the slice split as allgather_part does, or
// where the parts are cut otherwise, of each part held by its rail), else, or `by_sends`, a send of
// each part from its rail to each other receiver.
void gather_rails(const Batch& batch, const Job& job, const Box& slice,
                  const std::vector<Box>& parts, const RailHost& host, bool by_sends,
                  std::vector<Op>& then) {
  const auto g = static_cast<int>(host.rails.size());
  if (host.rails == host.receivers && !by_sends) {
    bool equal = true;
    for (int i = 0; i < g; ++i) equal &= parts[i] == allgather_part(slice, g, i);
    std::vector<Piece> pieces;
    if (equal) pieces.push_back(make_piece(batch, job.tensor, job.task, slice));
    for (int k = 0; k < g && !equal; ++k) {
      pieces.push_back(make_piece(batch, job.tensor, job.task, parts[k]));
      pieces.back().holder = k;
    }
    then.push_back(make_op(OpKind::allgather, std::move(pieces), std::nullopt, host.receivers));
    return;
  }
  for (int i = 0; i < g; ++i)
    for (DeviceId r : host.receivers)
      if (r != host.rails[i])
        then.push_back(make_op(OpKind::send, {make_piece(batch, job.tensor, job.task, parts[i])},
                               host.rails[i], {r}));
}

// `slice` cut along its longest dimension (as allgather_part cuts) into parts in proportion to
// `weights`; equal parts where a part would be empty.
std::vector<Box> cut_by_weights(const Box& slice, const std::vector<double>& weights) {
  std::vector<Box> cut = cut_at_weights(slice, weights);
  if (std::none_of(cut.begin(), cut.end(), [](const Box& b) { return b.empty(); })) return cut;
  const auto g = static_cast<int>(weights.size());
  for (int i = 0; i < g; ++i) cut[i] = allgather_part(slice, g, i);
  return cut;
}

// Per host with one device per NIC that holds slices bound for other hosts: the bytes each NIC
// should carry of them (`ports` of RailOptions), so that its devices' send ports end together. A
// device's port carries what leaves by its NIC at the NIC's rate and, at the device link's, the
// slices only it holds that only devices beside it need and the parts of its own slices that leave
// by the other NICs; with equal parts the busiest port decided while the other NICs idled.
std::map<int, std::vector<double>> port_loads(const std::vector<Job>& jobs,
                                              const Cluster& cluster) {
  std::map<int, double> leaving;    // per host
  std::map<DeviceId, double> held;  // per device: bytes that leave its host, held by it
  std::map<DeviceId, double> home;  // per device: bytes only it holds for devices beside it
  for (const Job& job : jobs)
    for (const Transfer& t : job.transfers) {
      const auto hosts = hosts_of(t.candidates, cluster);
      if (hosts.size() != 1 || t.receivers.empty()) continue;
      const auto bytes = static_cast<double>(t.bytes);
      if (t.within_holding_hosts(cluster)) {
        if (t.candidates.size() == 1) home[t.candidates[0]] += bytes;
        continue;
      }
      leaving[hosts[0]] += bytes;
      for (DeviceId d : t.candidates) held[d] += bytes / static_cast<double>(t.candidates.size());
    }
  const auto of = [](const std::map<DeviceId, double>& m, DeviceId d) {
    const auto it = m.find(d);
    return it == m.end() ? 0.0 : it->second;
  };
  std::map<int, std::vector<double>> loads;
  for (const auto& [host, bytes] : leaving) {
    const int n = cluster.devices_per_host;
    if (cluster.nics_of(host) < n || n < 2) continue;
    const double nic = cluster.single_nic_bandwidth_of(host);
    const double dev = cluster.device_bandwidth_of(cluster.device_id(host, 0));
    // Each port's time at the loads so far gives the next loads: L = nic (T - busy), sum L = bytes.
    std::vector<double> load(n, bytes / n);
    for (int pass = 0; pass < 8; ++pass) {
      std::vector<double> busy(n);
      double sum = 0;
      for (int l = 0; l < n; ++l) {
        const DeviceId d = cluster.device_id(host, l);
        busy[l] = (of(home, d) + of(held, d) * (1 - load[l] / bytes)) / dev;
        sum += busy[l];
      }
      const double t = (bytes / nic + sum) / n;
      double total = 0;
      for (int l = 0; l < n; ++l) total += load[l] = std::max(0.0, nic * (t - busy[l]));
      for (double& l : load) l *= bytes / total;
    }
    loads[host] = std::move(load);
  }
  return loads;
}

// The parts of the slice of `whole` that its rails carry (by_rail[i]: rail i, its holders and
// stages chosen). Equal (allgather_part), except where the devices of one host that hold the slice
// each send one rail over their own NIC and hand the s others over to stages (m holders, each
// handing over s / m, as the balance spreads hand-overs): a holder's send port (a device sends one
// op at a time) then carries its rail at the NIC's rate and the others at the device link's, so
// with equal parts the port, not the NICs, decides: 1 + (s / m) nic / dev times a rail's NIC time
// (1.1x with one holder of two NICs and links ten times as fast), more where a single holder's
// port also serves receivers beside it (1.5x with four NICs, a receiver staging a rail and its
// other parts sent after the last round). The own rails are cut smaller (by 1 - (s / m) nic / dev
// where the ports serve no receiver beside them), so that the ports and the stages' NICs end
// together, at the rate the lower bound's out(h) gives (docs/concepts.md#lower-bound). Cut along
// the longest dimension, as allgather_part does. Only for rails into hosts that take in from these
// holders alone: unequal rails load their NICs unequally, which costs where their NICs decide, as
// where they take in from other holders too. Through a chain of hosts every relay forwards the
// larger rail at its NIC's rate too, which holds it as long as the holder's port; its host's
// gathers wait for a round in which it relays nothing (balance_rounds, Deferral::until_idle).
std::vector<Box> rail_parts(const Transfer& whole, const std::vector<Transfer*>& by_rail,
                            const std::map<int, std::set<DeviceId>>& sources,
                            const std::map<DeviceId, double>& home_share,
                            const std::map<int, std::vector<double>>& loads, bool home_back,
                            const Cluster& cluster) {
  const Box& slice = whole.slice;
  const auto g = static_cast<int>(by_rail.size());
  std::vector<Box> equal;
  for (int i = 0; i < g; ++i) equal.push_back(allgather_part(slice, g, i));
  // Rail i leaves by NIC i: where one host holds the slice and feeds its receiving hosts alone,
  // in proportion to what that NIC's device can carry (port_loads).
  const int holding = cluster.host_of(whole.candidates[0]);
  const auto on_holding = [&](DeviceId d) { return cluster.host_of(d) == holding; };
  if (const auto load = loads.find(holding);
      load != loads.end() && static_cast<int>(load->second.size()) == g &&
      std::all_of(whole.candidates.begin(), whole.candidates.end(), on_holding) &&
      std::all_of(by_rail.begin(), by_rail.end(), [&](const Transfer* rail) {
        return std::all_of(rail->receivers.begin(), rail->receivers.end(), [&](DeviceId r) {
          const auto& from = sources.at(cluster.host_of(r));
          return std::all_of(from.begin(), from.end(), on_holding);
        });
      }))
    return cut_by_weights(slice, load->second);
  // The holders: one host's, each sending one rail itself (`direct`), handing the others over.
  std::set<DeviceId> holders;
  for (const Transfer* rail : by_rail)
    holders.insert(rail->candidates.begin(), rail->candidates.end());
  std::map<DeviceId, int> direct;  // holder -> the rail it sends itself
  for (int i = 0; i < g; ++i) {
    const Transfer& rail = *by_rail[i];
    if (std::any_of(rail.receivers.begin(), rail.receivers.end(),
                    [&](DeviceId r) { return sources.at(cluster.host_of(r)) != holders; }))
      return equal;
    if (!rail.stages.empty()) continue;
    if (rail.candidates.size() != 1 || !direct.emplace(rail.candidates[0], i).second) return equal;
  }
  const int host = cluster.host_of(*holders.begin());
  if (direct.size() != holders.size() ||
      std::any_of(holders.begin(), holders.end(),
                  [&](DeviceId d) { return cluster.host_of(d) != host; }))
    return equal;
  // The holders also serve their host's other receivers over their device links: `staged` of them
  // (Transfer::stage_receives) keep the rail they stage and take the other parts, `beside` take the
  // whole slice. Counted for a single holder only: which of several serves them is the balance's.
  const auto staged = static_cast<int>(std::count_if(
      by_rail.begin(), by_rail.end(), [](const Transfer* rail) { return rail->stage_receives; }));
  const auto beside =
      static_cast<int>(std::count_if(
          whole.receivers.begin(), whole.receivers.end(),
          [&](DeviceId r) { return !holders.contains(r) && cluster.host_of(r) == host; })) -
      staged;
  const auto m = static_cast<int>(holders.size());
  if (m > 1 && beside + staged > 0) return equal;
  // With home_back, the rails bring the receivers beside a single holder their parts, not its
  // port: it serves nobody beside it.
  const int served = home_back && staged > 0 ? 0 : beside + staged;
  const int kept = home_back && staged > 0 ? 0 : staged;
  // Weights: `own` for a holder's rail, 1 for each of the g - m staged ones, of which each holder
  // hands over o = (g - m) / m. Its port then sends own / nic + o / dev of rails and
  // (beside * w + staged * (w - 1)) / dev to its host (w the weights' sum, one holder), which
  // equals a stage's 1 / nic where, with r = nic / dev and b = beside + home + staged,
  // own = (1 - r * (o * (1 + b) - staged)) / (1 + r * b).
  const double r =
      cluster.single_nic_bandwidth_of(host) / cluster.device_bandwidth_of(*holders.begin());
  const double o = static_cast<double>(g - m) / m;
  std::vector<double> weights(g, 1);
  for (const auto& [holder, i] : direct) {
    const auto share = home_share.find(holder);
    const double home = share != home_share.end() ? share->second : 0;
    weights[i] = (1 - r * (o * (1 + served + home) - kept)) / (1 + r * (served + home));
    if (weights[i] <= 0) return equal;
  }
  return cut_by_weights(slice, weights);
}

// Per task (tensor, index): the devices that a follow-up other than a copy (a gather) serves some
// of its slice.
std::map<std::pair<int, int>, std::set<DeviceId>> gathered_receivers(const std::vector<Job>& jobs) {
  std::map<std::pair<int, int>, std::set<DeviceId>> gathered;
  for (const Job& job : jobs)
    for (const Op& op : job.then)
      if (op.kind != OpKind::copy)
        for (const Piece& p : op.pieces)
          gathered[{p.tensor, p.task}].insert(op.receivers.begin(), op.receivers.end());
  return gathered;
}

// Rail i of a slice leaves each holding host by its NIC i mod n (n: the host's NICs with devices),
// as on a rail-optimised fabric: only the holders on that NIC may send it, where some are. Else
// the balance could send every rail from one NIC's holders while the others idled. Where one host
// holds the slice, or no holder is on that NIC (or `beside`), on each holding host a device of
// that NIC that neither holds nor receives the slice (by `whole` or, `elsewhere`, by another
// transfer or a gather: it would take some elements twice), nor is in `senders`, may stage it
// (Transfer::stages), handed over by the host's holders on the NIC, or by any of its holders
// where none is: a holder hands the rail over the device link, in a tenth of the NIC's time or
// so, and is free again for its other rails and slices while the stage sends it on (with stages
// at holders, the staged rails delay the slices those send of their own: the planner tries
// both). So a host whose holders are all on one NIC (a single holder, or each host of a
// replicated slice holding it on its first device) still sends on every NIC. A host with neither
// a holder on the NIC nor a stage does not send the rail, unless no host can.
// (A stage cannot simply join the chain: the holder would hold its own send port as long as the
// stage's NIC hop takes, and the rails would still leave one at a time.)
void leave_by_rail(Transfer& rail, int i, const Transfer& whole,
                   const std::set<DeviceId>& elsewhere, const std::set<DeviceId>& senders,
                   const std::set<DeviceId>& home, int round, bool beside, bool only_stages,
                   const Cluster& cluster) {
  const auto nic_of_rail = [&](int host) {
    return i % std::min(cluster.nics_of(host), cluster.devices_per_host);
  };
  const auto hosts = hosts_of(rail.candidates, cluster);
  std::set<DeviceId> kept;
  for (DeviceId d : rail.candidates)
    if (cluster.nic_of(d) == nic_of_rail(cluster.host_of(d))) kept.insert(d);
  // Where several hosts hold the slice and some holders are on the rail's NIC, those send it
  // (unless `beside`: then the other hosts may stage it too).
  if (hosts.size() > 1 && !kept.empty() && !beside && !only_stages) {
    std::erase_if(rail.candidates, [&](DeviceId d) { return !kept.contains(d); });
    return;
  }
  for (const int host : hosts) {
    const int nic = nic_of_rail(host);
    const auto first = cluster.device_id(host, 0);
    std::optional<DeviceId> stage;
    for (int local = nic; local < cluster.devices_per_host && !stage;
         local += cluster.nics_of(host)) {
      const DeviceId d = first + local;
      if (!holds(rail.candidates, d) && !senders.contains(d) && !holds(whole.receivers, d) &&
          !elsewhere.contains(d))
        stage = d;
    }
    // Where one host holds the slice and that NIC's devices are its receivers, the first of them
    // may stage the rail, which it keeps as its part of the slice (Transfer::stage_receives).
    if (!stage && std::all_of(rail.candidates.begin(), rail.candidates.end(),
                              [&](DeviceId d) { return cluster.host_of(d) == host; }))
      for (DeviceId d : whole.receivers)
        if (cluster.host_of(d) == host && cluster.nic_of(d) == nic && !holds(rail.candidates, d) &&
            !senders.contains(d) && !elsewhere.contains(d)) {
          stage = d;
          rail.stage_receives = true;
          rail.through_stage = true;
          break;
        }
    if (!stage) continue;
    rail.stages.push_back(*stage);
    const auto on_host = [&](DeviceId d) { return cluster.host_of(d) == host; };
    if (std::none_of(kept.begin(), kept.end(), on_host))
      for (DeviceId d : rail.candidates)
        if (on_host(d)) kept.insert(d);
  }
  // Where several hosts hold the slice and none has a holder or a stage on the NIC, one of them in
  // turn (by rail and round) stages the rail at a receiver of its own on that NIC that takes the
  // slice from its host's holders (`home`), which keeps the rail as its part (stage_receives):
  // else every rail left by the holders' NICs, the others idle.
  if (hosts.size() > 1 && kept.empty() && rail.stages.empty()) {
    const int host = hosts[static_cast<size_t>(i + round) % hosts.size()];
    for (DeviceId d : home)
      if (cluster.host_of(d) == host && cluster.nic_of(d) == nic_of_rail(host) &&
          !holds(rail.candidates, d) && !senders.contains(d)) {
        rail.stages.push_back(d);
        rail.stage_receives = true;
        rail.through_stage = true;
        std::erase_if(rail.candidates, [&](DeviceId c) { return cluster.host_of(c) != host; });
        return;
      }
  }
  if (!kept.empty()) std::erase_if(rail.candidates, [&](DeviceId d) { return !kept.contains(d); });
  // With `only_stages`, where several hosts hold the slice and some have a stage for the rail,
  // only those send it: a holder that sends a rail over its own NIC into a NIC that another host
  // feeds too holds its send port at half the NIC's rate, while its stages wait for hand-overs.
  if (only_stages && hosts.size() > 1 && !rail.stages.empty())
    std::erase_if(rail.candidates,
                  [&](DeviceId d) { return !rail.stage_on(cluster.host_of(d), cluster); });
}

// The rounds `job` is cut into (torch.chunk of each slice's longest dimension): at most `rounds`,
// and fewer where its `largest` part would have less than `min_round_bytes` per round, or a slice
// too short to give every round an element.
int round_count(const Job& job, int64_t largest, int rounds, int64_t min_round_bytes) {
  int n = static_cast<int>(
      std::clamp<int64_t>(largest / std::max<int64_t>(min_round_bytes, 1), 1, rounds));
  while (n > 1 && std::any_of(job.transfers.begin(), job.transfers.end(), [&](const Transfer& t) {
           return allgather_part(t.slice, n, n - 1).empty();
         }))
    --n;
  return n;
}

}  // namespace

std::vector<Box> cut_at_weights(const Box& slice, const std::vector<double>& weights) {
  const int longest = longest_dimension(slice);
  const Interval extent = slice.dims[longest];
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<Box> cut(weights.size(), slice);
  double before = 0;  // weight of the parts before part i
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto at = [&](double w) {
      return extent.lo + std::llround(static_cast<double>(extent.size()) * w / total);
    };
    cut[i].dims[longest] = {at(before), at(before + weights[i])};
    before += weights[i];
  }
  return cut;
}

std::vector<Job> delay_line_jobs(const Batch& batch, const std::vector<Job>& jobs) {
  const Cluster& cluster = batch.cluster;
  std::set<DeviceId> busy;  // devices that hold or receive a slice
  for (const Job& job : jobs)
    for (const Transfer& t : job.transfers) {
      busy.insert(t.candidates.begin(), t.candidates.end());
      busy.insert(t.receivers.begin(), t.receivers.end());
    }
  const auto idle_on = [&](int host) -> std::optional<DeviceId> {
    for (int i = 0; i < cluster.devices_per_host; ++i)
      if (const DeviceId d = cluster.device_id(host, i); !busy.contains(d)) return d;
    return std::nullopt;
  };
  std::vector<Job> out = jobs;
  bool any = false;
  for (Job& job : out) {
    if (job.transfers.size() != 1 || !job.only_copies_follow()) continue;
    Transfer& t = job.transfers[0];
    if (t.receivers.empty() || !t.within_holding_hosts(cluster)) continue;
    for (int host : hosts_of(t.candidates, cluster))
      if (const auto stage = idle_on(host)) t.stages.push_back(*stage);
    any = any || !t.stages.empty();
  }
  return any ? out : std::vector<Job>{};
}

std::vector<Job> staged_jobs(const Batch& batch, const std::vector<Job>& jobs, int rounds,
                             int64_t min_round_bytes) {
  const Cluster& cluster = batch.cluster;
  std::set<DeviceId> senders;  // the devices no stage may be at
  for (const Job& job : jobs)
    for (const Transfer& t : job.transfers)
      senders.insert(t.candidates.begin(), t.candidates.end());
  auto gathered = gathered_receivers(jobs);
  std::vector<Job> out;
  for (const Job& job : jobs) {
    const bool only_copies = job.only_copies_follow();
    Job staged = job;
    staged.transfers.clear();
    int64_t largest = 0;  // bytes of the job's largest staged transfer, 0 when it has none
    for (const Transfer& t : job.transfers) {
      Transfer away = t;
      std::erase_if(away.receivers,
                    [&](DeviceId r) { return host_holds(t, cluster.host_of(r), cluster); });
      // No device may receive an element twice: the stage receives nothing that overlaps the
      // slice by another transfer or as the stage of one (send_recv gives each receiver of a
      // slice its own transfer), and a receiver stages only its own transfer.
      Transfer overlapping = t;
      const auto add = [&](const std::vector<DeviceId>& devices) {
        overlapping.receivers.insert(overlapping.receivers.end(), devices.begin(), devices.end());
      };
      for (const Transfer& u : job.transfers)
        if (&u != &t && intersect(u.slice, t.slice).volume() > 0) add(u.receivers);
      for (const Transfer& u : staged.transfers)
        if (intersect(u.slice, t.slice).volume() > 0) add(u.stages);
      if (only_copies && !away.receivers.empty())
        leave_by_rail(away, cluster.nic_of(t.candidates[0]), overlapping,
                      gathered[{job.tensor, job.task}], senders, /*home=*/{}, /*round=*/0,
                      /*beside=*/true, /*only_stages=*/false, cluster);
      if (away.stage_receives && !holds(t.receivers, away.stages[0])) away.stages.clear();
      if (away.stages.empty()) {
        staged.transfers.push_back(t);
        continue;
      }
      largest = std::max(largest, t.bytes);
      away.splittable = false;
      Transfer home = t;
      std::erase_if(home.receivers, [&](DeviceId r) {
        return holds(away.receivers, r) || (away.stage_receives && r == away.stages[0]);
      });
      staged.transfers.push_back(std::move(away));
      if (!home.receivers.empty()) staged.transfers.push_back(std::move(home));
    }
    if (largest == 0) {
      out.push_back(job);
      continue;
    }
    for (Job& part :
         in_rounds(batch, staged, round_count(staged, largest, rounds, min_round_bytes)))
      out.push_back(std::move(part));
  }
  return out;
}

std::vector<Job> exchanged_jobs(const Batch& batch, const std::vector<Job>& jobs, Exchange how) {
  const Cluster& cluster = batch.cluster;
  // A receiver that relays a part over the NICs must send nothing else: a holder that did would
  // spend its port, which its own sends need, at NIC speed.
  std::set<DeviceId> senders;
  for (const Job& job : jobs)
    for (const Transfer& t : job.transfers)
      senders.insert(t.candidates.begin(), t.candidates.end());
  const auto relays_of = [&](const Transfer& t) {
    std::vector<DeviceId> relays;
    std::copy_if(t.receivers.begin(), t.receivers.end(), std::back_inserter(relays),
                 [&](DeviceId r) { return !senders.contains(r); });
    return relays;
  };
  // Per job: its transfers into their holders' hosts (each into one host that holds the slice, from
  // holders there, with a receiver that may relay), where two or more hosts take in the same slice
  // so.
  std::vector<std::vector<const Transfer*>> shared_of(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!jobs[j].only_copies_follow()) continue;
    std::vector<const Transfer*>& local = shared_of[j];
    for (const Transfer& t : jobs[j].transfers)
      if (!t.helpers.empty() && t.splittable && hosts_of(t.candidates, cluster).size() == 1 &&
          !relays_of(t).empty())
        local.push_back(&t);
    if (local.size() < 2 || std::any_of(local.begin(), local.end(), [&](const Transfer* t) {
          return t->slice != local[0]->slice;
        }))
      local.clear();
  }
  // Per holder: the bytes it serves beside it, and of those, the bytes its host's receivers could
  // take from receivers on other hosts (each shared slice once per other host), and the NICs
  // those enter by. A slice of several holders counts for each in equal parts.
  std::map<DeviceId, double> served, shareable;
  std::map<DeviceId, std::set<int>> nics;
  std::map<DeviceId, int> slices;  // the shared slices it holds
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (const Transfer& t : jobs[j].transfers) {
      if (t.helpers.empty() || hosts_of(t.candidates, cluster).size() != 1) continue;
      for (DeviceId d : t.candidates)
        served[d] += static_cast<double>(t.bytes) / static_cast<double>(t.candidates.size());
    }
    for (const Transfer* t : shared_of[j])
      for (DeviceId d : t->candidates) {
        shareable[d] += static_cast<double>(t->bytes) *
                        static_cast<double>(shared_of[j].size() - 1) /
                        static_cast<double>(t->candidates.size());
        for (DeviceId r : t->receivers) nics[d].insert(cluster.nic_of(r));
        ++slices[d];
      }
  }
  // Each holder's share of what it serves that should come in over those NICs, so that its
  // device link and the NICs end together, the NICs starting once the holder has handed the first
  // of its parts (one per shared slice) to its relay; as a share of each slice it takes from each
  // other host. A slice's parts are sized by the least share of its holders.
  std::map<DeviceId, double> share;
  for (const auto& [holder, bytes] : shareable) {
    const double near = cluster.device_bandwidth_of(holder);
    const double afar = cluster.single_nic_bandwidth_of(cluster.host_of(holder)) *
                        static_cast<double>(nics[holder].size());
    share[holder] =
        served[holder] / (1 + near / afar + 1 / static_cast<double>(slices[holder])) / bytes;
  }
  // The parts that cross between hosts come first, in jobs of their own, so that the relays
  // have them to pass on while the holders serve the rest beside them.
  std::vector<Job> across, out;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    const std::vector<const Transfer*>& shared = shared_of[j];
    if (shared.empty()) {
      out.push_back(job);
      continue;
    }
    // The share of the slice each host takes from afar, and the hosts each host's part goes to:
    // the next one, or every other.
    const size_t m = shared.size();
    const size_t k = how == Exchange::next_host ? 1 : m - 1;
    if (how == Exchange::every_host && k == 1) {  // (the same as to the next host)
      out.push_back(job);
      continue;
    }
    double f = 1 / static_cast<double>(m);
    for (const Transfer* t : shared)
      for (DeviceId d : t->candidates)
        f = std::min(f, share.at(d) * static_cast<double>(m - 1) / static_cast<double>(k));
    std::vector<double> weights(m + 1, f);
    weights[0] = 1 - static_cast<double>(m) * f;
    const std::vector<Box> parts = cut_at_weights(shared[0]->slice, weights);
    if (std::any_of(parts.begin() + 1, parts.end(), [](const Box& b) { return b.empty(); })) {
      out.push_back(job);
      continue;
    }
    // Parts `first` to `last` as one box (they are consecutive along the dimension cut).
    const int cut = longest_dimension(shared[0]->slice);
    const auto parts_from = [&](size_t first, size_t last) {
      Box box = parts[first];
      box.dims[cut].hi = parts[last].dims[cut].hi;
      return box;
    };
    std::vector<size_t> ring(m);  // the shared transfers by host
    std::iota(ring.begin(), ring.end(), 0);
    std::sort(ring.begin(), ring.end(), [&](size_t x, size_t y) {
      return cluster.host_of(shared[x]->candidates[0]) < cluster.host_of(shared[y]->candidates[0]);
    });
    const int element = element_size(batch, job.tensor);
    Job near = job;
    near.transfers.clear();
    for (const Transfer& t : job.transfers)
      if (std::find(shared.begin(), shared.end(), &t) == shared.end()) near.transfers.push_back(t);
    Job exchange{.tensor = job.tensor, .task = job.task};
    for (size_t p = 0; p < m; ++p) {
      const Transfer& t = *shared[ring[p]];
      const auto part = [&](const Box& slice, std::vector<DeviceId> receivers) {
        Transfer q = t;
        q.slice = slice;
        q.bytes = slice.volume() * element;
        q.receivers = std::move(receivers);
        return q;
      };
      // A part that crosses between hosts, or goes from the holders to its relay's host, is sent
      // whole by the one way laid for it.
      const auto exchanged_part = [&](const Box& slice, std::vector<DeviceId> receivers) {
        Transfer q = part(slice, std::move(receivers));
        q.helpers.clear();
        q.splittable = false;
        return q;
      };
      // The holders send beside them the first part and the parts of the hosts whose parts do
      // not come here (part 1 + r is the part of the host at ring position r), in runs of
      // consecutive parts.
      std::vector<bool> held_here(m + 1, false);
      held_here[0] = true;
      for (size_t r = 0; r < m; ++r) held_here[1 + r] = r != p && (p + m - r) % m > k;
      for (size_t first = 0; first <= m;) {
        if (!held_here[first]) {
          ++first;
          continue;
        }
        size_t last = first;
        while (last + 1 <= m && held_here[last + 1]) ++last;
        if (const Box box = parts_from(first, last); !box.empty())
          near.transfers.push_back(part(box, t.receivers));
        first = last + 1;
      }
      // This host's part goes to one of its receivers that sends nothing else (turning from
      // slice to slice), which keeps it and sends it on to the receivers of the next host, or
      // chains it through every other host from the one after its own (so that every host ends
      // one chain, forwarding nothing, and every NIC forwards as many parts); and from the
      // holders to the rest beside them.
      const std::vector<DeviceId> relays = relays_of(t);
      const DeviceId stage = relays[job.task % relays.size()];
      std::vector<DeviceId> home = t.receivers, away;
      std::erase(home, stage);
      for (size_t hop = 1; hop <= k; ++hop) {
        const Transfer& next = *shared[ring[(p + hop) % m]];
        away.insert(away.end(), next.receivers.begin(), next.receivers.end());
      }
      std::sort(away.begin(), away.end());
      if (!home.empty())
        exchange.transfers.push_back(exchanged_part(parts[1 + p], std::move(home)));
      std::set<int> before;  // the other hosts with smaller ids than the stage's
      for (DeviceId r : away)
        if (cluster.host_of(r) < cluster.host_of(stage)) before.insert(cluster.host_of(r));
      Transfer relayed = exchanged_part(parts[1 + p], std::move(away));
      relayed.host_turn = static_cast<int>(before.size());
      relayed.hosts_in_turn = true;
      relayed.stages = {stage};
      relayed.through_stage = true;
      relayed.stage_receives = true;
      exchange.transfers.push_back(std::move(relayed));
    }
    across.push_back(std::move(exchange));
    out.push_back(std::move(near));
  }
  if (across.empty()) return {};
  across.insert(across.end(), std::make_move_iterator(out.begin()),
                std::make_move_iterator(out.end()));
  return across;
}

std::vector<Job> relay_tree_jobs(const Batch& batch, const std::vector<Job>& jobs) {
  const Cluster& cluster = batch.cluster;
  // A transfer from one holding host into two or more others: its receiving hosts, each taking
  // the slice from the holders (parent -1) or from the receiving host of index parent.
  struct Tree {
    size_t job, transfer;
    int root;
    double bytes;
    std::vector<int> hosts;
    std::vector<int> parent;
  };
  std::vector<Tree> trees;
  std::vector<std::vector<size_t>> rooted_at(static_cast<size_t>(cluster.hosts));  // tree indices
  // Each host's seconds of sending over its NICs, all of them together.
  std::vector<double> out(static_cast<size_t>(cluster.hosts), 0.0);
  const auto seconds = [&](double bytes, int host) {
    return bytes / cluster.nic_bandwidth_of(host);
  };
  for (size_t j = 0; j < jobs.size(); ++j)
    for (size_t i = 0; i < jobs[j].transfers.size(); ++i) {
      const Transfer& t = jobs[j].transfers[i];
      const std::vector<int> holding = hosts_of(t.candidates, cluster);
      std::vector<int> away = hosts_of(t.receivers, cluster);
      std::erase_if(away, [&](int h) { return holds(holding, h); });
      const auto bytes = static_cast<double>(t.bytes);
      if (holding.size() == 1 && away.size() >= 2) {
        rooted_at[static_cast<size_t>(holding[0])].push_back(trees.size());
        trees.push_back({j, i, holding[0], bytes, away, std::vector<int>(away.size(), -1)});
        out[holding[0]] += seconds(bytes * static_cast<double>(away.size()), holding[0]);
        continue;
      }
      // Spread over the holding hosts, as near as the heuristic needs.
      for (int h : holding)
        out[h] += seconds(
            bytes * static_cast<double>(away.size()) / static_cast<double>(holding.size()), h);
    }
  // Level the sending: while the busiest host holds a slice it sends to two or more hosts itself,
  // one of those takes it from another receiving host instead (one that sends this slice to no
  // host yet and takes it from the holders), the least busy such host, where that one stays less
  // busy than the busiest is now.
  bool moved = false;
  for (;;) {
    const auto busiest = static_cast<int>(std::max_element(out.begin(), out.end()) - out.begin());
    Tree* best_tree = nullptr;
    size_t best_child = 0, best_relay = 0;
    double best_load = out[busiest];
    for (size_t index : rooted_at[static_cast<size_t>(busiest)]) {
      Tree& tree = trees[index];
      const auto n = tree.hosts.size();
      std::vector<int> children(n, 0);
      for (int parent : tree.parent)
        if (parent >= 0) ++children[static_cast<size_t>(parent)];
      // A host that takes the slice from the holders and relays nothing relays it to another such.
      const auto leaf = [&](size_t k) { return tree.parent[k] < 0 && children[k] == 0; };
      size_t leaves = 0;
      for (size_t k = 0; k < n; ++k) leaves += leaf(k);
      if (leaves < 2) continue;
      for (size_t k = 0; k < n; ++k) {
        if (!leaf(k)) continue;
        size_t child = 0;
        while (child == k || !leaf(child)) ++child;
        const double load = out[tree.hosts[k]] + seconds(tree.bytes, tree.hosts[k]);
        if (load < best_load) {
          best_tree = &tree;
          best_child = child;
          best_relay = k;
          best_load = load;
        }
      }
    }
    if (!best_tree) break;
    best_tree->parent[best_child] = static_cast<int>(best_relay);
    out[busiest] -= seconds(best_tree->bytes, busiest);
    out[best_tree->hosts[best_relay]] += seconds(best_tree->bytes, best_tree->hosts[best_relay]);
    moved = true;
  }
  if (!moved) return {};
  std::vector<Job> relayed = jobs;
  // Each such transfer, cut: into the holders' host, into each host that takes it from the
  // holders and relays nothing, and into each relay chained on to the host it relays to (laid as
  // one chain, a transfer without a relay would have every host but its last relay it).
  for (auto tree = trees.rbegin(); tree != trees.rend(); ++tree) {
    Job& job = relayed[tree->job];
    const Transfer whole = job.transfers[tree->transfer];
    const auto on = [&](int host) {
      std::vector<DeviceId> receivers;
      for (DeviceId r : whole.receivers)
        if (cluster.host_of(r) == host) receivers.push_back(r);
      return receivers;
    };
    const auto part = [&](std::vector<DeviceId> receivers) {
      Transfer p = whole;
      p.receivers = std::move(receivers);
      p.helpers.clear();
      p.splittable = false;
      return p;
    };
    std::vector<Transfer> cut;
    if (auto home = on(tree->root); !home.empty()) cut.push_back(part(std::move(home)));
    const auto n = tree->hosts.size();
    for (size_t k = 0; k < n; ++k) {
      if (tree->parent[k] >= 0) continue;
      std::vector<DeviceId> receivers = on(tree->hosts[k]);
      const auto child = std::find(tree->parent.begin(), tree->parent.end(), static_cast<int>(k));
      if (child == tree->parent.end()) {
        cut.push_back(part(std::move(receivers)));
        continue;
      }
      const int relay = tree->hosts[k];
      const int last = tree->hosts[static_cast<size_t>(child - tree->parent.begin())];
      const auto further = on(last);
      receivers.insert(receivers.end(), further.begin(), further.end());
      std::sort(receivers.begin(), receivers.end());
      Transfer chain = part(std::move(receivers));
      // The other hosts in id order, turned so that the relay comes first.
      chain.host_turn = relay < last ? 0 : 1;
      chain.hosts_in_turn = true;
      cut.push_back(std::move(chain));
    }
    job.transfers.erase(job.transfers.begin() + static_cast<std::ptrdiff_t>(tree->transfer));
    job.transfers.insert(job.transfers.begin() + static_cast<std::ptrdiff_t>(tree->transfer),
                         cut.begin(), cut.end());
  }
  return relayed;
}

std::vector<Job> helped_jobs(const Batch& batch, const std::vector<Job>& jobs) {
  const Cluster& cluster = batch.cluster;
  SourceTiles sources(batch);
  // A transfer into its holders' one host that holders on other hosts could help, with those.
  struct Helped {
    const Transfer* t;
    int host;
    std::vector<DeviceId> afar;
  };
  std::vector<Helped> helped;
  for (const Job& job : jobs) {
    if (!job.only_copies_follow()) continue;
    for (const Transfer& t : job.transfers) {
      const auto hosts = hosts_of(t.candidates, cluster);
      if (hosts.size() != 1 || t.receivers.empty() || !t.within_holding_hosts(cluster)) continue;
      std::vector<DeviceId> afar = sources.holders(job.tensor, t.slice);
      std::erase_if(afar, [&](DeviceId d) { return cluster.host_of(d) == hosts[0]; });
      if (!afar.empty()) helped.push_back({&t, hosts[0], std::move(afar)});
    }
  }
  if (helped.empty()) return {};
  // Each host's share from afar: what its NICs (or the helping hosts' together, or the helping
  // holders' ports at NIC speed, if less) carry against what its holders' device links carry, so
  // that both end together, the helping holders' ports after serving their own hosts. A host
  // whose holders serve no more than the helpers' do is not helped: a helper's port sends over
  // its NIC at a tenth of its link's speed, and two hosts that helped each other kept the busier
  // one's holder busier still (random suite seed 2302 r8: 1.50x by the greedy, 1.10x unhelped).
  std::map<int, std::set<DeviceId>> local_holders;
  std::map<int, std::set<DeviceId>> helpers;
  std::map<int, double> served;  // bytes of each helped host's transfers
  for (const Helped& h : helped) {
    local_holders[h.host].insert(h.t->candidates.begin(), h.t->candidates.end());
    helpers[h.host].insert(h.afar.begin(), h.afar.end());
    served[h.host] += static_cast<double>(h.t->bytes);
  }
  std::map<int, double> near;  // each helped host's holders' device links together
  for (const auto& [host, holders] : local_holders)
    for (DeviceId d : holders) near[host] += cluster.device_bandwidth_of(d);
  const auto serving = [&](int host) {  // seconds a helped host's holders serve it alone
    return near.contains(host) ? served.at(host) / near.at(host) : 0.0;
  };
  std::map<int, double> share_afar;
  for (const auto& [host, holders] : local_holders) {
    std::set<int> helping_hosts;
    double ports = 0;  // the helpers' ports sending over their NICs
    for (DeviceId d : helpers[host]) {
      helping_hosts.insert(cluster.host_of(d));
      ports += std::min(cluster.single_nic_bandwidth_of(cluster.host_of(d)),
                        cluster.device_bandwidth_of(d));
    }
    double afar = 0;
    double busiest_helper = 0;
    for (int g : helping_hosts) {
      afar += cluster.nic_bandwidth_of(g);
      busiest_helper = std::max(busiest_helper, serving(g));
    }
    afar = std::min({afar, cluster.nic_bandwidth_of(host), ports});
    // (served - x) / near = busiest_helper + x / afar
    const double x = (serving(host) - busiest_helper) / (1 / near[host] + 1 / afar);
    share_afar[host] = std::max(0.0, x / served[host]);
  }
  std::vector<Job> out;
  auto next = helped.begin();
  for (const Job& job : jobs) {
    Job cut = job;
    cut.transfers.clear();
    for (const Transfer& t : job.transfers) {
      if (next == helped.end() || next->t != &t) {
        cut.transfers.push_back(t);
        continue;
      }
      const Helped& h = *next++;
      const int longest = longest_dimension(t.slice);
      const Interval whole = t.slice.dims[longest];
      const int64_t at =
          whole.hi - std::llround(static_cast<double>(whole.size()) * share_afar.at(h.host));
      if (at <= whole.lo || at >= whole.hi) {
        cut.transfers.push_back(t);
        continue;
      }
      const int element = element_size(batch, job.tensor);
      Transfer near = t;
      near.slice.dims[longest].hi = at;
      near.bytes = near.slice.volume() * element;
      near.splittable = false;
      Transfer afar = t;
      afar.slice.dims[longest].lo = at;
      afar.bytes = afar.slice.volume() * element;
      afar.candidates = h.afar;
      afar.splittable = false;
      cut.transfers.push_back(std::move(near));
      cut.transfers.push_back(std::move(afar));
    }
    out.push_back(std::move(cut));
  }
  return out;
}

std::vector<Job> in_rounds(const Batch& batch, const Job& job, int n) {
  const int element = element_size(batch, job.tensor);
  std::vector<Job> parts;
  for (int round = 0; round < n; ++round) {
    Job part{.tensor = job.tensor, .task = job.task, .round = round};
    for (Transfer t : job.transfers) {
      t.slice = allgather_part(t.slice, n, round);
      t.bytes = t.slice.volume() * element;
      part.transfers.push_back(std::move(t));
    }
    if (round == 0) part.then = job.then;
    parts.push_back(std::move(part));
  }
  return parts;
}

std::vector<Job> rail_jobs(const Batch& batch, const std::vector<Job>& jobs, int rounds,
                           int64_t min_round_bytes, const RailOptions& options) {
  const auto [stage_at_holders, per_receiver, beside, home, ports, only_stages, relays, tapered,
              home_back, home_stages, through_stages] = options;
  const Cluster& cluster = batch.cluster;
  std::set<DeviceId> senders;  // the devices no stage may be at
  if (!stage_at_holders)
    for (const Job& job : jobs)
      for (const Transfer& t : job.transfers)
        senders.insert(t.candidates.begin(), t.candidates.end());
  // Per host: the devices holding what it takes in over its NICs (rail_parts).
  std::map<int, std::set<DeviceId>> sources;
  // Per device that alone holds slices, where `home`: the bytes of those that only devices of its
  // host need, over the bytes of those that leave it (rail_parts).
  std::map<DeviceId, std::pair<double, double>> home_and_away;
  for (const Job& job : jobs)
    for (const Transfer& t : job.transfers) {
      for (DeviceId r : t.receivers)
        if (!host_holds(t, cluster.host_of(r), cluster))
          sources[cluster.host_of(r)].insert(t.candidates.begin(), t.candidates.end());
      if (home && t.candidates.size() == 1 && !t.receivers.empty()) {
        auto& [stays, leaves] = home_and_away[t.candidates[0]];
        (t.within_holding_hosts(cluster) ? stays : leaves) += static_cast<double>(t.bytes);
      }
    }
  std::map<DeviceId, double> home_share;
  for (const auto& [d, bytes] : home_and_away)
    if (bytes.second > 0) home_share[d] = bytes.first / bytes.second;
  const auto loads = ports ? port_loads(jobs, cluster) : std::map<int, std::vector<double>>();
  auto gathered = gathered_receivers(jobs);
  std::vector<Job> out;
  std::map<int, int> jobs_into;  // per host: the jobs laid on rails into it so far
  const auto first = [](int) { return 0; };
  for (const Job& job : jobs) {
    const bool only_copies = job.only_copies_follow();
    int64_t largest_rail = 0;  // bytes of the job's largest rail, 0 when it has none
    for (const Transfer& t : job.transfers) {
      const auto hosts = rail_hosts(t, cluster, per_receiver, relays, first);
      const auto g = static_cast<int>(hosts.empty() ? 0 : hosts[0].rails.size());
      if (g >= 2 && !allgather_part(t.slice, g, g - 1).empty())
        largest_rail = std::max(largest_rail, t.bytes / g);
    }
    if (!only_copies || largest_rail == 0) {
      out.push_back(job);
      continue;
    }
    const int n = round_count(job, largest_rail, rounds, min_round_bytes);
    const int element = element_size(batch, job.tensor);
    // Per transfer, what receives its slice otherwise may not stage it: the job's other
    // transfers' receivers and the devices their rails enter a host by, and a gather's members;
    // nor (below) the stages of a rail of an overlapping slice laid before, in any round: rounds
    // cut each transfer's slice their own way.
    std::map<const Transfer*, std::set<DeviceId>> received_otherwise;
    for (const Transfer& t : job.transfers) {
      std::set<DeviceId>& devices = received_otherwise[&t];
      devices = gathered[{job.tensor, job.task}];
      for (DeviceId r : job.receivers_besides(t)) devices.insert(r);
      for (const Transfer& u : job.transfers)
        if (&u != &t)
          for (const RailHost& h : rail_hosts(u, cluster, per_receiver, relays, first))
            devices.insert(h.rails.begin(), h.rails.end());
    }
    // With home_stages, per transfer held on several hosts: the receivers of the job's other
    // transfers that take its slice whole from the holders of one of those hosts (leave_by_rail
    // may stage a rail there).
    std::map<const Transfer*, std::set<DeviceId>> home_of;
    for (const Transfer& t : job.transfers) {
      if (!home_stages || hosts_of(t.candidates, cluster).size() < 2) continue;
      for (const Transfer& u : job.transfers) {
        const int host = u.candidates.empty() ? -1 : cluster.host_of(u.candidates[0]);
        const auto on_host = [&](DeviceId d) { return cluster.host_of(d) == host; };
        if (&u != &t && u.slice == t.slice && host_holds(t, host, cluster) &&
            std::all_of(u.candidates.begin(), u.candidates.end(), on_host) &&
            std::all_of(u.receivers.begin(), u.receivers.end(), on_host))
          for (DeviceId r : u.receivers)
            if (!gathered[{job.tensor, job.task}].contains(r)) home_of[&t].insert(r);
      }
    }
    std::map<const Transfer*, std::set<DeviceId>> stages_of;  // of the job's transfers' rails
    // Round `round`'s part of `slice`: the n rounds' parts, the last one in halves where tapered
    // (and each half has an element of every slice).
    const auto half_of_last = [&](const Box& slice, int half) {
      return allgather_part(allgather_part(slice, n, n - 1), 2, half);
    };
    const bool halved_last =
        tapered && n >= 2 &&
        std::all_of(job.transfers.begin(), job.transfers.end(),
                    [&](const Transfer& t) { return !half_of_last(t.slice, 1).empty(); });
    const auto part_of = [&](const Box& slice, int round) {
      if (!halved_last || round < n - 1) return allgather_part(slice, n, round);
      return half_of_last(slice, round - (n - 1));
    };
    // `x` cut to one rail's part (`slice`) for `receivers`, sent whole from x's holders.
    const auto from_holders_of = [&](const Transfer& x, const Box& slice,
                                     std::vector<DeviceId> receivers) {
      Transfer from_holders = x;
      from_holders.slice = slice;
      from_holders.bytes = slice.volume() * element;
      from_holders.receivers = std::move(receivers);
      from_holders.splittable = false;
      return from_holders;
    };
    for (int round = 0; round < n + (halved_last ? 1 : 0); ++round) {
      Job part{.tensor = job.tensor, .task = job.task, .round = round};
      // Per receiver that takes a slice from its host's holders and stages a rail of it: the
      // slice, its rails' parts and the rail it stages.
      struct StagedAtHome {
        Box slice;
        std::vector<Box> parts;
        int rail = 0;
      };
      std::map<DeviceId, StagedAtHome> staged_at_home;
      for (const Transfer& t : job.transfers) {
        Transfer whole = t;
        whole.slice = part_of(t.slice, round);
        whole.bytes = whole.slice.volume() * element;
        const auto hosts = rail_hosts(t, cluster, per_receiver, relays,
                                      [&](int host) { return jobs_into[host] + round; });
        const auto g = static_cast<int>(hosts.empty() ? 0 : hosts[0].rails.size());
        if (g < 2 || allgather_part(whole.slice, g, g - 1).empty()) {
          part.transfers.push_back(std::move(whole));
          continue;
        }
        std::set<DeviceId> elsewhere = received_otherwise[&t];
        for (const Transfer& u : job.transfers)
          if (&u != &t && intersect(u.slice, t.slice).volume() > 0)
            elsewhere.insert(stages_of[&u].begin(), stages_of[&u].end());
        // The rails from the holders' NIC on first, so that holders on different NICs, which
        // send their rails one after another, start on different rails.
        const int start = cluster.nic_of(t.candidates[0]) % g;
        // A receiver beside the holders stages one rail of a round at most (two rails on one NIC
        // would both pick it, and it would keep one part and take the other twice).
        std::set<DeviceId> home = home_of[&t];
        const bool through = through_stages && hosts_of(t.candidates, cluster).size() == 1;
        for (int j = 0; j < g; ++j) {
          const int i = (start + j) % g;
          Transfer rail = whole;
          rail.slice = allgather_part(whole.slice, g, i);
          rail.bytes = rail.slice.volume() * element;
          rail.receivers.clear();
          for (const RailHost& h : hosts) rail.receivers.push_back(h.rails[i]);
          leave_by_rail(rail, i, whole, elsewhere, senders, home, round, beside, only_stages,
                        cluster);
          if (through && rail.stages.size() == 1) rail.through_stage = true;
          for (DeviceId d : rail.stages) home.erase(d);
          stages_of[&t].insert(rail.stages.begin(), rail.stages.end());
          rail.splittable = false;
          rail.host_turn = round;
          part.transfers.push_back(std::move(rail));
        }
        std::vector<Transfer*> by_rail(g);  // the rails just added, by rail index
        for (int j = 0; j < g; ++j) by_rail[(start + j) % g] = &part.transfers.end()[j - g];
        const auto parts =
            rail_parts(whole, by_rail, sources, home_share, loads, home_back, cluster);
        // A rail with bytes may not enter a host at a device that receives the slice otherwise
        // (by another transfer, a gather, or a copy as a receiver that holds it: a part helped
        // from afar, helped_jobs, enters a host whose holders serve it): it would take those
        // elements twice. Such a transfer goes whole.
        const auto receives_otherwise = [&](DeviceId d) {
          return !holds(t.receivers, d) &&
                 (elsewhere.contains(d) ||
                  std::any_of(job.then.begin(), job.then.end(),
                              [&](const Op& op) { return holds(op.receivers, d); }));
        };
        if (std::any_of(hosts.begin(), hosts.end(), [&](const RailHost& h) {
              for (int i = 0; i < g; ++i)
                if (parts[i].volume() > 0 && receives_otherwise(h.rails[i])) return true;
              return false;
            })) {
          part.transfers.resize(part.transfers.size() - static_cast<size_t>(g));
          part.transfers.push_back(std::move(whole));
          continue;
        }
        for (int i = 0; i < g; ++i) {
          by_rail[i]->slice = parts[i];
          by_rail[i]->bytes = parts[i].volume() * element;
          if (by_rail[i]->stage_receives && !holds(t.receivers, by_rail[i]->stages[0]))
            staged_at_home[by_rail[i]->stages[0]] = {whole.slice, parts, i};
        }
        for (const RailHost& h : hosts)
          gather_rails(batch, job, whole.slice, parts, h, home_back, part.then);
        // The receivers on hosts that hold the slice get it whole, over device links; a receiver
        // that stages a rail gets the other parts only.
        std::erase_if(whole.receivers,
                      [&](DeviceId r) { return !host_holds(t, cluster.host_of(r), cluster); });
        std::vector<DeviceId> staged(g, -1);  // per rail: the receiver that stages it, or -1
        for (int j = 0; j < g; ++j)
          if (const Transfer& rail = part.transfers.end()[j - g]; rail.stage_receives)
            staged[(start + j) % g] = rail.stages[0];
        if (std::all_of(staged.begin(), staged.end(), [](DeviceId d) { return d < 0; })) {
          if (!whole.receivers.empty()) part.transfers.push_back(std::move(whole));
          continue;
        }
        std::vector<Transfer> from_holders;  // added after the loop, which by_rail points into
        for (int i = 0; i < g; ++i) {
          std::vector<DeviceId> rest = whole.receivers;
          std::erase(rest, staged[i]);
          if (rest.empty()) continue;
          if (home_back) {
            Transfer& rail = *by_rail[i];
            rail.receivers.insert(rail.receivers.end(), rest.begin(), rest.end());
            std::sort(rail.receivers.begin(), rail.receivers.end());
            rail.home_back = true;
            continue;
          }
          from_holders.push_back(from_holders_of(whole, parts[i], std::move(rest)));
        }
        std::move(from_holders.begin(), from_holders.end(), std::back_inserter(part.transfers));
      }
      // A receiver that stages a rail at home takes the other parts from its host's holders.
      if (!staged_at_home.empty()) {
        std::vector<Transfer> transfers;
        for (Transfer& x : part.transfers) {
          const auto staged_here = [&](DeviceId r) -> const StagedAtHome* {
            const auto it = staged_at_home.find(r);
            return it != staged_at_home.end() && it->second.slice == x.slice ? &it->second
                                                                             : nullptr;
          };
          const auto first_staged =
              std::find_if(x.receivers.begin(), x.receivers.end(), staged_here);
          if (!x.stages.empty() || first_staged == x.receivers.end()) {
            transfers.push_back(std::move(x));
            continue;
          }
          const std::vector<Box> parts = staged_here(*first_staged)->parts;
          for (int i = 0; i < static_cast<int>(parts.size()); ++i) {
            std::vector<DeviceId> rest = x.receivers;
            std::erase_if(rest, [&](DeviceId r) {
              const StagedAtHome* at = staged_here(r);
              return at != nullptr && at->rail == i;
            });
            if (!rest.empty() && parts[i].volume() > 0)
              transfers.push_back(from_holders_of(x, parts[i], std::move(rest)));
          }
        }
        part.transfers = std::move(transfers);
      }
      if (round == 0) part.then.insert(part.then.end(), job.then.begin(), job.then.end());
      out.push_back(std::move(part));
    }
    for (const Transfer& t : job.transfers)
      for (const RailHost& h : rail_hosts(t, cluster, per_receiver, relays, first))
        ++jobs_into[cluster.host_of(h.receivers[0])];
  }
  return out;
}

std::optional<DeviceId> Transfer::stage_on(int host, const Cluster& cluster) const {
  const auto it = std::find_if(stages.begin(), stages.end(),
                               [&](DeviceId d) { return cluster.host_of(d) == host; });
  return it == stages.end() ? std::nullopt : std::optional(*it);
}

int64_t Job::bytes() const {
  int64_t total = 0;
  for (const auto& t : transfers) total += t.bytes;
  return total;
}

std::vector<DeviceId> Job::receivers_besides(const Transfer& t) const {
  std::vector<DeviceId> out;
  for (const Transfer& u : transfers)
    if (&u != &t) out.insert(out.end(), u.receivers.begin(), u.receivers.end());
  return out;
}

bool Job::only_copies_follow() const {
  return std::all_of(then.begin(), then.end(),
                     [](const Op& op) { return op.kind == OpKind::copy; });
}

bool Transfer::within_holding_hosts(const Cluster& cluster) const {
  const auto hosts = hosts_of(candidates, cluster);
  return std::all_of(receivers.begin(), receivers.end(), [&](DeviceId r) {
    return std::find(hosts.begin(), hosts.end(), cluster.host_of(r)) != hosts.end();
  });
}

int64_t slice_bytes(const Batch& batch, const Job& job, const Box& slice) {
  return slice.volume() * element_size(batch, job.tensor);
}

std::vector<int> hosts_of(const std::vector<DeviceId>& devices, const Cluster& cluster) {
  std::vector<int> hosts;
  for (DeviceId d : devices) {
    const int h = cluster.host_of(d);
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  return hosts;
}

std::vector<Job> make_jobs(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks,
                           Strategy strategy, bool gather) {
  std::vector<Job> jobs;
  size_t count = 0;
  for (const auto& of_tensor : tasks) count += of_tensor.size();
  jobs.reserve(count);
  // send_recv means one send per receiver: it gathers nothing.
  Gathers gathers =
      strategy == Strategy::send_recv || !gather ? Gathers(batch, {}) : Gathers(batch, tasks);
  for (int tensor = 0; tensor < static_cast<int>(tasks.size()); ++tensor)
    for (int i = 0; i < static_cast<int>(tasks[tensor].size()); ++i)
      jobs.push_back(
          make_job(batch, tensor, i, tasks[tensor][i], strategy, gathers.gathered(tensor, i)));
  std::move(gathers.jobs().begin(), gathers.jobs().end(), std::back_inserter(jobs));
  return jobs;
}

Op transfer_op(std::vector<DeviceId> receivers, int host_turn, const Box& slice, const Job& job,
               DeviceId sender, const Batch& batch, int64_t chunk_bytes, const ChainKeys& keys) {
  const Cluster& cluster = batch.cluster;
  const int element = element_size(batch, job.tensor);
  const int home = cluster.host_of(sender);
  std::vector<DeviceId> chain = std::move(receivers);
  // The sender's host first, then the other hosts in id order, each host's devices together
  // (std::stable_sort allocates a buffer even for one element).
  if (chain.size() > 1)
    std::stable_sort(chain.begin(), chain.end(), [&](DeviceId a, DeviceId b) {
      const int ha = cluster.host_of(a);
      const int hb = cluster.host_of(b);
      return std::pair(ha != home, ha) < std::pair(hb != home, hb);
    });
  const auto group_end = [&](std::vector<DeviceId>::iterator group) {
    const int host = cluster.host_of(*group);
    return std::find_if(group, chain.end(), [&](DeviceId d) { return cluster.host_of(d) != host; });
  };
  if (host_turn > 0) {
    auto others = chain.begin();
    while (others != chain.end() && cluster.host_of(*others) == home) ++others;
    std::vector<std::vector<DeviceId>::iterator> groups;
    for (auto group = others; group != chain.end(); group = group_end(group))
      groups.push_back(group);
    if (groups.size() > 1) std::rotate(others, groups[host_turn % groups.size()], chain.end());
  }
  // Each other host is entered at its device of smallest key (the balance mode's choice), the
  // rest of its devices following in cyclic order: with several NICs per host, chains spread over
  // them.
  if (keys.entry)
    for (auto group = chain.begin(); group != chain.end();) {
      const auto end = group_end(group);
      if (cluster.host_of(*group) != home && end - group > 1) {
        auto entry = group;
        auto best = keys.entry(*group);
        for (auto it = std::next(group); it != end; ++it)
          if (const auto key = keys.entry(*it); key < best) {
            best = key;
            entry = it;
          }
        std::rotate(group, entry, end);
      }
      group = end;
    }
  // The other host of largest `last_host` key (the last of them on ties) ends the chain: it is
  // the one host the chain enters that forwards nothing, so it should be the one whose NIC has
  // the most else to send.
  if (keys.last_host) {
    auto last_group = chain.end();
    double most = 0;
    for (auto group = chain.begin(); group != chain.end();) {
      const int host = cluster.host_of(*group);
      const auto end = group_end(group);
      if (host != home)
        if (const double key = keys.last_host(host); last_group == chain.end() || key >= most) {
          most = key;
          last_group = group;
        }
      group = end;
    }
    if (last_group != chain.end()) std::rotate(last_group, group_end(last_group), chain.end());
  }
  if (keys.home_last)
    std::rotate(chain.begin(),
                std::find_if(chain.begin(), chain.end(),
                             [&](DeviceId d) { return cluster.host_of(d) != home; }),
                chain.end());
  // Of the last host's devices (but the one it is entered at, from another host), the one with
  // the most sending ahead ends the chain, where it only receives.
  if (keys.sending && chain.size() >= 2) {
    const int host = cluster.host_of(chain.back());
    auto first = chain.end();
    while (first != chain.begin() && cluster.host_of(*std::prev(first)) == host) --first;
    if (host != home || keys.home_last) ++first;
    auto last = std::prev(chain.end());
    double most = keys.sending(*last);
    for (auto it = first; it != chain.end(); ++it)
      if (const double key = keys.sending(*it); key > most) {
        most = key;
        last = it;
      }
    std::rotate(last, std::next(last), chain.end());
  }
  // (the kind first: the chain is moved into the op)
  const OpKind kind = chain.size() == 1 ? OpKind::send : OpKind::broadcast;
  Op op = make_op(kind, {make_piece(batch, job.tensor, job.task, slice)}, sender, std::move(chain));
  if (op.kind == OpKind::broadcast)
    op.chunk_bytes = chain_chunk_bytes(op, cluster, chunk_bytes, element);
  return op;
}

constexpr double kSmallChunkBytes = 64 * 1024;
constexpr double kMostSmallChunks = 32;

int64_t chain_chunk_bytes(const Op& op, const Cluster& cluster, int64_t chunk_bytes,
                          int element_size) {
  if (chunk_bytes > 0) return std::min(chunk_bytes, op.bytes);
  std::vector<double> capacities;  // per hop, as the simulator routes it
  DeviceId prev = *op.sender;
  for (DeviceId r : op.receivers) {
    capacities.push_back(prev == r ? std::numeric_limits<double>::infinity()
                                   : chain_hop_bandwidth(cluster, prev, r));
    prev = r;
  }
  const double rate = *std::min_element(capacities.begin(), capacities.end());
  const double lat = cluster.latency;
  const double bytes = static_cast<double>(op.bytes);
  const int64_t elements = op.bytes / element_size;
  if (elements <= 1 || !std::isfinite(rate)) return op.bytes;
  // The chunk of whole elements that cuts the message into `chunks` (or slightly fewer) pieces.
  const auto chunk_of = [&](double chunks) {
    const auto per = static_cast<int64_t>(std::ceil(static_cast<double>(elements) / chunks));
    return std::clamp<int64_t>(per * element_size, element_size, op.bytes);
  };
  // The chain alone, as the simulator times it (chain_pipeline): its delay (latencies and fill),
  // then its bytes at the slowest hop's rate or at the message rate, whichever is lower.
  const auto time_of = [&](int64_t chunk) {
    const ChainPipeline chain = chain_pipeline(op.bytes, chunk, capacities, lat);
    return chain.delay_s + bytes / std::min(rate, chain.max_rate);
  };
  // More chunks shorten the fill as long as a hop's window covers its round trip, a chunk at least
  // `per_chunk` on the slowest hop's wire (`wire_chunks`); beyond, each further message costs
  // `per_chunk`, which pays only while the fill per byte is large against it (the optimum of
  // fill + messages: `balanced`).
  // Chunks below 64 KiB only for messages under 2 MiB, and then at most 32: every chunk is a
  // message each relay must take and forward, and on a loaded host each may wait for the CPU
  // (docs/simulator.md), which the latency alone does not price.
  // A hop moves at most a window of kChainMaxWindow chunks per round trip (chain_window).
  const double per_chunk = 2 * lat / kChainMaxWindow;
  const double most = std::min(static_cast<double>(elements),
                               std::max(kMostSmallChunks, std::ceil(bytes / kSmallChunkBytes)));
  const double wire_chunks =
      lat > 0 ? std::min(std::floor(bytes / (rate * per_chunk)) + 1, most) : most;
  double fill_per_byte = -1 / rate;
  for (double capacity : capacities) fill_per_byte += 1 / capacity;
  std::vector<double> candidates{1, wire_chunks};
  if (lat > 0 && fill_per_byte > 0) {
    const double balanced = std::sqrt(fill_per_byte * bytes / per_chunk);
    if (balanced > wire_chunks)
      candidates.insert(candidates.end(), {std::min(std::floor(balanced), most),
                                           std::min(std::ceil(balanced), most)});
  }
  int64_t best_chunk = op.bytes;
  double best = time_of(op.bytes);
  for (double chunks : candidates)
    if (const int64_t chunk = chunk_of(chunks); time_of(chunk) < best) {
      best = time_of(chunk);
      best_chunk = chunk;
    }
  // The fewest chunks within 1/1024 of the best time: a large message does not need a hundred
  // thousand chunks to save a fraction of a percent, and every chunk is a message to the
  // executors. Up to `wire_chunks` the time only falls as chunks are added.
  const double good_enough = best + best / 1024;
  if (time_of(chunk_of(wire_chunks)) > good_enough) return best_chunk;
  double few = 1, many = wire_chunks;  // time_of(chunk_of(many)) is good enough
  while (many - few > 1) {
    const double mid = std::floor((few + many) / 2);
    (time_of(chunk_of(mid)) <= good_enough ? many : few) = mid;
  }
  return time_of(chunk_of(few)) <= good_enough ? chunk_of(few) : chunk_of(many);
}

int split_parts(const Transfer& transfer, int holder_hosts) {
  if (!transfer.splittable) return 1;
  int parts = holder_hosts;
  while (parts > 1 && allgather_part(transfer.slice, parts, parts - 1).empty()) --parts;
  return parts;
}

}  // namespace meshcast::detail
