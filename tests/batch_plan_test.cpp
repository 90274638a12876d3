// Batches through the planner, the validator, the estimate and the simulator: random batches
// (every dtype, tiny tensors, meshes differing from tensor to tensor) under every strategy.
#include <gtest/gtest.h>

#include "corpus.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/validate.h"
#include "meshcast/planner/estimate.h"
#include "meshcast/planner/lower_bound.h"
#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

std::vector<PlanOptions> every_strategy() {
  std::vector<PlanOptions> all;
  for (Strategy s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast})
    for (Balance b : {Balance::none, Balance::size, Balance::order})
      for (bool split : {false, true}) all.push_back({.strategy = s, .balance = b, .split = split});
  return all;
}

TEST(BatchPlanTest, RandomBatchesGiveValidPlansUnderEveryStrategy) {
  std::mt19937 rng(2026);
  int plans = 0;
  const int rounds = testing::sanitized_count(40);
  for (int round = 0; round < rounds; ++round) {
    const Batch batch = testing::random_batch(rng, 1 + static_cast<int>(rng() % 8));
    const auto tasks = decompose(batch);
    for (const PlanOptions& o : every_strategy()) {
      const Plan plan = make_plan(batch, o);
      ASSERT_NO_THROW(validate_plan(plan)) << "round " << round;
      EXPECT_DOUBLE_EQ(plan.lower_bound_s, lower_bound(batch, tasks));
      EXPECT_GE(estimate(plan), plan.lower_bound_s * (1 - 1e-9)) << "round " << round;
      EXPECT_GE(simulate(plan).time_s, plan.lower_bound_s * (1 - 1e-9)) << "round " << round;
      // Every op names a tensor of the batch and moves that tensor's bytes.
      for (const Op& op : plan.ops) {
        int64_t bytes = 0;
        for (const Piece& p : op.pieces) {
          ASSERT_GE(p.tensor, 0);
          ASSERT_LT(p.tensor, static_cast<int>(batch.tensors.size()));
          EXPECT_EQ(p.bytes, p.slice.volume() * dtype_size(batch.tensors[p.tensor].tensor.dtype));
          bytes += p.bytes;
        }
        EXPECT_EQ(op.bytes, bytes);
      }
      ++plans;
    }
  }
  EXPECT_EQ(plans, rounds * static_cast<int>(every_strategy().size()));
}

// The bound of a batch is the formula over all tasks together: never more than the tensors'
// bounds one after another.
TEST(BatchPlanTest, TheBoundOfABatchIsAtMostTheSumOfItsTensorsBounds) {
  std::mt19937 rng(7);
  for (int round = 0; round < 100; ++round) {
    const Batch batch = testing::random_batch(rng, 2 + static_cast<int>(rng() % 6));
    double sum = 0;
    for (size_t i = 0; i < batch.tensors.size(); ++i) {
      const Resharding one = batch.resharding(i);
      sum += lower_bound(one, decompose(one));
    }
    EXPECT_LE(lower_bound(batch, decompose(batch)), sum * (1 + 1e-12)) << "round " << round;
  }
}

// ... and never less than any one tensor's bound: moving the batch moves that tensor too. (The
// pooled term over all tasks alone could be: a tensor held by two hosts, pooled with one held by
// two others, would share four hosts' bandwidth.)
TEST(BatchPlanTest, TheBoundOfABatchIsAtLeastEachTensorsBound) {
  std::mt19937 rng(8);
  for (int round = 0; round < 100; ++round) {
    const Batch batch = testing::random_batch(rng, 2 + static_cast<int>(rng() % 6));
    const double joint = lower_bound(batch, decompose(batch));
    for (size_t i = 0; i < batch.tensors.size(); ++i) {
      const Resharding one = batch.resharding(i);
      EXPECT_GE(joint, lower_bound(one, decompose(one)) * (1 - 1e-12)) << "round " << round;
    }
  }
  // The case the pooled term alone misses: 64 MiB held by hosts 0 and 1, spread over hosts 4-7
  // (32 MiB per source NIC), pooled with 4 KiB held by hosts 2 and 3.
  Batch batch;
  batch.cluster = Cluster{.hosts = 9, .devices_per_host = 1};
  batch.tensors.push_back({"big", TensorSpec{{16 << 20}, DType::float32},
                           Layout{Mesh({2}, {0, 1}), ShardingSpec::parse("R")},
                           Layout{Mesh({4}, {4, 5, 6, 7}), ShardingSpec::parse("S0")}});
  batch.tensors.push_back({"small", TensorSpec{{1024}, DType::float32},
                           Layout{Mesh({2}, {2, 3}), ShardingSpec::parse("R")},
                           Layout{Mesh({1}, {8}), ShardingSpec::parse("R")}});
  const double per_nic = 32.0 * (1 << 20) / batch.cluster.nic_bandwidth;
  EXPECT_DOUBLE_EQ(lower_bound(batch, decompose(batch)), per_nic + batch.cluster.latency);
  // The term that says so is the big tensor's own (held({0, 1}) gives the same, and is named
  // after).
  const LowerBound bound = explain_lower_bound(batch, decompose(batch));
  EXPECT_EQ(bound.term, BoundTerm::first_tensor);
  EXPECT_EQ(bound.at, 0);
  EXPECT_EQ(describe(bound, batch),
            "first(S, B) of tensor 'big': what must cross a NIC leaves its holders' hosts at most "
            "at their rate");
}

// Joint planning: two tensors whose sources sit on different hosts send at the same time, so
// the batch finishes in about the time of its larger tensor, not of both one after another.
TEST(BatchPlanTest, TensorsFromDifferentHostsMoveAtOnce) {
  Batch batch;
  batch.cluster = Cluster{.hosts = 4, .devices_per_host = 1};
  const TensorSpec tensor{{1 << 20}, DType::float32};
  batch.tensors.push_back({"a", tensor, Layout{Mesh({1}, {0}), ShardingSpec::parse("R")},
                           Layout{Mesh({1}, {2}), ShardingSpec::parse("R")}});
  batch.tensors.push_back({"b", tensor, Layout{Mesh({1}, {1}), ShardingSpec::parse("R")},
                           Layout{Mesh({1}, {3}), ShardingSpec::parse("R")}});
  const Plan plan = make_plan(batch);
  const double one = make_plan(batch.resharding(0)).lower_bound_s;
  EXPECT_DOUBLE_EQ(plan.lower_bound_s, one);
  EXPECT_LT(simulate(plan).time_s, 1.05 * one);
}

TEST(BatchPlanTest, BadBatchesAreRefusedNamingTheTensor) {
  Batch batch = Batch::of_one(paper_cases()[0].problem, "w");
  batch.tensors.push_back(batch.tensors[0]);
  try {
    make_plan(batch);
    FAIL() << "a duplicate name was planned";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tensors[1] 'w': duplicate name"), std::string::npos)
        << e.what();
  }
}

TEST(BatchPlanTest, AnOpOfAMissingTensorIsRejected) {
  Plan plan = make_plan(paper_cases(64)[0].problem);
  plan.ops[0].pieces[0].tensor = 1;
  try {
    validate_plan(plan);
    FAIL() << "an op of tensor 1 passed in a batch of one";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 does not exist: the batch has 1 tensors"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace meshcast
