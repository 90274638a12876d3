#include "balance.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <random>

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
    ops.push_back(transfer_op(transfer, allgather_part(transfer.slice, parts, i), job, senders[i],
                              batch, chunk_bytes));
  return ops;
}

int holder_hosts(const Transfer& transfer, const Cluster& cluster) {
  return static_cast<int>(hosts_of(transfer.candidates, cluster).size());
}

void append_then(std::vector<Op>& ops, const Job& job) {
  ops.insert(ops.end(), job.then.begin(), job.then.end());
}

// ---- size ----------------------------------------------------------------------------------

// Bytes each host NIC and each device have sent so far.
struct Loads {
  std::vector<int64_t> host;
  std::vector<int64_t> device;
};

bool leaves_host(const Transfer& transfer, int host, const Cluster& cluster) {
  return std::any_of(transfer.receivers.begin(), transfer.receivers.end(),
                     [&](DeviceId r) { return cluster.host_of(r) != host; });
}

// The holder on the least-loaded host (ties: least-loaded device, then mesh order), skipping
// `used` hosts; adds `bytes` to its loads.
DeviceId pick_least_loaded(const Transfer& transfer, int64_t bytes, const std::vector<int>& used,
                           Loads& loads, const Cluster& cluster) {
  DeviceId best = -1;
  std::pair<int64_t, int64_t> best_key;
  for (DeviceId d : transfer.candidates) {
    const int h = cluster.host_of(d);
    if (std::find(used.begin(), used.end(), h) != used.end()) continue;
    const int64_t out = leaves_host(transfer, h, cluster) ? bytes : 0;
    const std::pair key{loads.host[h] + out, loads.device[d]};
    if (best < 0 || key < best_key) {
      best = d;
      best_key = key;
    }
  }
  const int h = cluster.host_of(best);
  loads.host[h] += leaves_host(transfer, h, cluster) ? bytes : 0;
  loads.device[best] += bytes;
  return best;
}

// The most bytes any of `hosts` has sent.
int64_t max_load(const Loads& loads, const std::vector<int>& hosts) {
  int64_t most = 0;
  for (int h : hosts) most = std::max(most, loads.host[h]);
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

struct Placed {
  double start;
  int seq;
  Op op;
};

struct Decoded {
  std::vector<Op> ops;             // in start order
  std::vector<SplitChoice> split;  // what each job did
  double makespan = 0;             // the simulated time of `ops`: what estimate() reports
  int64_t work = 0;                // what decoding cost, in work units (kSearchWork)
};

class OrderPlanner {
 public:
  OrderPlanner(const Batch& batch, const std::vector<Job>& jobs, const PlanOptions& options)
      : batch_(batch), jobs_(jobs), options_(options) {}

  Decoded decode(const Genome& genome) const {
    Schedule schedule(batch_);
    std::vector<Placed> placed;
    Decoded out;
    out.split = genome.split;
    for (int j : genome.order) {
      const Job& job = jobs_[j];
      bool did_split = false;
      double done = 0;  // an allgather waits for the transfers of its parts
      for (const Transfer& t : job.transfers)
        did_split |= place_transfer(t, job, genome.split[j], schedule, placed, done, out.work);
      if (genome.split[j] == SplitChoice::automatic)
        out.split[j] = did_split ? SplitChoice::yes : SplitChoice::no;
      for (const Op& op : job.then)
        record(schedule.insert(op, op.kind == OpKind::allgather ? done : 0), op, placed);
    }
    std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
      return std::pair(a.start, a.seq) < std::pair(b.start, b.seq);
    });
    out.ops.reserve(placed.size());
    for (Placed& p : placed) out.ops.push_back(std::move(p.op));
    const SimTime simulated = simulate_time(batch_, out.ops);
    out.makespan = simulated.time_s;
    // Recording and sorting the ops (a unit per op and level of the sort), then simulating them.
    const auto ops = static_cast<int64_t>(out.ops.size());
    out.work += ops * std::bit_width(static_cast<uint64_t>(ops)) + simulated.steps;
    return out;
  }

 private:
  static void record(Slot slot, const Op& op, std::vector<Placed>& placed) {
    placed.push_back({slot.start, static_cast<int>(placed.size()), op});
  }

  // The op from the holder (not on `used` hosts) that finishes soonest. Adds to `work` two
  // units per holder probed (building its op) and one per device of the op (its windows).
  Op soonest(const Transfer& t, const Box& slice, const Job& job, const std::vector<int>& used,
             const Schedule& schedule, int64_t& work) const {
    std::optional<Op> best;
    double best_finish = 0;
    for (DeviceId d : t.candidates) {
      if (std::find(used.begin(), used.end(), batch_.cluster.host_of(d)) != used.end()) continue;
      Op op = transfer_op(t, slice, job, d, batch_, options_.chunk_bytes);
      const double finish = schedule.probe(op, 0).finish;
      work += 3 + static_cast<int64_t>(op.receivers.size());
      if (!best || finish < best_finish) {
        best = std::move(op);
        best_finish = finish;
      }
    }
    return *best;
  }

  // Places one transfer whole or split; returns whether it was split. `done` grows to the
  // latest finish, `work` by the probes.
  bool place_transfer(const Transfer& t, const Job& job, SplitChoice choice, Schedule& schedule,
                      std::vector<Placed>& placed, double& done, int64_t& work) const {
    const int parts = options_.split && choice != SplitChoice::no
                          ? split_parts(t, holder_hosts(t, batch_.cluster))
                          : 1;
    const Op whole = soonest(t, t.slice, job, {}, schedule, work);
    const double whole_finish = schedule.probe(whole, 0).finish;
    if (parts > 1) {
      std::vector<std::pair<Op, Slot>> pieces;
      std::vector<int> used;
      double finish = 0;
      for (int i = 0; i < parts; ++i) {
        Op op = soonest(t, allgather_part(t.slice, parts, i), job, used, schedule, work);
        used.push_back(batch_.cluster.host_of(*op.sender));
        const Slot slot = schedule.insert(op, 0);
        finish = std::max(finish, slot.finish);
        pieces.emplace_back(std::move(op), slot);
      }
      if (choice == SplitChoice::yes || finish < whole_finish) {
        for (const auto& [op, slot] : pieces) record(slot, op, placed);
        done = std::max(done, finish);
        return true;
      }
      for (const auto& [op, slot] : pieces) schedule.remove(op, slot);
    }
    const Slot slot = schedule.insert(whole, 0);
    record(slot, whole, placed);
    done = std::max(done, slot.finish);
    return false;
  }

  const Batch& batch_;
  const std::vector<Job>& jobs_;
  const PlanOptions& options_;
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
  Loads loads{std::vector<int64_t>(cluster.hosts, 0), std::vector<int64_t>(cluster.devices(), 0)};
  return ops_from_senders(batch, jobs, options, [&](const Job& job, const Transfer& t, int parts) {
    const int element = dtype_size(batch.tensors[job.tensor].tensor.dtype);
    Loads whole = loads;
    std::vector<DeviceId> senders{pick_least_loaded(t, t.bytes, {}, whole, cluster)};
    if (parts > 1) {
      Loads split = loads;
      std::vector<DeviceId> split_senders;
      std::vector<int> used;
      for (int i = 0; i < parts; ++i) {
        const int64_t bytes = allgather_part(t.slice, parts, i).volume() * element;
        split_senders.push_back(pick_least_loaded(t, bytes, used, split, cluster));
        used.push_back(cluster.host_of(split_senders.back()));
      }
      const auto holders = hosts_of(t.candidates, cluster);
      if (max_load(split, holders) < max_load(whole, holders)) {
        whole = split;
        senders = split_senders;
      }
    }
    loads = std::move(whole);
    return senders;
  });
}

std::vector<Op> balance_order(const Batch& batch, const std::vector<Job>& jobs,
                              const PlanOptions& options) {
  const OrderPlanner planner(batch, jobs, options);
  const int n = static_cast<int>(jobs.size());

  // Two greedy seeds: largest jobs first, and task order; keep the better (ties: the first).
  Genome natural{std::vector<int>(n), std::vector<SplitChoice>(n, SplitChoice::automatic)};
  std::iota(natural.order.begin(), natural.order.end(), 0);
  Genome largest = natural;
  std::stable_sort(largest.order.begin(), largest.order.end(),
                   [&](int a, int b) { return jobs[a].bytes() > jobs[b].bytes(); });
  Decoded best = planner.decode(largest);
  Genome current{largest.order, best.split};
  if (Decoded other = planner.decode(natural); other.makespan < best.makespan) {
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
      if (options.split && split_parts(t, holder_hosts(t, batch.cluster)) > 1) {
        splittable.push_back(j);
        break;
      }
  const int64_t max_steps = std::max<int64_t>(100, 20LL * n * n);
  const double budget = options.search_effort * kSearchWork;
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
      Decoded result = planner.decode(trial);
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
