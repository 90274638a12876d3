// validate_plan accepts the planner's plans and forwarding chains, and rejects hand-broken plans
// with a message that names the op and the problem.
#include "meshcast/plan/validate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <random>

#include "meshcast/error.h"
#include "meshcast/planner/planner.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

// An 8x4 int32 tensor split by rows over devices 0,1 (host 0) and wanted whole by devices 2..5
// (hosts 1 and 2). Task 0 is rows [0,4) from device 0, task 1 rows [4,8) from device 1.
Resharding small_problem() {
  Resharding p;
  p.tensor = TensorSpec{{8, 4}, DType::int32};
  p.src = Layout{Mesh({2}, {0, 1}), ShardingSpec::parse("S0R")};
  p.dst = Layout{Mesh({2, 2}, {2, 3, 4, 5}), ShardingSpec::parse("RR")};
  p.cluster = paper_cluster(3);
  p.cluster.devices_per_host = 2;
  return p;
}

const Box kTop{{{0, 4}, {0, 4}}};
const Box kBottom{{{4, 8}, {0, 4}}};

Op send(int id, int task, const Box& slice, DeviceId from, DeviceId to) {
  return Op{.id = id,
            .kind = OpKind::send,
            .pieces = {{0, task, slice, slice.volume() * 4}},
            .bytes = slice.volume() * 4,
            .sender = from,
            .receivers = {to}};
}

Plan broadcast_plan() {
  return make_plan(small_problem(), {.strategy = Strategy::broadcast, .balance = Balance::none});
}

// Expects validate_plan to throw InvalidArgument whose message contains `expected`.
void expect_rejected(const Plan& plan, const std::string& expected) {
  try {
    validate_plan(plan);
    ADD_FAILURE() << "accepted a plan that should fail with: " << expected;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
        << "message: " << e.what() << "\nexpected: " << expected;
  }
}

Plan broken(const std::function<void(Plan&)>& edit) {
  Plan plan = broadcast_plan();
  edit(plan);
  return plan;
}

TEST(ValidatePlanTest, TheBaseBroadcastPlanIsValid) {
  const Plan plan = broadcast_plan();
  ASSERT_EQ(plan.ops.size(), 2u);
  EXPECT_EQ(plan.ops[0].pieces.at(0).slice, kTop);
  EXPECT_EQ(plan.ops[0].receivers, (std::vector<DeviceId>{2, 3, 4, 5}));
  EXPECT_NO_THROW(validate_plan(plan));
}

TEST(ValidatePlanTest, AcceptsForwardingFromAnEarlierReceiver) {
  Plan plan;
  plan.batch = Batch::of_one(small_problem());
  int id = 0;
  for (auto [task, slice, holder] : {std::tuple{0, kTop, 0}, std::tuple{1, kBottom, 1}}) {
    plan.ops.push_back(send(id++, task, slice, holder, 2));
    plan.ops.push_back(send(id++, task, slice, 2, 3));  // 2 forwards what it just received
    plan.ops.push_back(send(id++, task, slice, 3, 4));
    plan.ops.push_back(send(id++, task, slice, 4, 5));
  }
  EXPECT_NO_THROW(validate_plan(plan));
  // Forwarding before receiving is not.
  std::swap(plan.ops[0], plan.ops[1]);
  plan.ops[0].id = 0;
  plan.ops[1].id = 1;
  expect_rejected(plan, "op 0 (send of task 0): sender 2 does not hold [0,4)x[0,4) at that point");
}

TEST(ValidatePlanTest, AcceptsSplitPartsForwardedInPiecesButNotJoined) {
  Plan plan;
  plan.batch = Batch::of_one(small_problem());
  const Box left{{{0, 4}, {0, 2}}};
  const Box right{{{0, 4}, {2, 4}}};
  plan.ops = {send(0, 0, left, 0, 2),    send(1, 0, right, 0, 2),   send(2, 0, left, 2, 3),
              send(3, 0, right, 2, 3),   send(4, 0, kTop, 0, 4),    send(5, 0, kTop, 0, 5),
              send(6, 1, kBottom, 1, 2), send(7, 1, kBottom, 1, 3), send(8, 1, kBottom, 1, 4),
              send(9, 1, kBottom, 1, 5)};
  EXPECT_NO_THROW(validate_plan(plan));
  // Device 2 forwarding the two halves it received as one box: the executors send from one
  // buffer, so pieces received by separate ops are not joined (the rule place_plan applies).
  Plan joined = plan;
  joined.ops.erase(joined.ops.begin() + 3);
  joined.ops[2] = send(2, 0, kTop, 2, 3);
  for (int i = 0; i < static_cast<int>(joined.ops.size()); ++i) joined.ops[i].id = i;
  expect_rejected(joined, "op 2 (send of task 0): sender 2 does not hold [0,4)x[0,4)");
  // Device 2 forwarding the whole top slice after receiving only its left half.
  plan.ops.erase(plan.ops.begin() + 1);
  plan.ops[1] = send(1, 0, kTop, 2, 3);
  plan.ops.erase(plan.ops.begin() + 2);
  for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) plan.ops[i].id = i;
  expect_rejected(plan, "op 1 (send of task 0): sender 2 does not hold [0,4)x[0,4)");
}

TEST(ValidatePlanTest, RejectsBadIds) {
  expect_rejected(broken([](Plan& p) { p.ops[1].id = 5; }),
                  "op at position 1 has id 5: expected ids 0..n-1 in plan order");
}

TEST(ValidatePlanTest, RejectsAMissingTask) {
  expect_rejected(
      broken([](Plan& p) { p.ops[0].pieces[0].task = 7; }),
      "op 0 (broadcast of task 7): task 7 does not exist: the problem has 2 unit tasks");
}

TEST(ValidatePlanTest, RejectsASliceOutsideItsTask) {
  expect_rejected(broken([](Plan& p) {
                    p.ops[0].pieces[0].slice = Box{{{0, 5}, {0, 4}}};
                  }),
                  "slice [0,5)x[0,4) is not a non-empty part of the task's slice [0,4)x[0,4)");
  expect_rejected(broken([](Plan& p) {
                    p.ops[0].pieces[0].slice = Box{{{0, 4}}};
                  }),
                  "slice [0,4) is not a non-empty part");
}

TEST(ValidatePlanTest, RejectsWrongBytes) {
  expect_rejected(broken([](Plan& p) { p.ops[0].bytes += 1; }),
                  "bytes 65 do not match the slice's 64");
}

TEST(ValidatePlanTest, RejectsASenderWithoutTheData) {
  expect_rejected(broken([](Plan& p) { p.ops[0].sender = 1; }),
                  "op 0 (broadcast of task 0): sender 1 does not hold [0,4)x[0,4) at that point");
}

TEST(ValidatePlanTest, RejectsMissingOrExtraSenders) {
  expect_rejected(broken([](Plan& p) { p.ops[0].sender.reset(); }), "the sender is missing");
  expect_rejected(broken([](Plan& p) {
                    p.ops[0].kind = OpKind::allgather;
                    p.ops[0].receivers = {2, 3};
                  }),
                  "op 0 (allgather of task 0): an allgather has no sender");
}

TEST(ValidatePlanTest, RejectsBadReceivers) {
  expect_rejected(broken([](Plan& p) { p.ops[0].receivers.push_back(99); }),
                  "receiver 99 is not a device of the cluster (0..5)");
  expect_rejected(broken([](Plan& p) { p.ops[0].receivers.push_back(3); }),
                  "receiver 3 is listed twice");
  // A device outside the destination mesh may be a relay: it keeps nothing.
  EXPECT_NO_THROW(validate_plan(broken([](Plan& p) { p.ops[0].receivers.push_back(1); })));
  expect_rejected(broken([](Plan& p) { p.ops[0].receivers.push_back(0); }),
                  "device 0 is both sender and receiver; use a copy");
  expect_rejected(broken([](Plan& p) { p.ops[0].receivers.clear(); }),
                  "a broadcast has no receivers");
}

TEST(ValidatePlanTest, RejectsKindsWithTheWrongShape) {
  expect_rejected(broken([](Plan& p) { p.ops[0].kind = OpKind::send; }),
                  "op 0 (send of task 0): a send has 4 receivers, expected 1");
  expect_rejected(broken([](Plan& p) {
                    p.ops[0].kind = OpKind::copy;
                    p.ops[0].receivers = {2};
                  }),
                  "a copy must have its sender 0 as its only receiver, got [2]");
  expect_rejected(broken([](Plan& p) { p.ops[0].chunk_bytes = -4; }), "chunk_bytes -4 is negative");
}

TEST(ValidatePlanTest, RejectsReceivingTwice) {
  expect_rejected(broken([](Plan& p) {
                    Op again = p.ops[0];
                    again.id = 2;
                    again.receivers = {3};
                    p.ops.push_back(again);
                  }),
                  "op 2 (broadcast of task 0): device 3 receives [0,4)x[0,4) a second time (op 0 "
                  "delivered it)");
}

TEST(ValidatePlanTest, RejectsAnIncompletePlan) {
  expect_rejected(broken([](Plan& p) { p.ops[1].receivers.pop_back(); }),
                  "device 5 receives 0 of the 16 elements of task 1 (slice [4,8)x[0,4)): the plan "
                  "is incomplete");
  expect_rejected(broken([](Plan& p) { p.ops.clear(); }), "device 2 receives 0 of the 16");
}

TEST(ValidatePlanTest, AReceiverMayGetMoreThanItsTileAndKeepsItsPart) {
  // Destination S0R on devices 2, 4: device 4 wants rows [4,8) only, and also gets the top rows
  // (as a whole-shard broadcast gives them): it keeps its part, the rest does not count.
  Plan plan = broadcast_plan();
  plan.batch.tensors[0].dst = Layout{Mesh({2}, {2, 4}), ShardingSpec::parse("S0R")};
  plan.ops[0].receivers = {2, 4};
  plan.ops[1].receivers = {4};
  EXPECT_NO_THROW(validate_plan(plan));
  plan.ops.pop_back();
  expect_rejected(plan, "device 4 receives 0 of the 16 elements of task 1");
}

TEST(ValidatePlanTest, ChecksAllgatherParts) {
  const Plan plan =
      make_plan(small_problem(), {.strategy = Strategy::allgather, .balance = Balance::none});
  ASSERT_NO_THROW(validate_plan(plan));
  // Task 0's ops: part sends to 2, 3, 4, 5, then allgathers on hosts 1 and 2.
  ASSERT_EQ(plan.ops[4].kind, OpKind::allgather);
  EXPECT_EQ(plan.ops[4].receivers, (std::vector<DeviceId>{2, 3}));

  Plan missing_part = plan;
  missing_part.ops.erase(missing_part.ops.begin() + 1);
  for (int i = 0; i < static_cast<int>(missing_part.ops.size()); ++i) missing_part.ops[i].id = i;
  expect_rejected(missing_part,
                  "op 3 (allgather of task 0): device 3 does not hold its part [2,4)x[0,4) before "
                  "the allgather");

  Plan two_hosts = plan;
  two_hosts.ops[4].receivers = {2, 4};
  expect_rejected(two_hosts, "allgather devices [2,4] are not on one host");

  Plan lonely = plan;
  lonely.ops[4].receivers = {2};
  expect_rejected(lonely, "an allgather has 1 devices, expected at least 2");
}

// Device 2 takes a 64 x 16 tensor from device 0 in pieces cut any way (guillotine cuts along
// either dimension, in any order), sometimes with a piece again, then forwards them to device 3,
// whole or in halves, and sometimes two as their bounding box. The validator finds receipts by
// where they start along the task's longest dimension; each verdict must equal a scan of every
// pair.
TEST(ValidatePlanTest, FindsEveryOverlapAndHoldingAmongPiecesCutAnyWay) {
  Resharding problem;
  problem.tensor = TensorSpec{{64, 16}, DType::int32};
  problem.src = Layout{Mesh({1}, {0}), ShardingSpec::parse("RR")};
  problem.dst = Layout{Mesh({2}, {2, 3}), ShardingSpec::parse("RR")};
  problem.cluster = paper_cluster(2);
  problem.cluster.devices_per_host = 2;
  const auto overlaps = [](const Box& a, const Box& b) { return !intersect(a, b).empty(); };
  int rejected_twice = 0, rejected_held = 0, accepted = 0;
  for (unsigned seed = 1; seed <= 60; ++seed) {
    std::mt19937 rng(seed);
    const auto pick = [&](int64_t lo, int64_t hi) {  // in [lo, hi)
      return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo));
    };
    // `box` cut in two along `dim` at a random place.
    const auto cut_in_two = [&](const Box& box, int dim) {
      const int64_t cut = pick(box.dims[dim].lo + 1, box.dims[dim].hi);
      std::pair<Box, Box> halves{box, box};
      halves.first.dims[dim].hi = cut;
      halves.second.dims[dim].lo = cut;
      return halves;
    };
    std::vector<Box> pieces;
    std::vector<Box> open = {Box{{{0, 64}, {0, 16}}}};
    while (!open.empty()) {
      const Box box = open.back();
      open.pop_back();
      const int dim = static_cast<int>(rng() % 2);
      if (box.dims[dim].size() < 2 || rng() % 4 == 0) {
        pieces.push_back(box);
        continue;
      }
      const auto [low, high] = cut_in_two(box, dim);
      open.push_back(low);
      open.push_back(high);
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    if (rng() % 2) {  // a part of some piece again, anywhere
      Box again = pieces[rng() % pieces.size()];
      for (auto& d : again.dims) {
        d.lo = pick(d.lo, d.hi);
        d.hi = pick(d.lo, d.hi) + 1;
      }
      pieces.insert(pieces.begin() + static_cast<std::ptrdiff_t>(rng() % (pieces.size() + 1)),
                    again);
    }
    Plan plan;
    plan.batch = Batch::of_one(problem);
    for (const Box& b : pieces) plan.ops.push_back(send(0, 0, b, 0, 2));
    // The first receipt of device 2 that overlaps an earlier one, and the earliest such.
    std::optional<std::pair<size_t, size_t>> twice;
    for (size_t i = 0; i < pieces.size() && !twice; ++i)
      for (size_t j = 0; j < i && !twice; ++j)
        if (overlaps(pieces[i], pieces[j])) twice = {i, j};
    std::vector<Box> forwards;  // each piece, or its halves along either dimension
    for (const Box& b : pieces) {
      const int dim = static_cast<int>(rng() % 2);
      if (b.dims[dim].size() < 2 || rng() % 2) {
        forwards.push_back(b);
        continue;
      }
      const auto [low, high] = cut_in_two(b, dim);
      forwards.push_back(high);
      forwards.push_back(low);
    }
    if (rng() % 2 && pieces.size() >= 2) {  // two receipts forwarded as one box
      Box joined = pieces[0];
      for (size_t d = 0; d < 2; ++d) {
        joined.dims[d].lo = std::min(pieces[0].dims[d].lo, pieces[1].dims[d].lo);
        joined.dims[d].hi = std::max(pieces[0].dims[d].hi, pieces[1].dims[d].hi);
      }
      forwards.insert(forwards.begin() + static_cast<std::ptrdiff_t>(rng() % forwards.size()),
                      joined);
    }
    for (const Box& b : forwards) plan.ops.push_back(send(0, 0, b, 2, 3));
    for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) plan.ops[i].id = i;
    std::optional<size_t> not_held;  // the first forward no single receipt contains
    for (size_t i = 0; i < forwards.size() && !not_held; ++i)
      if (std::none_of(pieces.begin(), pieces.end(),
                       [&](const Box& b) { return b.contains(forwards[i]); }))
        not_held = i;
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    if (twice) {
      ++rejected_twice;
      expect_rejected(plan,
                      fmt::format("op {} (send of task 0): device 2 receives {} a second "
                                  "time (op {} delivered it)",
                                  twice->first,
                                  to_string(intersect(pieces[twice->first], pieces[twice->second])),
                                  twice->second));
    } else if (not_held) {
      ++rejected_held;
      expect_rejected(plan, fmt::format("op {} (send of task 0): sender 2 does not hold {}",
                                        pieces.size() + *not_held, to_string(forwards[*not_held])));
    } else {
      ++accepted;
      EXPECT_NO_THROW(validate_plan(plan));
    }
  }
  // Each verdict was reached on some seed.
  EXPECT_GT(rejected_twice, 5);
  EXPECT_GT(rejected_held, 5);
  EXPECT_GT(accepted, 5);
}

}  // namespace
}  // namespace meshcast
