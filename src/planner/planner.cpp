#include "meshcast/planner/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "balance.h"
#include "bucket.h"
#include "jobs.h"
#include "meshcast/error.h"
#include "meshcast/plan/dependencies.h"
#include "meshcast/plan/validate.h"
#include "meshcast/planner/estimate.h"
#include "meshcast/planner/lower_bound.h"
#include "meshcast/sim/simulator.h"
#include "shop.h"

namespace meshcast {

Balance effective_balance(const PlanOptions& options) {
  if (options.balance) return *options.balance;
  return options.strategy == Strategy::broadcast ? Balance::order : Balance::size;
}

int64_t default_bucket_bytes(const Cluster& cluster) {
  return std::llround(99 * cluster.latency * cluster.nic_bandwidth);
}

namespace {

// A plan within this factor of the lower bound is near enough: only a plan beyond it is worth
// other candidates.
constexpr double kNearTheBound = 1.05;
// How near the best plan a candidate laid by the greedy that keeps receipts apart must come to be
// laid again by the one that takes them in over NICs at once.
constexpr double kAtOnceWithin = 1.2;
// The most jobs for which balance order plans other candidates: planning and simulating each
// costs about as much again as the first plan (up to five: split, one op per host, host by host
// either way round, halved), which a large problem's planning time cannot spare.
constexpr size_t kMostJobsForACandidate = 1024;
// What reordering the best plan's sends may cost, in ops simulated, at search effort 1: a few
// hundred tries for a plan of a few hundred ops (the random suite's far cases), fewer as plans
// grow; it adds 4-8% to the random suite's planning (100,000: 45%, for three more cases of 525
// within 1.05x with four NICs).
constexpr double kReorderWork = 30'000;

// The ops of `jobs` by `options`' balance mode.
std::vector<Op> ops_of(const Batch& batch, const std::vector<detail::Job>& jobs,
                       const PlanOptions& options, Balance balance) {
  switch (balance) {
    case Balance::none:
      return detail::balance_none(batch, jobs, options);
    case Balance::size:
      return detail::balance_size(batch, jobs, options);
    case Balance::order:
      break;
  }
  return detail::balance_order(batch, jobs, options);
}

// Whether some transfer of `jobs` satisfies `pred`.
template <typename Pred>
bool any_transfer(const std::vector<detail::Job>& jobs, Pred pred) {
  for (const detail::Job& job : jobs)
    for (const detail::Transfer& t : job.transfers)
      if (pred(t)) return true;
  return false;
}

// Whether some transfer brings a slice back to its holder's host (Transfer::home_back).
bool any_brought_back(const std::vector<detail::Job>& jobs) {
  return any_transfer(jobs, [](const detail::Transfer& t) { return t.home_back; });
}

// Whether some transfer takes its NIC longer than a message's latency: one smaller costs about a
// latency in every shape, so only then can another plan come nearer the bound (and a batch of tiny
// tensors spares the candidates' planning).
bool any_beyond_a_latency(const Batch& batch, const std::vector<detail::Job>& jobs) {
  const Cluster& c = batch.cluster;
  return any_transfer(jobs, [&](const detail::Transfer& t) {
    return static_cast<double>(t.bytes) >= c.latency * c.nic_bandwidth;
  });
}

// Whether some transfer has receivers on several hosts: only then do chains differ from one op per
// host.
bool any_spread(const Batch& batch, const std::vector<detail::Job>& jobs) {
  return any_transfer(jobs, [&](const detail::Transfer& t) {
    return detail::hosts_of(t.receivers, batch.cluster).size() > 1;
  });
}

bool any_splittable(const Batch& batch, const std::vector<detail::Job>& jobs) {
  return any_transfer(jobs, [&](const detail::Transfer& t) {
    const auto holder_hosts =
        static_cast<int>(detail::hosts_of(t.candidates, batch.cluster).size());
    return detail::split_parts(t, holder_hosts) > 1;
  });
}

// Whether some transfer of `jobs` goes to devices beside its holders and has helpers
// (detail::Transfer::helpers) that could send part of it.
bool any_helped(const std::vector<detail::Job>& jobs) {
  return any_transfer(jobs, [](const detail::Transfer& t) { return t.helpable(); });
}

// Whether some transfer of `jobs` has receivers on a host with several NICs: only then can rails
// (detail::rail_jobs) receive faster than chains, which enter each host through one device.
bool any_into_several_nics(const Batch& batch, const std::vector<detail::Job>& jobs) {
  const Cluster& c = batch.cluster;
  return any_transfer(jobs, [&](const detail::Transfer& t) {
    return std::any_of(t.receivers.begin(), t.receivers.end(),
                       [&](DeviceId r) { return c.nics_of(c.host_of(r)) > 1; });
  });
}

// Whether some NIC carries the sends of several devices of its host.
bool any_shared_nic(const Cluster& c) {
  for (int h = 0; h < c.hosts; ++h)
    if (c.devices_per_host > c.nics_of(h)) return true;
  return false;
}

// The rounds rails are laid in (detail::rail_jobs). Each round's allgathers run while the next
// round's rails arrive, so only the last round's is not hidden: about a round's slice over a
// device link, against every round's slice over a host's NICs. kRailTail is what that may cost,
// in parts of the whole; a round keeps at least kRailRoundBuckets default buckets per rail, so
// that latencies stay small too, and the rounds of all jobs stay within kMostJobsForACandidate.
constexpr double kRailTail = 0.02;
constexpr int kMostRailRounds = 32;
constexpr int64_t kRailRoundBuckets = 4;
// But a round's tail is more than one device link's time where a host's receivers gather: each
// sends its part to every other receiver of its host, and the first round's hand-overs to stages
// also wait at the start. So the rails that made the fastest plan are laid once more in twice and
// in four times as many rounds (up to as many times kMostRailRounds), where more latencies may
// cost less than that wait (random suite seed 1104 r15 with two NICs, four receivers per host:
// 1.069x -> 1.049x). Each wins where the other does not (seeds 1101-1120, 1301-1320 and 901-920
// with two and four NICs: twice as many 26 cases faster than four times, 3 slower); eight times
// as many made no case faster than four. Last, after the reordering: tried before it, such a plan,
// a little faster than the best, took the reordering's place from a plan that the reordering would
// have made faster still (seed 1220 r28 with four NICs 1.090x -> 1.152x).
constexpr std::array kFinerRails = {2, 4};
// The rounds of detail::nic_shop's pieces: a NIC idles about a round at the start and the end.
constexpr int kShopRounds = 32;
// The fastest rails are laid again in pieces half and a quarter as large (at least
// kRailRoundBuckets default buckets each).
constexpr std::array kFinerRailRounds = {2 * kShopRounds, 4 * kShopRounds};
// And last in pieces of an eighth or at least two buckets: the pieces a chain's last host waits
// for at the start and the end take half as long, for twice the latencies (random suite seed
// 1119 r22 with two NICs, where four buckets per piece left its hosts' NICs idle 6%).
constexpr int kFinestRailRounds = 8 * kShopRounds;
constexpr int64_t kFinestRailRoundBuckets = 2;
// The sends a stage should have ready before its holder hands it more rather than send (played
// plans, detail::play_steps): on the pieces of one receiver each a stock of three brought 8 of
// 78 cases of the random suite's tail within 1.05x where waiting until a stage idled brought none;
// on rails, whose stages also relay, one does best, but the fastest rails gain from two, three
// and five too on some cases with four NICs. The shop is played with each of three stocks:
// a small one keeps a holder free to send over its own NIC, a large one keeps its stages' NICs
// from idling while it does, and neither wins everywhere; the fastest shop is also played with a
// stock of twenty, where its stages' NICs still ran dry.
// A stage's stock counts the sends it could start once their hand-overs arrive: several holders
// that feed one stage at once each find it short and all hand over, which stocks it several times
// over while their own NICs wait (three holders on NICs 0-2 handed eight pieces each to the stage
// of NIC 3 before sending anything: 1.078x the bound). Counting the hand-overs on their way too,
// in every play instead, made 11-13 cases per seed set worse with four NICs, some by 6% (their
// stages wanted the deeper stock); so each shop is played both ways at each of its stocks, and
// the fastest rails once more with a stock of one that counts them (with two and three as well:
// one more case of three seed sets with four NICs, for 14% more planning time).
constexpr std::array<int, 3> kShopStocks = {3, 6, 10};
// A shop whose fastest play so far is beyond this factor of the best plan is played no further
// (its other stocks, turns and sends, the stock of twenty). On hosts of 8 devices with 8 NICs some
// shops played at 3-5x the best 20-30 times over (seed 1509 r18). At 1.5x every plan of seeds
// 1501-1520 on those hosts is as before, and their planning took 8% less (seeds 1501-1503). At
// 1.25x, which stops more shops, plans of seeds 1101-1110 and 1301-1310 with four NICs, 1201-1210
// with two and 1601-1604 on 8-device hosts with four were as before too (12% less), but a shop's
// larger stock that played 1.25x faster than its first was missed (seed 1516 r14 with 8 NICs,
// 1.048x -> 1.061x). Stopping any play beyond 1.5x saved 2% more and changed no plan.
constexpr double kShopPlaysWithin = 1.5;
constexpr std::array<int, 1> kMoreShopStocks = {20};
constexpr int kRailStock = 1;
constexpr std::array<int, 3> kMoreRailStocks = {2, 3, 5};
// How near the fastest rails the fastest laid another way (spread or not) must play to be laid
// again in finer pieces and played again with the larger stocks too: both gain more on some ways
// than on others (the stocks, seeds 1201-1220 with four NICs: 6 cases 1-2% faster, none slower;
// with 1.15, no more).
constexpr double kOtherRailsWithin = 1.05;

// Swaps of two sends of one device, the second its next after the first, that keep `plan` a plan
// (neither moves past an op it depends on or that depends on it; no copy, whose device may forward
// what it copies): pairs (p, q) of op indices, q to go first. Those whose q lies on the plan's
// critical path come first (back from the op that ends last, through the dependency of each that
// ended last: moving it earlier can end the plan sooner), then by how late q ends.
std::vector<std::pair<size_t, size_t>> late_swaps(const Plan& plan) {
  Plan probe = plan;
  for (int i = 0; i < std::ssize(probe.ops); ++i) probe.ops[i].id = i;
  const SimResult timing = simulate(probe);
  const auto deps = op_dependencies(plan.batch, probe.ops);
  std::vector<std::vector<size_t>> dependents(plan.ops.size());
  for (size_t k = 0; k < deps.size(); ++k)
    for (int d : deps[k]) dependents[d].push_back(k);
  std::vector<bool> critical(plan.ops.size(), false);
  size_t last = 0;
  for (size_t i = 0; i < timing.ops.size(); ++i)
    if (timing.ops[i].end_s > timing.ops[last].end_s) last = i;
  for (std::optional<size_t> op = last; op;) {
    critical[*op] = true;
    std::optional<size_t> before;
    for (int d : deps[*op])
      if (!before || timing.ops[d].end_s > timing.ops[*before].end_s) before = d;
    op = before;
  }
  const auto between = [](size_t x, size_t p, size_t q) { return x > p && x < q; };
  std::vector<std::pair<size_t, size_t>> swaps;
  for (size_t p = 0; p < plan.ops.size(); ++p) {
    const Op& first = plan.ops[p];
    if (!first.sender || first.kind == OpKind::copy) continue;
    size_t q = p + 1;
    while (q < plan.ops.size() && plan.ops[q].sender != first.sender) ++q;
    if (q == plan.ops.size() || plan.ops[q].kind == OpKind::copy) continue;
    if (std::any_of(deps[q].begin(), deps[q].end(), [&](int d) { return between(d, p, q); }) ||
        std::any_of(dependents[p].begin(), dependents[p].end(),
                    [&](size_t d) { return between(d, p, q); }))
      continue;
    swaps.emplace_back(p, q);
  }
  std::stable_sort(swaps.begin(), swaps.end(), [&](const auto& a, const auto& b) {
    if (critical[a.second] != critical[b.second]) return critical[a.second] > critical[b.second];
    return timing.ops[a.second].end_s > timing.ops[b.second].end_s;
  });
  return swaps;
}

size_t stage_count(const std::vector<detail::Job>& jobs) {
  size_t count = 0;
  for (const detail::Job& job : jobs)
    for (const detail::Transfer& t : job.transfers) count += t.stages.size();
  return count;
}

int rail_rounds(const Batch& batch, const std::vector<detail::Job>& jobs, int finer = 1) {
  const Cluster& c = batch.cluster;
  double nics_over_link = 0;  // the most a host's NICs take in, over one device link
  for (int h = 0; h < c.hosts; ++h)
    nics_over_link = std::max(nics_over_link, c.nic_bandwidth_of(h) / c.device_bandwidth);
  const auto by_tail = static_cast<int>(std::ceil(finer * nics_over_link / kRailTail));
  const auto by_jobs = static_cast<int>(kMostJobsForACandidate / std::max<size_t>(jobs.size(), 1));
  return std::clamp(std::min(by_tail, by_jobs), 1, finer * kMostRailRounds);
}

// `jobs` with each job whose follow-ups are only copies cut in two: the first half of each of its
// slices, then the second half (torch.chunk of the longest dimension), as two jobs.
std::vector<detail::Job> halved(const Batch& batch, const std::vector<detail::Job>& jobs) {
  std::vector<detail::Job> out;
  for (const detail::Job& job : jobs) {
    const bool divisible = std::all_of(
        job.transfers.begin(), job.transfers.end(),
        [](const detail::Transfer& t) { return allgather_part(t.slice, 2, 1).volume() > 0; });
    if (!job.only_copies_follow() || !divisible || job.transfers.empty()) {
      out.push_back(job);
      continue;
    }
    for (detail::Job& half : detail::in_rounds(batch, job, 2)) out.push_back(std::move(half));
  }
  return out;
}

#ifdef NDEBUG
constexpr bool kStopAtInvalidCandidates = false;
#else
constexpr bool kStopAtInvalidCandidates = true;
#endif

// make_plan, and the simulated time of the plan it returns where it simulated that plan (as it
// is, or fused into the same buckets: the simulator's time does not depend on op ids).
std::pair<Plan, std::optional<double>> plan_and_time(const Batch& batch,
                                                     const PlanOptions& options) {
  if (options.chunk_bytes < 0)
    throw InvalidArgument(
        fmt::format("bad chunk bytes {}: expected >= 0 (0 = automatic)", options.chunk_bytes));
  if (!(options.search_effort >= 0) || std::isinf(options.search_effort))
    throw InvalidArgument(
        fmt::format("bad search effort {}: expected >= 0", options.search_effort));
  if (options.bucket_bytes && *options.bucket_bytes < 0)
    throw InvalidArgument(
        fmt::format("bad bucket bytes {}: expected >= 0 (0 = no buckets)", *options.bucket_bytes));
  // decompose validates the batch: once, as a model's batch of a thousand tensors costs a tenth
  // of its planning time to check.
  auto tasks = decompose(batch);
  auto jobs = detail::make_jobs(batch, tasks, options.strategy);
  // The played candidates below take slices that only copies follow: where a broadcast's receivers
  // gather parts they hold, they are also played on the jobs without those gathers, made from the
  // tasks kept for them.
  const bool gathers =
      options.strategy == Strategy::broadcast && effective_balance(options) == Balance::order &&
      jobs.size() <= kMostJobsForACandidate &&
      std::any_of(jobs.begin(), jobs.end(),
                  [](const detail::Job& job) { return !job.only_copies_follow(); });

  Plan plan;
  plan.batch = batch;
  plan.strategy = options.strategy;
  plan.balance = effective_balance(options);
  plan.lower_bound_s = lower_bound(batch, tasks);
  // The tasks, and below the jobs where no candidate needs them, are freed as soon as they are
  // used: the ops take their memory rather than fresh pages (each a page fault, and at 4,096 x 8
  // hosts the tasks alone are 70 MB).
  std::vector<std::vector<UnitTask>> kept_tasks;
  if (gathers) kept_tasks = std::move(tasks);
  tasks = {};
  plan.ops = ops_of(batch, jobs, options, plan.balance);
  const bool many_jobs = jobs.size() > kMostJobsForACandidate;
  if (many_jobs) jobs = {};
  // When balance order's plan is far from the bound, it is planned again in other ways and the
  // fastest by the simulator is kept. Each is timed as it will run, its small pieces fused into
  // buckets, but of the cluster's default size whatever bucket size was asked, so that the bucket
  // size never changes which pieces a plan moves: timed unfused, a plan of many small tensors that
  // buckets bring near the bound looked far from it, and a candidate that fused into four times
  // as many messages replaced it. Whole slices cannot reach the bound where a few slices held by
  // several hosts must leave through those hosts' NICs together (three equal slices on two
  // holders: one holder sends two, 1.33x the bound): slices split between their holders can.
  // Chains through several hosts cannot run at once where they share relays (a device sends one
  // op at a time): one op per receiving host, or host by host as a ring (either way round: where
  // hosts hold unequal shares, the one that forwards all a host needs differs), can. And halves of
  // every slice let a device with several receivers take turns between them. Where a receiving
  // host has several NICs, chains enter it through one device each and, holding all its devices
  // as relays, run one at a time: rails spread its receiving over all its NICs, one per receiver
  // (gathered by an allgather) or one per NIC. The greedy's timeline keeps a device's receipts
  // apart, so it holds a host's next relays until its gathers end: rails are also laid in
  // lockstep rounds (balance_rounds), whose chains turn their hosts round by round.
  const int64_t bucket_bytes = options.bucket_bytes.value_or(default_bucket_bytes(batch.cluster));
  std::optional<double> time;  // the simulated time of the plan returned, where it is known
  const auto fused_time = [&](const std::vector<Op>& ops) {
    return simulate_time(batch, detail::bucket_ops(batch, ops, default_bucket_bytes(batch.cluster),
                                                   options.chunk_bytes))
        .time_s;
  };
  if (plan.balance == Balance::order && !many_jobs && any_beyond_a_latency(batch, jobs)) {
    // The candidates' stages, relays and forwards are laid by heuristics: one that would deliver
    // an element twice (a stage that also receives its slice another way) or miss one is not a
    // plan, and is dropped however fast it looks; so is a first plan that is not one. Debug builds
    // (the sanitizers' tests) stop there instead, so that such a candidate is found and mended
    // rather than hidden.
    const auto delivers_once = [&](const std::vector<Op>& ops) {
      Plan candidate{
          .batch = batch, .strategy = plan.strategy, .balance = plan.balance, .ops = ops};
      for (int i = 0; i < static_cast<int>(candidate.ops.size()); ++i) candidate.ops[i].id = i;
      try {
        validate_plan(candidate);
        return true;
      } catch (const InvalidArgument& e) {
        if (kStopAtInvalidCandidates)
          throw std::logic_error(
              fmt::format("planner: a candidate plan is not valid: {}", e.what()));
        return false;
      }
    };
    // Of plan.ops fused into the default buckets; infinite where the first plan is not one (then
    // any candidate that is replaces it).
    double best =
        delivers_once(plan.ops) ? fused_time(plan.ops) : std::numeric_limits<double>::infinity();
    const auto near = [&] { return best <= kNearTheBound * plan.lower_bound_s; };
    // The candidate's time (infinite where it is not a plan). The candidate tried last and its
    // time are kept (as `plan.ops` where it was the best so far): the lockstep orders and the two
    // ways of handing over in a play often give the same ops twice in a row, which are not
    // checked and simulated again.
    std::optional<double> last_time;
    bool last_is_best = false;
    int candidates = 0;  // simulated, for options.on_progress
    std::vector<Op> last_ops;
    const auto try_ops = [&](std::vector<Op> ops) {
      if (last_time && ops == (last_is_best ? plan.ops : last_ops)) return *last_time;
      last_time.reset();
      if (!delivers_once(ops)) return std::numeric_limits<double>::infinity();
      const double time = fused_time(ops);
      last_time = time;
      last_is_best = time < best;
      if (last_is_best) {
        best = time;
        plan.ops = std::move(ops);
      } else {
        last_ops = std::move(ops);
      }
      if (options.on_progress)
        options.on_progress({.candidates = ++candidates, .best_ratio = best / plan.lower_bound_s});
      return time;
    };
    // Each candidate by the greedy, which keeps a device's receipts apart. Those on rails and the
    // shop's pieces (`at_once_too`), which enter a host by every NIC, are kept and, where every
    // other candidate leaves the plan far from the bound, laid once more by the greedy that lets
    // a device take in from other hosts at once (last, as it doubles their planning; and only
    // those that came within kAtOnceWithin of the best plan so far: no other won on the random
    // suite, and they cost half the time).
    struct AtOnce {
      double time = 0;  // by the greedy that keeps receipts apart
      std::vector<detail::Job> jobs;
      PlanOptions options;
    };
    std::vector<AtOnce> at_once;
    const auto try_candidate = [&](const std::vector<detail::Job>& candidate_jobs,
                                   const PlanOptions& candidate, detail::Shape shape,
                                   bool at_once_too = false) {
      if (near()) return;
      const double time = try_ops(detail::balance_order(batch, candidate_jobs, candidate, shape));
      if (at_once_too && any_into_several_nics(batch, candidate_jobs))
        at_once.push_back({time, candidate_jobs, candidate});
    };
    if (!options.split && any_splittable(batch, jobs)) {
      PlanOptions split = options;
      split.split = true;
      try_candidate(jobs, split, detail::Shape::chains);
    }
    if (any_spread(batch, jobs)) {
      try_candidate(jobs, options, detail::Shape::per_host);
      try_candidate(jobs, options, detail::Shape::relayed);
      try_candidate(jobs, options, detail::Shape::relayed_down);
    }
    // Lockstep rounds with each holder host's jobs of a round in the order that spreads them
    // over the receiving hosts, first fit, then rotated (balance_rounds): neither order wins
    // everywhere; each also with the rounds' gathers held back until their devices relay nothing
    // (`held`: Deferral::until_idle, which wins through chains of three hosts or more).
    const auto try_rounds = [&](const std::vector<detail::Job>& round_jobs,
                                detail::Deferral held_until = detail::Deferral::until_idle) {
      std::vector<std::vector<Op>> in_order;  // by `rotated`
      for (bool rotated : {false, true}) {
        if (near()) return;
        in_order.push_back(
            detail::balance_rounds(batch, round_jobs, options, rotated, detail::Deferral::none));
        try_ops(in_order.back());
      }
      for (bool rotated : {false, true}) {
        if (near()) return;
        // Where no gather is held back, it is the plan just timed.
        auto held = detail::balance_rounds(batch, round_jobs, options, rotated, held_until);
        if (held != in_order[rotated]) try_ops(std::move(held));
      }
    };
    try_candidate(halved(batch, jobs), options, detail::Shape::chains);
    // Slices inside their holders' hosts that may wait on a device that has nothing to do.
    if (!near())
      if (const auto delayed = detail::delay_line_jobs(batch, jobs); !delayed.empty())
        try_candidate(delayed, options, detail::Shape::chains);
    // Slices that leave their holders' hosts handed over to stages, round by round, so that a
    // holder serving devices of its own host too does not keep its NIC idle meanwhile.
    if (!near()) {
      const auto staged =
          detail::staged_jobs(batch, jobs, rail_rounds(batch, jobs),
                              kRailRoundBuckets * default_bucket_bytes(batch.cluster));
      if (stage_count(staged) > 0) {
        try_candidate(staged, options, detail::Shape::chains);
        try_rounds(staged);
      }
    }
    // Rails, and where several hosts hold a slice and only some have holders on a rail's NIC,
    // rails that the others also send through stages (when that adds any stage): the first keep
    // those NICs' holders from waiting for the others' hand-overs, the second spread the rail.
    // Each is planned by the greedy and in lockstep rounds; with stages at holders too, since
    // the greedy, which hands a rail over only when that ends it soonest, sends a holder's rails
    // over its own NIC while another holder's NIC, which has less of its own, could take half.
    // And where a holder that sends a rail over its own NIC alone holds slices that only devices
    // beside it need, with its own rails cut smaller by those too: its send port carries them
    // (the lower bound's home(d) in out(h)), but where the rails' relays decide, equal rails fare
    // better. And where a chain passes through several hosts, with the devices of a NIC that
    // receive nothing taking turns as relays beside its receivers: a NIC's one receiver that
    // relays every round has no time to hand its parts to its host's other receivers.
    const auto rails_of = [&](const std::vector<detail::Job>& of,
                              const detail::RailOptions& rail_options, int finer = 1) {
      return detail::rail_jobs(batch, of, rail_rounds(batch, of, finer),
                               kRailRoundBuckets * default_bucket_bytes(batch.cluster),
                               rail_options);
    };
    // The rails options whose lay (by the greedy or in lockstep) made the fastest plan so far.
    std::optional<detail::RailOptions> fastest_laid_rails;
    // Rails variants that lay the same jobs as one tried before (per receiver or per NIC where
    // hosts have unequal receivers, stages at holders where no rail has a stage, parts cut by
    // ports or by home bytes as equal ones are, relays where none takes a turn) are planned
    // once: the greedy and the rounds would give the same plans again (unless the first was not
    // kept for the greedy that takes in at once and this one would be).
    std::vector<std::pair<std::vector<detail::Job>, bool>> rails_tried;  // with at_once_too
    // Whether `rails` were laid before (kept for the greedy that takes in at once, where
    // `at_once_too`).
    const auto laid_before = [&](const std::vector<detail::Job>& rails, bool at_once_too) {
      return std::any_of(rails_tried.begin(), rails_tried.end(), [&](const auto& tried) {
        return tried.first == rails && (tried.second || !at_once_too);
      });
    };
    const auto try_laid_rails = [&](const std::vector<detail::Job>& rails,
                                    bool at_once_too = false) -> bool {
      if (laid_before(rails, at_once_too)) return false;
      rails_tried.emplace_back(rails, at_once_too);
      const double before = best;
      try_candidate(rails, options, detail::Shape::chains, at_once_too);
      try_rounds(rails, any_brought_back(rails) ? detail::Deferral::until_idle_or_never
                                                : detail::Deferral::until_idle);
      return best < before;
    };
    const bool spread = any_spread(batch, jobs);
    const auto lay_rails = [&](const detail::RailOptions& rail_options, bool at_once_too = false) {
      auto rails = rails_of(jobs, rail_options);
      if (try_laid_rails(rails, at_once_too)) fastest_laid_rails = rail_options;
      return rails;
    };
    if (any_into_several_nics(batch, jobs))
      for (bool per_receiver : {true, false})
        for (bool stage_at_holders : {false, true}) {
          if (near()) break;
          const auto rails =
              lay_rails({.stage_at_holders = stage_at_holders, .per_receiver = per_receiver}, true);
          if (near()) break;
          if (!stage_at_holders && spread) {
            lay_rails({.per_receiver = per_receiver, .relays = true});
            if (near()) break;
          }
          if (stage_at_holders) {
            lay_rails({.stage_at_holders = true, .per_receiver = per_receiver, .ports = true});
            continue;
          }
          lay_rails({.per_receiver = per_receiver, .home = true});
          if (near()) continue;
          // Where a receiver beside a single holder stages a rail, the others there brought back
          // by the rails (only where some are: else these rails differ only in their gathers).
          const detail::RailOptions back{.per_receiver = per_receiver, .home_back = true};
          if (const auto back_rails = rails_of(jobs, back); any_brought_back(back_rails)) {
            if (try_laid_rails(back_rails)) fastest_laid_rails = back;
            if (near()) continue;
          }
          const detail::RailOptions beside{.per_receiver = per_receiver, .beside = true};
          const auto beside_rails = rails_of(jobs, beside);
          if (stage_count(beside_rails) == stage_count(rails)) continue;
          if (try_laid_rails(beside_rails)) fastest_laid_rails = beside;
          if (near()) continue;
          lay_rails({.per_receiver = per_receiver, .only_stages = true});
        }
    // Slices that several hosts' holders serve over device links, exchanged between those hosts'
    // receivers over their NICs.
    // Each part to the next host, or chained through every other host; each also by the greedy
    // that takes receipts in at once: a receiver takes its host's part over its NIC while its
    // holder serves it beside it.
    for (detail::Exchange how : {detail::Exchange::next_host, detail::Exchange::every_host})
      if (!near())
        if (const auto exchanged = detail::exchanged_jobs(batch, jobs, how); !exchanged.empty()) {
          try_candidate(exchanged, options, detail::Shape::chains);
          if (!near())
            try_ops(detail::balance_order(batch, exchanged, options, detail::Shape::chains,
                                          detail::Receipts::over_nics_at_once));
        }
    // Slices that a host's holders serve over device links, helped from afar over its NICs.
    if (!near())
      if (const auto helped = detail::helped_jobs(batch, jobs); !helped.empty()) {
        try_candidate(helped, options, detail::Shape::chains);
        try_rounds(helped);
        // Where the hosts have several NICs, the parts from afar on rails too.
        if (any_into_several_nics(batch, helped))
          for (bool per_receiver : {true, false}) {
            if (near()) break;
            try_laid_rails(rails_of(helped, {.per_receiver = per_receiver}), true);
          }
      }
    // Each play with a device's hand-overs in step order and toward the NICs that idle, each
    // also to its stages in turn (a single holder that filled one stage's stock before the next
    // started its NICs late: 8 NICs that started 0.1-3.5 ms into a plan of 9.7): none wins
    // everywhere. The first two also with the longest chain first (detail::Ties; seeds 3301-3310
    // with four NICs, 20 cases faster and 3 slower, for a quarter more planning time there; in
    // turn too, no case more within 1.05x for a fifth more again). The fastest play's time.
    const auto try_plays = [&](const std::vector<detail::PlayStep>& steps,
                               const std::vector<detail::Job>& of, detail::PlayRules rules) {
      double fastest = std::numeric_limits<double>::infinity();
      for (detail::Ties ties : {detail::Ties::most_to_take, detail::Ties::longest_chain})
        for (detail::HandOvers hand_overs :
             {detail::HandOvers::in_order, detail::HandOvers::to_idle_nics})
          for (bool in_turn : {false, true}) {
            if (near()) return fastest;
            if (ties == detail::Ties::longest_chain && in_turn) continue;
            rules.hand_overs = hand_overs;
            rules.in_turn = in_turn;
            rules.ties = ties;
            fastest = std::min(fastest, try_ops(detail::play_steps(batch, steps, of, rules)));
          }
      return fastest;
    };
    // The fastest play of a lay played again with every other pair of turns and sends: the devices
    // that have least left on their NICs choosing first (where the busiest chose first, a NIC with
    // little left took a receiving NIC that only it could have fed later), and the sends chosen by
    // phase (where a NIC that took the receiving NIC most in need left another without a sender).
    // Each played so every time, more cases got worse than better. And where devices share a
    // NIC, with sends out of NICs that no other device sends over now first, the busiest choosing
    // first (the rule of every play, that made 19 cases of three seed sets with two NICs worse and
    // 38 better, seed 1114 r15 1.07x; played again on the fastest only, 3 worse and 15 better; with
    // the least busy choosing first too, one more better for 5% more planning time). And with a
    // send inside a host into a device that takes nothing from its host now before the sends over
    // the NICs (Forwards::between_sends; on hosts of 8 devices and 8 NICs, seeds 1501-1520, 36
    // cases faster and 2 slower; with 4 NICs, seeds 1101-1120, 4 faster).
    const bool shared_nic = any_shared_nic(batch.cluster);
    const auto try_other_turns_and_sends = [&](const std::vector<detail::PlayStep>& steps,
                                               const std::vector<detail::Job>& of, int stock) {
      for (bool latency : {true, false})
        for (detail::Turns turns :
             {detail::Turns::most_left_first, detail::Turns::least_left_first})
          for (detail::Sends sends : {detail::Sends::to_idle_nics, detail::Sends::in_phases,
                                      detail::Sends::to_idle_pairs}) {
            if (near()) return;
            if (latency && turns == detail::Turns::most_left_first &&
                sends == detail::Sends::to_idle_nics)
              continue;  // (the play that made it the fastest)
            if (sends == detail::Sends::to_idle_pairs &&
                (!shared_nic || turns == detail::Turns::least_left_first))
              continue;  // (with a NIC per device, the same as to_idle_nics)
            try_plays(steps, of,
                      {.latency = latency, .stock = stock, .turns = turns, .sends = sends});
          }
      if (!near())
        try_plays(steps, of, {.stock = stock, .forwards = detail::Forwards::between_sends});
    };
    // Slices sent from their holders to each host that needs them (a shop: one flow per receiving
    // host, passed on inside it to its receivers), spread over every NIC of their hosts by bytes
    // or by the ports that carry them, through stages and forwards the greedy may not move (it
    // sends a piece from its holder where that ends it soonest, which puts the pieces back on their
    // holders' NICs), and played device by device as the simulator plays them. With one NIC per
    // host too, and inside one host: the play alone, in pieces, can order what the greedy sends
    // whole (and one NIC levels the same way by bytes as by ports). Each also from any host that
    // holds a slice: a holder beside its receivers helped over its host's other NICs, and pieces
    // leaving by the holding host that ends them soonest; not instead, as a slice kept on one host
    // plays better where the pieces of many would meet at the receiving NICs. And each with the
    // slices cut between their holding hosts so that the busiest sends least (chosen slice by
    // slice, two hosts each sent as much as a receiving host took in, at its rate, and a third
    // holder nothing: seed 1214 r14 with four NICs 1.110x -> 1.046x; over five seed sets with two
    // and four NICs, 3 to 8 cases better per set and 0 to 2 worse, within 1.05x still).
    const auto try_played = [&](const std::vector<detail::Job>& of, detail::Pieces pieces) {
      const auto try_shops = [&] {
        // The fastest play of the shop (time, steps, stock), of those laid with stages beside their
        // holders and of those without.
        struct FastestShop {
          double time = 0;
          std::vector<detail::PlayStep> steps;
          int stock = 0;
        };
        std::array<std::optional<FastestShop>, 2> fastest_shops;
        // A shop whose fastest play so far is this slow is played no further.
        const auto far = [&](double time) { return time > kShopPlaysWithin * best; };
        // The fastest shop's lay so far and the stock of its fastest play, to be laid once more in
        // other ways.
        struct FastestLay {
          double time = 0;
          detail::ShopRules rules;
          int stock = 0;
          bool counted = false;
        };
        std::optional<FastestLay> fastest_lay;
        // And of those laid by the ports.
        std::optional<FastestLay> fastest_by_ports;
        // A shop laid once more in another way (`again`: the lay it comes from) is played only
        // with that lay's fastest stock, and not by the greedy.
        const auto try_shop = [&](const detail::ShopRules& rules,
                                  const FastestLay* again = nullptr) {
          const auto shop =
              detail::nic_shop(batch, of, kShopRounds,
                               kRailRoundBuckets * default_bucket_bytes(batch.cluster), rules);
          if (!shop) return false;
          if (!again)
            try_candidate(detail::shop_jobs(batch, *shop, of), options, detail::Shape::chains,
                          true);
          // Levelled, also whole: one piece per pair of NICs, which the greedy sends as one op each
          // in the order it finds. Where every receiving NIC and the busiest senders are at the
          // bound, pieces taking turns left NICs short, while the slices whole, each device's in
          // the right order, end together (seed 1303 r7 with one NIC, 1.167x -> 1.000x). Laid so
          // for every shop, it came within 1.05x first where a later candidate came nearer (seeds
          // 1301-1320 with two NICs: 5 cases worse, 2 better).
          if (!again && rules.sources == detail::Sources::levelled_hosts &&
              pieces == detail::Pieces::even)
            if (const auto whole = detail::nic_shop(batch, of, 1, 0, rules))
              try_candidate(detail::shop_jobs(batch, *whole, of), options, detail::Shape::chains,
                            true);
          auto steps = detail::shop_steps(*shop);
          std::optional<FastestLay> fastest_stock;
          for (int stock : kShopStocks)
            for (bool counted : {false, true})
              if ((!again || (stock == again->stock && counted == again->counted)) &&
                  (!fastest_stock || !far(fastest_stock->time)))
                if (const double time =
                        try_plays(steps, of, {.stock = stock, .stock_counts_coming = counted});
                    !fastest_stock || time < fastest_stock->time)
                  fastest_stock = {time, rules, stock, counted};
          // Its fastest stock once more played without the latency (PlayRules::latency).
          if (!near())
            try_plays(steps, of,
                      {.latency = false,
                       .stock = fastest_stock->stock,
                       .stock_counts_coming = fastest_stock->counted});
          // Its fastest stock once more with the pieces passed on in rings inside the hosts
          // (detail::passed_in_rings): on hosts of 8 devices and 8 NICs the entries of a host sent
          // into one receiver at once; played so every time, slower as often as faster.
          if (auto rings = detail::passed_in_rings(batch.cluster, steps); !near() && rings != steps)
            try_plays(
                rings, of,
                {.stock = fastest_stock->stock, .stock_counts_coming = fastest_stock->counted});
          if (!fastest_lay || fastest_stock->time < fastest_lay->time) fastest_lay = fastest_stock;
          if (rules.level == detail::ShopLevel::ports && !again &&
              (!fastest_by_ports || fastest_stock->time < fastest_by_ports->time))
            fastest_by_ports = fastest_stock;
          // Only shops of even pieces are played again below: where a shop cut at its phases was
          // the fastest so far, playing it again in other ways left the plan further from the
          // bound than the even shop's (seed 1702 r17 with two NICs, 1.039x -> 1.070x).
          if (pieces == detail::Pieces::by_phases) return true;
          auto& fastest = fastest_shops[rules.stages_beside_holders];
          if (!fastest || fastest_stock->time < fastest->time)
            fastest = FastestShop{fastest_stock->time, std::move(steps), fastest_stock->stock};
          return true;
        };
        // Laid by the ports, each way once more with stages beside the holders: a holder that hands
        // the other NICs their shares over its link, or serves its neighbours, cannot keep its own
        // NIC busy alone; laid only so, some larger shops played worse.
        for (detail::ShopLevel level : {detail::ShopLevel::bytes, detail::ShopLevel::ports}) {
          if (near() || (level == detail::ShopLevel::ports && !any_into_several_nics(batch, of)))
            break;
          bool any_shop = false;
          for (detail::Sources sources : {detail::Sources::chosen_host, detail::Sources::any_host,
                                          detail::Sources::levelled_hosts})
            for (detail::Funnel funnelled :
                 {detail::Funnel::none, detail::Funnel::by_senders, detail::Funnel::with_spares})
              for (bool beside : {false, true}) {
                if (near() || (beside && level != detail::ShopLevel::ports)) break;
                any_shop = try_shop({.level = level,
                                     .sources = sources,
                                     .funnel = funnelled,
                                     .stages_beside_holders = beside,
                                     .pieces = pieces}) ||
                           any_shop;
              }
          if (!any_shop) break;
        }
        // The fastest shop laid by the ports, once more with entries that mirror its sending NICs
        // (Entries::mirrored), played as every shop: not the fastest shop of all, which, where it
        // was laid by bytes, sends as much over every NIC and has nothing to mirror. Mirroring
        // every shop laid by the ports made no case faster than this (seeds 1901-1910 with eight
        // NICs).
        if (fastest_by_ports && !near()) {
          detail::ShopRules mirrored = fastest_by_ports->rules;
          mirrored.entries = detail::Entries::mirrored;
          try_shop(mirrored);
        }
        // Then the fastest laid by the ports (mirrored or not) once more in fine quanta: every
        // shop laid so in place of the coarse quanta, many cases played slower too (seeds
        // 1901-1910 with eight NICs: 26 faster, 13 slower).
        if (fastest_by_ports && !near()) {
          detail::ShopRules fine = fastest_by_ports->rules;
          fine.quanta = detail::Quanta::fine;
          try_shop(fine);
        }
        // The fastest shop once more with the receivers beside a holder relaying its pieces (all of
        // them, or only those that send nothing over the NICs), then the fastest so far once more
        // laid by the ports with its stages fed by the least busy holders, each where it played
        // within kShopPlaysWithin of the best plan (laid so for every shop, twice as many shops
        // would be laid and played each time).
        if (fastest_lay && !near() && !far(fastest_lay->time)) {
          const FastestLay from = *fastest_lay;
          for (detail::Beside beside : {detail::Beside::relayed, detail::Beside::relayed_by_all,
                                        detail::Beside::relayed_by_non_senders}) {
            detail::ShopRules relayed = from.rules;
            relayed.beside = beside;
            if (!near()) try_shop(relayed, &from);
          }
        }
        if (fastest_lay && !near() && !far(fastest_lay->time)) {
          const FastestLay from = *fastest_lay;
          detail::ShopRules fed = from.rules;
          fed.level = detail::ShopLevel::ports;
          fed.feeds = detail::Feeds::least_busy_holder;
          try_shop(fed, &from);
        }
        for (const auto& fastest : fastest_shops) {
          if (!fastest || far(fastest->time)) continue;
          try_other_turns_and_sends(fastest->steps, of, fastest->stock);
          for (int stock : kMoreShopStocks)
            for (bool latency : {true, false}) {
              if (near()) break;
              try_plays(fastest->steps, of, {.latency = latency, .stock = stock});
            }
        }
      };
      const auto try_rails_all = [&] {
        // Slices with several receivers on rails whose pieces go host to host, played the same way;
        // with one NIC per host, one rail: a ring through the hosts that need each slice, whose
        // hosts forward what they took in while the holders send the next pieces. Each also spread:
        // receivers beside the holders staging pieces, and the holding host feeding several chains
        // where one ring would have the receiving hosts forward most of it; and spread with the
        // holders handing pieces to stages on their own NICs where they serve their hosts; and
        // spread with the receivers beside the holders taking pieces back from the receiving hosts;
        // not instead, as none wins everywhere.
        // (Variants that give the steps of one played before are not played again.)
        struct Played {
          std::vector<detail::PlayStep> steps;
          double time = 0;
          detail::RailRules lay;
          std::ptrdiff_t from = -1;  // the entry whose steps these pass on in rings, or -1
        };
        std::vector<Played> played;
        const auto try_rails = [&](int rounds, const detail::RailRules& lay,
                                   int64_t round_buckets = kRailRoundBuckets) {
          auto steps = detail::rail_steps(batch, of, rounds,
                                          round_buckets * default_bucket_bytes(batch.cluster), lay);
          if (!steps) return std::numeric_limits<double>::infinity();
          // The fastest play of the steps laid as `played[laid]`, and of them passed on in rings.
          const auto fastest_of = [&](std::ptrdiff_t laid) {
            double time = played[laid].time;
            for (const Played& p : played)
              if (p.from == laid) time = std::min(time, p.time);
            return time;
          };
          for (std::ptrdiff_t i = 0; i < std::ssize(played); ++i)
            if (played[i].from < 0 && played[i].steps == *steps) return fastest_of(i);
          const double time = try_plays(*steps, of, {.stock = kRailStock});
          played.push_back({std::move(*steps), time, lay});
          const std::ptrdiff_t laid = std::ssize(played) - 1;
          if (auto rings = detail::passed_in_rings(batch.cluster, played[laid].steps);
              !near() && rings != played[laid].steps) {
            const double ringed = try_plays(rings, of, {.stock = kRailStock});
            played.push_back({std::move(rings), ringed, lay, laid});
          }
          return fastest_of(laid);
        };
        std::optional<std::pair<double, detail::RailRules>> fastest_rails;
        for (detail::RailPick pick : {detail::RailPick::cyclic, detail::RailPick::least_busy})
          for (detail::RailSpread how :
               {detail::RailSpread::none, detail::RailSpread::spread, detail::RailSpread::handing,
                detail::RailSpread::returning}) {
            if (near()) break;
            const double time = try_rails(kShopRounds, {pick, how});
            if (time < std::numeric_limits<double>::infinity() &&
                (!fastest_rails || time < fastest_rails->first))
              fastest_rails = {time, {pick, how}};
          }
        if (!fastest_rails) return;
        // The fastest of the rails played so far that `keep` keeps, or -1.
        const auto fastest_played_if = [&](const auto& keep) {
          std::ptrdiff_t fastest = -1;
          for (std::ptrdiff_t i = 0; i < std::ssize(played); ++i)
            if (keep(played[i]) && (fastest < 0 || played[i].time < played[fastest].time))
              fastest = i;
          return fastest;
        };
        // The fastest laid another way than `how` (spread or not, not levelled), where it played
        // within kOtherRailsWithin of `time`; else -1.
        const auto near_other_way = [&](detail::RailSpread how, double time) {
          const std::ptrdiff_t other = fastest_played_if([&](const Played& p) {
            return p.lay.how != how && p.lay.level == detail::RailLevel::busiest;
          });
          return other >= 0 && played[other].time <= kOtherRailsWithin * time ? other : -1;
        };
        // The fastest rails once more in each other relay order (detail::RailRelays), kept where
        // it plays faster: with the hosts that have sent least relaying first (in host order one
        // receiving host relayed two slices while another relayed none; neither order wins
        // everywhere: played instead, 12 cases better and 15 worse with four NICs), and so counting
        // what each must still send of its own (instead, seed 3203 r22 with four NICs 1.052x ->
        // 1.117x, where the hosts that had sent least relayed first), and turned by
        // two hosts a round (in one order every round, each host but the last relayed every piece,
        // its ports sending it on and handing it to the receivers beside it; turned by one, the
        // rounds that follow one another down their chains all entered one host at once), and
        // turned through all the hosts where they are even in number (else the same steps as
        // turned, played once), and turned piece by piece to the least busy chain.
        std::vector<detail::RailRules> fastest_lays = {fastest_rails->second};
        for (detail::RailRelays relays :
             {detail::RailRelays::least_sent_first, detail::RailRelays::least_due_first,
              detail::RailRelays::turned, detail::RailRelays::turned_through_all,
              detail::RailRelays::turned_least_busy}) {
          const detail::RailRules other_order = {fastest_rails->second.pick,
                                                 fastest_rails->second.how, relays};
          const size_t before = played.size();
          if (!near() && try_rails(kShopRounds, other_order) < fastest_rails->first &&
              played.size() > before)
            fastest_lays.push_back(other_order);
        }
        // And levelled: of chains that leave the busiest port or NIC about as busy, the one that
        // loads the less busy ones (where the busiest was one that every chain used, the first
        // chain tried took the piece, and the others' ports and NICs ended unevenly loaded). Where
        // that plays faster it goes on to the finer and finest pieces, and its fastest play is
        // played again, after the others' (it took their place: a spread within 5% of the fastest
        // no longer was, and missed the larger stocks that had brought it to 1.096x, 919 r7).
        std::vector<detail::RailRules> levelled_lays;
        if (detail::RailRules levelled = fastest_rails->second; !near()) {
          levelled.level = detail::RailLevel::levelled;
          if (try_rails(kShopRounds, levelled) < fastest_rails->first)
            levelled_lays.push_back(levelled);
        }
        // And the fastest laid another way (spread or not), where it played within
        // kOtherRailsWithin of the fastest: finer pieces gain more on some ways than on others.
        std::vector<detail::RailRules> finer_lays = fastest_lays;
        finer_lays.insert(finer_lays.end(), levelled_lays.begin(), levelled_lays.end());
        if (const std::ptrdiff_t other =
                near_other_way(fastest_rails->second.how, fastest_rails->first);
            other >= 0)
          finer_lays.push_back(played[other].lay);
        // The fastest rails (in both orders where the second was faster: in the faster order alone,
        // 2 cases worse) once more in pieces half and a quarter as large: a host forwards a piece
        // once it has taken it in, so the last piece reaches the end of a chain a piece's time per
        // hop after it left, while NICs that have sent their share idle. Only the fastest ways, as
        // each lay and play costs as much as the first (every other rails variant in halves too: 2
        // more of 531 cases within 1.05x with two NICs, 17% more planning time; the one other way
        // within 5%: seeds 1201-1220 with four NICs 8 cases better and 2 worse, 9% more; going on
        // to the finest pieces and the stocks too, it took their place where they had won).
        for (const detail::RailRules& lay : finer_lays)
          for (int rounds : kFinerRailRounds) {
            if (near()) break;
            try_rails(rounds, lay);
          }
        // The fastest play of rails, finer ones too, played again with larger stocks, and with
        // every other pair of turns and sends (only the fastest: every variant played with the
        // stocks cost half the planning time again with four NICs); where both relay orders went
        // on, the fastest in host order too (else the stocks went to the other order alone: 1 case
        // worse). Then the fastest rails in the finest pieces (in both orders where the second was
        // faster), played again so too where they are now the fastest (laid before the larger
        // stocks were played, they took them from rails that gained more from them: 3 cases worse
        // with two NICs). The fastest of those laid in `relays` order, or of all, levelled or not:
        const auto fastest_played = [&](std::optional<detail::RailRelays> relays = std::nullopt,
                                        detail::RailLevel level = detail::RailLevel::busiest) {
          return fastest_played_if([&](const Played& p) {
            return (!relays || p.lay.relays == *relays) && p.lay.level == level;
          });
        };
        std::vector<std::ptrdiff_t> played_again;
        const auto play_again = [&](std::ptrdiff_t i) {
          if (std::find(played_again.begin(), played_again.end(), i) != played_again.end()) return;
          played_again.push_back(i);
          for (int stock : kMoreRailStocks) try_plays(played[i].steps, of, {.stock = stock});
          try_plays(played[i].steps, of, {.stock = kRailStock, .stock_counts_coming = true});
          try_other_turns_and_sends(played[i].steps, of, kRailStock);
        };
        if (near()) return;
        const std::ptrdiff_t fastest = fastest_played();
        play_again(fastest);
        // Where its rings played fastest, the rails they were passed from too: the larger stocks
        // and other turns gained more on them (random suite seed 2309 r8 with two NICs).
        if (played[fastest].from >= 0 && !near()) play_again(played[fastest].from);
        if (const std::ptrdiff_t other =
                near_other_way(played[fastest].lay.how, played[fastest].time);
            other >= 0 && !near())
          play_again(other);
        const bool several_orders = fastest_lays.size() > 1;
        if (several_orders)
          if (const std::ptrdiff_t by_host = fastest_played(detail::RailRelays::by_host);
              by_host != fastest && !near())
            play_again(by_host);
        if (near()) return;
        fastest_lays.insert(fastest_lays.end(), levelled_lays.begin(), levelled_lays.end());
        for (const detail::RailRules& lay : fastest_lays) {
          if (near()) return;
          try_rails(kFinestRailRounds, lay, kFinestRailRoundBuckets);
        }
        const std::ptrdiff_t finest = fastest_played();
        if (finest != fastest && !near()) play_again(finest);
        // Where several relay orders went on, the fastest of each is played again too: the stocks
        // went to the turned rails alone once they played fastest, and host order, which gained
        // more from them, ended slower (random suite seed 1709 r9 with eight NICs, 1.315x ->
        // 1.357x).
        if (several_orders)
          for (const detail::RailRules& lay : fastest_lays)
            if (const std::ptrdiff_t in_order = fastest_played(lay.relays);
                in_order >= 0 && !near())
              play_again(in_order);
        if (const std::ptrdiff_t levelled =
                fastest_played(std::nullopt, detail::RailLevel::levelled);
            levelled >= 0 && played[levelled].time < played[finest].time && !near())
          play_again(levelled);
        // Returning in turn, last, so that it takes no other lay's place above (tried among the
        // spreads, it went on where returning slice by slice had gained more: random suite seed
        // 2207 r7 with two NICs, 1.067x -> 1.091x). Where it plays within kOtherRailsWithin of the
        // fastest, it goes on to the finer pieces, and its fastest play is played again.
        for (detail::RailPick pick : {detail::RailPick::cyclic, detail::RailPick::least_busy}) {
          if (near()) return;
          try_rails(kShopRounds, {pick, detail::RailSpread::returning_in_turn});
        }
        const auto fastest_in_turn = [&] {
          return fastest_played_if(
              [](const Played& p) { return p.lay.how == detail::RailSpread::returning_in_turn; });
        };
        const std::ptrdiff_t in_turn = fastest_in_turn();
        if (in_turn < 0 || played[in_turn].time > kOtherRailsWithin * played[fastest_played()].time)
          return;
        const detail::RailRules in_turn_lay = played[in_turn].lay;
        for (int rounds : kFinerRailRounds) {
          if (near()) return;
          try_rails(rounds, in_turn_lay);
        }
        if (!near()) play_again(fastest_in_turn());
      };
      // Rails first where they apply: a shop sends a slice bound for several hosts from its
      // holders to each of them, which wins only where the holders can send it that often.
      if (pieces == detail::Pieces::even) try_rails_all();
      try_shops();
    };
    try_played(jobs, detail::Pieces::even);
    if (!kept_tasks.empty() && !near())
      try_played(detail::make_jobs(batch, kept_tasks, options.strategy, false),
                 detail::Pieces::even);
    for (const AtOnce& candidate : at_once) {
      if (near()) break;
      if (candidate.time <= kAtOnceWithin * best)
        try_ops(detail::balance_order(batch, candidate.jobs, candidate.options,
                                      detail::Shape::chains, detail::Receipts::over_nics_at_once));
    }
    // The shops once more, each pair of NICs' bytes cut at the phases of the NICs' open shop:
    // pieces of one size taking turns shared the busiest sender's receiving NIC with another
    // sender while a third NIC idled (seed 1704 r11 with one NIC, 1.186x -> 1.148x). After the
    // rest: laid before, a shop cut so came within 1.05x first where a later candidate came
    // nearer (seed 1113 r18 with two NICs, 1.02x -> 1.04x).
    if (!near()) try_played(jobs, detail::Pieces::by_phases);
    // Chains whose relays level the hosts' sending (relay_tree_jobs): where a host that sends
    // a slice to several hosts is the busiest, a receiving host that needs only part of the
    // slices relays it. Laid whole, a device's next send often does not fit the gap its
    // receivers leave it; in halves and quarters, and by the greedy that takes receipts in at
    // once, it does more often. Late: tried before the rails and the shops, its six lays made the
    // random suite with one NIC plan half as long again (seeds 2001-2010), and came nearest the
    // bound only where nothing else did.
    if (spread && !near())
      if (auto trees = detail::relay_tree_jobs(batch, jobs); !trees.empty())
        for (int cuts = 0; cuts < 3 && !near(); ++cuts) {
          if (cuts > 0) trees = halved(batch, trees);
          try_candidate(trees, options, detail::Shape::chains);
          if (!near())
            try_ops(detail::balance_order(batch, trees, options, detail::Shape::chains,
                                          detail::Receipts::over_nics_at_once));
        }
    // A holder that alone serves several devices beside it takes longer than its host's NICs
    // would: their slices are also cut between it and holders on other hosts. Last: it wins only
    // where nothing else came near the bound, and coming near it first would stop the search
    // before candidates that come nearer.
    if (any_helped(jobs) && !near()) {
      PlanOptions split = options;
      split.split = true;
      try_ops(detail::balance_order(batch, jobs, split, detail::Shape::chains,
                                    detail::Receipts::apart, detail::Helpers::used));
    }
    // Rails that go through their stages wherever one host holds a slice, by both greedies (the
    // lockstep rounds hand every rail to its stage already): the greedy sends a rail from its
    // holder where that ends it soonest, and a holder that sends another NIC's rail over its own
    // holds its port and its NIC while the other NIC idles (random suite seed 2709 r21 with two
    // NICs: 1.258x; 1.210x by the greedy that takes receipts in at once, reordered 1.191x; with
    // eight NICs on hosts of 8, seeds 2601-2610 and 2701-2710, 11 cases faster and 1 slower, 2701
    // r14 1.141x -> 1.015x). Late, as they come nearest only where no other candidate did, but
    // before the reordering, which gains from them too.
    if (any_into_several_nics(batch, jobs))
      for (bool per_receiver : {true, false})
        for (bool stage_at_holders : {false, true}) {
          if (near()) break;
          const auto rails = rails_of(jobs, {.stage_at_holders = stage_at_holders,
                                             .per_receiver = per_receiver,
                                             .through_stages = true});
          if (laid_before(rails, false)) continue;
          rails_tried.emplace_back(rails, true);
          const double time =
              try_ops(detail::balance_order(batch, rails, options, detail::Shape::chains));
          if (!near() && time <= kAtOnceWithin * best)
            try_ops(detail::balance_order(batch, rails, options, detail::Shape::chains,
                                          detail::Receipts::over_nics_at_once));
        }
    // Last, where the plan is still far from the bound: its sends reordered one swap at a time,
    // each kept where the simulator finds it faster, the swaps found again after each gain (the
    // plays choose each device's next op by what they see at the moment; of seeds 1201-1220 with
    // four NICs 51 cases better, none worse, 80.4 -> 81.9% within 1.05x). Within a budget of ops
    // simulated, so that the plan does not depend on the machine.
    double reorder_work = options.search_effort * kReorderWork;
    for (bool gained = std::isfinite(best); gained && !near();) {
      gained = false;
      reorder_work -= 2 * static_cast<double>(plan.ops.size());  // (the timing, the dependencies)
      if (reorder_work < 0) break;
      for (const auto& [p, q] : late_swaps(plan)) {
        reorder_work -= static_cast<double>(plan.ops.size());
        if (reorder_work < 0) break;
        std::vector<Op> swapped = plan.ops;
        std::swap(swapped[p], swapped[q]);
        const double before = best;
        try_ops(std::move(swapped));
        if (best < before) {
          gained = !near();
          break;
        }
      }
    }
    // Where several hosts hold a slice and a rail's NIC has neither a holder nor a free device
    // there, rails with that rail staged at a receiver beside the holders (else the same rails,
    // not laid again). After every other candidate but the fastest rails' more rounds below, so
    // that where the others come near the bound they plan as before (laid right after the other
    // rails, seed 2710 r3 with two NICs came near the bound by them, 1.020x -> 1.025x).
    if (any_into_several_nics(batch, jobs))
      for (bool per_receiver : {true, false}) {
        if (near()) break;
        lay_rails({.per_receiver = per_receiver, .home_stages = true});
      }
    // The rails that made the fastest plan, laid once more in more rounds (not reordered), each
    // also with its last round in halves: a chain's last pieces reach its end a piece's time per
    // hop after the NICs that sent them are done (seeds 1701-1710 and 1801-1810 with two NICs, 4
    // cases faster, 1808 r2 1.053x -> 1.045x; with four NICs 9, 1709 r13 1.119x -> 1.104x; none
    // slower). Not every rails lay so: laid so throughout, two of five broadcasts that end on a
    // chain's drain were slower (1805 r17 1.057x -> 1.065x).
    if (fastest_laid_rails)
      for (int finer : kFinerRails) {
        if (near()) break;
        try_laid_rails(rails_of(jobs, *fastest_laid_rails, finer));
        if (near()) break;
        detail::RailOptions tapered = *fastest_laid_rails;
        tapered.tapered = true;
        try_laid_rails(rails_of(jobs, tapered, finer));
      }
    if (std::isinf(best))
      throw std::logic_error(
          "planner: neither the plan nor any candidate delivers every element once");
    if (bucket_bytes == default_bucket_bytes(batch.cluster)) time = best;
  } else if (plan.balance == Balance::order && !many_jobs &&
             any_transfer(jobs, [](const detail::Transfer& t) { return !t.helpers.empty(); })) {
    // Where every transfer costs about a latency, the greedy that keeps a device's receipts apart
    // holds a receiver's port through its own copy, so a slice from a holder beside it waits for
    // that copy as long as one from a holder afar: where some slice has both, the greedy that
    // takes receipts from other hosts at once is laid too (where the plan is not near the bound),
    // and the faster kept (two bytes that a device needed, held beside it by one device that
    // copied its own slice first: 10 us against a bound of 5, random suite seed 3005 r13).
    if (const double apart = fused_time(plan.ops); apart > kNearTheBound * plan.lower_bound_s) {
      auto at_once = detail::balance_order(batch, jobs, options, detail::Shape::chains,
                                           detail::Receipts::over_nics_at_once);
      if (fused_time(at_once) < apart) plan.ops = std::move(at_once);
    }
  }
  plan.ops = detail::bucket_ops(batch, std::move(plan.ops), bucket_bytes, options.chunk_bytes);
  // Where no candidate is planned (too many jobs), chains whose latencies outweigh their bytes
  // are still cut into a chain through one device per host and chains inside each host (rails
  // would be planned again: detail::host_chains only rewrites ops), when the simulator finds that
  // faster.
  if (plan.balance == Balance::order && many_jobs) {
    if (std::optional<std::vector<Op>> cut =
            detail::host_chains(batch, plan.ops, options.chunk_bytes)) {
      const double cut_time = simulate_time(batch, *cut).time_s;
      time = simulate_time(batch, plan.ops).time_s;
      if (cut_time < *time) {
        plan.ops = std::move(*cut);
        time = cut_time;
      }
    }
  }
  for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) plan.ops[i].id = i;
  for (const HostTraffic& h : host_traffic(plan)) plan.network_bytes += h.out_bytes;
  return {std::move(plan), time};
}

}  // namespace

Plan make_plan(const Batch& batch, const PlanOptions& options) {
  return plan_and_time(batch, options).first;
}

EstimatedPlan make_estimated_plan(const Batch& batch, const PlanOptions& options) {
  auto [plan, time] = plan_and_time(batch, options);
  const double estimate_s = time ? *time : estimate(plan);
  return {std::move(plan), estimate_s};
}

Plan make_plan(const Resharding& problem, const PlanOptions& options) {
  problem.validate();
  return make_plan(Batch::of_one(problem), options);
}

Plan on_cluster(Plan plan, const Cluster& cluster) {
  plan.batch.cluster = cluster;
  plan.batch.validate();
  plan.lower_bound_s = lower_bound(plan.batch, decompose(plan.batch));
  return plan;
}

}  // namespace meshcast
