// op_dependencies: the start rule (a device sends one op at a time, receives passively)
// (docs/concepts.md, Execution) on hand-written ops, and its invariants on planned plans.
#include "meshcast/plan/dependencies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "corpus.h"
#include "meshcast/layout/layout.h"
#include "meshcast/plan/holdings.h"
#include "meshcast/planner/planner.h"

namespace meshcast {
namespace {

using Deps = std::vector<std::vector<int>>;

// An 8-element int8 vector on two hosts of two devices: device 0 holds [0,4) (task 0), device 1
// holds [4,8) (task 1); devices 2 and 3 hold nothing.
Batch two_shards() {
  Batch batch;
  batch.cluster = Cluster{.hosts = 2, .devices_per_host = 2};
  batch.tensors.push_back({.name = "v",
                           .tensor = TensorSpec{{8}, DType::int8},
                           .src = Layout{Mesh({2}, {0, 1}), ShardingSpec::parse("S0")},
                           .dst = Layout{Mesh({4}, {0, 1, 2, 3}), ShardingSpec::parse("R")}});
  batch.validate();
  return batch;
}

Piece piece(int64_t lo, int64_t hi) {
  return Piece{0, lo < 4 ? 0 : 1, Box{{{lo, hi}}}, hi - lo};
}

Op op(OpKind kind, std::optional<DeviceId> sender, std::vector<DeviceId> receivers,
      std::vector<Piece> pieces) {
  return make_op(kind, std::move(pieces), sender, std::move(receivers));
}

Op send(DeviceId from, DeviceId to, int64_t lo, int64_t hi) {
  return op(OpKind::send, from, {to}, {piece(lo, hi)});
}

TEST(OpDependenciesTest, TheTwoSendsOfAnExchangeAreIndependent) {
  const std::vector<Op> ops{send(0, 1, 0, 4), send(1, 0, 4, 8)};
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}}));
}

TEST(OpDependenciesTest, ADeviceReceivesFromSeveralOpsAtOnce) {
  const std::vector<Op> ops{send(0, 2, 0, 4), send(1, 2, 4, 8), send(0, 3, 0, 4)};
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {0}}));
}

TEST(OpDependenciesTest, TheSendsOfADeviceFollowPlanOrderItsReceivesDoNot) {
  const std::vector<Op> ops{
      send(0, 2, 0, 4),  // 0
      send(1, 3, 4, 8),  // 1
      send(0, 3, 0, 4),  // 2: device 0 sends after op 0; device 3 receives op 1 meanwhile
      send(1, 2, 4, 8),  // 3: device 1 sends after op 1
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {0}, {1}}));
}

TEST(OpDependenciesTest, ADeviceSendsWhatItReceivedOnlyAfterTheReceipt) {
  const std::vector<Op> ops{
      send(0, 2, 0, 4),  // 0: device 2 receives [0,4)
      send(1, 3, 4, 8),  // 1
      send(2, 1, 0, 4),  // 2: sends what op 0 delivers
      send(1, 0, 4, 8),  // 3: device 1 sent in op 1; op 2 only delivers to it
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {0}, {1}}));
}

TEST(OpDependenciesTest, ASourceTileIsHeldFromTheStart) {
  // Device 0 receives [4,8) first; sending its own [0,4) does not wait for that receipt.
  const std::vector<Op> ops{send(1, 0, 4, 8), send(0, 3, 0, 4)};
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}}));
}

TEST(OpDependenciesTest, RelaysOfABroadcastSendAndItsLastReceiverOnlyReceives) {
  const std::vector<Op> ops{
      op(OpKind::broadcast, 0, {2, 3}, {piece(0, 4)}),  // 0: relay 2, last receiver 3
      send(1, 0, 4, 8),                                 // 1: independent
      send(1, 3, 4, 8),  // 2: device 1 sent in op 1; device 3 may receive both at once
      send(3, 1, 0, 4),  // 3: device 3 sends what op 0 delivered
      // 4: device 1 sent in op 2, relay 2 forwarded in op 0; device 0 only receives.
      op(OpKind::broadcast, 1, {2, 0}, {piece(4, 8)}),
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {1}, {0}, {0, 2}}));
}

TEST(OpDependenciesTest, AnAllgatherMemberSendsAndNeedsTheReceiptOfItsPart) {
  const std::vector<Op> ops{
      send(0, 2, 0, 2),  // 0: device 2 receives [0,2), its part of the gather
      send(1, 2, 4, 8),  // 1: and [4,8), which the gather does not need
      send(0, 3, 2, 4),  // 2: device 3 receives [2,4), its part (device 0 sent in op 0)
      op(OpKind::allgather, std::nullopt, {2, 3}, {piece(0, 4)}),  // 3: the parts' receipts
      send(2, 1, 2, 4),  // 4: device 2 sent in op 3, and holds [2,4) through it
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {0}, {0, 2}, {3}}));
}

TEST(OpDependenciesTest, AnAllgatherPieceWithAHolderWaitsOnlyForThatHolder) {
  Piece whole = piece(0, 4);
  whole.holder = 1;  // receivers[1] = device 0 holds it in its source tile
  const std::vector<Op> ops{
      send(0, 3, 0, 4),  // 0
      send(3, 2, 0, 4),  // 1: device 2 now holds [0,4) too, through this receipt
      // 2: device 0 sent in op 0; the holder contributes from its source tile, so op 1, through
      // which device 2 holds its half, is not waited for.
      op(OpKind::allgather, std::nullopt, {2, 0}, {whole}),
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {0}, {0}}));
}

TEST(OpDependenciesTest, ACopyIsSentByItsDevice) {
  const std::vector<Op> ops{
      send(1, 0, 4, 8),                         // 0: device 0 receives
      op(OpKind::copy, 0, {0}, {piece(0, 4)}),  // 1: from its source tile, at once
      send(0, 3, 0, 4),                         // 2: device 0 copied in op 1
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {1}}));
}

// The rule of op_dependencies as its header states it, replayed naively: every earlier op is
// scanned for each op, every receipt of every device kept.
Deps naive_dependencies(const Batch& batch, const std::vector<Op>& ops) {
  const auto sends_in = [](const Op& op, DeviceId d) {
    const auto& r = op.receivers;
    if (op.kind == OpKind::allgather) return std::find(r.begin(), r.end(), d) != r.end();
    return (op.sender && *op.sender == d) || std::find(r.begin(), r.end() - 1, d) != r.end() - 1;
  };
  // What `d` received of `piece`'s task in the ops before k, in plan order.
  const auto receipts = [&](DeviceId d, const Piece& piece, int k) {
    std::vector<std::pair<Box, int>> out;
    for (int j = 0; j < k; ++j) {
      const Op& op = ops[j];
      const int n = static_cast<int>(op.receivers.size());
      for (int i = 0; i < n; ++i) {
        if (op.receivers[i] != d) continue;
        for (const Piece& p : op.pieces) {
          if (p.tensor != piece.tensor || p.task != piece.task) continue;
          if (op.kind != OpKind::allgather) {
            out.emplace_back(p.slice, j);
            continue;
          }
          for (int m = 0; m < n; ++m)
            if (const Box part = allgather_part(p, n, m); m != i && !part.empty())
              out.emplace_back(part, j);
        }
      }
    }
    return out;
  };
  Deps deps(ops.size());
  for (int k = 0; k < static_cast<int>(ops.size()); ++k) {
    const Op& op = ops[k];
    const int n = static_cast<int>(op.receivers.size());
    std::vector<DeviceId> senders = op.receivers;
    if (op.kind != OpKind::allgather) senders.pop_back();
    if (op.sender) senders.push_back(*op.sender);
    for (DeviceId d : senders)
      for (int j = k - 1; j >= 0; --j)
        if (sends_in(ops[j], d)) {
          deps[k].push_back(j);
          break;
        }
    const auto contribute = [&](DeviceId d, const Piece& piece, const Box& box) {
      const TensorResharding& t = batch.tensors[piece.tensor];
      std::optional<Box> tile;
      for (int64_t i = 0; i < t.src.mesh.size(); ++i)
        if (t.src.mesh.device_at(i) == d) tile = tile_at(t.tensor, t.src, i);
      const auto received = receipts(d, piece, k);
      const auto holding = find_holding(
          tile ? &*tile : nullptr, received,
          [](const std::pair<Box, int>& r) -> const Box& { return r.first; }, box);
      if (holding && *holding != kHeldInSourceTile) deps[k].push_back(received[*holding].second);
    };
    for (const Piece& piece : op.pieces) {
      if (op.kind == OpKind::allgather) {
        for (int i = 0; i < n; ++i)
          if (const Box part = allgather_part(piece, n, i); !part.empty())
            contribute(op.receivers[i], piece, part);
      } else if (op.sender) {
        contribute(*op.sender, piece, piece.slice);
      }
    }
    std::sort(deps[k].begin(), deps[k].end());
    deps[k].erase(std::unique(deps[k].begin(), deps[k].end()), deps[k].end());
  }
  return deps;
}

// op_dependencies keeps only the receipts some op looks up; every plan's dependencies are still
// those of the rule played with every receipt kept. Batches of several tensors sharing devices,
// single tensors of every strategy (allgather parts, copies, relays forwarding receipts).
TEST(OpDependenciesTest, PlannedPlansDependOnWhatTheRuleSays) {
  int checked = 0;
  int with_receipt_dependencies = 0;
  const auto check = [&](const Plan& plan) {
    const Deps deps = op_dependencies(plan.batch, plan.ops);
    ASSERT_EQ(deps, naive_dependencies(plan.batch, plan.ops));
    ++checked;
    // A relay's later send of what it received is a receipt dependency the rule must keep.
    bool forwards = false;
    for (size_t k = 0; k < plan.ops.size(); ++k)
      for (int j : deps[k])
        for (DeviceId r : plan.ops[j].receivers) forwards |= plan.ops[k].sender == r;
    with_receipt_dependencies += forwards ? 1 : 0;
  };
  for (const Resharding& problem : testing::property_corpus(25, testing::sanitized_count(40)))
    for (Strategy strategy : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast})
      check(make_plan(problem, PlanOptions{.strategy = strategy}));
  std::mt19937 rng(2025);
  for (int i = 0; i < 20; ++i) check(make_plan(testing::random_batch(rng, 6)));
  EXPECT_EQ(checked, 3 * testing::sanitized_count(40) + 20);
  EXPECT_GT(with_receipt_dependencies, 0);
}

TEST(OpDependenciesTest, PlannedPlansHaveSortedDistinctEarlierDependencies) {
  int checked = 0;
  for (const Resharding& problem : testing::property_corpus(21, 60))
    for (Strategy strategy : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast}) {
      const Plan plan = make_plan(problem, PlanOptions{.strategy = strategy, .search_effort = 0});
      const Deps deps = op_dependencies(plan.batch, plan.ops);
      ASSERT_EQ(deps.size(), plan.ops.size());
      for (int k = 0; k < static_cast<int>(deps.size()); ++k) {
        for (size_t i = 0; i < deps[k].size(); ++i) {
          ASSERT_GE(deps[k][i], 0);
          ASSERT_LT(deps[k][i], k);
          if (i > 0) {
            ASSERT_LT(deps[k][i - 1], deps[k][i]);
          }
        }
      }
      ++checked;
    }
  EXPECT_EQ(checked, 3 * 60);
}

}  // namespace
}  // namespace meshcast
