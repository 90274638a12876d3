// make_plan on hand-checked cases and the paper's suite: op shapes of each strategy, sender
// balance, ordering, split senders, chunk choice and the lower bound.
#include "meshcast/planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "corpus.h"
#include "meshcast/error.h"
#include "meshcast/plan/validate.h"
#include "meshcast/planner/estimate.h"
#include "meshcast/planner/lower_bound.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

Resharding problem_of(std::vector<int64_t> shape, Mesh src, const char* src_spec, Mesh dst,
                      const char* dst_spec, int hosts, int per_host) {
  Resharding p;
  p.tensor = TensorSpec{std::move(shape), DType::int32};
  p.src = Layout{std::move(src), ShardingSpec::parse(src_spec)};
  p.dst = Layout{std::move(dst), ShardingSpec::parse(dst_spec)};
  p.cluster = paper_cluster(hosts);
  p.cluster.devices_per_host = per_host;
  return p;
}

// Devices 0, 1, ..., count - 1.
std::vector<DeviceId> first_devices(int count) {
  std::vector<DeviceId> devices(count);
  std::iota(devices.begin(), devices.end(), 0);
  return devices;
}

std::map<OpKind, int> kind_counts(const Plan& plan) {
  std::map<OpKind, int> counts;
  for (const Op& op : plan.ops) ++counts[op.kind];
  return counts;
}

const Resharding& paper(int number) {
  static const auto cases = paper_cases();
  return cases[number - 1].problem;
}

TEST(PlannerTest, SendRecvSendsOneCopyPerReceiver) {
  // Host 0 holds halves of an 8-vector on devices 0,1; devices 2,3 of host 1 want all of it.
  const auto p = problem_of({8}, Mesh({2}, {0, 1}), "S0", Mesh({2}, {2, 3}), "R", 2, 2);
  const Plan plan = make_plan(p, {.strategy = Strategy::send_recv, .balance = Balance::none});
  validate_plan(plan);
  EXPECT_EQ(kind_counts(plan), (std::map<OpKind, int>{{OpKind::send, 4}}));
  EXPECT_EQ(plan.network_bytes, 2 * 8 * 4);
  EXPECT_EQ(plan.ops[0].sender, 0);
  EXPECT_EQ(plan.ops[0].receivers, (std::vector<DeviceId>{2}));
  EXPECT_EQ(plan.ops[0].pieces, (std::vector<Piece>{{0, 0, Box{{{0, 4}}}, 16}}));
  EXPECT_EQ(plan.ops[1].receivers, (std::vector<DeviceId>{3}));
}

TEST(PlannerTest, DevicesThatHoldTheirSliceCopyIt) {
  // Same devices on both sides: S0 -> R; each device copies its half and receives the other:
  // by a send each with send_recv, else in one allgather of the two halves, each held by its
  // device (docs/concepts.md#gathers).
  const auto p = problem_of({8}, Mesh({2}, {0, 1}), "S0", Mesh({2}, {0, 1}), "R", 1, 2);
  for (auto s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast}) {
    const Plan plan = make_plan(p, {.strategy = s});
    validate_plan(plan);
    const OpKind moves = s == Strategy::send_recv ? OpKind::send : OpKind::allgather;
    EXPECT_EQ(kind_counts(plan),
              (std::map<OpKind, int>{{moves, moves == OpKind::send ? 2 : 1}, {OpKind::copy, 2}}))
        << to_string(s);
    EXPECT_EQ(plan.network_bytes, 0);
    for (const Op& op : plan.ops) {
      if (op.kind == OpKind::copy) {
        EXPECT_EQ(op.receivers, std::vector<DeviceId>{*op.sender});
      }
    }
  }
}

TEST(PlannerTest, BroadcastChainsHostsSendersHostFirst) {
  // The slice lives on device 4 (host 1); receivers on hosts 0, 1 and 2, listed out of order.
  const auto p = problem_of({8}, Mesh({1}, {4}), "R", Mesh({5}, {9, 0, 5, 8, 1}), "R", 3, 4);
  const Plan plan = make_plan(p, {.strategy = Strategy::broadcast});
  validate_plan(plan);
  ASSERT_EQ(plan.ops.size(), 1u);
  EXPECT_EQ(plan.ops[0].kind, OpKind::broadcast);
  EXPECT_EQ(plan.ops[0].sender, 4);
  EXPECT_EQ(plan.ops[0].receivers, (std::vector<DeviceId>{5, 0, 1, 8, 9}));
  // Hops 4->5 (host 1), 5->0 (1->0), 0->1, 1->8 (0->2), 8->9: two NIC crossings.
  EXPECT_EQ(plan.network_bytes, 2 * 8 * 4);
}

TEST(PlannerTest, AllgatherSendsPartsThenGathersOnEachHost) {
  const Plan plan = make_plan(paper(7), {.strategy = Strategy::allgather});
  validate_plan(plan);
  // 4 tasks x 2 receiving hosts: 4 part sends and one allgather each.
  EXPECT_EQ(kind_counts(plan), (std::map<OpKind, int>{{OpKind::send, 32}, {OpKind::allgather, 8}}));
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::send) {
      EXPECT_EQ(op.bytes, paper(7).tensor.bytes() / 4 / 4);
    }
  }
}

TEST(PlannerTest, AllgatherFallsBackToSendsForOneDevicePerHost) {
  // Each receiving host has one destination device: no local allgather applies.
  const auto p = problem_of({8, 4}, Mesh({2}, {0, 1}), "S0R", Mesh({2, 1}, {2, 4}), "RR", 3, 2);
  const Plan plan = make_plan(p, {.strategy = Strategy::allgather});
  validate_plan(plan);
  EXPECT_EQ(kind_counts(plan), (std::map<OpKind, int>{{OpKind::send, 4}}));
}

TEST(PlannerTest, AllgatherFallsBackWhenPartsWouldBeEmpty) {
  // A 1x1 slice cannot be cut into 2 parts with an element each.
  const auto p = problem_of({1, 1}, Mesh({1}, {0}), "RR", Mesh({2}, {2, 3}), "RR", 2, 2);
  const Plan plan = make_plan(p, {.strategy = Strategy::allgather});
  validate_plan(plan);
  EXPECT_EQ(kind_counts(plan), (std::map<OpKind, int>{{OpKind::send, 2}}));
}

TEST(PlannerTest, DefaultBalanceFollowsTheStrategy) {
  EXPECT_EQ(effective_balance({.strategy = Strategy::broadcast}), Balance::order);
  EXPECT_EQ(effective_balance({.strategy = Strategy::send_recv}), Balance::size);
  EXPECT_EQ(effective_balance({.strategy = Strategy::allgather}), Balance::size);
  EXPECT_EQ(effective_balance({.strategy = Strategy::send_recv, .balance = Balance::none}),
            Balance::none);
  EXPECT_EQ(make_plan(paper(1)).balance, Balance::order);
}

TEST(PlannerTest, SizeSpreadsSendersOverReplicaHosts) {
  // Case 2: the source is replicated on both hosts; none sends everything from host 0.
  const auto traffic_of = [](Balance b) {
    return host_traffic(make_plan(paper(2), {.strategy = Strategy::broadcast, .balance = b}));
  };
  const auto none = traffic_of(Balance::none);
  const auto size = traffic_of(Balance::size);
  EXPECT_EQ(none[0].out_bytes, paper(2).tensor.bytes());
  EXPECT_EQ(none[1].out_bytes, 0);
  EXPECT_EQ(size[0].out_bytes, paper(2).tensor.bytes() / 2);
  EXPECT_EQ(size[1].out_bytes, paper(2).tensor.bytes() / 2);
}

TEST(PlannerTest, PaperCase7BroadcastSpendsAtMostASeventhOfSendRecvOnTheSourceNic) {
  const auto source_out = [](Strategy s) {
    const Plan plan = make_plan(paper(7), {.strategy = s});
    validate_plan(plan);
    return host_traffic(plan)[0].out_bytes;
  };
  const int64_t broadcast = source_out(Strategy::broadcast);
  const int64_t send_recv = source_out(Strategy::send_recv);
  EXPECT_EQ(broadcast, paper(7).tensor.bytes());
  EXPECT_LE(7 * broadcast, send_recv);
}

TEST(PlannerTest, PaperCase6OrderNoLaterThanSizeNoLaterThanNone) {
  const auto time_of = [](Balance b) {
    const Plan plan = make_plan(paper(2), {.strategy = Strategy::broadcast, .balance = b});
    validate_plan(plan);
    return estimate(plan);
  };
  const double none = time_of(Balance::none);
  const double size = time_of(Balance::size);
  const double order = time_of(Balance::order);
  // Both put the same bytes on every NIC; their chains differ in order, and so in pipeline fill
  // (a chunk per hop, some 0.02% here).
  EXPECT_LE(order, size * 1.001);
  EXPECT_LE(size, none);
  // none sends tasks 0 and 1 from device 0 one after the other, and tasks 2 and 3 (host 1) wait
  // behind task 1 on host 3's devices; order overlaps the two source hosts.
  EXPECT_LT(order, none);
}

TEST(PlannerTest, SplitSharesTasksBetweenReplicaHosts) {
  // Three slices replicated on hosts 0 and 1 go to hosts 2, 3, 4: without splitting one source
  // host sends two of them; split, each sends one and a half.
  Resharding p = problem_of({3 * 4096}, Mesh::placed({2, 1}, 0, 1), "R", Mesh::placed({3, 1}, 2, 1),
                            "S0", 5, 1);
  // The greedy alone splits nothing here (each split finishes no sooner on its own); the search
  // at the default effort finds the split plan. Whole slices (balance none) are 1.33x the bound,
  // so without split order plans the split candidate too and keeps it.
  const Plan whole = make_plan(p, {.balance = Balance::none});
  const Plan a = make_plan(p, {.balance = Balance::order});
  const Plan b = make_plan(p, {.balance = Balance::order, .split = true});
  validate_plan(b);
  EXPECT_LT(estimate(b), estimate(whole));
  EXPECT_GT(b.ops.size(), whole.ops.size());
  EXPECT_EQ(a.ops, b.ops);
  const auto traffic = host_traffic(b);
  EXPECT_EQ(traffic[0].out_bytes + traffic[1].out_bytes, p.tensor.bytes());
  EXPECT_LT(std::max(traffic[0].out_bytes, traffic[1].out_bytes), p.tensor.bytes() * 2 / 3);
}

TEST(PlannerTest, SizeSplitsWhenThatLowersTheBusiestHoldersBytes) {
  const Resharding p = problem_of({3 * 4096}, Mesh::placed({2, 1}, 0, 1), "R",
                                  Mesh::placed({3, 1}, 2, 1), "S0", 5, 1);
  const auto busiest = [&](bool split) {
    const Plan plan = make_plan(p, {.balance = Balance::size, .split = split});
    validate_plan(plan);
    const auto traffic = host_traffic(plan);
    return std::max(traffic[0].out_bytes, traffic[1].out_bytes);
  };
  EXPECT_EQ(busiest(false), p.tensor.bytes() * 2 / 3);  // one host sends two of three slices
  EXPECT_EQ(busiest(true), p.tensor.bytes() / 2);
}

TEST(PlannerTest, BroadcastChunks) {
  const Plan automatic = make_plan(paper(7));
  for (const Op& op : automatic.ops) {
    ASSERT_EQ(op.kind, OpKind::broadcast);
    EXPECT_GT(op.chunk_bytes, 0);
    EXPECT_LT(op.chunk_bytes, op.bytes);  // 8 hops: pipelining pays off
    EXPECT_EQ(op.chunk_bytes % 4, 0);
  }
  const Plan fixed = make_plan(paper(7), {.chunk_bytes = 1 << 20});
  for (const Op& op : fixed.ops) EXPECT_EQ(op.chunk_bytes, 1 << 20);
  // The estimate prefers the automatic chunk to one unpipelined message.
  EXPECT_LT(estimate(automatic), estimate(make_plan(paper(7), {.chunk_bytes = int64_t{1} << 40})));
}

// The automatic chunk is the simulator's best for the chain (within the planner's 1/1024 slack,
// which buys fewer messages, and above its floor), on large and small messages, with and without
// latency.
TEST(PlannerTest, AutomaticChunksAreTheSimulatorsBestForTheirChain) {
  int chains = 0;
  for (double latency : {0.0, 5e-6, 231e-6})
    for (int scale : {1, 64, 2048})
      for (int number : {1, 3, 6, 7}) {
        Resharding p = paper(number);
        p.tensor.shape[0] = std::max<int64_t>(1, p.tensor.shape[0] / scale);
        p.cluster.latency = latency;
        Batch batch = Batch::of_one(p);
        const OpTimer timer(batch);
        for (Op op : make_plan(p).ops) {
          if (op.kind != OpKind::broadcast) continue;
          ++chains;
          const double chosen = timer.time_of(op);
          double best = std::numeric_limits<double>::infinity();
          // Chunks below 64 KiB only up to 32 of them (the planner's floor).
          const int64_t floor = std::min<int64_t>(64 * 1024, (op.bytes + 31) / 32);
          for (int64_t chunk = floor; chunk < 2 * op.bytes; chunk = chunk * 5 / 4 + 4) {
            op.chunk_bytes = chunk;
            best = std::min(best, timer.time_of(op));
          }
          EXPECT_LE(chosen, best * (1 + 1.0 / 1024) * (1 + 1e-9))
              << "case " << number << " / " << scale << ", latency " << latency << ", op " << op.id;
        }
      }
  EXPECT_GT(chains, 50);
}

// A 1 MiB tensor from one device to three hosts (three chains through the same hosts, one after
// another from the one sender): chunks of a latency's worth of bytes keep each chain's fill
// short, where 64 KiB chunks made it 1.42x the bound.
TEST(PlannerTest, SmallBroadcastsAreNotDominatedByPipelineFill) {
  Resharding p = problem_of({512, 512}, Mesh::placed({1}, 0, 3), "RS0", Mesh::placed({3, 3}, 1, 3),
                            "S1R", 4, 3);
  p.tensor.dtype = DType::float32;
  const Plan plan = make_plan(p);
  validate_plan(plan);
  for (const Op& op : plan.ops) {
    ASSERT_EQ(op.kind, OpKind::broadcast);
    EXPECT_LT(op.chunk_bytes, 16 * 1024);
  }
  EXPECT_LE(estimate(plan), 1.15 * plan.lower_bound_s);
}

TEST(PlannerTest, RejectsBadOptions) {
  EXPECT_THROW(make_plan(paper(1), {.chunk_bytes = -1}), InvalidArgument);
  for (double effort : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      make_plan(paper(1), {.search_effort = effort});
      ADD_FAILURE() << "search effort " << effort << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("bad search effort"), std::string::npos) << e.what();
    }
  }
}

// Rows cut in 5 at the source and columns in 4 at the destination (overlaps of uneven sizes),
// each replicated across the hosts of its mesh, the meshes sharing hosts (a variant of a random
// corpus case): each further stretch of search finds a better send order, so a search bounded by
// time would plan differently on a faster or busier machine.
Resharding where_search_keeps_improving() {
  Resharding p;
  p.tensor = TensorSpec{{59, 40}, DType::float64};
  p.src = Layout{Mesh::placed({3, 5}, 0, 5), ShardingSpec::parse("S1R")};
  p.dst = Layout{Mesh::placed({4, 4}, 0, 5), ShardingSpec::parse("RS1")};
  p.cluster = Cluster{.hosts = 4, .devices_per_host = 5};
  return p;
}

TEST(PlannerTest, SearchGivesTheSamePlanOnEveryRun) {
  const Resharding p = where_search_keeps_improving();
  const PlanOptions options{.strategy = Strategy::send_recv, .balance = Balance::order};
  const Plan first = make_plan(p, options);
  for (int run = 0; run < 3; ++run) EXPECT_TRUE(make_plan(p, options) == first) << "run " << run;
  // Here the plan depends on how far the search gets, which the effort alone decides.
  PlanOptions more = options;
  more.search_effort = 2;
  EXPECT_LT(estimate(make_plan(p, more)), estimate(first));
}

TEST(PlannerTest, EffortZeroKeepsTheGreedyPlanAndSearchingIsNeverWorse) {
  const Resharding p = where_search_keeps_improving();
  const auto plan_with = [&](double effort) {
    return make_plan(
        p, {.strategy = Strategy::send_recv, .balance = Balance::order, .search_effort = effort});
  };
  const Plan greedy = plan_with(0);
  // A budget below the cost of one search step takes none.
  EXPECT_TRUE(plan_with(1e-9) == greedy);
  EXPECT_LT(estimate(plan_with(1)), estimate(greedy));
  for (const PaperCase& c : paper_cases(16))
    for (auto s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast})
      for (bool split : {false, true}) {
        PlanOptions options{.strategy = s, .balance = Balance::order, .split = split};
        const Plan searched = make_plan(c.problem, options);
        options.search_effort = 0;
        EXPECT_LE(estimate(searched), estimate(make_plan(c.problem, options)))
            << c.number << " " << to_string(s) << " split " << split;
      }
}

TEST(PlannerTest, EstimateIsAtLeastTheLowerBoundOnThePaperCases) {
  for (const PaperCase& c : paper_cases(16))
    for (auto s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast}) {
      const Plan plan = make_plan(c.problem, {.strategy = s});
      validate_plan(plan);
      EXPECT_GE(estimate(plan), plan.lower_bound_s) << c.number << " " << to_string(s);
    }
}

// make_estimated_plan reuses the simulation the planner ran to choose the plan (of its ops fused
// into the default buckets, or of the plan kept against its host chains): the plan is make_plan's
// and the estimate what simulating it afresh gives, for a problem with candidates, one with too
// many jobs for them (1,100 small tensors chained to three hosts), and buckets of another size.
TEST(PlannerTest, EstimatedPlanIsThePlanAndItsFreshEstimate) {
  const auto expect_fresh = [](const Batch& batch, const PlanOptions& options) {
    const EstimatedPlan planned = make_estimated_plan(batch, options);
    EXPECT_TRUE(planned.plan == make_plan(batch, options));
    EXPECT_EQ(planned.estimate_s, estimate(planned.plan));
  };
  for (const int number : {1, 6, 7}) {
    const Batch batch = Batch::of_one(paper_cases(16)[number - 1].problem);
    expect_fresh(batch, {});
    expect_fresh(batch, {.bucket_bytes = 4096});
    expect_fresh(batch, {.strategy = Strategy::send_recv});
  }
  Batch many;
  many.cluster = Cluster{.hosts = 4, .devices_per_host = 2};
  for (int i = 0; i < 1100; ++i)
    many.tensors.push_back({"t" + std::to_string(i), TensorSpec{{256}, DType::float32},
                            Layout{Mesh({2}, {0, 1}), ShardingSpec::parse("S0")},
                            Layout{Mesh({3, 2}, {2, 3, 4, 5, 6, 7}), ShardingSpec::parse("S1")}});
  expect_fresh(many, {});
}

// Balance order's search reports each candidate plan it simulates with the fastest so far: the
// counts run 1, 2, 3, ..., the ratio never grows, and the last is the returned plan's estimate
// over its bound; following the search does not change the plan (random suite seed 1209 r17 with
// two NICs, a hundred candidates or so).
TEST(PlannerTest, TheSearchReportsEachCandidateAndTheFastestSoFar) {
  auto p =
      problem_of({20648883, 13}, Mesh({2}, {0, 1}), "RS0", Mesh({2, 2}, {3, 1, 0, 2}), "RR", 2, 2);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  std::vector<PlanProgress> seen;
  PlanOptions options;
  options.on_progress = [&](const PlanProgress& progress) { seen.push_back(progress); };
  const EstimatedPlan planned = make_estimated_plan(Batch::of_one(p), options);
  ASSERT_GT(seen.size(), 10u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].candidates, static_cast<int>(i) + 1);
    if (i > 0) {
      EXPECT_LE(seen[i].best_ratio, seen[i - 1].best_ratio);
    }
  }
  EXPECT_NEAR(seen.back().best_ratio, planned.estimate_s / planned.plan.lower_bound_s, 1e-9);
  EXPECT_TRUE(planned.plan == make_plan(p));
}

// Simulated time over the lower bound of the broadcast plan of `p`.
double order_ratio(const Resharding& p, bool split) {
  const Plan plan = make_plan(p, {.strategy = Strategy::broadcast, .split = split});
  validate_plan(plan);
  return estimate(plan) / plan.lower_bound_s;
}

// The term that decides `p`'s bound (docs/concepts.md#lower-bound) and where: each test of a term
// below checks that its layout is decided by that term, as its comment derives.
std::pair<BoundTerm, int64_t> term_of(const Resharding& p) {
  const LowerBound bound = explain_lower_bound(Batch::of_one(p), {decompose(p)});
  EXPECT_EQ(bound.seconds, lower_bound(p, decompose(p)));
  return {bound.term, bound.at};
}

TEST(LowerBoundTest, ReceiverNicOfPaperCase7) {
  // Every destination host must take in the whole tensor: 2 GiB at 10 Gbps, plus the latency of
  // the first message.
  EXPECT_DOUBLE_EQ(lower_bound(paper(7), decompose(paper(7))),
                   paper(7).tensor.bytes() / gbps_to_bytes(10) + paper(7).cluster.latency);
  EXPECT_EQ(term_of(paper(7)), std::pair(BoundTerm::in, int64_t{1}));  // the first of hosts 1, 2
}

// A plan's bound is explained where it is this version's count of its batch, and not otherwise
// (a plan document of another version, or edited), so that no term is named for a bound it is not.
TEST(LowerBoundTest, APlansBoundIsExplainedWhereItIsThisVersionsCount) {
  Plan plan = make_plan(paper(7));
  const std::optional<LowerBound> bound = explain_plan_bound(plan);
  ASSERT_TRUE(bound);
  EXPECT_EQ(bound->seconds, plan.lower_bound_s);
  EXPECT_EQ(describe(*bound, plan.batch),
            "in(h) of host 1: what it takes in over its NICs, at their bandwidth");
  plan.lower_bound_s *= 1.5;
  EXPECT_FALSE(explain_plan_bound(plan));
  const Plan nothing = make_plan(problem_of({16}, Mesh({1}, {0}), "R", Mesh({1}, {0}), "R", 1, 1));
  EXPECT_EQ(explain_plan_bound(nothing), (LowerBound{}));
  EXPECT_EQ(describe(LowerBound{}, nothing.batch), "nothing has to move");
}

TEST(LowerBoundTest, SingleSenderHostTerm) {
  // Host 0 alone holds the 32 B; host 1 takes them in over a 4x faster NIC, so host 0's NIC
  // (only(0) = 32 B at 1 B/s) decides.
  auto p = problem_of({8}, Mesh({1}, {0}), "R", Mesh({2}, {2, 3}), "S0", 2, 2);
  p.cluster.host_nic_bandwidth = {1.0, 4.0};
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 32 / 1.0 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::out, int64_t{0}));
}

TEST(LowerBoundTest, PooledSenderTerm) {
  // Three 4-element slices replicated on hosts 0 and 1, one per receiving host 2, 3, 4:
  // in(h) = 16 B, only = 0, pooled = 48 B over two NICs.
  auto p =
      problem_of({12}, Mesh::placed({2, 1}, 0, 1), "R", Mesh::placed({3, 1}, 2, 1), "S0", 5, 1);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 1000;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 24.0 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::first, int64_t{-1}));
}

TEST(LowerBoundTest, DeviceTerm) {
  // Intra-host only: device 1 takes in 16 B over a 2 B/s link.
  auto p = problem_of({4}, Mesh({1}, {0}), "R", Mesh({1}, {1}), "R", 1, 2);
  p.cluster.device_bandwidth = 2;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 8.0 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::dev_in, int64_t{1}));
}

TEST(LowerBoundTest, LocalHolderTerm) {
  // Devices 0 (host 0) and 3 (host 1) hold all 32 B; devices 1 and 2 of host 0 take 16 B each.
  // On host 0 only device 0 holds them, so they reach devices 1 and 2 through device 0's 3 B/s
  // out-link or host 0's 1 B/s NIC: 32 B over 4 B/s, more than either device link's 16 B / 3 B/s.
  auto p = problem_of({8}, Mesh({2}, {0, 3}), "R", Mesh({2}, {1, 2}), "S0", 2, 3);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 3;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 8.0 + p.cluster.latency);
  // (near(d) of device 0 says the same as beside(h) of its host here, which is named first)
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::beside, int64_t{0}));
  // A second holder on host 0 (device 1 itself) lifts the term: device 2's link decides.
  auto two = problem_of({8}, Mesh({2}, {0, 1}), "R", Mesh({2}, {1, 2}), "S0", 2, 3);
  two.cluster.nic_bandwidth = 1;
  two.cluster.device_bandwidth = 3;
  EXPECT_DOUBLE_EQ(lower_bound(two, decompose(two)), 16.0 / 3 + two.cluster.latency);
  EXPECT_EQ(term_of(two), std::pair(BoundTerm::dev_in, int64_t{2}));
}

TEST(LowerBoundTest, BytesHeldOnlyInsideAHostSetLeaveThroughItsNics) {
  // 40 int32 (160 B) in 4 parts of 40 B, each on two hosts of 6 (one device per host, 1 B/s NICs);
  // 5 destination hosts take 32 B each. Only hosts 0 and 1 hold elements [20, 40), which hosts 2,
  // 3 and 4 need: 80 B leave through two NICs, 40 s, more than any host takes in (32 B) or the
  // bytes over all holders' NICs (160 B over 5).
  auto p = problem_of({40}, Mesh({4, 2}, {9, 5, 8, 11, 2, 0, 3, 1}), "S0",
                      Mesh::placed({5, 2}, 0, 2), "S0", 6, 2);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 1000;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 40.0 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::held, int64_t{-1}));
}

TEST(LowerBoundTest, ASingleHolderSendsOverItsHostsNicsOneOpAtATime) {
  // Device 0 alone holds 40 B that devices 2 and 3 of host 1 need; two NICs per host (1 B/s each,
  // device l on NIC l), 4 B/s device links. Host 1 takes in 40 B over two NICs (20 s), but every
  // byte leaves device 0, which sends one op at a time: `a` bytes over its own NIC (a / 1 s) and
  // the rest over its link to device 1, whose NIC sends them (at most T B in T s). So T >=
  // a + (40 - a) / 4 with 40 - a <= T: 40 B over 1 * (1 - 1/4) + 1 = 1.75 B/s, 160/7 s.
  auto p = problem_of({10}, Mesh({1}, {0}), "R", Mesh({2}, {2, 3}), "R", 2, 2);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 2;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 160.0 / 7 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::out, int64_t{0}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 160.0 / 7);
  // A second holder on host 0 sends over the other NIC itself: 40 B over two NICs.
  auto two = problem_of({10}, Mesh({2}, {0, 1}), "R", Mesh({2}, {2, 3}), "R", 2, 2);
  two.cluster = p.cluster;
  EXPECT_DOUBLE_EQ(lower_bound(two, decompose(two)), 20 + two.cluster.latency);
  EXPECT_EQ(term_of(two), std::pair(BoundTerm::in, int64_t{1}));
  // Device 0 alone holds 80 B: device 1 beside it needs the first 40 B, device 2 of host 1 the
  // other 40 B. Device 1's 40 B take device 0's link too: a + (40 - a) / 4 + 40 / 4 <= T with
  // 40 - a <= T gives T >= 50 / 1.75 = 200 / 7 s, where the NICs alone gave 40 / 1.75 (home(d) in
  // out(h) of docs/concepts.md#lower-bound).
  auto beside = problem_of({20}, Mesh({1}, {0}), "R", Mesh({2}, {1, 2}), "S0", 2, 2);
  beside.cluster = p.cluster;
  EXPECT_DOUBLE_EQ(lower_bound(beside, decompose(beside)), 200.0 / 7 + beside.cluster.latency);
  EXPECT_EQ(term_of(beside), std::pair(BoundTerm::out, int64_t{0}));
  EXPECT_GE(simulate(make_plan(beside)).time_s, 200.0 / 7);
}

TEST(LowerBoundTest, ADeviceServingItsHostLeavesItsNicPartOfTheTime) {
  // Two NICs per host (1 B/s each, device l on NIC l), 4 B/s device links. Device 0 alone holds
  // the first 40 B, which device 1 beside it needs (10 s of device 0's port); device 1 alone holds
  // the other 40 B, which device 2 of host 1 needs. Every byte leaving host 0 over NIC 0 leaves
  // device 0, which sends one op at a time: NIC 0 carries at most T - 10 B in T s and NIC 1 T B,
  // so 2T - 10 >= 40 and T >= 25 s, where the NICs alone gave 20 s. And device 0 holds none of
  // those bytes: device 1 hands it each one it sends, a quarter second of its port. With a B over
  // NIC 1, a + (40 - a) / 4 <= T and 10 + 40 - a <= T, so T >= 47.5 / 1.75 = 190/7 s (27.1; out(h)
  // of docs/concepts.md#lower-bound, which counts only the holders of only(h) as holders).
  auto p = problem_of({20}, Mesh({2}, {0, 1}), "S0", Mesh({2}, {1, 2}), "S0", 2, 2);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 2;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 190.0 / 7 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::out, int64_t{0}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 190.0 / 7);
  // With one NIC both devices feed it: 40 B at 1 B/s, and device 0's 10 s fit beside them.
  auto one = p;
  one.cluster.nics_per_host = 1;
  EXPECT_DOUBLE_EQ(lower_bound(one, decompose(one)), 40 + one.cluster.latency);
  EXPECT_EQ(term_of(one), std::pair(BoundTerm::in, int64_t{1}));
}

TEST(LowerBoundTest, TheDeviceBesideAHolderPassesOnWhatItsNicTakesIn) {
  // Device 0 of host 0 holds 32 B that device 2 of host 1 needs, and device 2 holds 32 B that
  // device 0 needs; two NICs per host (1 B/s each, device l on NIC l), 4 B/s links. Device 1, the
  // only device on host 0's NIC 1, sends over it what device 0 hands it; and what host 0 takes in
  // lands on device 0 over NIC 0, at most T B in T s, or on device 1, which passes it on over its
  // link, a quarter of a port second a byte. With x B over NIC 0: x + (32 - x) / 4 <= T and
  // 32 - x + (32 - T) / 4 <= T, so T >= 152 / 7.75 = 608/31 s (19.6), where device 1's port
  // counted free gave 32 / 1.75 = 128/7 s (18.3; forwarded(h) in out(h) of
  // docs/concepts.md#lower-bound).
  auto p = problem_of({16}, Mesh({2}, {0, 2}), "S0", Mesh({2}, {2, 0}), "S0", 2, 2);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 2;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 608.0 / 31 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::out, int64_t{0}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 608.0 / 31);
}

TEST(LowerBoundTest, ADeviceAloneOnItsNicServesItsHostOverItsPortOrTheOtherNics) {
  // Devices 0 (host 0) and 4 (host 1) hold a 60 B tensor; devices 5, 6 and 7 beside device 4 need
  // 20 B each. Four NICs per host (1 B/s each, device l on NIC l), 4 B/s links. Device 4 sends
  // what it gives them at 4 B/s, and the rest comes from host 0 over host 1's NICs; but a byte
  // that enters by NIC 0 lands at device 4, its only device, and leaves it by the same port. So
  // 60 <= 4T + 3T and T >= 60/7 s, where all four NICs gave 60 / 8 (near(d) of
  // docs/concepts.md#lower-bound).
  auto p = problem_of({15}, Mesh({2}, {0, 4}), "R", Mesh({3}, {5, 6, 7}), "S0", 2, 4);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 4;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 60.0 / 7 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::near, int64_t{4}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 60.0 / 7);
  // With two NICs device 6 shares NIC 0 with device 4 and takes its part in by it: both NICs
  // count, 60 / (4 + 2) s.
  auto two = p;
  two.cluster.nics_per_host = 2;
  EXPECT_DOUBLE_EQ(lower_bound(two, decompose(two)), 10 + two.cluster.latency);
  // (where no NIC is device 4's alone, near(d) is beside(h) of its host, which is named first)
  EXPECT_EQ(term_of(two), std::pair(BoundTerm::beside, int64_t{1}));
}

TEST(LowerBoundTest, EveryHopHoldsASendPortOfTheTasksHosts) {
  // Devices 0, 2 and 4, one per host of 3 hosts of 2 devices, each hold a third (12 B) of a 36 B
  // tensor that all 6 devices need; two NICs per host (1 B/s each), 4 B/s links. Each third
  // enters the 2 other hosts at least once by a hop over the NICs (at most 1 B/s, so 12 port
  // seconds each) and reaches its other 3 receivers by hops at most 4 B/s (3 each): 3 x 12 x
  // (2 / 1 + 3 / 4) = 99 port seconds over 6 devices, 16.5 s, where the NICs gave 24 B over two
  // NICs, 12 s (hops of docs/concepts.md#lower-bound). On a cluster of 6 hosts too: the planner
  // moves no byte through hosts 3-5, so their ports carry no hop (the cluster's 12 ports would
  // give 99 / 12 s, and so the NICs' 12 s).
  for (int hosts : {3, 6}) {
    auto p = problem_of({9}, Mesh({3}, {0, 2, 4}), "S0", Mesh({3, 2}, {0, 1, 2, 3, 4, 5}), "R",
                        hosts, 2);
    p.cluster.nic_bandwidth = 1;
    p.cluster.device_bandwidth = 4;
    p.cluster.nics_per_host = 2;
    EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 16.5 + p.cluster.latency) << hosts;
    EXPECT_EQ(term_of(p), std::pair(BoundTerm::hops, int64_t{-1})) << hosts;
    const Plan plan = make_plan(p);
    EXPECT_GE(simulate(plan).time_s, 16.5) << hosts;
    EXPECT_EQ(testing::op_outside(plan, {0, 1, 2}), "") << hosts;
  }
  // The random suite's case (seed 2801 r15, eight NICs on hosts of eight): host 0's devices 0-3
  // hold a quarter each of 512 MiB that hosts 1-3's 24 devices need, on a cluster of 7 hosts: over
  // those 4 hosts' 32 ports 68.46 ms, where the cluster's 56 gave 39.1 ms, below out(h)'s 56.52.
  Resharding r15 = problem_of({134217732}, Mesh({4}, first_devices(4)), "S0",
                              Mesh::placed({3, 8}, 1, 8), "R", 7, 8);
  r15.tensor.dtype = DType::float32;
  r15.cluster.nics_per_host = 8;
  const LowerBound bound = explain_lower_bound(Batch::of_one(r15), {decompose(r15)});
  EXPECT_EQ(bound.term, BoundTerm::hops);
  EXPECT_NEAR(bound.seconds, 68.46e-3, 0.01e-3);
}

TEST(LowerBoundTest, HoldersOnSomeNicsHandTheRestOverOneOpAtATime) {
  // Devices 0 and 1 of host 0 hold 40 B that devices 4 and 5 of host 1 need; four NICs per host
  // (1 B/s each, device l on NIC l), 4 B/s links. NICs 2 and 3 have no holder: what they send,
  // up to 2T B in T s, is handed over by the holders at 4 B/s, a quarter of a second per byte of
  // the ports that also feed NICs 0 and 1. So 40 <= 2T + 2T - 2T / 4 and T >= 80/7 s, where the
  // four NICs alone gave 10 s (out(h) of docs/concepts.md#lower-bound).
  auto p = problem_of({10}, Mesh({2}, {0, 1}), "R", Mesh({2}, {4, 5}), "R", 2, 4);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 4;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 80.0 / 7 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::out, int64_t{0}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 80.0 / 7);
}

TEST(LowerBoundTest, HostsThatHoldASliceTogetherHandItOverToTheirOtherNicsToo) {
  // Devices 0 and 1 of host 0 and devices 4 and 5 of host 1 each hold a 64 B tensor whose eighths
  // devices 8-15 of hosts 2 and 3 need; four NICs per host (1 B/s each, device l on NIC l), 4 B/s
  // links. Each byte leaves host 0 or host 1 first from a device that holds it or was handed it
  // over a device link: per host, NICs 0 and 1 carry at most 2T B in T s, NICs 2 and 3 what the
  // holders hand over at a quarter port second a byte, 2T - 2T / 4. So 64 <= 2 x 3.5T and
  // T >= 64/7 s, where the hosts' eight NICs alone gave 8 s (capacity(T) in the terms over sets of
  // hosts of docs/concepts.md#lower-bound).
  auto p = problem_of({16}, Mesh({4}, {0, 1, 4, 5}), "R", Mesh({8}, {8, 9, 10, 11, 12, 13, 14, 15}),
                      "S0", 4, 4);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 4;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 64.0 / 7 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::first, int64_t{-1}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 64.0 / 7);
}

TEST(LowerBoundTest, AHolderServesItsNeighboursOverItsLinkOrTheirBytesCrossANic) {
  // Device 0 of host 0 and device 2 of host 1 each hold a 64 B tensor whose quarters devices 1
  // (beside device 0), 3 (beside device 2), 4 (host 2) and 6 (host 3) need; two NICs per host (1
  // B/s each, device l on NIC l), 4 B/s links. Those 32 B leave hosts 0 and 1; device 1's 16 B
  // either leave device 0 over its link (a quarter port second a byte) or cross a NIC for the first
  // time too, and so do device 3's from device 2. In T s a host whose holder serves x B beside it
  // sends P + 3/4 min(T, 4P) with P = T - x / 4: 7/4 T - x / 4 (for 4P >= T), and the rest, 16 - x,
  // adds to what crosses; best at x = 16. So 2 x 7/4 T >= 32 + 2 x 4, T >= 80/7 s (11.4), where the
  // hosts' NICs gave 64/7 s (9.1) (served(S) in first(S, B) of docs/concepts.md#lower-bound). The
  // largest x is found on a grid and raised by what the capacity can gain between its points, so
  // the bound lies a little below 80/7 s.
  auto p = problem_of({16}, Mesh({2}, {0, 2}), "R", Mesh({4}, {1, 3, 4, 6}), "S0", 4, 2);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 2;
  const double bound = lower_bound(p, decompose(p)) - p.cluster.latency;
  EXPECT_LE(bound, 80.0 / 7);
  EXPECT_GE(bound, 0.99 * 80.0 / 7);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::first, int64_t{-1}));
  EXPECT_GE(simulate(make_plan(p)).time_s, bound);
}

TEST(LowerBoundTest, TheSendPortsOfAHostCarryWhatLeavesItAndWhatItsDevicesTakeFromIt) {
  // Devices 0-3 of host 0 each hold a quarter (16 B) of a 64 B tensor that devices 0 and 3 and
  // device 4 of host 1 need; four NICs per host (1 B/s each, device l on NIC l), 4 B/s links. The
  // 64 B leave host 0 at 1 B/s of some port each (64 port seconds), devices 0 and 3 take 48 B each
  // from their host at 4 B/s (24 port seconds) unless they come back in over their own NICs, 0
  // and 3 (1 B/s each, a quarter port second saved per byte): 88 - 2T / 4 <= 4T, so T >= 176/9 s
  // (19.6), where the NICs gave 16 s, and all four NICs' intake counted 17.6 s (ports(h) of
  // docs/concepts.md#lower-bound).
  auto p = problem_of({16}, Mesh({4}, {0, 1, 2, 3}), "S0", Mesh({3}, {0, 3, 4}), "R", 2, 4);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 4;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 176.0 / 9 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::ports, int64_t{0}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 176.0 / 9);

  // The example of docs/concepts.md: the same layout at 512 MiB, 10 Gbps NICs, 100 Gbps links.
  // W = 512 MiB / 1.25 GB/s + 2 x 384 MiB / 12.5 GB/s over G + 2 x nic / dev = 4 + 0.2 ports:
  // 117.6 ms, where the four NICs gave 107.4 ms.
  auto large =
      problem_of({128 << 20}, Mesh({4}, {0, 1, 2, 3}), "S0", Mesh({3}, {0, 3, 4}), "R", 2, 4);
  large.cluster.nic_bandwidth = 1.25e9;
  large.cluster.device_bandwidth = 12.5e9;
  large.cluster.nics_per_host = 4;
  const double bytes = 512.0 * (1 << 20);
  const double ports = (bytes / 1.25e9 + 2 * 0.75 * bytes / 12.5e9) / (4 + 2.5e9 / 12.5e9);
  EXPECT_NEAR(ports, 0.1176, 5e-5);
  EXPECT_NEAR(lower_bound(large, decompose(large)), ports + large.cluster.latency, 1e-9);
  EXPECT_GT(ports, bytes / 5e9);
  EXPECT_GE(simulate(make_plan(large)).time_s, ports);
}

TEST(LowerBoundTest, SlicesOnlyAHostHoldsAndNeedsCannotComeBackInOverItsNics) {
  // Device 2 (host 0) holds the first third (32 B) of a 96 B tensor, device 1 the second, device
  // 7 (host 1) the last; devices 0 and 1 need the first half, devices 4 and 5 of host 1 the
  // second. Four NICs per host (1 B/s each, device l on NIC l), 10 B/s links. 16 B leave host 0
  // at 1 B/s of some port each (16 port seconds), and devices 0 and 1 take 80 B of what only
  // host 0 holds and needs (8 port seconds): such a byte comes in over host 0's NICs only after
  // it left the host, a port second, more than the tenth it saves there. So 24 <= 4T and
  // T >= 6 s, where the bound was 5.47 s while it counted those receipts as ones that may come
  // in over the NICs (stay(h) in ports(h) of docs/concepts.md#lower-bound).
  auto p = problem_of({24}, Mesh({3}, {2, 1, 7}), "S0", Mesh({2, 2}, {0, 1, 4, 5}), "S0", 2, 4);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 10;
  p.cluster.nics_per_host = 4;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 6 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::ports, int64_t{0}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 6);

  // The example of docs/concepts.md at 512 MiB, 10 Gbps NICs and 100 Gbps links (random suite seed
  // 1108 r8 with four NICs): 26.85 ms, where letting those receipts come in gave 24.49 ms.
  auto large = problem_of({3947582, 17}, Mesh({3}, {2, 1, 7}), "S0R", Mesh({2, 2}, {0, 1, 4, 5}),
                          "S0R", 2, 4);
  large.tensor.dtype = DType::int64;
  large.cluster.nics_per_host = 4;
  // (the bound with its latency, as `meshcast simulate` prints it)
  EXPECT_NEAR(lower_bound(large, decompose(large)), 0.02685, 5e-6);
}

TEST(LowerBoundTest, ADeviceTakesInFromAfarOnlyOverItsOwnNic) {
  // The example of docs/concepts.md (random suite seed 1118 r25 with two NICs): two hosts of two
  // devices and two NICs (10 Gbps, 100 Gbps links); device 1 holds the first 7 of 13 columns of a
  // float64 tensor of 512 MiB, device 3 the rest, devices 0 and 2 need all of it. Device 0 takes
  // in over NIC 0 only, so host 0's two ports send device 1's columns away at NIC speed and pass
  // device 0 all it takes but what NIC 0 brings: (A / nic + (A + B) / dev) / (2 + nic / dev),
  // 130.6 ms, where counting both NICs' intake gave 124.6 ms (ports(h) of
  // docs/concepts.md#lower-bound).
  auto p =
      problem_of({5162223, 13}, Mesh({2, 1}, {1, 3}), "S1S0", Mesh({2, 1}, {0, 2}), "RR", 2, 2);
  p.tensor.dtype = DType::float64;
  p.cluster.nics_per_host = 2;
  const double a = 5162223.0 * 7 * 8;
  const double b = 5162223.0 * 6 * 8;
  const double nic = p.cluster.nic_bandwidth;
  const double dev = p.cluster.device_bandwidth;
  const double ports = (a / nic + (a + b) / dev) / (2 + nic / dev);
  EXPECT_NEAR(ports, 0.1306, 5e-5);
  EXPECT_NEAR(lower_bound(p, decompose(p)), ports + p.cluster.latency, 1e-9);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::ports, int64_t{0}));
}

TEST(LowerBoundTest, TheSendPortsOfHostsThatHoldASliceTogetherCarryItOutAndPassOnWhatTheyNeed) {
  // The example of docs/concepts.md (random suite seed 2208 r16 with eight NICs on hosts of
  // eight): hosts 0-3 each hold a 512 MiB uint8 tensor in fifths on devices 0-4, and row r of a
  // 7x7 mesh (devices 0-6 of host r) needs the r-th seventh. Hosts 4-6 take in 230 MB that only
  // hosts 0-3 hold (out at 1.25 GB/s of some port each), and six devices of each holding host take
  // their host's seventh from a holder beside them (12.5 GB/s); 26 of those receivers' rails may
  // bring a tenth of it over their NICs instead: (A / nic + B / dev) / (32 + 26 nic / dev), 9.58
  // ms, where each receiving host's eight NICs gave 7.67 ms (ports(S) of
  // docs/concepts.md#lower-bound).
  std::vector<DeviceId> src, dst;
  for (int r = 0; r < 7; ++r)
    for (int l = 0; l < 7; ++l) {
      if (r < 4 && l < 5) src.push_back(r * 8 + l);
      dst.push_back(r * 8 + l);
    }
  auto p = problem_of({536870912}, Mesh({4, 5}, src), "S1", Mesh({7, 7}, dst), "S0", 8, 8);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 8;
  const double seventh = 76695845;  // the last seventh is 3 B shorter
  const double a = 3 * seventh - 3;
  const double b = 4 * 6 * seventh;
  const double nic = p.cluster.nic_bandwidth;
  const double dev = p.cluster.device_bandwidth;
  const double ports = (a / nic + b / dev) / (32 + 26 * nic / dev);
  EXPECT_NEAR(ports, 0.009576, 5e-7);
  EXPECT_NEAR(lower_bound(p, decompose(p)), ports + p.cluster.latency, 1e-9);
  EXPECT_GT(ports, seventh / (8 * nic) + 0.0019);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::held_ports, int64_t{-1}));
  EXPECT_GE(simulate(make_plan(p)).time_s, ports);
}

TEST(LowerBoundTest, HoldersTogetherSendWhatOnlyTheyHoldThroughTheirOwnLinks) {
  // Devices 0 and 1 of one host of 8 hold a 64 B tensor whose eighths all 8 devices need (4 B/s
  // links): the 48 B of devices 2-7 leave device 0 or 1 by its out-link, 48 B over 8 B/s, 6 s,
  // where each receiver's link gave 2 s and the 8 ports together 1.5 s (dev_held(S) of
  // docs/concepts.md#lower-bound). Each holder sending three eighths reaches it.
  auto p = problem_of({16}, Mesh({2}, {0, 1}), "R", Mesh({8}, first_devices(8)), "S0", 1, 8);
  p.cluster.device_bandwidth = 4;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 6 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::dev_held, int64_t{-1}));
  const double time = simulate(make_plan(p)).time_s;
  EXPECT_GE(time, 6);
  EXPECT_LE(time, 1.01 * lower_bound(p, decompose(p)));
  // With device 2 a third holder, its own eighth needs no link: 40 B over 12 B/s.
  auto three = problem_of({16}, Mesh({3}, {0, 1, 2}), "R", Mesh({8}, first_devices(8)), "S0", 1, 8);
  three.cluster.device_bandwidth = 4;
  EXPECT_DOUBLE_EQ(lower_bound(three, decompose(three)), 40.0 / 12 + three.cluster.latency);
  EXPECT_EQ(term_of(three), std::pair(BoundTerm::dev_held, int64_t{-1}));
  // Random suite seed 1516 r29 on hosts of 8 devices (`bench --suite random --devices-per-host
  // 8`): two holders of a 512 MiB int32 tensor and a destination S0 over the 8 devices of their
  // host, 3.0x the bound that counted each device's link alone, 1.001x this one.
  auto r29 = problem_of({11184815, 2, 6}, Mesh({2}, {0, 1}), "RRR", Mesh({8}, first_devices(8)),
                        "S0RR", 6, 8);
  const double bound = lower_bound(r29, decompose(r29));
  EXPECT_NEAR(
      bound,
      6 * (r29.tensor.bytes() / 8.0) / (2 * r29.cluster.device_bandwidth) + r29.cluster.latency,
      1e-6);
  EXPECT_LE(simulate(make_plan(r29)).time_s, 1.01 * bound);
}

TEST(LowerBoundTest, WhatTheTakingHostsNeedComesOverTheirHoldersLinksOrTheOtherHostsNics) {
  // Devices 0, 3, 6 and 9 (the first of four hosts of three devices, one NIC of 1 B/s, 4 B/s links)
  // each hold a 60 B tensor whose sixths devices 1, 2, 4, 5, 7 and 8 need. Each host's holder
  // serves its two receivers 20 B, helped at most by its host's NIC: 20 B over 5 B/s, 4 s
  // (beside(h)). But only host 3's NIC has bytes to spare: the 60 B reach hosts 0-2 over three
  // links and one NIC, 60 B over 13 B/s (taken(R) of docs/concepts.md#lower-bound).
  // On a cluster of 6 hosts too: the planner moves no byte through hosts 4 and 5, whose NICs would
  // give 60 B over 15 B/s.
  for (int hosts : {4, 6}) {
    Resharding p = problem_of({60}, Mesh({4}, {0, 3, 6, 9}), "R", Mesh({6}, {1, 2, 4, 5, 7, 8}),
                              "S0", hosts, 3);
    p.tensor.dtype = DType::int8;
    p.cluster.nic_bandwidth = 1;
    p.cluster.device_bandwidth = 4;
    EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 60.0 / 13 + p.cluster.latency) << hosts;
    EXPECT_EQ(term_of(p), std::pair(BoundTerm::taken, int64_t{-1})) << hosts;
    const Plan plan = make_plan(p);
    EXPECT_GE(simulate(plan).time_s, 60.0 / 13) << hosts;
    EXPECT_EQ(testing::op_outside(plan, {0, 1, 2, 3}), "") << hosts;
  }
  // The random suite's case (seed 2710 r5, two NICs): the twelfths of 512 MiB that the nine
  // receivers of hosts 0-2 that hold nothing need come over three 100 Gbps links and host 3's two
  // 10 Gbps NICs, 10.07 ms, where each host's beside(h) gave 8.95 ms.
  Resharding r5 = problem_of({3834794, 7, 5}, Mesh({4, 1}, {3, 8, 15, 5}), "S1RR",
                             Mesh({3, 4}, first_devices(12)), "S0/1RR", 4, 4);
  r5.tensor.dtype = DType::float32;
  r5.cluster.nics_per_host = 2;
  const LowerBound bound = explain_lower_bound(Batch::of_one(r5), {decompose(r5)});
  EXPECT_EQ(bound.term, BoundTerm::taken);
  EXPECT_NEAR(bound.seconds, 10.07e-3, 0.01e-3);
  EXPECT_LE(order_ratio(r5, true), 1.05);
}

TEST(LowerBoundTest, WhatHoldersNeedBesideThemComesFromTheirLinksOrTheirHostsNics) {
  // Devices 0 and 5 of host 0 and 12, 13, 15 of host 1 (hosts of 8 devices, 8 NICs of 1 B/s, 4 B/s
  // links) hold a 112 B tensor whose sevenths devices 0-6 need: the 80 B of devices 1-4 and 6
  // reach them from the links of devices 0 and 5 or over host 0's NICs, 80 B over 16 B/s, 5 s
  // (beside(h) of docs/concepts.md#lower-bound), where the five holders' links gave 4 s (random
  // suite seed 1614 r12 on hosts of 8 devices, 2.50x -> 1.40x with the same plan).
  auto p =
      problem_of({28}, Mesh({5}, {0, 5, 12, 13, 15}), "R", Mesh({7}, first_devices(7)), "S0", 2, 8);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 4;
  p.cluster.nics_per_host = 8;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 5 + p.cluster.latency);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::beside, int64_t{0}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 5);
  // The suite's case at its size (512 MiB, the paper's links): the 366 MiB of the five come over
  // two 100 Gbps links and 80 Gbps of NICs, 11.0 ms (docs/concepts.md's example).
  auto r12 = problem_of({134217738}, Mesh({5}, {0, 5, 13, 15, 12}), "R",
                        Mesh({7}, first_devices(7)), "S0", 2, 8);
  r12.cluster.nics_per_host = 8;
  const std::vector<UnitTask> tasks = decompose(r12);
  double beside = 0;
  for (const UnitTask& t : tasks)
    for (DeviceId d : t.receivers)
      if (d != 0 && d != 5) beside += static_cast<double>(t.bytes);
  const double bound = lower_bound(r12, tasks);
  EXPECT_NEAR(bound,
              beside / (2 * r12.cluster.device_bandwidth + r12.cluster.nic_bandwidth_of(0)) +
                  r12.cluster.latency,
              1e-9);
  EXPECT_NEAR(bound, 11.0e-3, 0.05e-3);
  const double time = simulate(make_plan(r12)).time_s;
  EXPECT_GE(time, bound);
  EXPECT_LE(time, 1.45 * bound);  // 1.40x
}

TEST(LowerBoundTest, LatencyCountsOnceAndNothingToMoveCostsNothing) {
  // 64 B over 1 B/s links with a 3 s latency: 64 s of bandwidth plus one latency.
  auto p = problem_of({16}, Mesh({1}, {0}), "R", Mesh({1}, {2}), "R", 2, 2);
  p.cluster.nic_bandwidth = 1;
  p.cluster.device_bandwidth = 1000;
  p.cluster.latency = 3;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 64 + 3.0);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::in, int64_t{1}));
  // Source and destination on the same device: nothing moves, no message, a bound of 0.
  auto same = problem_of({16}, Mesh({1}, {0}), "R", Mesh({1}, {0}), "R", 1, 1);
  same.cluster.latency = 3;
  EXPECT_DOUBLE_EQ(lower_bound(same, decompose(same)), 0.0);
  EXPECT_EQ(term_of(same), std::pair(BoundTerm::none, int64_t{-1}));
}

TEST(LowerBoundTest, ADeviceThatCopiesWhatItAloneHoldsAndSendsWaitsTwoLatencies) {
  // Devices 0 and 1 of one host hold the halves of a 64 B tensor that devices 0 and 2 need whole
  // (4 B/s links, a 100 s latency): device 0 alone holds a half that it needs itself and device 2
  // needs, so it spends an op on sending it and one on copying it (or has it sent back), one after
  // the other: 2 x 100 s (copy(t) of docs/concepts.md#lower-bound), where the busiest link and one
  // latency gave 116 s.
  auto p = problem_of({16}, Mesh({2}, {0, 1}), "S0", Mesh({2}, {0, 2}), "R", 1, 4);
  p.cluster.device_bandwidth = 4;
  p.cluster.latency = 100;
  EXPECT_DOUBLE_EQ(lower_bound(p, decompose(p)), 2 * 100.0);
  EXPECT_EQ(term_of(p), std::pair(BoundTerm::copy, int64_t{-1}));
  EXPECT_GE(simulate(make_plan(p)).time_s, 2 * 100.0);
  // Where the slices a holder needs are held by others too, it may take them in over its link
  // instead of copying: an 18-element tensor in halves on rows {0, 1} and {2, 3}, wanted in
  // parts of 5, 5, 5 and 3 elements: element 9 goes from device 2 or 3 to device 1, and device 3
  // could take its 12 B in from device 2 at 4 B/s: 100 + 3 s.
  auto shared = problem_of({18}, Mesh({2, 2}, first_devices(4)), "S0",
                           Mesh({2, 2}, first_devices(4)), "S01", 1, 4);
  shared.cluster.device_bandwidth = 4;
  shared.cluster.latency = 100;
  EXPECT_DOUBLE_EQ(lower_bound(shared, decompose(shared)), 100 + 3.0);
  EXPECT_GE(simulate(make_plan(shared)).time_s, 100 + 3.0);
  // Random suite seed 1509 r29 on hosts of 8 devices with 8 NICs: each of 20 devices holds its
  // part of a 512 MiB tensor with four others, and an uneven cut leaves 48 B to cross hosts from
  // devices that copy their own parts: 2.00x the bound of one latency, 1.00x this one.
  auto r29 = problem_of({134217730}, Mesh({4, 5}, first_devices(20)), "S0",
                        Mesh({4, 5}, first_devices(20)), "S01", 4, 8);
  r29.cluster.nics_per_host = 8;
  const double bound = lower_bound(r29, decompose(r29));
  EXPECT_DOUBLE_EQ(bound, 2 * r29.cluster.latency);
  EXPECT_LE(simulate(make_plan(r29)).time_s, 1.01 * bound);
}

// Planning follows the problem, not the cluster: the devices of a problem on the first hosts of
// the largest cluster allowed (8,192 hosts of 512 devices) get the plan they get on a cluster of
// just those hosts.
TEST(PlannerTest, PlansDoNotDependOnTheDevicesAProblemDoesNotTouch) {
  for (const char* dst_spec : {"RS0", "S0R", "RR"}) {
    SCOPED_TRACE(dst_spec);
    const Resharding small = problem_of({64, 64}, Mesh::placed({2, 2}, 0, 512), "S0R",
                                        Mesh::placed({2, 2}, 2, 512), dst_spec, 4, 512);
    Resharding huge = small;
    huge.cluster.hosts = 8192;
    for (Balance b : {Balance::none, Balance::size, Balance::order}) {
      const Plan a = make_plan(small, {.balance = b});
      const Plan c = make_plan(huge, {.balance = b});
      EXPECT_EQ(a.ops, c.ops);
      EXPECT_EQ(a.lower_bound_s, c.lower_bound_s);
      EXPECT_EQ(estimate(a), estimate(c));
    }
  }
}

// No relay through a host that holds the slice: each host's receiver gets it from the holder
// beside it, and nothing crosses a NIC.
TEST(PlannerTest, BroadcastServesReceiversOnAHoldingHostFromThatHost) {
  const Resharding p = problem_of({1024}, Mesh({2}, {0, 2}), "R", Mesh({2}, {1, 3}), "R", 2, 2);
  for (Balance b : {Balance::none, Balance::size, Balance::order}) {
    const Plan plan = make_plan(p, {.strategy = Strategy::broadcast, .balance = b});
    validate_plan(plan);
    EXPECT_EQ(plan.network_bytes, 0) << to_string(b);
    ASSERT_EQ(plan.ops.size(), 2u);
    for (const Op& op : plan.ops)
      EXPECT_EQ(p.cluster.host_of(*op.sender), p.cluster.host_of(op.receivers[0]));
  }
}

// A chain ends at the host with the most to send of its own: the two source devices each hold
// half the tensor and nothing else does, so their hosts' NICs must send 2 x a quarter; a chain
// that passed through one of them on the way to another host would make it send a third quarter
// (1.5x the bound, as before; random suite seed 13 r28 and seed 11 r28).
TEST(PlannerTest, ChainsDoNotRelayThroughHostsThatMustSendTheirOwnSlices) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split);
    Resharding a = problem_of({16777221}, Mesh({2, 1}, {3, 0}), "S0",
                              Mesh({4, 2}, {4, 5, 7, 8, 6, 3, 2, 1}), "S0", 5, 2);
    EXPECT_LE(order_ratio(a, split), 1.01);
    Resharding b = problem_of({2796203, 12, 2}, Mesh({2}, {9, 4}), "S0RR",
                              Mesh({3, 2}, {11, 8, 9, 4, 0, 6}), "RS1R", 6, 2);
    EXPECT_LE(order_ratio(b, split), 1.01);
  }
}

// Two hosts hold the tensor and three others need a fifth each: whole slices make one holder send
// two fifths (1.33x the bound at best, 1.40x before); far from the bound, balance order plans
// again with slices split between the holders and keeps that plan (random suite seed 6 r16).
TEST(PlannerTest, OrderSplitsSlicesWhenWholeOnesCannotComeNearTheBound) {
  const Resharding p =
      problem_of({16777221}, Mesh({2}, {7, 5}), "R", Mesh::placed({5, 2}, 0, 2), "S0", 5, 2);
  const Plan plan = make_plan(p, {.strategy = Strategy::broadcast});
  validate_plan(plan);
  EXPECT_LE(estimate(plan) / plan.lower_bound_s, 1.10);
  EXPECT_GT(plan.ops.size(), 3u) << "the three remote fifths are split";
  // Near the bound, slices stay whole: every op of paper case 2 (each slice on both source hosts)
  // carries a whole task.
  const Plan near = make_plan(paper(2), {.strategy = Strategy::broadcast});
  EXPECT_LE(estimate(near) / near.lower_bound_s, 1.05);
  const auto tasks = decompose(paper(2));
  for (const Op& op : near.ops)
    for (const Piece& piece : op.pieces) EXPECT_EQ(piece.slice, tasks[piece.task].slice);
}

// Each source host holds a third of the tensor on both its devices and two hosts each need half
// of every third: a host's two sends go from its two devices, so that they run at once (a device
// sends one op at a time); from one device, the second waited for the first while the receivers,
// which take any number of receipts at once, were busy with others (1.5x the bound; random suite
// seed 11 r3, 1.32x).
TEST(PlannerTest, AHostsReplicasSendItsSlicesAtOnce) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split);
    const Resharding p = problem_of({65536, 4, 12}, Mesh::placed({3, 2}, 0, 2), "RRS0",
                                    Mesh::placed({2, 1}, 3, 2), "S0RR", 5, 2);
    EXPECT_LE(order_ratio(p, split), 1.01);
  }
}

// Every device of a chain but its last relays, and a relay sends one op at a time: a chain enters
// a host at the device whose own sending ends soonest, so that a holder with slices to send is
// not held relaying. (a) Device 4 holds a quarter that devices 3 and 7 need; entered at device 4,
// the three quarters from host 0 held it for the whole of host 1's NIC time before its own send
// (1.34x; random suite seed 5 r17). (b) Hosts 0 and 1 alone hold half the tensor, which hosts
// 2-4 need: each must send a quarter, from one of its devices all the time; entered at the lowest
// id, the chains into hosts 0 and 1 made that device relay and host 0 sent 179 of the 256 MiB
// (1.41x; random suite seed 1 r10).
TEST(PlannerTest, ChainsEnterAHostAtTheDeviceWhoseSendingEndsSoonest) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split);
    const Resharding a =
        problem_of({4194304}, Mesh({4}, {1, 0, 4, 3}), "S0", Mesh({3}, {3, 7, 4}), "R", 2, 4);
    EXPECT_LE(order_ratio(a, split), 1.01);
    const Resharding b = problem_of({4194305}, Mesh({4, 2}, {9, 5, 8, 11, 2, 0, 3, 1}), "S0",
                                    Mesh::placed({5, 2}, 0, 2), "S0", 6, 2);
    EXPECT_LE(order_ratio(b, split), 1.02);
  }
}

// Devices 0, 1, 4 and 5 each hold one tile and must send a part to device 3 and one to device
// 10, while devices 2 and 3 also send to device 10: a device sends one op at a time and receivers
// share their NIC fairly among senders, so with whole slices one receiver's NIC idles while the
// devices that still owe it a slice finish their other send (1.21x at best over every order of
// whole sends). Far from the bound, balance order also plans with every slice cut in two halves
// sent as two ops, which a device can interleave, and keeps that plan when the simulator finds it
// faster (random suite seed 13 r6).
TEST(PlannerTest, OrderHalvesSlicesSoThatADeviceCanInterleaveItsSends) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split);
    const Resharding p = problem_of({262144, 12, 7}, Mesh::placed({3, 2}, 0, 2), "S1S0R",
                                    Mesh({1, 2}, {3, 10}), "S0RS1", 6, 2);
    EXPECT_LE(order_ratio(p, split), 1.01);
  }
}

// Every host of the destination needs the slices the others hold: an allgather across hosts.
// Chains through every host cannot run at once, since each device sends in one op at a time and
// every chain needs the others' devices as relays: one after another they took 1.21x the bound
// (six hosts: the relays sent a sixth more than their share) and 1.17x. One op per host (each
// holder sends to each host in turn, rounds in which every NIC sends and receives) reaches the
// bound; forwarding host by host (a ring, here the other way round from the hosts' order) spreads
// the sending where holders have unequal shares (random suite seed 15 r24 and seed 7 r20).
TEST(PlannerTest, AllgathersAcrossHostsAreNotChainsThatShareRelays) {
  Resharding ring =
      problem_of({1}, Mesh::placed({6, 1}, 0, 2), "S10", Mesh::placed({6, 1}, 0, 2), "S1", 6, 2);
  ring.tensor = {{67108866}, DType::float64};
  EXPECT_LE(order_ratio(ring, false), 1.01);
  Resharding unequal = problem_of({1597835, 7, 12}, Mesh::placed({5, 3}, 0, 4), "S1S0R",
                                  Mesh::placed({4, 1}, 0, 4), "RRS1", 5, 4);
  unequal.tensor.dtype = DType::float32;
  EXPECT_LE(order_ratio(unequal, false), 1.01);
}

// Host 3's devices 12 and 13 must each send their own slice to host 2 while two slices from host
// 4 go to all four devices of host 3. A chain over four devices has three relays and a relay
// sends in one op at a time, so one of 12 and 13 relays each chain; the chains end at the device
// whose own sending (its busy send port, then the bytes only it holds, still to place) ends last,
// so that each of 12 and 13 relays the chain that does not overlap its own sends (1.78x the bound
// when both chains passed through 12 and 13 by id; 1.08x with the entry chosen but the end by id;
// random suite seed 20 r23).
TEST(PlannerTest, ChainsEndAtTheDeviceWithItsOwnSendsAhead) {
  Resharding p = problem_of({44739244, 12}, Mesh::placed({5, 2}, 0, 4), "S0/1R",
                            Mesh::placed({4, 4}, 0, 4), "S0R", 7, 4);
  p.tensor.dtype = DType::int8;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// A host's NICs are parallel paths even where it has one receiver: host 1 has two NICs (device 2
// on NIC 0, device 3 on NIC 1) and only device 2 needs the tensor, which devices 0 and 1 of host 0
// hold by halves, one on each NIC. Half of each round goes through device 3, which relays it to
// device 2 over the device link (2.0x the bound when everything entered through device 2's NIC;
// random suite seed 101 r10 with two NICs per host).
TEST(PlannerTest, AHostWithOneReceiverTakesItsBytesThroughEveryNic) {
  Resharding p = problem_of({16777216}, Mesh({2}, {0, 1}), "S0", Mesh({1}, {2}), "R", 2, 2);
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// One device (0, host 0, NIC 0) holds the tensor; device 3 on its own host needs 3/5 of it and
// device 11 on host 2 the other 2/5, the bound being those over host 2's two NICs. Device 0 sends
// one op at a time, so sending its rails itself at NIC speed, and device 3's part besides, took
// 2.3x the bound: in lockstep rounds it hands each rail over to a stage on the rail's NIC
// (devices 2 and 1, which hold and receive nothing) over the device link, in a tenth of the time,
// and sends device 3's part after the last round (random suite seed 101 r25 with two NICs).
TEST(PlannerTest, ASingleHolderHandsItsRailsToStagesOnEveryNic) {
  Resharding p =
      problem_of({3355443, 8, 5}, Mesh({1}, {0}), "RRR", Mesh({1, 2}, {3, 11}), "RS0S1", 3, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// Hosts 0 and 1 each hold the tensor on device 0 (NIC 0 of two); hosts 2-4 need a sixth per
// device. Each holding host must send half the tensor through both its NICs, but device 1 of each
// holds nothing: rails on NIC 1 are handed over to it as a stage on either holding host (before,
// stages were only where one host held the slice, so both hosts sent everything over NIC 0: 1.90x
// the bound; now 1.21x, where a holder that also sends over its own NIC and hands over the other
// NIC's rails cannot keep both busy all the time; random suite seed 302 r13 and seed 304 r23).
TEST(PlannerTest, EveryHoldingHostStagesItsRailsOnItsOtherNics) {
  Resharding p =
      problem_of({16777216}, Mesh({2}, {0, 2}), "R", Mesh({3, 2}, {4, 5, 6, 7, 8, 9}), "S0", 5, 2);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.25);
}

// Device 3 (host 1, NIC 1) alone holds the tensor, which device 2 beside it (NIC 0) and devices 0
// and 4 of hosts 0 and 2 need. The only device on host 1's NIC 0 is a receiver, so no stage that
// holds and receives nothing can take the rails of NIC 0 (1.90x the bound: everything left by
// NIC 1). Device 2 stages them: it keeps each such rail as its part of the slice and takes the
// other parts from device 3 over the device link (1.17x: device 3 sends one op at a time, and
// device 2's parts take a tenth of a NIC's time each; random suite seed 311 r23).
TEST(PlannerTest, AReceiverBesideTheSingleHolderStagesTheRailsOfItsNic) {
  Resharding p = problem_of({16777216}, Mesh({1}, {3}), "R", Mesh({3, 1}, {0, 2, 4}), "R", 3, 2);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.2);
}

// Device 3 (host 1, one NIC) alone holds the tensor: device 0 on host 0 needs the first half,
// device 2 beside it the second. Device 3 sends one op at a time, so sending the first half over
// the NIC and the second to device 2 one after the other kept the NIC idle for a tenth of its time
// (1.10x the bound). Handed over round by round to a stage (device 2, which holds nothing), the
// first half leaves by the NIC while device 3 serves device 2 (random suite seed 622 r7).
TEST(PlannerTest, AHolderServingItsOwnHostHandsWhatLeavesItToAStage) {
  const Resharding p =
      problem_of({16777216}, Mesh({1}, {3}), "S0", Mesh({2, 1}, {0, 2}), "S0", 2, 2);
  EXPECT_LE(order_ratio(p, false), 1.03);
}

// Devices 0 (NIC 0) and 1 (NIC 1) of host 0 hold a half each; devices 0, 2 and 4 need a third
// each, so host 0 sends two thirds, a half of it held by device 1 alone. Device 1 sent its half
// over NIC 1 alone (1.48x the bound) though it could hand some to device 0 on NIC 0, whose own
// share is smaller: rails staged at holders are also laid in lockstep rounds, where every rail is
// handed over to its stage, and each NIC sends a third (random suite seed 604 r29 with two NICs).
TEST(PlannerTest, RailsStagedAtHoldersAreAlsoLaidInRounds) {
  Resharding p =
      problem_of({67108866}, Mesh({2}, {0, 1}), "S0", Mesh({3, 1}, {0, 2, 4}), "S0", 3, 2);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.1);
}

// Device 14 (host 7) and device 3 (host 1) each hold half the rows, which devices 12 (host 6) and
// 4 (host 2) need a half of the columns of. In lockstep rounds both holders sent to host 6 first,
// then to host 2, so both shared host 6's NICs while host 2's idled (1.64x the bound): each holder
// host's jobs of a round are rotated by its rank, so they start on different receiving hosts
// (random suite seed 608 r21 with two NICs).
TEST(PlannerTest, HoldersOnDifferentHostsStartARoundOnDifferentReceivers) {
  Resharding p =
      problem_of({8388608, 8}, Mesh({2}, {14, 3}), "S0R", Mesh({2, 1}, {12, 4}), "RS01", 8, 2);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.12);
}

// Device 0 (host 0, NIC 0 of two) alone holds the tensor that device 3 (host 1) needs. It sends
// the rail of NIC 0 itself and hands the other over to device 1, so its send port carries the one
// at the NIC's rate and the other at the device link's: with equal rails the port took 1.1x a
// rail's NIC time (1.058x the bound, whose send(h) counts this). The own rail is cut smaller, so
// that the port and device 1's NIC end together (random suite seed 633 r29 and alike with two
// NICs).
TEST(PlannerTest, ASingleHolderSendsTheRailOfItsOwnNicSmaller) {
  Resharding p = problem_of({16777216}, Mesh({1}, {0}), "R", Mesh({1}, {3}), "R", 2, 2);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.03);
}

// Devices 0 and 1 of host 0 hold the tensor, which three devices of host 1 need; four NICs per
// host. Each holder sends the rail of its own NIC and hands half of rails 2 and 3 to their stages,
// so with equal rails its port, not the NICs, decided (1.13x the NICs' bound, 1.075x the bound
// that counts the hand-overs; random suite seed 509 r10 with four NICs): each holder's own rail is
// now cut smaller, by 1 - (2 / 2) nic / dev.
TEST(PlannerTest, SeveralHoldersSendTheRailsOfTheirOwnNicsSmaller) {
  Resharding p = problem_of({134217730}, Mesh({2}, {0, 1}), "R", Mesh({3}, {4, 5, 6}), "R", 2, 4);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, false), 1.04);
}

// Devices 0 and 1 of host 0 each hold half the rows; devices 0 and 1 need parts of each other's
// half, device 7 of host 1 parts of both; one device per NIC. With equal rails NICs 0 and 1 idled
// while their devices served each other and handed their halves' other rails to devices 2 and 3,
// while NICs 2 and 3 only sent (1.17x the bound; random suite seed 508 r27 with four NICs): the
// rails are now also cut in proportion to what each NIC's device can send.
TEST(PlannerTest, RailsFollowWhatEachNicsDeviceCanSend) {
  Resharding p = problem_of({466033, 12, 12}, Mesh({2}, {0, 1}), "S0RR", Mesh({1, 3}, {1, 7, 0}),
                            "RRS10", 3, 4);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, false), 1.07);
}

// Device 14 (host 3, NIC 2) and device 27 (host 6, NIC 3) both hold the tensor that devices 0
// and 1 of host 0 need, through all four of its NICs; one device per NIC. Each holder sent the
// rail of its own NIC into a NIC the other host fed too, at half the NIC's rate, holding its send
// port while its stages waited for their hand-overs (1.11x the bound; random suite seed 511 r16
// with four NICs): rails 2 and 3 now leave only by the host that stages them.
TEST(PlannerTest, RailsHeldOnSeveralHostsLeaveByTheHostsThatStageThem) {
  Resharding p =
      problem_of({5263443, 17, 6}, Mesh({2}, {14, 27}), "RRR", Mesh({2}, {0, 1}), "RRR", 7, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.05);
}

// Devices 0 and 1 of each of four hosts hold an eighth each; device 0, 4 and 8 (one per host, on
// NIC 0) each need a third, so every slice goes to one receiver, and each receiving host takes 128
// MiB while host 3 sends as much. The greedy's rails and stages left the receivers' hosts taking
// most of it through the receivers' own NICs (1.48x the bound with two NICs per host, 1.83x with
// four; random suite seed 515 r17): now each host's sending and receiving is spread over all its
// NICs, each NIC's share entering at a device of that NIC that forwards it over the device link,
// and the pieces are played as the simulator plays them, each device's next send into a NIC that
// takes nothing else at the time where it can (detail::nic_shop).
TEST(PlannerTest, SlicesToOneReceiverEachSpreadOverEveryNic) {
  for (int nics : {2, 4}) {
    Resharding p = problem_of({16777222, 8}, Mesh({4, 2}, {0, 1, 4, 5, 8, 9, 12, 13}), "S1S0",
                              Mesh({3, 1}, {0, 4, 8}), "S0R", 6, 4);
    p.cluster.nics_per_host = nics;
    EXPECT_LE(order_ratio(p, false), 1.25) << nics << " NICs";
  }
}

// Devices 0, 4 and 8 (hosts 0-2) each hold a third of a tensor that devices 0, 1 and 2 of host 0
// all need, over four NICs per host. The greedy's chains and rails took host 0's receiving
// through fewer NICs than it has (1.18x the bound; random suite seed 501 r21): pieces that go host
// to host on rails, each entering at a device of its NIC that forwards it to the host's receivers,
// and played as the simulator plays them, come within 1.04x (detail::rail_steps).
TEST(PlannerTest, SlicesToSeveralReceiversGoHostToHostOnRails) {
  Resharding p =
      problem_of({17318421, 31}, Mesh({3, 1}, {0, 4, 8}), "S10R", Mesh({3}, {0, 1, 2}), "RR", 3, 4);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// With one NIC per host the rails are one ring of pieces through the hosts that need each slice:
// twelve devices each hold a twelfth of the tensor that three devices of up to three hosts need,
// and two hosts must take in seven twelfths. Sent whole by the greedy, 1.29x the bound (random
// suite seed 920 r27); each host now forwards what it took in while the holders send the next
// pieces.
TEST(PlannerTest, SlicesToSeveralHostsGoRoundARingWithOneNic) {
  Resharding p = problem_of({26843546, 5}, Mesh({4, 3}, {8, 1, 10, 6, 12, 7, 0, 15, 3, 13, 9, 5}),
                            "S0/1R", Mesh({3, 3}, {3, 5, 14, 8, 1, 10, 9, 12, 4}), "S0R", 4, 4);
  EXPECT_LE(order_ratio(p, false), 1.10);
}

// Nine devices each hold a ninth of the tensor that one device of each of four hosts needs, all
// four on NIC 0 of their hosts' four. A rail's entries forward to the receiver over the device
// link and the holders hand their pieces to the other rails, so pieces dealt to the NICs in turn
// left the holders' ports busiest (1.73x the bound, random suite seed 903 r23, then with host 1's
// receiver taking the pieces it staged twice): each piece now goes on the NIC whose busiest port
// or receiving NIC ends least busy (1.36x; what remains is mostly the relays' ports, which the
// bound does not count).
TEST(PlannerTest, RailPiecesGoWhereThePortsAreLeastBusy) {
  Resharding p = problem_of({134217730}, Mesh({3, 3}, {7, 12, 1, 6, 15, 11, 3, 10, 4}), "S0/1",
                            Mesh({4, 1}, {0, 4, 8, 12}), "S1", 4, 4);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, false), 1.40);
}

// An all-to-all of single holders with one NIC per host (docs/results.md, seed 12 r15 of the
// first random suite): the greedy left sender NICs idle while receivers took turns (1.065x); the
// open shop, played in pieces, keeps every NIC busy.
TEST(PlannerTest, AnAllToAllOfSingleHoldersIsPlayedAsAnOpenShopWithOneNic) {
  std::vector<DeviceId> sources(9), receivers(16);
  std::iota(sources.begin(), sources.end(), 0);
  std::iota(receivers.begin(), receivers.end(), 12);
  const Resharding p = problem_of({1024, 512, 256}, Mesh({3, 3}, sources), "RRS01",
                                  Mesh({4, 4}, receivers), "S0S1R", 7, 4);
  EXPECT_LE(order_ratio(p, false), 1.02);
}

// Devices 0, 2, 4, 6 and 8 (one on each of hosts 0-4, one NIC each) each alone hold a fifth of a
// 512 MiB tensor whose eighths the two devices of hosts 0-3 need: host 4 sends 107 MB, each of
// hosts 0-3 takes 107 MB in, all at the bound, while hosts 0-3 send 80 MB each. In pieces of one
// size taking turns, host 4's flow shared a receiving NIC with another sender while the host that
// sender had left idled (1.186x the bound; random suite seed 1704 r11, never tuned on). The shop
// is also cut at the phases of the NICs' open shop, in each of which a receiving NIC takes in from
// one sending NIC: 1.148x.
TEST(PlannerTest, TheOpenShopIsAlsoCutAtThePhasesOfItsNics) {
  Resharding p = problem_of({8947849, 12, 5}, Mesh({6, 1}, {0, 2, 4, 6, 8, 10}), "RRS0",
                            Mesh({4, 2}, first_devices(8)), "S0S1R", 7, 2);
  p.tensor.dtype = DType::uint8;
  EXPECT_LE(order_ratio(p, true), 1.15);
}

// One host: devices 0, 1 and 2 each hold a third of the columns, devices 0 and 1 need half of the
// last dimension each. Device 2 sends 150 MiB to the two, one op at a time, while each also sends
// 90 MiB to the other: in halves, device 2's sends shared a receiver's link with the other's most
// of the time (1.229x the bound; random suite seed 1019 r10 with one NIC). The open shop now also
// cuts slices that stay inside their hosts into pieces, and its play shares device links as the
// simulator does, so each device turns to the receiver that takes in least. (The bound itself
// needs a device to wait, which plans cannot say: docs/results.md.)
TEST(PlannerTest, SendsInsideAHostArePlayedPieceByPieceIntoTheLeastBusyReceiver) {
  Resharding p =
      problem_of({3947585, 17, 8}, Mesh({3}, {0, 1, 2}), "RS0R", Mesh({2}, {0, 1}), "RRS0", 1, 4);
  p.tensor.dtype = DType::uint8;
  EXPECT_LE(order_ratio(p, false), 1.21);
}

// Every host holds the whole tensor on one device; devices 5 and 6 beside the holder 4 on host 1
// need a third each, device 10 beside the holder 8 another. Device 4 served both over its one send
// port while host 1's NICs idled (1.30x the bound, whose near(d) counts the three NICs whose
// devices hold nothing): the open shop now gives a part of each such slice to the other holding
// hosts, entering by those NICs (random suite seed 1001 r13 with four NICs).
TEST(PlannerTest, AHolderBesideItsReceiversIsHelpedThroughTheOtherNicsOfItsHost) {
  Resharding p =
      problem_of({536870912}, Mesh({4, 1}, {0, 4, 8, 12}), "S1", Mesh({3}, {10, 6, 5}), "S0", 4, 4);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, false), 1.20);
}

// Device 1 (host 0) and devices 5, 6, 7 (host 1) hold the tensor; fifteen devices of five hosts
// need a fifteenth each, nine of them on the three hosts that hold nothing. Device 1 also serves
// its two neighbours, so host 0's NICs can send less than host 1's: each slice went from the one
// host with the least to send per NIC (1.26x the bound with two NICs); pieces of a slice now leave
// by whichever holding host's NICs and send ports end them soonest (random suite seed 906 r21).
TEST(PlannerTest, ASliceLeavesByTheHoldingHostWhosePortsEndItSoonest) {
  Resharding p =
      problem_of({536870915}, Mesh({4}, {1, 5, 6, 7}), "R",
                 Mesh({5, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18}), "S10", 5, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.15);
}

// Devices 17 (host 4) and 7 (host 1) hold the tensor; every device of the five hosts needs it. The
// rails' pieces left each holding host by its holder's one NIC, as every other device there
// receives the tensor by another transfer of the job, and each holder sent the whole of it to its
// three neighbours (2.45x the bound with four NICs): spread, the receivers beside a holder stage
// its pieces on their NICs and pass each piece on to one another, and the holding host feeds the
// three other hosts by several chains (random suite seed 1103 r30).
TEST(PlannerTest, ReceiversBesideTheHoldersStageRailsAndPassPiecesOn) {
  Resharding p = problem_of(
      {536870913}, Mesh({2}, {17, 7}), "R",
      Mesh({5, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}), "R", 5,
      4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.45);
}

// Nine devices of hosts 0-2 hold a ninth each; three devices of each of six hosts need all of it.
// The receivers that hold a ninth gather their host's ninths by an allgather, which kept the job
// from the played candidates (they take slices that only copies follow), and rails in rounds gave
// 1.71x the bound with four NICs: the played rails are now also laid on the jobs without the
// gathers, each ninth one broadcast to every device that lacks it (random suite seed 1104 r28).
TEST(PlannerTest, ReceiversThatGatherArePlayedOnRailsWithoutTheirGathers) {
  Resharding p = problem_of(
      {67108869}, Mesh({3, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10}), "S01",
      Mesh({6, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22}), "R", 6, 4);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, false), 1.40);
}

// Devices 6 (host 1) and 10 (host 2) hold the tensor; devices 0 and 1 of hosts 0-2 need it. Each
// holder sent the pieces of its own NIC's rail over that NIC, at the NIC's rate, and its port
// served its two neighbours only after (1.20x the bound with two NICs): the played rails now also
// charge a holder's port with that serving while the pieces choose their senders, and may hand a
// piece to a stage on the holder's own NIC (random suite seed 1114 r10).
TEST(PlannerTest, AHolderServingItsHostHandsItsOwnRailToAStage) {
  Resharding p =
      problem_of({268435460}, Mesh({2}, {6, 10}), "R", Mesh({3, 2}, {0, 1, 4, 5, 8, 9}), "R", 3, 4);
  p.tensor.dtype = DType::bfloat16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.10);
}

// Ten devices of hosts 0-4 (two each) hold the halves of an int8 tensor of 512 MiB, five times
// over, and the first eight need eighths of it: each copies its own, and device 6 needs two bytes
// of the second half, held beside it by device 7 only, which copied its eighth first (10 us; the
// bound is one latency, 5 us). A slice under a bucket may also come from a holder on another host,
// and where every slice is, the greedy that takes receipts from afar at once sends it from device
// 9, which copies nothing: 1.000x (random suite seed 3005 r13, any number of NICs).
TEST(PlannerTest, ASmallSliceComesFromAHolderThatDoesNotCopyFirst) {
  Resharding p = problem_of({536870915}, Mesh({5, 2}, first_devices(10)), "S1",
                            Mesh({4, 2}, first_devices(8)), "S10", 7, 2);
  p.tensor.dtype = DType::int8;
  EXPECT_LE(order_ratio(p, false), 1.01);
}

// Device 0 alone holds an int32 tensor of 512 MiB that devices 0-2 and 8-10 need (two hosts of
// eight devices and eight NICs). Spread, the holder hands each piece to a stage on another NIC,
// and each piece also went to devices 1 and 2 beside it from the holder: its port carried the
// tensor twice, 705 MiB in all (1.452x). The stage it was handed to passes it to them where that
// leaves the ports less busy: 1.370x (random suite seed 2909 r7; detail::rail_steps).
TEST(PlannerTest, StagesPassTheirPiecesToTheReceiversBesideTheHolder) {
  Resharding p = problem_of({44739242, 3}, Mesh({1}, {0}), "S0R", Mesh({2, 3}, {0, 1, 2, 8, 9, 10}),
                            "RR", 2, 8);
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.38);
}

// Devices 22 (host 2) and 27 (host 3) each hold half of an int32 tensor of 512 MiB that devices
// 0, 6, 7 (host 0), 9, 11 (host 1), 24, 28 and 30 (host 3) need, eight devices and eight NICs per
// host. Serving its host, a holder's port is charged with handing each piece to a receiver beside
// it once; a chain that staged the piece at such a receiver was charged the hand-over again, so
// the pieces went by the other NICs' stages and the holder handed them over twice (1.469x). The
// hand-over to a receiver that stages the piece is that one: 1.429x (random suite seed 2904 r8).
TEST(PlannerTest, AHolderServingItsHostStagesPiecesAtItsReceivers) {
  Resharding p = problem_of({2396749, 7, 8}, Mesh({2}, {22, 27}), "S0RR",
                            Mesh({8}, {28, 30, 11, 0, 24, 6, 9, 7}), "RRR", 4, 8);
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.44);
}

// Devices 0, 1 (host 0), 4 and 5 (host 1) each hold a quarter that three devices of hosts 0-5
// need. Device 4 sent its quarter to device 16 (host 4) over its NIC, then to device 7 beside it
// over its device link, at the NIC's rate plus a tenth (1.10x the bound with two NICs): balance
// order now also probes a chain that ends at the receivers beside its sender, entered from the
// last other host over NICs that carry nothing else (random suite seed 1117 r13).
TEST(PlannerTest, AChainEndsAtTheReceiversBesideItsSender) {
  Resharding p = problem_of({268435456}, Mesh({2, 2}, {0, 1, 4, 5}), "S0/1",
                            Mesh({3, 4}, {23, 19, 7, 13, 9, 12, 16, 5, 2, 18, 4, 20}), "S1", 6, 4);
  p.tensor.dtype = DType::bfloat16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.05);
}

// Devices 0 and 1 (host 0, one per NIC) each hold a half that device 9 (host 4) needs, and device
// 0 needs device 1's half too. Device 1 served it over its device link while its NIC waited, and
// each holder handed the other some of its rail (1.09x the bound with two NICs): the played rails
// now also let a receiver beside the holders take a piece back from a receiving host that has it,
// over NICs that carry nothing else, and charge a holder with its own slices while the pieces
// choose their rails (random suite seed 1119 r28).
TEST(PlannerTest, AReceiverBesideTheHoldersTakesPiecesBackFromAfar) {
  Resharding p = problem_of({7895163, 17}, Mesh({2}, {0, 1}), "S0R", Mesh({2}, {0, 9}), "RR", 6, 2);
  p.tensor.dtype = DType::int32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// Devices 0 and 1 (host 0, one per NIC) each hold half of a tensor that device 1 and devices 4, 6
// and 7 (hosts 2 and 3) need whole. The played rails send each piece host to host, and a host
// forwards a piece once it has taken it in, so the last pieces reached host 3 a piece's time after
// host 2 while host 0's NICs idled (1.107x the bound with two NICs; random suite seed 1107 r22):
// the fastest rails are now played once more in pieces half as large.
TEST(PlannerTest, TheFastestRailsArePlayedAgainInPiecesHalfAsLarge) {
  Resharding p =
      problem_of({67108866}, Mesh({2}, {0, 1}), "S0", Mesh({4, 1}, {1, 4, 7, 6}), "S1", 4, 2);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.09);
}

// Devices 0, 1 and 2 of one host each hold a third of a tensor that devices 0 and 1 need halves of:
// device 2 sends to both, and devices 0 and 1 to each other. Device 1's send to device 0 could only
// wait for device 2's to end on the greedy's timeline; a device starts its next op as soon as its
// last one ends, so the two shared device 0's link while device 2's other receiver idled (1.25x the
// bound; random suite seed 1109 r26, the worst with one NIC): device 1 now hands its slice to idle
// device 3, which sends it on once device 2's has arrived.
TEST(PlannerTest, ASliceWaitsOnAnIdleDeviceWhileItsReceiverIsBusy) {
  Resharding p =
      problem_of({932070, 12, 6}, Mesh({3}, {0, 1, 2}), "RRS0", Mesh({2}, {0, 1}), "S0RR", 1, 4);
  p.tensor.dtype = DType::int64;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.02) << split;
}

// Devices 0 and 1 of each of three hosts hold a sixth each (one NIC per host); device 0 needs half
// of every sixth, device 4 the other half. Host 2 must send to both hosts for the bound's whole
// time, but devices 0 and 1 each sent into host 1, and devices 4 and 5 into host 0, at once: a NIC
// is shared fairly among the flows that cross it, so host 2 had a third of each receiving NIC
// (1.24x the bound; random suite seed 1120 r14, the worst with one NIC): the open shop now also
// sends each NIC's bytes into one host through one device, the other holders handing theirs to
// it.
TEST(PlannerTest, OneDeviceSendsEachNicsBytesIntoOneHost) {
  Resharding p = problem_of({1864141, 6, 12}, Mesh({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
                            "RS0/1R", Mesh({2, 1}, {0, 4}), "S0RR", 3, 4);
  p.tensor.dtype = DType::float32;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Device 7 alone of host 3 (five hosts of two, one NIC) holds a third of the tensor, a quarter of
// which each of devices 0-3 (hosts 0 and 1) needs, while hosts 0 and 1 send each other 85 MiB. Sent
// by device 7 one op after another, host 1's and host 0's sends started at once and each took half
// of a receiving NIC that device 7's op needed (1.250x the bound): the shop's pairs of a NIC and a
// receiving host are also taken by devices that send nothing, device 6 sending into host 1 while
// device 7 sends into host 0 (random suite seed 1315 r14).
TEST(PlannerTest, APairOfNicAndHostIsTakenByADeviceThatSendsNothing) {
  Resharding p = problem_of({7456543, 12, 6}, Mesh({5, 1}, {1, 2, 7, 5, 6}), "RS1S0",
                            Mesh({2, 2}, {0, 1, 2, 3}), "S1S0R", 5, 2);
  p.tensor.dtype = DType::uint8;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 19, 24 and 11 (hosts 4, 6 and 2 of seven hosts of four, four NICs) each hold the tensor,
// whose halves devices 7 and 21 (hosts 1 and 5) need. Chosen slice by slice, each half left one
// holding host whole: two hosts sent as much as each receiving host took in, at the same rate,
// with no room for the play to take turns, and the third sent nothing (1.110x the bound). The shop
// is also laid with each half cut between the three hosts so that their NICs send for the least
// time, each a third of the tensor (random suite seed 1214 r14).
TEST(PlannerTest, SlicesAreCutBetweenTheirHoldingHostsSoThatTheirNicsSendLeast) {
  Resharding p =
      problem_of({536870917}, Mesh({3}, {19, 24, 11}), "R", Mesh({2}, {7, 21}), "S0", 7, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 4;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Sixths of the tensor, each held on two of eight hosts of two (one NIC), go to one device of each
// host by eighths: cut between their holders, hosts 3, 4 and 6 send exactly what each of the six
// receiving hosts takes in. Chosen slice by slice, host 6 sent 3.5 of those shares (1.167x the
// bound); levelled but in pieces taking turns, NICs ran short of the rate they needed (1.22x).
// Levelled and whole, each device sends its slices one op each, the greedy ordering them: the
// devices that share a NIC each take half of it while their receivers take half from another
// host, and every flow ends when its receiving NIC's last one does (random suite seed 1303 r7).
TEST(PlannerTest, LevelledSlicesAreAlsoSentWhole) {
  Resharding p = problem_of({268435461}, Mesh({6, 2}, {7, 13, 6, 9, 0, 11, 8, 12, 3, 5, 15, 2}),
                            "S0", Mesh({8, 1}, {0, 2, 4, 6, 8, 10, 12, 14}), "S0", 8, 2);
  p.tensor.dtype = DType::float16;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.01) << split;
}

// Devices 0-3 (host 0 of eight hosts of four, four NICs) hold the tensor, which devices 16, 24, 26
// and 30 need. Host 6's device 25 takes pieces in over its NIC and forwards each to receivers 24
// and 26 beside it; the plays chose its forwards by the moment, and the plan ended 1.167x the
// bound. The best plan's sends are then reordered a swap at a time where the simulator finds that
// faster, those on the critical path first: device 25's forwards to 26 went before those to 24,
// eleven swaps in all (random suite seed 1220 r28).
TEST(PlannerTest, TheBestPlansSendsAreReorderedWhereThatEndsItSooner) {
  Resharding p = problem_of({53687096, 5}, Mesh({4}, {0, 1, 2, 3}), "RR",
                            Mesh({4}, {26, 16, 30, 24}), "RR", 8, 4);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, false), 1.10);
}

// Devices 0 and 1 (host 0) and 2 and 3 (host 1) each hold a quarter that device 0 needs: host 1's
// half enters by both of host 0's NICs, NIC 1's through device 1, which also sends its own quarter.
// The greedy keeps a device's receipts apart, so device 0 took what came over NIC 0 and what came
// from device 1 one after the other (1.06x the bound with two NICs): the candidates whose pieces
// enter a host by every NIC (the shop's here) are also laid by a greedy that lets a device take in
// from other hosts while it takes from its own (random suite seed 1113 r18).
TEST(PlannerTest, ADeviceTakesInFromOtherHostsAndBesideItAtOnce) {
  Resharding p = problem_of({4329608, 31, 2}, Mesh({2, 2}, {0, 1, 2, 3}), "RS10R",
                            Mesh({1, 1}, {0}), "RRS0", 2, 2);
  p.tensor.dtype = DType::bfloat16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.03);
}

// Devices 0 and 1 (host 0) and 11 (host 5) each hold the tensor, whose sixteenths devices 0-15
// need. The shop from any host had host 0, whose NICs send most of the other hosts' sixteenths,
// also help device 11 serve device 10 beside it, sized as if host 0's NICs were idle (1.053x the
// bound with two NICs): the help is now sized by what the helping hosts' NICs send besides
// (random suite seed 1101 r17).
TEST(PlannerTest, HelpFromAfarCountsWhatTheHelpingHostsSendBesides) {
  Resharding p = problem_of({16777216, 8}, Mesh({3, 1}, {0, 11, 1}), "RS1",
                            Mesh({8, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}),
                            "S1S0", 8, 2);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// Devices 0 (host 0) and 4 (host 1) hold the tensor, whose thirds devices 3, 1 (host 0) and 11
// (host 2) need. In the plays each holder handed its stages their pieces in step order, so the
// stages fed host 2's NICs one after another while the others idled (1.36x the bound with four
// NICs, each NIC busy for the bound's time): each play is also laid with a holder handing over
// first the piece whose stage sends into the NIC that takes in fewest now (random suite seed 1112
// r28).
TEST(PlannerTest, HandOversGoFirstToTheStagesOfIdleNics) {
  Resharding p =
      problem_of({9586984, 7}, Mesh({2, 1}, {0, 4}), "S1R", Mesh({3}, {3, 11, 1}), "S0R", 3, 4);
  p.tensor.dtype = DType::float64;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.25);
}

// Device 0 (host 0) holds the first half that device 1 beside it needs, device 2 (host 1) the
// second half, which comes over host 0's two NICs in lockstep rounds. Device 0 sends nothing over
// a NIC, so its own half now goes with the first round's gathers instead of after the last round,
// where its device link's time came on top of the NICs' (1.20x the bound; random suite seed 708
// r21 with two NICs).
TEST(PlannerTest, AHolderThatSendsNothingAwayServesItsHostDuringTheRounds) {
  Resharding p = problem_of({268435457}, Mesh({2, 1}, {0, 2}), "S0", Mesh({1}, {1}), "S0", 2, 2);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.05);
}

// Devices 1 (host 0) and 5 (host 1) both hold the tensor, whose halves devices 0 and 2 (host 0)
// need. Device 1 sent both over its one device link while host 0's NIC idled (1.10x the bound,
// whose local(d) term counts the NIC): a part of each half now comes from device 5 over the NIC,
// sized so that both end together (random suite seed 704 r3 and four alike with one NIC).
TEST(PlannerTest, AHostServingItsOwnReceiversIsHelpedOverItsNicFromAfar) {
  Resharding p = problem_of({8388608}, Mesh({2}, {5, 1}), "R", Mesh({2}, {0, 2}), "S0", 2, 4);
  p.tensor.dtype = DType::float32;
  EXPECT_LE(order_ratio(p, false), 1.02);
}

// Devices 3 (host 0) and 5 (host 1) both hold the tensor; devices 0 and 1 of host 0 and 4 and 5
// of host 1 each need a quarter (random suite seed 2302 r8). Device 3 serves two quarters beside
// it, device 5 one. Each host was helped from afar by the other, and device 3, sending device 4's
// part over its NIC at a tenth of its link's speed, ended later still (1.50x by the greedy; 1.10x
// unhelped). Host 0 alone is now helped, with device 5's port serving its own host first: 1.051x
// with one NIC; with two, where device 5's own NIC carries the help, 1.199x -> 1.146x.
TEST(PlannerTest, AHostIsHelpedOnlyByHostsWhoseHoldersServeLess) {
  Resharding p = problem_of({5592405, 12}, Mesh({1, 2}, {5, 3}), "RS0", Mesh({2, 2}, {0, 1, 4, 5}),
                            "S0S1", 2, 4);
  p.tensor.dtype = DType::float64;
  EXPECT_LE(order_ratio(p, true), 1.06);
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.15);
}

// Device 0 alone holds the tensor; two devices of each of four hosts receive it. Its two rails
// (staged at devices 2 and 3) chain through the other three hosts, turned round by round, and each
// host's two receivers swap their rails by an allgather. A host's gathers waited in plan order
// for the next round's chain, which they then held while the host relayed it, one gather per round
// on every chain (1.13x, random suite seed 505 r2 with two NICs): a host now gathers in the rounds
// in which it is the chains' last host and sends nothing.
TEST(PlannerTest, GathersWaitForARoundInWhichTheHostRelaysNothing) {
  Resharding p = problem_of({8388610, 8}, Mesh({1}, {0}), "RR",
                            Mesh({4, 2}, {0, 1, 4, 5, 8, 9, 12, 13}), "RR", 4, 4);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.07);
}

// Device 0 alone holds the tensor, which devices 2, 4 and 6 (NIC 0 of hosts 1-3) need: its rail on
// NIC 1 goes by a stage (device 1), and the rails chain through the three hosts. Device 0's send
// port carries its own rail at the NIC's rate and the hand-overs at the device link's, so with
// equal rails the port decided (1.070x); its own rail is now cut smaller, as for one host, and
// each host's NIC-1 device, which relays the larger rail, serves its receiver in the rounds in
// which it relays nothing (random suite seed 707 r7 and five alike with two NICs).
TEST(PlannerTest, ASingleHolderCutsItsOwnRailSmallerThroughAChainOfHosts) {
  Resharding p = problem_of({134217729}, Mesh({1}, {0}), "R", Mesh({3, 1}, {2, 4, 6}), "S1", 4, 2);
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.05);
}

// Device 0 alone holds the tensor; device 1 beside it and a device of host 1 receive it. Device 1
// stages the rail of its NIC, and device 0 sends it the other parts too: with equal rails device
// 0's send port, which also carries its own rail at the NIC's rate, decided (1.14x with two NICs,
// 1.49x with four). Its own rail is now cut smaller by what it sends beside it as well (random
// suite seed 518 r7 and 516 r22, and a dozen alike with four NICs).
TEST(PlannerTest, ASingleHolderCountsWhatItSendsBesideItWhenItCutsItsOwnRail) {
  for (const auto& [nics, afar] : {std::pair{2, 2}, std::pair{4, 6}}) {
    SCOPED_TRACE(nics);
    Resharding p = problem_of({67108864}, Mesh({1}, {0}), "S0", Mesh({2}, {1, afar}), "R", 2, nics);
    p.tensor.dtype = DType::int64;
    p.cluster.nics_per_host = nics;
    EXPECT_LE(order_ratio(p, true), 1.10);
  }
}

// Device 0 alone holds the tensor: device 1 beside it needs the first half, device 2 of host 1
// the second, over two NICs (device 1 stages the rail of NIC 1). Device 0's send port also
// carries device 1's half, which the rails' cut did not count (1.08x); it is now counted in
// proportion to what leaves the holder (random suite seed 506 r16, 514 r28 and a dozen alike with
// two and four NICs).
TEST(PlannerTest, ASingleHolderCountsTheSlicesOnlyItsHostNeedsWhenItCutsItsOwnRail) {
  Resharding p = problem_of({67108864}, Mesh({1}, {0}), "R", Mesh({2}, {1, 2}), "S0", 2, 2);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.05);
}

// Devices 0-2 (host 0 of 7, two NICs) hold the tensor that devices 0-2 of every host need. A rail
// enters each host at a receiver on its NIC: NIC 0 has two (devices 0 and 2) that take turns,
// NIC 1 only device 1, which relayed every round of its chain and had no time left to hand its
// parts to the host's other receivers (1.22x the bound): device 3, on NIC 1 and receiving
// nothing, now takes its turns too (random suite seed 1106 r25).
TEST(PlannerTest, ADeviceThatReceivesNothingTakesItsTurnsAsARailsRelay) {
  std::vector<DeviceId> dst;
  for (int host = 0; host < 7; ++host)
    for (int local = 0; local < 3; ++local) dst.push_back(host * 4 + local);
  Resharding p = problem_of({67108867}, Mesh({3}, {0, 1, 2}), "R", Mesh({7, 3}, dst), "R", 7, 4);
  p.tensor.dtype = DType::float64;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.10) << split;
}

// Devices 0, 4, 8 and 12 (one per host, two NICs) each hold a quarter of the rows, and devices 0,
// 4 and 8 each need a part of the columns (the fourth part is empty). Each holder hands pieces to
// the device of its other NIC and sends its own: played with a stage keeping three sends ready,
// the holders sent on their own NICs while their stages ran dry (1.076x the bound); the shop is
// now also played with stocks of 6 and 10 (random suite seed 1106 r18).
TEST(PlannerTest, TheShopIsPlayedWithSeveralStocksOfHandOvers) {
  Resharding p = problem_of({107374183, 5}, Mesh({4, 1}, {0, 4, 8, 12}), "S0S1",
                            Mesh({4, 1}, {0, 4, 8, 12}), "RS0", 4, 4);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 0, 1, 4 and 5 (two hosts of four, four NICs) each hold a quarter of the tensor, whose
// twelfths twelve shuffled devices of three hosts need. The played rails' stages kept one send
// ready, and the rails' relays waited on their hand-overs (1.51x the bound): the fastest rails
// are also played with stocks of two and three (random suite seed 1117 r13, still the tail with
// four NICs).
TEST(PlannerTest, TheFastestRailsArePlayedAgainWithLargerStocks) {
  Resharding p = problem_of({268435456}, Mesh({2, 2}, {0, 1, 4, 5}), "S0/1",
                            Mesh({3, 4}, {23, 19, 7, 13, 9, 12, 16, 5, 2, 18, 4, 20}), "S1", 6, 4);
  p.tensor.dtype = DType::bfloat16;
  p.cluster.nics_per_host = 4;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.47) << split;
}

// The eight devices of four hosts (two each, two NICs) each hold an eighth of the rows, and devices
// 0, 4 and 3 each need a third of the last dimension. Played with the devices that have most left
// on their NICs choosing first, a NIC with little left took a receiving NIC that only it could
// feed later (1.10x the bound): the fastest play of the shop is also played with those that have
// least left choosing first (random suite seed 1106 r5).
TEST(PlannerTest, TheFastestShopIsPlayedAgainWithTheLeastBusyNicsChoosingFirst) {
  Resharding p = problem_of({699052, 12, 8}, Mesh({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), "S0/1RR",
                            Mesh({3, 1}, {0, 4, 3}), "RRS0/1", 4, 2);
  p.tensor.dtype = DType::float64;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.03) << split;
}

// Devices 20, 6 and 26 (device 0 or 2 of three of eight hosts, all on NIC 0 of two) each hold the
// tensor, and four devices of two other hosts each need a quarter. Spread by the send ports, each
// holder sent its NIC 0's share itself while its port also handed NIC 1's share to a stage there,
// so its NIC 0 idled a tenth of the time (1.062x the bound): the other device of NIC 0 may now
// stage part of that share too (random suite seed 1107 r24, and 17 others with two NICs).
TEST(PlannerTest, AStageSharesTheNicOfAHolderWhosePortIsBusy) {
  Resharding p = problem_of({268435456}, Mesh({3, 1}, {20, 6, 26}), "R", Mesh({4}, {8, 17, 26, 27}),
                            "S0", 8, 4);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.03) << split;
}

// Devices 0-7 (two hosts of four, four NICs) hold the columns in eighths (each eighth on one
// device of each host), and devices 6, 8 and 7 need a third of the rows each. Played with each
// device sending into the idle NIC that has most still to take in, a NIC that took one left
// another receiving NIC that only it could feed without a sender (1.064x the bound); the fastest
// shop is also played with the sends of each pair of NICs in phases (matchings whose lengths add
// up to the busiest NIC's bytes), the earliest first (random suite seed 1104 r12).
TEST(PlannerTest, TheFastestShopIsPlayedAgainInPhases) {
  Resharding p = problem_of({31580644, 17}, Mesh({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}), "RS10",
                            Mesh({3, 1}, {6, 8, 7}), "S0S1", 4, 4);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 4;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 3, 13 and 22 (three of six hosts of four, two NICs) each hold the tensor, and the
// twenty devices of hosts 0-4 each need a twentieth: every sending and receiving NIC carries
// exactly the bound's bytes. Played with the busiest choosing first, or in phases, a receiving
// NIC still went without a sender now and then (1.178x the bound); the fastest shop is also played
// in phases with the least busy choosing first (random suite seed 1102 r3, long the worst case with
// two NICs).
TEST(PlannerTest, TheFastestShopIsPlayedInPhasesWithTheLeastBusyChoosingFirst) {
  const std::vector<DeviceId> dst = first_devices(20);
  Resharding p =
      problem_of({268435456}, Mesh({3}, {3, 13, 22}), "R", Mesh({5, 4}, dst), "S0/1", 6, 4);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.16) << split;
}

// Six devices of six hosts (two NICs) each hold a sixth of the tensor, and the twelve devices of
// hosts 0-2 need a third each, four receivers per third on three hosts: rails through the receiving
// hosts. In pieces of a 64th of a NIC's bytes the chains' last hosts got their first piece some
// hops late and idled at the end (1.082x the bound); the fastest rails are also laid in pieces a
// quarter as large (random suite seed 1106 r28, and 10 others with two NICs).
TEST(PlannerTest, TheFastestRailsAreLaidAgainInPiecesAQuarterAsLarge) {
  const std::vector<DeviceId> dst = first_devices(12);
  Resharding p = problem_of({536870912}, Mesh({6, 1}, {14, 21, 3, 16, 22, 2}), "S01",
                            Mesh({4, 3}, dst), "S1", 6, 4);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 0 and 1 (host 0 of four hosts of two, two NICs) each hold half of the tensor, which
// devices 1, 4, 7 and 6 all need. The rails in finer pieces were fastest, but the larger stocks
// and the least busy choosing first were played only on the fastest rails in the pieces before
// them (1.062x the bound); they are now played on the fastest of all (random suite seed 1107 r22,
// and 17 others with two and four NICs).
TEST(PlannerTest, TheFinerRailsArePlayedWithLargerStocksToo) {
  Resharding p =
      problem_of({67108866}, Mesh({2}, {0, 1}), "S0", Mesh({4, 1}, {1, 4, 7, 6}), "S1", 4, 2);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 0-7 (hosts 0 and 1 of six, four NICs) each hold an eighth of the last dimension, and
// devices 19, 4, 5 and 16 need all of it: rails. Played with the busiest choosing first, or the
// least busy, a NIC that took the receiving NIC most in need left another without a sender
// (1.089x the bound); the fastest rails are also played in phases (random suite seed 1106 r24).
TEST(PlannerTest, TheFastestRailsArePlayedInPhasesToo) {
  const std::vector<DeviceId> src = first_devices(8);
  Resharding p = problem_of({333052, 13, 31}, Mesh({2, 4}, src), "RRS0/1",
                            Mesh({4}, {19, 4, 5, 16}), "RRR", 6, 4);
  p.cluster.nics_per_host = 4;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 17 and 7 (two of five hosts of four, two NICs) each hold the tensor, which all twenty
// devices need: rails through every host. Their stages kept one, two or three sends ready, and the
// relays waited on their hand-overs (1.145x the bound); the fastest rails are also played with a
// stock of five (random suite seed 1103 r30).
TEST(PlannerTest, TheFastestRailsArePlayedWithAStockOfFive) {
  const std::vector<DeviceId> dst = first_devices(20);
  Resharding p = problem_of({536870913}, Mesh({2}, {17, 7}), "R", Mesh({5, 4}, dst), "R", 5, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.11) << split;
}

// Devices 0, 4, 8, 12 and 16 (device 0 of five hosts of four, four NICs) each hold a fifth of the
// middle dimension, and the twelve devices 0-2 of hosts 0-3 each need a twelfth of the first.
// Played without each send's latency, the shop laid by the send ports, whose busiest port and NIC
// end at the bound, came out at 1.66x and the plan at 1.43x: pieces of a few hundred KB took longer
// than the play counted, and devices that chose by its clock sent into NICs still busy. Played with
// it (PlayRules::latency), 1.35x (random suite seed 2901 r17, never used before 2026-12-07).
TEST(PlannerTest, PlaysCountEachSendsLatency) {
  Resharding p = problem_of({360805, 31, 6}, Mesh::placed({5, 1}, 0, 4), "RS0S1",
                            Mesh::placed({4, 3}, 0, 4), "S10RR", 5, 4);
  p.tensor.dtype = DType::float64;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.38);
}

// Devices 0, 4 and 8 hold the first half of the last dimension and 1, 5 and 9 the second (hosts
// 0-2 of six, two NICs); device 0 of every host needs a sixth of the middle one. Played with
// stocks of three, six and ten hand-overs, the stages of the holders' other NIC still ran dry
// while the holders sent on their own (1.080x the bound); the fastest shop is also played with a
// stock of twenty (random suite seed 1114 r15; 1.050x, and 1.053x since plays count each send's
// latency, PlayRules::latency).
TEST(PlannerTest, TheFastestShopIsPlayedWithAStockOfTwenty) {
  Resharding p = problem_of({16777217, 16, 2}, Mesh({3, 2}, {0, 1, 4, 5, 8, 9}), "RRS1",
                            Mesh({6, 1}, {0, 4, 8, 12, 16, 20}), "RS0/1R", 6, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.055) << split;
}

// Devices 0, 1 and 2 of host 0 (of two hosts of four, four NICs) each hold a third of the tensor,
// which devices 4, 5 and 6 of host 1 need. NIC 3 sends what the three holders hand its device:
// each found its stock short while the others' hand-overs were on their way, and all three handed
// over for 8 ms before sending over their own NICs (1.053x the bound); each shop is also played
// with stocks that count the hand-overs on their way (random suite seed 1105 r14).
TEST(PlannerTest, ShopsArePlayedWithStocksThatCountHandOversOnTheirWayToo) {
  Resharding p =
      problem_of({268435460}, Mesh({1, 3}, {0, 1, 2}), "S01", Mesh({1, 3}, {4, 5, 6}), "S0", 2, 4);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 4;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 17 and 12 (hosts 4 and 3 of five hosts of four, two NICs) each hold half of the last
// dimension, and every device needs a twentieth of the first. Two devices of a host share each NIC:
// played into idle receiving NICs only, one of them often started a send over the NIC its
// neighbour was sending over, and both went at half the rate (1.072x the bound); the fastest
// play is also played again with sends out of idle NICs first (random suite seed 1208 r5).
TEST(PlannerTest, TheFastestPlayIsPlayedAgainWithSendsOutOfIdleNics) {
  Resharding p = problem_of({67108867, 2}, Mesh({2}, {17, 12}), "RS0",
                            Mesh({5, 4}, first_devices(20)), "S0/1R", 5, 4);
  p.tensor.dtype = DType::int32;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// The twelve devices of hosts 0-2 (of seven hosts of four, four NICs) hold the quarters of the
// tensor, each quarter on one device of each host, and devices 20, 13 and 23 need all of it. Laid
// by the busiest port or NIC alone, chains that tied took the first tried: host 5 relayed a quarter
// of what host 3 took in while the holders' NICs sent 31-51 MiB of their 64, and one NIC of each
// receiving host took in 137 MiB where 128 would do (1.100x the bound); the fastest rails are also
// laid levelled (random suite seed 1211 r4).
TEST(PlannerTest, RailsAreAlsoLaidLevelled) {
  Resharding p = problem_of({134217730}, Mesh({3, 4}, first_devices(12)), "S1",
                            Mesh({3}, {20, 13, 23}), "R", 7, 4);
  p.tensor.dtype = DType::int32;
  p.cluster.nics_per_host = 4;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Devices 3, 13, 22 and 41 (four of fourteen hosts of four, two NICs) each hold the tensor, and
// the 48 devices of hosts 0-11 each need a 48th. Laid only with stages beside the holders this
// larger shop played at 1.161x the bound, laid without them 1.140x: the shop is laid both ways,
// and each way's fastest play played again (`AStageSharesTheNicOfAHolderWhosePortIsBusy` is the
// case the stages win).
TEST(PlannerTest, TheShopIsLaidWithAndWithoutStagesBesideItsHolders) {
  const std::vector<DeviceId> dst = first_devices(48);
  Resharding p =
      problem_of({268435456}, Mesh({4}, {3, 13, 22, 41}), "R", Mesh({12, 4}, dst), "S0/1", 14, 4);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.145);
}

// Devices 1, 6, 9 and 10 (hosts 0, 1, 2, 2 of three hosts of four) each hold the tensor, and
// every device needs a twelfth. Device 1 alone serves the three devices beside it over its link
// (3 x 42.7 MiB, 10.7 ms), where the bound lets the host's NICs bring part of their slices from
// the holders on other hosts (near(d), 8.95 ms with one NIC): those slices are also cut between
// the holder beside them and a holder elsewhere, in the share at which both parts end together
// (random suite seed 1113 r2: 1.102x -> 1.065x with one NIC, 1.302x -> 1.258x with four).
TEST(PlannerTest, SlicesBesideALoneHolderAreCutWithHoldersOnOtherHosts) {
  const Resharding p = problem_of({134217731}, Mesh({4}, {1, 6, 9, 10}), "R",
                                  Mesh({3, 4}, first_devices(12)), "S10", 3, 4);
  EXPECT_LE(order_ratio(p, true), 1.08);
  // Some receiver beside a holder takes part of its slice from another host.
  const Plan plan = make_plan(p, {.strategy = Strategy::broadcast, .split = true});
  std::map<DeviceId, std::set<int>> sending_hosts;  // per receiver
  for (const Op& op : plan.ops)
    if (op.kind == OpKind::send)
      sending_hosts[op.receivers.back()].insert(p.cluster.host_of(*op.sender));
  EXPECT_TRUE(std::any_of(sending_hosts.begin(), sending_hosts.end(),
                          [](const auto& entry) { return entry.second.size() > 1; }));
}

// Devices 3, 19 and 17 (hosts 0 and 4 of seven hosts of four, two NICs) each hold a third of the
// tensor, and the first device of each of hosts 0-5 needs all of it: rails through four hosts that
// hold nothing. In pieces of four buckets the chains' last hosts waited some 6 ms of 215 for their
// first pieces and the last, their NICs idle meanwhile (1.060x the bound); the fastest rails are
// also laid in pieces of two buckets (random suite seed 1119 r22), within 1.05x, where the search
// stops (1.034x until plays also took the longest chain first: a play so, at 1.0496x, stops it).
TEST(PlannerTest, TheFastestRailsAreLaidAgainInPiecesOfTwoBuckets) {
  Resharding p = problem_of({134217733}, Mesh({3}, {3, 19, 17}), "S0",
                            Mesh({6, 1}, {0, 4, 8, 12, 16, 20}), "R", 7, 4);
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// The first device of each of four hosts (four NICs) holds a quarter of the rows of a 512 MiB
// uint8 tensor, and each of them needs its part of the 5 columns of every row (random suite seed
// 1106 r18): each sends three others their parts over four NICs through stages. Its
// fastest play handed a holder's pieces over to one stage until that stage had its stock, then
// to the next, whose NIC meanwhile idled: every play is also played with the hand-overs going to
// the stages in turn (1.172x -> 1.119x).
TEST(PlannerTest, PlaysAlsoHandOverToTheStagesInTurn) {
  Resharding p = problem_of({107374183, 5}, Mesh({4, 1}, {0, 4, 8, 12}), "S0S1",
                            Mesh({4, 1}, {0, 4, 8, 12}), "RS0", 4, 4);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.13);
}

// Hosts 0 and 1 (two devices each) need all of a bfloat16 tensor of 512 MiB whose sixths lie on
// six devices of hosts 0, 1, 2, 3 and 5 (two on host 5); two NICs per host. A rail goes host to
// host through the receiving hosts, and in host order host 0 relayed every slice from afar to host
// 1 while host 1 relayed none: 1.072x. With the hosts that have sent least relaying first, 1.039x
// (random suite seed 1111 r29; detail::rail_steps, RailRelays).
TEST(PlannerTest, RailsAlsoRelayThroughTheHostsThatSentLeast) {
  Resharding p = problem_of({268435458}, Mesh({6, 1}, {11, 10, 3, 7, 0, 5}), "S0",
                            Mesh({2, 2}, {0, 1, 2, 3}), "R", 6, 2);
  p.tensor.dtype = DType::bfloat16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// Devices 0, 2 and 4 (hosts 0-2 of four, two devices and two NICs each) each hold a third of an
// int64 tensor of 512 MiB that all eight devices need (random suite seed 1704 r17, split). A
// third's rails go through the three other hosts in the same order every round, so two of them
// relay every piece, sending it on and handing it beside them: 1.104x. Turned by two hosts a
// round, each host relays two rounds in three (1.070x; detail::rail_steps, RailRelays::turned).
TEST(PlannerTest, RailsTurnTheirRelaysRoundByRound) {
  Resharding p = problem_of({3947582, 17}, Mesh({3, 1}, {0, 2, 4}), "S0R",
                            Mesh({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), "RR", 4, 2);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.085);
}

// Host 0's eight devices each hold all of a float16 tensor of 512 MiB that the first three devices
// of hosts 1-4 need (eight devices and eight NICs per host; random suite seed 1805 r17). Turned by
// two hosts a round, the chains through four hosts ended only at hosts 2 and 4, and in host order
// always at host 4: the ports of the hosts that relayed every round carried 80 ms of sends, the
// last host's 17-34 ms (1.722x). Turned one place more every two rounds, each host is the last in
// one round of four (1.581x; detail::rail_steps, RailRelays::turned).
TEST(PlannerTest, RailsTurnedThroughAnEvenNumberOfHostsEndAtEachOfThem) {
  std::vector<DeviceId> receivers;
  for (int h = 1; h <= 4; ++h)
    for (int l = 0; l < 3; ++l) receivers.push_back(8 * h + l);
  Resharding p =
      problem_of({268435461}, Mesh({8}, first_devices(8)), "R", Mesh({4, 3}, receivers), "R", 5, 8);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.6);
}

// Host 0's first six devices each hold all of an int64 tensor of 512 MiB that twelve devices of
// hosts 1-5 need, one to four a host (eight devices and eight NICs per host; random suite seed
// 2907 r11). Each host but a chain's last relays its pieces, and a relay also hands them to the
// receivers beside it, one op at a time: in host order or turned round by round, the relays of
// the hosts with three and four receivers sent 240-300 MiB each besides their NICs' share
// (1.458x). Each piece's chain turned to the one that leaves its ports least busy: 1.387x
// (detail::rail_steps, RailRelays::turned_least_busy).
TEST(PlannerTest, RailsTurnEachPieceToTheLeastBusyChain) {
  const std::vector<DeviceId> receivers = {42, 16, 11, 41, 37, 29, 32, 45, 15, 38, 33, 25};
  Resharding p =
      problem_of({67108867}, Mesh({6}, first_devices(6)), "R", Mesh({4, 3}, receivers), "R", 8, 8);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.42);
}

// A float16 tensor of 512 MiB in six blocks of columns, each held by the first two devices of one
// of hosts 0-5; the first three devices of each of hosts 0-4 need a fifth of its rows (four
// devices and two NICs per host; random suite seed 3108 r20). Laid by the ports, the shares into a
// host entered NIC 1 only at device 1, a receiver that also sends its host's block over that NIC:
// NIC 0 of each receiving host took in 43.9 MiB and NIC 1 39.4 (1.172x). Device 3, which takes
// nothing else, may take them in and forward them to the three receivers: 41.6 MiB each, 1.129x
// (detail::nic_shop, ShopLevel::ports).
TEST(PlannerTest, AShareEntersANicAtADeviceThatTakesNothingElseOfTheSlice) {
  Resharding p =
      problem_of({16777216, 16}, Mesh({6, 2}, {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21}), "RS0",
                 Mesh({5, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18}), "S0R", 6, 4);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.14);
}

// Device 0 (host 0) holds the first half of an int32 tensor of 512 MiB, which devices 5 (host 1),
// 9 and 11 (host 2) need, and device 4 (host 1) the second half, which devices 0-2 need (four
// devices and two NICs per host; random suite seed 3003 r5). The bound needs host 2 to relay the
// first half to host 1, as host 1's NICs send the second half; the relays chosen by what hosts had
// sent so far saw host 1 idle and chose it first: 1.230x. A host is also charged with what it must
// send of its own, not yet laid: 1.055x (detail::rail_steps, RailRelays::least_due_first).
TEST(PlannerTest, AHostThatMustSendItsOwnSliceRelaysAnotherLast) {
  Resharding p = problem_of({16777220, 8}, Mesh({2, 1}, {0, 4}), "RS0",
                            Mesh({2, 3}, {5, 11, 9, 0, 1, 2}), "RS0", 3, 4);
  p.tensor.dtype = DType::int32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.07);
}

// The rule of the test above (RailRelays::least_due_first), laid instead of the order by what
// hosts had sent so far, made this case slower (an int8 tensor of 512 MiB on twelve devices of
// hosts 0-4, S0S1R, into six devices, S1RR; four devices and four NICs per host, split; random
// suite seed 3203 r22: 1.052x -> 1.117x): both orders are laid.
TEST(PlannerTest, RelaysByWhatHostsSentAreLaidBesideThoseByWhatTheyMustSend) {
  Resharding p =
      problem_of({2886408, 6, 31}, Mesh({4, 3}, {3, 16, 15, 11, 14, 17, 6, 5, 9, 10, 8, 19}),
                 "S0S1R", Mesh({2, 3}, {15, 13, 16, 8, 0, 6}), "S1RR", 5, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.06);
}

// Devices 5 (host 1) and 0 (host 0) hold the first half of an int32 tensor of 512 MiB, devices 14
// and 15 (host 3) the second, and devices 0-7 (hosts 0 and 1) need all of it (four devices and four
// NICs per host; random suite seed 3301 r29, split). The bound needs hosts 0 and 1 to share the
// relaying of the second half: rails that turn the relaying host round by round (RailRelays::
// turned_through_all) load every port within 1.17x of it, but played at 1.58x, each device taking
// first the step into the NIC or device with the most still to take in, whatever waited for it.
// With the fastest rails, where host 0 relayed all, 1.382x. Played also taking first the step with
// the longest chain of steps waiting for it (detail::Ties::longest_chain), the turned rails win:
// 1.243x.
TEST(PlannerTest, PlaysAlsoTakeTheStepWithTheLongestChainWaitingFirst) {
  Resharding p = problem_of({134217730}, Mesh({2, 2}, {5, 14, 0, 15}), "S1",
                            Mesh({2, 4}, first_devices(8)), "R", 4, 4);
  p.tensor.dtype = DType::int32;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.30);
}

// Device 0 holds an int64 tensor of 512 MiB that the first device of each of hosts 0-5 needs (four
// devices and two NICs per host; random suite seed 1705 r1, split). The rail of NIC 1 enters each
// host at its device 1, which relayed every round over NIC 1 and also sent each on to the host's
// receiver (device 0, on NIC 0), one op at a time: the next round's chain waited for that send, and
// the last rounds' sends trailed the NICs (1.058x). Devices 1 and 3 take the rounds in turn
// (1.042x; detail::rail_jobs with RailOptions::relays).
TEST(PlannerTest, TheDevicesOfANicWithoutReceiversRelayRoundsInTurn) {
  Resharding p =
      problem_of({67108869}, Mesh({1}, {0}), "R", Mesh({6, 1}, {0, 4, 8, 12, 16, 20}), "S1", 6, 4);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.05);
}

// Device 0 holds an int32 tensor of 512 MiB that three devices of each of hosts 0-6 need (four
// devices and two NICs per host; random suite seed 1808 r2). Its rails' last pieces reach the end
// of their chains a piece's time per hop after host 0's NICs are done: 1.053x. Laid once more with
// the last round in halves, the chains drain sooner (1.045x; RailOptions::tapered).
TEST(PlannerTest, TheRailsLastRoundIsHalvedWhereTheirChainsDrainLast) {
  Resharding p = problem_of(
      {67108864, 2}, Mesh({1}, {0}), "S0R",
      Mesh({7, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22, 24, 25, 26}),
      "RR", 7, 4);
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.049);
}

// Devices 4 (host 1) and 9 (host 2) each hold all of a bfloat16 tensor of 512 MiB; the four
// devices of host 0 need its first half and the four of host 1 its second, which stays on host 1
// (random suite seed 908 r25). The rails took the first half from device 4 over its NIC before
// they knew that its port also serves host 1: 1.121x with two NICs. Slices that stay on their
// holders' hosts are laid first (1.013x); with four NICs device 4 serving its three neighbours
// one after the other took longer than the NICs, so it serves them in a chain of pieces
// (1.411x -> 1.235x), and the least busy rails send more of the first half from host 2, whose
// devices serve nobody beside them (1.045x; detail::rail_steps).
TEST(PlannerTest, RailsSeeThePortsOfSlicesThatStayOnTheirHosts) {
  for (const auto& [nics, within] : {std::pair{2, 1.02}, std::pair{4, 1.06}}) {
    Resharding p = problem_of({268435456}, Mesh({2}, {4, 9}), "R",
                              Mesh({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}), "S0", 3, 4);
    p.tensor.dtype = DType::bfloat16;
    p.cluster.nics_per_host = nics;
    EXPECT_LE(order_ratio(p, false), within) << nics << " NICs per host";
  }
}

// Devices 0 and 1 of host 0 hold the halves of a 512 MiB uint8 tensor that devices 1 and 3 need
// (two hosts of two devices, two NICs each; random suite seed 907 r21). Returning, device 1 took
// every piece of device 0's half that host 1 had from host 1 over its NIC, the last one too, which
// then came a piece's time after the NICs had sent everything: 1.054x. The last piece comes from
// the holder beside it (1.046x).
TEST(PlannerTest, TheLastPieceComesFromTheHolderBeside) {
  Resharding p = problem_of({536870912}, Mesh({2}, {0, 1}), "S0", Mesh({1, 2}, {1, 3}), "R", 2, 2);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// Devices 0 and 1 of host 0 hold the halves of a 512 MiB float32 tensor that every device of
// hosts 0 and 1 needs (two NICs each; random suite seed 2605 r10). Each holder's port sends its
// half over its NIC, all 214.7 ms of the bound, so device 1 should take nearly all of device 0's
// half back from host 1, whose ports only pass pieces beside them. Returning slice by slice, device
// 1 took the first half's pieces back while host 1's ports were idle, and device 0 half of the
// second's from device 1 (128 MiB of each half came back, 1.055x). Served in turn, once both halves
// have left, 232 MiB of each come back (1.045x).
TEST(PlannerTest, ReceiversBesideTheHoldersTakeThePiecesOfEverySliceBackInTurn) {
  Resharding p =
      problem_of({134217730}, Mesh({2}, {0, 1}), "S0", Mesh({2, 2}, {2, 3, 1, 0}), "R", 2, 2);
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.048);
}

// Host 0's four devices hold the fifths of a float64 tensor's last dimension (in quarters) that
// the first three devices of hosts 0, 1 and 2 need by thirds of its second; four NICs per host
// (random suite seed 919 r7). The fastest rails were played again with larger stocks, but another
// spread that played within 5% of them gains more from the stocks: 1.123x -> 1.096x.
TEST(PlannerTest, AnotherSpreadNearTheFastestRailsIsPlayedWithLargerStocksToo) {
  Resharding p = problem_of({789522, 17, 5}, Mesh({4}, {0, 1, 2, 3}), "RRS0",
                            Mesh({3, 3}, {0, 1, 2, 4, 5, 6, 8, 9, 10}), "RS0R", 7, 4);
  p.tensor.dtype = DType::float64;
  p.cluster.nics_per_host = 4;
  EXPECT_LE(order_ratio(p, true), 1.11);
}

// The first devices of seven hosts (two devices, two NICs each) hold sevenths of a bfloat16
// tensor's last dimension; four devices of hosts 0, 2, 3 and 5 need halves of its second (random
// suite seed 1215 r8). Only the fastest rails went on to finer pieces, but rails laid another way
// that played within 5% of them gain more from finer pieces: 1.129x -> 1.082x.
TEST(PlannerTest, AnotherWayNearTheFastestRailsIsLaidInFinerPiecesToo) {
  Resharding p = problem_of({19173966, 2, 7}, Mesh({7, 1}, {0, 2, 4, 6, 8, 10, 12}), "RRS0",
                            Mesh({2, 2}, {6, 11, 0, 5}), "RS1R", 7, 2);
  p.tensor.dtype = DType::bfloat16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.10);
}

// Devices 3 (host 0) and 7 (host 1) each hold the whole float64 tensor, and every device of both
// hosts needs a quarter of it (random suite seed 1113 r9): each holder alone serves three quarters
// beside it over its device link while the NICs idle. Holders elsewhere are as busy, but each
// quarter that both hosts need is now cut: each host's holder sends its receiver all but a part
// that the other host's receiver passes over, and each host's receiver passes on the other's
// (1.100x -> 1.050x with one NIC; 1.201x -> 1.146x with two, where the receivers of the quarters
// both hosts need are all on NIC 0).
TEST(PlannerTest, ReceiversOnHostsThatHoldTheirSliceExchangeParts) {
  for (const auto& [nics, within] : {std::pair{1, 1.06}, std::pair{2, 1.16}}) {
    SCOPED_TRACE(nics);
    Resharding p = problem_of({3947581, 17}, Mesh({2}, {3, 7}), "RR",
                              Mesh({2, 4}, {6, 5, 1, 4, 3, 2, 7, 0}), "S1R", 2, 4);
    p.tensor.dtype = DType::float64;
    p.cluster.nics_per_host = nics;
    EXPECT_LE(order_ratio(p, true), within);
  }
}

// Devices 0 and 1 of each of 8 hosts of four hold the tensor's halves; every device of hosts
// 0-6 needs a quarter (random suite seed 2401 r13). Device 1 of each host serves its second half
// to devices 2 and 3 beside it over its one link: 256 MiB while the NICs idled. Exchanged, each
// host's part went to device 1 (which sends the rest, so relaying at NIC speed held it) and on
// through the six other hosts, each host's part after the other's (1.89x). A receiver that sends
// nothing else now relays, each host's part to the next host only, sized so that the NICs, which
// start after the first hand-over, end with device 1 (1.100x -> 1.030x with one NIC; 1.201x ->
// 1.107x with two, where the receipts of device 2 and 3 over the NICs and beside them go at once).
TEST(PlannerTest, EachHostPassesItsPartToTheNextByAReceiverThatSendsNothingElse) {
  std::vector<DeviceId> halves;
  for (int host = 0; host < 8; ++host) halves.insert(halves.end(), {4 * host, 4 * host + 1});
  for (const auto& [nics, within] : {std::pair{1, 1.035}, std::pair{2, 1.11}}) {
    SCOPED_TRACE(nics);
    Resharding p = problem_of({134217730}, Mesh({8, 2}, halves), "S1",
                              Mesh({7, 4}, first_devices(28)), "S1", 8, 4);
    p.tensor.dtype = DType::int32;
    p.cluster.nics_per_host = nics;
    EXPECT_LE(order_ratio(p, false), within);
  }
}

// Devices 7 (host 3) and 5 (host 2) each hold all of a float16 tensor of 512 MiB that every device
// of hosts 0-5 needs (hosts of two devices and two NICs; random suite seed 2501 r11). Both holders
// sit on NIC 1 and devices 4 and 6 beside them take the tensor from them, so no device could stage
// rail 0 and both rails left by NIC 1 (1.166x). Now one holding host in turn stages it at its
// receiver on NIC 0, which keeps that rail as its part (1.127x).
TEST(PlannerTest, ARailWithoutHoldersOnItsNicIsStagedAtAReceiverBesideThemInTurn) {
  Resharding p = problem_of({268435461}, Mesh({1, 2}, {7, 5}), "R", Mesh({6, 2}, first_devices(12)),
                            "R", 6, 2);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.135);
}

// Devices 6 (host 3) and 14 (host 7) hold the halves of a float32 tensor of 512 MiB; device 7
// beside device 6 and devices on hosts 7 and 2 need the first, one device on each of hosts 1, 3,
// 4 and 6 the second (hosts of two devices and two NICs; random suite seed 2709 r21). On rails,
// device 15 beside device 14 stages the second half's rail 1, but the greedy sent that rail from
// device 14 over NIC 0, whose own rail then waited, and host 7's NIC 1 sent nothing for the first
// 41 ms of 148 (1.258x). The rails are now also laid through their stages (1.191x).
TEST(PlannerTest, RailsAreAlsoLaidThroughTheirStages) {
  Resharding p = problem_of({134217730}, Mesh({2}, {6, 14}), "S0",
                            Mesh({4, 2}, {7, 6, 14, 8, 4, 12, 5, 2}), "S1", 8, 2);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, false), 1.20);
}

// Devices 3 and 2 (host 0), 23 (host 2) and 26 (host 3) hold the quarters of a float32 tensor of
// 512 MiB that every device of host 0 needs (hosts of eight devices and eight NICs; random suite
// seed 2701 r14). The quarters from hosts 2 and 3 enter host 0 by all eight NICs only where their
// holders hand the rails to stages, which the greedy did not always do: 1.141x; 1.015x through
// the stages.
TEST(PlannerTest, RailsThroughTheirStagesLeaveAHostByEveryNic) {
  Resharding p = problem_of({67108864, 2}, Mesh({4, 2}, {3, 23, 2, 26, 5, 6, 7, 33}), "S1S0",
                            Mesh({8}, first_devices(8)), "RR", 5, 8);
  p.tensor.dtype = DType::float32;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, true), 1.05);
}

// Device 1 alone holds 512 MiB that every device of hosts 0-4 needs, with two NICs per host
// (random suite seed 1104 r15). On rails each round's part enters a host at one receiver, which
// then sends it to the host's three others: the last round's sends and the first round's
// hand-overs are what the NICs wait for, four sends of a part, not one. In ten rounds that was
// 1.069x the bound; the fastest rails are now also laid in four times as many rounds (1.049x).
TEST(PlannerTest, TheFastestRailsAreLaidAgainInMoreRounds) {
  Resharding p =
      problem_of({268435461}, Mesh({1}, {1}), "S0", Mesh({5, 4}, first_devices(20)), "R", 6, 4);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.055);
}

// Devices 2, 1 and 7 (hosts 0, 0 and 1 of two hosts of four, two NICs) hold the thirds of the
// tensor; devices 0 and 1 need its first half, devices 4 and 5 (host 1, one on each NIC) its
// second. The sixth that device 1 holds of the second half goes to both receivers on host 1: on
// rails host 0's NIC 0 sent 48 MiB of it and NIC 1 37 MiB (1.227x the bound). A slice bound for
// several devices is now also played as a shop, one flow into each receiving host that enters
// at its receivers on every NIC, each passing what it took in to the other (1.044x; random suite
// seed 1108 r8).
TEST(PlannerTest, ASliceForSeveralReceiversIsPlayedAsAShopToo) {
  Resharding p = problem_of({3947582, 17}, Mesh({3}, {2, 1, 7}), "S0R", Mesh({2, 2}, {0, 1, 4, 5}),
                            "S0R", 2, 4);
  p.tensor.dtype = DType::int64;
  p.cluster.nics_per_host = 2;
  for (bool split : {false, true}) EXPECT_LE(order_ratio(p, split), 1.05) << split;
}

// Host 0's 8 devices hold the tensor; device 0 of each of the 7 other hosts of 8 devices and 8
// NICs needs it all (random suite seed 1505 r14 on hosts of 8 devices). On rails each piece
// enters a host at the device of its NIC, which sends it on to the next host and to device 0
// beside it. The relays that sent every piece to the next host first (a send into an idle NIC
// came first) then all sent to device 0 at once, through its one link, once the NICs were done:
// 1.79x the bound. Played again with a send into a device that takes nothing from its host now
// before the sends over the NICs, the forwards go between them (1.25x).
TEST(PlannerTest, ARelayPassesPiecesToTheDeviceBesideItBetweenItsSends) {
  Resharding p = problem_of({19173964, 7}, Mesh({8}, first_devices(8)), "RR",
                            Mesh({8, 1}, {0, 8, 16, 24, 32, 40, 48, 56}), "RR", 8, 8);
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.3);
}

// Devices 47, 31, 25, 12 and 0 hold the fifths of a tensor that devices 0 to 4 of host 0 need
// whole: six hosts of eight devices, eight NICs each (random suite seed 1710 r30, at an eighth of
// its size). Device 0 sent its fifth to each of the four others beside it, and passed on what
// its NIC took in besides: its port ran all the time, at 1.51x the bound. The four hold nothing
// to send, so they relay device 0's pieces to each other (detail::Beside::relayed): 1.39x.
TEST(PlannerTest, ReceiversBesideTheHolderRelayItsPieces) {
  Resharding p = problem_of({67108865}, Mesh({5}, {47, 31, 25, 12, 0}), "S0",
                            Mesh({5}, {0, 1, 2, 3, 4}), "R", 6, 8);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, true), 1.45);
}

// Device 0 holds a uint8 tensor of 512 MiB whose thirds (by columns) devices 8-10 of host 1 need
// (three hosts of eight devices, eight NICs each; random suite seed 1905 r22). Laid by the ports
// in 32 quanta of each of the three slices, each quantum is 5.3 MiB: one stage's NIC took one
// more than the others, 74.7 MiB against 69.3, and ended 4.5 ms after them (1.072x). In fine
// quanta (detail::Quanta::fine), 86 of each slice, the NICs end together: 1.032x.
TEST(PlannerTest, TheFastestShopByThePortsIsLaidAgainInFineQuanta) {
  Resharding p =
      problem_of({89478486, 6}, Mesh({1}, {0}), "RS0", Mesh({3}, {8, 9, 10}), "RS0", 3, 8);
  p.tensor.dtype = DType::uint8;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.05);
}

// Devices 0-2 each hold a third of the rows of a float32 tensor of 512 MiB whose seventh columns
// devices 8-14 of host 1 need (seven hosts of eight devices, eight NICs each; random suite seed
// 1901 r26, split). Host 0's holders also hand the five other NICs their shares, so laid by the
// ports their NICs send 54 MiB each and the others 70; entered evenly, 64 MiB into each of host
// 1's NICs, most sending NICs fed two receiving ones that two senders shared: 1.142x. With each
// share entering by the NIC of its sender's index (detail::Entries::mirrored), each pair of NICs
// carries one flow: 1.067x.
TEST(PlannerTest, TheShopLaidByThePortsEntersByTheNicsItLeavesBy) {
  Resharding p = problem_of({22369626, 6}, Mesh({3}, {0, 1, 2}), "S0R",
                            Mesh({7}, {8, 9, 10, 11, 12, 13, 14}), "RS0", 7, 8);
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, true), 1.1);
}

// Three hosts each hold a third of a float32 tensor of 512 MiB (a 2x2 mesh: device 19 of host 4
// columns 0-1, device 13 of host 3 columns 2-3, device 3 of host 0 columns 4-5, device 17 none),
// and devices of all five hosts need halves (host 2 only columns 0-2, host 1 only 3-5): five hosts
// of four devices, one NIC each (random suite seed 2005 r23). Each holder sends its third to three
// hosts, 512 MiB, while the bound is what host 0 takes in, 341 MiB. Chains through every host or
// host by host make the holders relay more still (1.251x). Relayed by hosts 1 and 2, which need
// only half the tensor, every host sends at most 341 MiB (detail::relay_tree_jobs), and laid in
// quarters by the greedy that takes receipts in at once the plan is 1.067x.
TEST(PlannerTest, AHostThatNeedsFewSlicesRelaysOthers) {
  const Resharding p = problem_of({22369622, 6}, Mesh({2, 2}, {19, 3, 13, 17}), "RS10",
                                  Mesh({2, 4}, {19, 12, 9, 0, 5, 16, 14, 3}), "RS0", 5, 4);
  EXPECT_LE(order_ratio(p, false), 1.1);
}

// Device 1 of host 0 holds the first column of an int8 tensor of 512 MiB, device 6 of host 1 the
// second, and each host's four devices need its half of the rows: two hosts of four devices, two
// NICs each (random suite seed 2101 r17, split). Relayed beside its holder, a holder's half went to
// its three neighbours in turn, each passing its pieces on, the two stages that send over the NICs
// too: each sent its 64 MiB over its NIC and 88 MiB beside it one after the other, 1.155x the
// bound. Relayed only by the neighbour that sends over no NIC (detail::Beside), 1.060x.
TEST(PlannerTest, OnlyReceiversThatSendOverNoNicRelayBesideTheHolder) {
  Resharding p = problem_of({268435459, 2}, Mesh({4}, {1, 6, 3, 0}), "RS0",
                            Mesh({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}), "S0R", 2, 4);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.1);
}

// Device 0 holds an int8 tensor of 512 MiB that device 1 beside it and one device on each of four
// other hosts need: six hosts of two devices, two NICs each (random suite seed 2002 r12, split).
// Device 1 stages the rail over NIC 1, and the holder sent it the other rail's parts over its link
// too, after all its own sends: 1.099x the bound. Brought back to device 1 by that rail's chain
// from its last host (RailOptions::home_back), the holder's port carries only its hand-overs and
// its own rail, as the bound's send(h) counts: 1.048x.
TEST(PlannerTest, ARailBringsTheHoldersNeighbourItsPartBack) {
  Resharding p =
      problem_of({536870912}, Mesh({1}, {0}), "S0", Mesh({6, 1}, {4, 7, 10, 2, 1, 0}), "R", 6, 2);
  p.tensor.dtype = DType::int8;
  p.cluster.nics_per_host = 2;
  EXPECT_LE(order_ratio(p, true), 1.06);
}

// Devices 0-6 of host 0 need all of a bfloat16 tensor of 512 MiB that hosts 0-2 hold in 24ths,
// one on each of their devices: three hosts of eight devices, eight NICs each (random suite seed
// 2208 r9). Each device takes in 490 MiB over its link, the bound. Each piece from hosts 1 and 2
// entered at a receiver that passed it on to the six others: several entries sent into one
// receiver's link at a time while other links idled, 1.278x. Passed on in rings
// (detail::passed_in_rings), each device sends every piece to the next by local index and takes in
// from the one before: 1.039x.
TEST(PlannerTest, PiecesArePassedOnInsideAHostInARing) {
  Resharding p = problem_of({268435462}, Mesh({3, 8}, first_devices(24)), "S01",
                            Mesh({7}, first_devices(7)), "R", 3, 8);
  p.tensor.dtype = DType::bfloat16;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.06);
}

// Devices 0 and 1 each hold all of a float16 tensor of 512 MiB whose halves devices 8 and 9 of host
// 1 need: three hosts of eight devices, eight NICs each (random suite seed 1707 r28). Host 0's six
// other devices stage the NICs' shares, and device 0, the first holder, handed them all over while
// it sent over its own NIC too: its port ran to the end, at 1.212x the bound, while device 1 sent
// over its NIC alone. Fed by the holder whose port is least busy (detail::Feeds), the holders
// hand over 192 and 224 MiB and send 48 MiB each over their own NICs instead of 64: 1.139x.
TEST(PlannerTest, StagesAreFedByTheLeastBusyHolder) {
  Resharding p = problem_of({268435459}, Mesh({2}, {0, 1}), "R", Mesh({2}, {8, 9}), "S0", 3, 8);
  p.tensor.dtype = DType::float16;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, true), 1.17);
}

// Devices 0-4 of hosts 0, 1 and 2 hold the fifteenths of a float64 tensor's second dimension that
// devices 0-5 of host 0 need whole: six hosts of eight devices, eight NICs each (random suite seed
// 1708 r3). Each of devices 0-4 sent its own fifteenth to the five others beside it, while also
// taking in and passing on the pieces from hosts 1 and 2: 1.316x the bound. Relayed by every
// receiver beside it, those that hold slices of their own too (detail::Beside::relayed_by_all),
// each holder's pieces go to the others in turn, each passing them on: 1.272x.
TEST(PlannerTest, ReceiversThatHoldSlicesOfTheirOwnRelayTooWhereThatIsFaster) {
  Resharding p =
      problem_of({3947584, 17}, Mesh({3, 5}, {0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 16, 17, 18, 19, 20}),
                 "RS0/1", Mesh({6}, {0, 1, 2, 3, 4, 5}), "RR", 6, 8);
  p.tensor.dtype = DType::float64;
  p.cluster.nics_per_host = 8;
  EXPECT_LE(order_ratio(p, false), 1.29);
}

}  // namespace
}  // namespace meshcast
