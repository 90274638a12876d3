#include "meshcast/plan/json.h"

#include <gtest/gtest.h>

#include "corpus.h"
#include "meshcast/error.h"
#include "meshcast/planner/planner.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

Plan sample_plan() {
  Plan plan;
  plan.batch = Batch::of_one(paper_cases()[6].problem);
  plan.strategy = Strategy::broadcast;
  plan.balance = Balance::order;
  plan.ops.push_back(
      Op{.id = 0,
         .kind = OpKind::broadcast,
         .pieces = {{0, 0, Box{{{0, 1024}, {0, 256}, {0, 512}}}, 1024 * 256 * 512 * 4}},
         .bytes = 1024 * 256 * 512 * 4,
         .sender = 0,
         .receivers = {4, 5, 6, 7, 8, 9, 10, 11},
         .chunk_bytes = 1 << 20});
  plan.ops.push_back(
      Op{.id = 1,
         .kind = OpKind::allgather,
         .pieces = {{0, 1, Box{{{0, 1024}, {256, 512}, {0, 512}}}, 1024 * 256 * 512 * 4}},
         .bytes = 1024 * 256 * 512 * 4,
         .sender = std::nullopt,
         .receivers = {4, 5, 6, 7},
         .chunk_bytes = 0});
  plan.lower_bound_s = 0.5;
  plan.network_bytes = 12345;
  return plan;
}

TEST(PlanJsonTest, RoundTrips) {
  const Plan plan = sample_plan();
  const auto j = plan_to_json(plan);
  EXPECT_TRUE(j.contains("meshcast_version"));
  EXPECT_TRUE(j["ops"][1]["sender"].is_null());
  EXPECT_EQ(j["tensors"][0]["src"]["spec"], "S1RR");
  EXPECT_EQ(j["ops"][1]["pieces"][0]["tensor"], 0);
  EXPECT_EQ(j["cluster"]["devices_per_host"], 4);
  EXPECT_EQ(plan_from_json(nlohmann::json::parse(j.dump())), plan);
}

TEST(PlanJsonTest, NamesTheBadKey) {
  auto j = plan_to_json(sample_plan());
  j["ops"][0]["kind"] = "teleport";
  try {
    plan_from_json(j);
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("teleport"), std::string::npos) << e.what();
  }
  j = plan_to_json(sample_plan());
  j["ops"][0]["pieces"][0].erase("slice");
  try {
    plan_from_json(j);
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("ops[0].pieces[0]: missing key 'slice'"),
              std::string::npos)
        << e.what();
  }
  j = plan_to_json(sample_plan());
  j["ops"][1]["pieces"] = nlohmann::json::array();
  EXPECT_THROW(plan_from_json(j), ParseError);
  j = plan_to_json(sample_plan());
  j["tensors"][0]["dst"]["devices"][0] = 99;
  EXPECT_THROW(plan_from_json(j), ParseError);
}

// The single-tensor form that meshcast wrote before batches: "tensor", "src", "dst", "cluster"
// at the top and ops without "tensor". It loads as a batch of one.
TEST(PlanJsonTest, LoadsTheSingleTensorForm) {
  const Plan plan = sample_plan();
  nlohmann::json j = plan_to_json(plan);
  j.erase("tensors");
  j.update(resharding_to_json(plan.batch.resharding(0)));
  for (auto& op : j["ops"]) {
    op["task"] = op["pieces"][0]["task"];
    op["slice"] = op["pieces"][0]["slice"];
    op.erase("pieces");
  }
  EXPECT_EQ(plan_from_json(j), plan);
}

// The batch form that meshcast wrote before buckets: each op names its one tensor, task and slice
// instead of listing pieces. It loads as ops of one piece each.
TEST(PlanJsonTest, LoadsOpsWithoutPieces) {
  std::mt19937 rng(5);
  const Plan plan = make_plan(testing::random_batch(rng, 4), {.bucket_bytes = 0});
  nlohmann::json j = plan_to_json(plan);
  for (auto& op : j["ops"]) {
    ASSERT_EQ(op["pieces"].size(), 1u);
    for (const char* key : {"tensor", "task", "slice"}) op[key] = op["pieces"][0][key];
    op.erase("pieces");
  }
  EXPECT_EQ(plan_from_json(j), plan);
}

TEST(PlanJsonTest, BatchPlansRoundTrip) {
  std::mt19937 rng(17);
  for (int round = 0; round < 20; ++round) {
    const Batch batch = testing::random_batch(rng, 1 + static_cast<int>(rng() % 6));
    for (Strategy s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast}) {
      const Plan plan = make_plan(batch, {.strategy = s, .split = round % 2 == 0});
      EXPECT_EQ(plan_from_json(nlohmann::json::parse(plan_to_json(plan).dump())), plan);
    }
  }
}

TEST(PlanJsonTest, RejectsSlicesOfTooManyDimensions) {
  auto j = plan_to_json(sample_plan());
  auto& slice = j["ops"][0]["pieces"][0]["slice"];
  slice = nlohmann::json::array();
  for (int d = 0; d < 9; ++d) slice.push_back({0, 1});
  try {
    plan_from_json(j);
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("9 dimensions, expected at most 8"), std::string::npos)
        << e.what();
  }
}

TEST(AllgatherPartTest, SplitsLongestDimensionLikeTorchChunk) {
  const Box b{{{0, 4}, {10, 20}, {0, 3}}};
  EXPECT_EQ(allgather_part(b, 4, 0), (Box{{{0, 4}, {10, 13}, {0, 3}}}));
  EXPECT_EQ(allgather_part(b, 4, 3), (Box{{{0, 4}, {19, 20}, {0, 3}}}));
  int64_t total = 0;
  for (int i = 0; i < 4; ++i) total += allgather_part(b, 4, i).volume();
  EXPECT_EQ(total, b.volume());
}

}  // namespace
}  // namespace meshcast
