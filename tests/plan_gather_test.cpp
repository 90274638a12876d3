// Same-mesh redistributions: receivers that already hold parts gather the rest in one allgather
// whose pieces name their holder (docs/concepts.md, Plan), planned, validated and simulated.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "corpus.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/validate.h"
#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"

namespace meshcast {
namespace {

// One host of 4 devices; tensor 4x1024x512 float32 (8 MiB) on mesh 1x4 = devices 0..3 on both
// sides (the CLI's --src-mesh 1x4 --dst-host-offset 0).
Resharding same_host(const std::string& src_spec, const std::string& dst_spec,
                     std::vector<int64_t> mesh = {1, 4}) {
  Resharding p;
  p.tensor = {{4, 1024, 512}, DType::float32};
  p.cluster.hosts = 1;
  p.cluster.devices_per_host = 4;
  p.src = Layout{Mesh(mesh, {0, 1, 2, 3}), ShardingSpec::parse(src_spec)};
  p.dst = Layout{Mesh(mesh, {0, 1, 2, 3}), ShardingSpec::parse(dst_spec)};
  p.validate();
  return p;
}

std::vector<const Op*> allgathers(const Plan& plan) {
  std::vector<const Op*> out;
  for (const Op& op : plan.ops)
    if (op.kind == OpKind::allgather) out.push_back(&op);
  return out;
}

TEST(SameMeshGatherTest, ShardToReplicateOnOneHostIsOneAllgatherNearTheDeviceBound) {
  const Resharding p = same_host("RS1R", "RRR");
  for (Strategy s : {Strategy::broadcast, Strategy::allgather}) {
    const Plan plan = make_plan(p, {.strategy = s});
    validate_plan(plan);
    const auto gathers = allgathers(plan);
    ASSERT_EQ(gathers.size(), 1u) << to_string(s);
    const Op& op = *gathers[0];
    EXPECT_EQ(op.receivers, (std::vector<DeviceId>{0, 1, 2, 3}));
    ASSERT_EQ(op.pieces.size(), 4u);
    for (const Piece& piece : op.pieces) {
      // Device k holds columns [256k, 256k+256) of dim 1 and gives exactly those.
      ASSERT_GE(piece.holder, 0);
      EXPECT_EQ(piece.slice.dims[1].lo, 256 * op.receivers[piece.holder]);
      EXPECT_EQ(piece.slice.dims[1].size(), 256);
    }
    // Every device takes in the 6 MiB it lacks over its 100 Gbps link: the device-link bound.
    EXPECT_DOUBLE_EQ(plan.lower_bound_s, 6.0 * (1 << 20) / 12.5e9 + 5e-6);
    const double time = simulate(plan).time_s;
    EXPECT_LE(time, 1.10 * plan.lower_bound_s) << to_string(s);
    EXPECT_GE(time, plan.lower_bound_s);
  }
}

TEST(SameMeshGatherTest, LowerBoundOfSameDeviceLayoutsIsTheDeviceLinkBound) {
  // Nothing moves when every device already holds its destination tile.
  EXPECT_EQ(make_plan(same_host("RRR", "RRR")).lower_bound_s, 0);
  EXPECT_EQ(make_plan(same_host("RRR", "RS1R")).lower_bound_s, 0);
  // Shard(1) -> Shard(0): every device lacks 3 of its 4 blocks of 512 KiB, over its own link.
  EXPECT_DOUBLE_EQ(make_plan(same_host("RS1R", "S1RR")).lower_bound_s,
                   1.5 * (1 << 20) / 12.5e9 + 5e-6);
}

TEST(SameMeshGatherTest, EachRowOfATwoDimensionalMeshGathersItsOwnPieces) {
  // (Shard(0), Shard(1)) -> (Shard(0), Replicate()) on a 2x2 mesh of one host: rows {0,1} and
  // {2,3} each gather their two column blocks, both at once.
  const Plan plan = make_plan(same_host("S0S1R", "S0RR", {2, 2}));
  validate_plan(plan);
  const auto gathers = allgathers(plan);
  ASSERT_EQ(gathers.size(), 2u);
  EXPECT_EQ(gathers[0]->receivers, (std::vector<DeviceId>{0, 1}));
  EXPECT_EQ(gathers[1]->receivers, (std::vector<DeviceId>{2, 3}));
  EXPECT_LE(simulate(plan).time_s, 1.10 * plan.lower_bound_s);
}

TEST(SameMeshGatherTest, TasksWithTwoHoldersInTheGroupKeepTheirBroadcasts) {
  // RS1R over a 2x2 mesh of one host: each column block is held by two devices of the group; an
  // allgather would hand the other holder its block again, so the plan keeps broadcasts.
  const Plan plan = make_plan(same_host("RS1R", "RRR", {2, 2}));
  validate_plan(plan);
  EXPECT_TRUE(allgathers(plan).empty());
}

TEST(SameMeshGatherTest, TensorsOfABatchGatherInOneOp) {
  Batch batch = Batch::of_one(same_host("RS1R", "RRR"), "a");
  Resharding second = same_host("S1RR", "RRR");
  second.tensor.shape = {8, 64, 64};
  batch.tensors.push_back({"b", second.tensor, second.src, second.dst});
  const Plan plan = make_plan(batch);
  validate_plan(plan);
  const auto gathers = allgathers(plan);
  ASSERT_EQ(gathers.size(), 1u);
  std::vector<int> tensors;
  for (const Piece& piece : gathers[0]->pieces) tensors.push_back(piece.tensor);
  EXPECT_EQ(std::count(tensors.begin(), tensors.end(), 0), 4);
  EXPECT_EQ(std::count(tensors.begin(), tensors.end(), 1), 4);
  EXPECT_LE(simulate(plan).time_s, 1.10 * plan.lower_bound_s);
}

TEST(SameMeshGatherTest, SendRecvAndSingleTasksKeepTheirOps) {
  // send_recv is one send per receiver by definition.
  EXPECT_TRUE(
      allgathers(make_plan(same_host("RS1R", "RRR"), {.strategy = Strategy::send_recv})).empty());
  // One task whose holder feeds the others: a chained broadcast is as fast, and kept.
  Resharding one = same_host("RRR", "RRR");
  one.src = Layout{Mesh({1}, {0}), ShardingSpec::parse("RRR")};
  const Plan plan = make_plan(one);
  EXPECT_TRUE(allgathers(plan).empty());
  validate_plan(plan);
}

TEST(SameMeshGatherTest, AHolderOutsideTheAllgatherOrOnAnotherKindIsRefused) {
  Plan plan = make_plan(same_host("RS1R", "RRR"));
  auto it = std::find_if(plan.ops.begin(), plan.ops.end(),
                         [](const Op& op) { return op.kind == OpKind::allgather; });
  ASSERT_NE(it, plan.ops.end());
  Plan bad = plan;
  bad.ops[it - plan.ops.begin()].pieces[0].holder = 4;
  EXPECT_THROW(
      {
        try {
          validate_plan(bad);
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("holder 4"), std::string::npos) << e.what();
          throw;
        }
      },
      InvalidArgument);
  EXPECT_THROW(simulate(bad), InvalidArgument);
  bad = plan;
  auto copy = std::find_if(bad.ops.begin(), bad.ops.end(),
                           [](const Op& op) { return op.kind == OpKind::copy; });
  ASSERT_NE(copy, bad.ops.end());
  copy->pieces[0].holder = 0;
  EXPECT_THROW(validate_plan(bad), InvalidArgument);
  // A holder that does not hold its piece: the piece's part is where it says, or refused.
  bad = plan;
  Op& gather = bad.ops[it - plan.ops.begin()];
  std::swap(gather.pieces[0].holder, gather.pieces[1].holder);
  EXPECT_THROW(validate_plan(bad), InvalidArgument);
}

// Random same-mesh batches (fixed seeds): every strategy's plan is valid, its holders survive
// the plan document, and no simulated time beats the lower bound. Gathers do show up.
TEST(SameMeshGatherTest, RandomSameMeshBatchesGiveValidPlans) {
  std::mt19937 rng(17);
  int held = 0;
  for (int round = 0; round < 40; ++round) {
    const int per_host = 1 + static_cast<int>(rng() % 4);
    const int hosts = 1 + static_cast<int>(rng() % 3);
    const Batch batch =
        testing::same_mesh_batch(rng, 1 + static_cast<int>(rng() % 4), hosts, per_host);
    for (Strategy s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast})
      for (Balance b : {Balance::none, Balance::size, Balance::order}) {
        const Plan plan = make_plan(batch, {.strategy = s, .balance = b, .search_effort = 0.2});
        ASSERT_NO_THROW(validate_plan(plan)) << "round " << round;
        EXPECT_EQ(plan_from_json(plan_to_json(plan)), plan) << "round " << round;
        EXPECT_GE(simulate(plan).time_s, plan.lower_bound_s * (1 - 1e-9)) << "round " << round;
        for (const Op& op : plan.ops)
          for (const Piece& p : op.pieces) held += p.holder >= 0;
      }
  }
  EXPECT_GT(held, 0);
}

}  // namespace
}  // namespace meshcast
