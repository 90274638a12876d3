// op_dependencies: the start rule (a device sends one op at a time, receives passively)
// (docs/concepts.md, Execution) on hand-written ops, and its invariants on planned plans.
#include "meshcast/plan/dependencies.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "corpus.h"
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
