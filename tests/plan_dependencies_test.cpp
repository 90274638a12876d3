// op_dependencies: the full-duplex start rule (docs/concepts.md, Execution) on hand-written ops,
// and its invariants on planned plans.
#include "meshcast/plan/dependencies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "corpus.h"
#include "meshcast/plan/planner.h"

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

TEST(OpDependenciesTest, OpsOnOnePortFollowPlanOrder) {
  const std::vector<Op> ops{
      send(0, 2, 0, 4),  // 0
      send(1, 3, 4, 8),  // 1: other ports
      send(0, 3, 0, 4),  // 2: device 0's send port (op 0), device 3's receive port (op 1)
      send(1, 2, 4, 8),  // 3: device 1's send port (op 1), device 2's receive port (op 0)
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {0, 1}, {0, 1}}));
}

TEST(OpDependenciesTest, ADeviceSendsWhatItReceivedOnlyAfterTheReceipt) {
  const std::vector<Op> ops{
      send(0, 2, 0, 4),  // 0: device 2 receives [0,4)
      send(1, 3, 4, 8),  // 1
      send(2, 1, 0, 4),  // 2: no port in common with op 0, but sends what op 0 delivers
      send(1, 0, 4, 8),  // 3: device 1's send port (op 1); op 2 used only its receive port
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {0}, {1}}));
}

TEST(OpDependenciesTest, ASourceTileIsHeldFromTheStart) {
  // Device 0 receives [4,8) first; sending its own [0,4) waits for neither that receipt nor its
  // receive port.
  const std::vector<Op> ops{send(1, 0, 4, 8), send(0, 3, 0, 4)};
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}}));
}

TEST(OpDependenciesTest, RelaysOfABroadcastUseBothPortsAndTheLastReceiverOnlyItsReceivePort) {
  const std::vector<Op> ops{
      op(OpKind::broadcast, 0, {2, 3}, {piece(0, 4)}),  // 0: relay 2, last receiver 3
      send(1, 0, 4, 8),                                 // 1: independent
      send(1, 3, 4, 8),  // 2: device 3's receive port (op 0), device 1's send port (op 1)
      send(3, 1, 0, 4),  // 3: device 3's send port is free, but it sends what op 0 delivered
      // 4: device 1's send port (op 2), relay 2's receive port (op 0), device 0's (op 1); op 3
      // used device 1's receive port only.
      op(OpKind::broadcast, 1, {2, 0}, {piece(4, 8)}),
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {}, {0, 1}, {0}, {0, 1, 2}}));
}

TEST(OpDependenciesTest, AnAllgatherWaitsOnBothPortsOfEveryMemberAndForTheReceiptsOfItsParts) {
  const std::vector<Op> ops{
      send(0, 2, 0, 2),  // 0: device 2 receives [0,2), its part of the gather
      send(1, 2, 4, 8),  // 1: then [4,8) (its receive port)
      send(0, 3, 2, 4),  // 2: device 3 receives [2,4), its part (device 0's send port: op 0)
      // 3: both ports of 2 (op 1: port; op 0: its part) and of 3 (op 2).
      op(OpKind::allgather, std::nullopt, {2, 3}, {piece(0, 4)}),
      send(2, 1, 2, 4),  // 4: device 2 holds [2,4) through op 3, whose send port it also used
  };
  const Deps deps = op_dependencies(two_shards(), ops);
  EXPECT_EQ(deps[2], (std::vector<int>{0}));
  EXPECT_EQ(deps[3], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(deps[4], (std::vector<int>{3}));
}

TEST(OpDependenciesTest, AnAllgatherPieceWithAHolderWaitsOnlyForThatHolder) {
  Piece whole = piece(0, 4);
  whole.holder = 1;  // receivers[1] = device 0 holds it in its source tile
  const std::vector<Op> ops{
      send(1, 2, 4, 8),                                      // 0: device 2's receive port
      op(OpKind::allgather, std::nullopt, {2, 0}, {whole}),  // 1: ports of 2 (op 0)
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {0}}));
}

TEST(OpDependenciesTest, ACopyUsesBothPortsOfItsDevice) {
  const std::vector<Op> ops{
      send(1, 0, 4, 8),                         // 0: device 0's receive port
      op(OpKind::copy, 0, {0}, {piece(0, 4)}),  // 1: waits for it
      send(0, 3, 0, 4),                         // 2: device 0's send port (op 1)
  };
  EXPECT_EQ(op_dependencies(two_shards(), ops), (Deps{{}, {0}, {1}}));
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
        }
        ASSERT_TRUE(std::adjacent_find(deps[k].begin(), deps[k].end(), std::greater_equal<>()) ==
                    deps[k].end());
      }
      ++checked;
    }
  EXPECT_EQ(checked, 3 * 60);
}

}  // namespace
}  // namespace meshcast
