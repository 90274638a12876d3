#include "meshcast/pipeline/model.h"

#include <gtest/gtest.h>

#include "meshcast/error.h"
#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"

namespace meshcast::pipeline {
namespace {

using nlohmann::json;

// Two (1,4) meshes on two hosts; stage 0 produces a batch-sharded activation that stage 1 needs
// replicated, so send/recv sends it four times over the NIC and broadcast once.
json two_stage_model() {
  return json::parse(R"({
    "name": "test",
    "cluster": {"hosts": 2, "devices_per_host": 4, "nic_gbps": 10, "dev_gbps": 100},
    "microbatches": 8,
    "samples_per_microbatch": 4,
    "device_tflops": 2,
    "stages": [
      {"mesh": "4", "first_host": 0, "forward_tflop": 8, "activation_bytes": 1000},
      {"mesh": "4", "devices": [4, 5, 6, 7], "forward_s": 0.5, "backward_s": 0.75}
    ],
    "edges": [
      {"from": 0, "to": 1, "tensors": [
        {"shape": [64, 1024, 256], "dtype": "float16", "src_spec": "S0RR", "dst_spec": "RRR"}]}
    ]
  })");
}

std::string rejection(const json& j) {
  try {
    model_from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(PipelineModelTest, ReadsStagesAndComputeTimes) {
  const auto m = model_from_json(two_stage_model());
  EXPECT_EQ(m.name, "test");
  ASSERT_EQ(m.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(m.stages[0].forward_s, 8.0 / (4 * 2));  // TFLOP over 4 devices at 2 TFLOP/s
  EXPECT_DOUBLE_EQ(m.stages[0].backward_s, 2.0);           // twice the forward by default
  EXPECT_DOUBLE_EQ(m.stages[1].backward_s, 0.75);
  EXPECT_EQ(m.stages[0].mesh.devices(), (std::vector<DeviceId>{0, 1, 2, 3}));
  EXPECT_EQ(m.stages[1].mesh.devices(), (std::vector<DeviceId>{4, 5, 6, 7}));
  EXPECT_EQ(m.microbatches, 8);
  EXPECT_DOUBLE_EQ(m.samples_per_microbatch, 4);
}

TEST(PipelineModelTest, EdgeTimesComeFromThePlannerAndSimulator) {
  const auto m = model_from_json(two_stage_model());
  const auto& e = m.edges[0];
  const double send_recv = edge_time(m, e, {Strategy::send_recv}, false);
  const double broadcast = edge_time(m, e, {Strategy::broadcast}, false);
  EXPECT_EQ(edge_time(m, e, {std::nullopt}, false), 0);
  // The receiving host's NIC takes 4 copies with send/recv and 1 with broadcast.
  const double bytes = 64.0 * 1024 * 256 * 2;
  EXPECT_GE(send_recv, 4 * bytes / m.cluster.nic_bandwidth * 0.99);
  EXPECT_GE(broadcast, bytes / m.cluster.nic_bandwidth * 0.99);
  EXPECT_LT(broadcast, send_recv / 2);
  // The gradient goes back from the replicated layout to the sharded one: planned the other way.
  Resharding back{m.edges[0].tensors[0].tensor,
                  Layout{m.stages[1].mesh, ShardingSpec::parse("RRR")},
                  Layout{m.stages[0].mesh, ShardingSpec::parse("S0RR")}, m.cluster};
  EXPECT_DOUBLE_EQ(edge_time(m, e, {Strategy::broadcast}, true),
                   simulate(make_plan(back, {.strategy = Strategy::broadcast})).time_s);
  const auto costs = model_costs(m, {Strategy::broadcast});
  EXPECT_DOUBLE_EQ(costs.edges[0].activation_s, broadcast);
  EXPECT_DOUBLE_EQ(costs.stages[0].activation_bytes, 1000);
}

TEST(PipelineModelTest, FixedTimesAndSkipConnections) {
  auto j = two_stage_model();
  j["stages"].push_back({{"mesh", "2"}, {"devices", {0, 1}}, {"forward_s", 1}});
  j["edges"].push_back({{"from", 1}, {"to", 2}, {"time_s", 0.25}});
  j["edges"].push_back({{"from", 0}, {"to", 2}, {"time_s", 0.5}});
  const auto m = model_from_json(j);
  const auto costs = model_costs(m, {Strategy::broadcast});
  EXPECT_DOUBLE_EQ(costs.edges[2].gradient_s, 0.5);
  EXPECT_DOUBLE_EQ(model_costs(m, {std::nullopt}).edges[2].activation_s, 0);
  const auto s = make_schedule(ScheduleKind::eager_1f1b, 3, m.microbatches);
  const auto r = simulate_pipeline(s, costs);
  int skips = 0;
  for (const auto& t : r.transfers) skips += t.from_stage == 0 && t.to_stage == 2;
  EXPECT_EQ(skips, m.microbatches);
}

TEST(PipelineModelTest, RejectsBadDocumentsByName) {
  auto j = two_stage_model();
  j["edges"] = json::array();
  EXPECT_EQ(rejection(j), "model: edges lack 0->1: every consecutive pair of stages needs an edge");
  j = two_stage_model();
  j["stages"][0].erase("forward_tflop");
  EXPECT_EQ(rejection(j), "stage 0: expected \"forward_s\" or \"forward_tflop\"");
  j = two_stage_model();
  j.erase("device_tflops");
  EXPECT_EQ(rejection(j), "stage 0: \"forward_tflop\" needs a top-level \"device_tflops\"");
  j = two_stage_model();
  j["stages"][1]["devices"] = {4, 5, 6, 9};
  EXPECT_NE(rejection(j).find("device 9"), std::string::npos) << rejection(j);
  j = two_stage_model();
  j["edges"][0]["tensors"][0]["dst_spec"] = "S0S0R";
  EXPECT_NE(rejection(j).find("mesh axis 0 is used twice"), std::string::npos) << rejection(j);
  j = two_stage_model();
  j["edges"][0]["time_s"] = 1;
  EXPECT_EQ(rejection(j), "edge 0: expected either \"time_s\" or \"tensors\"");
  j = two_stage_model();
  j["stages"][1]["forward_s"] = -1;
  EXPECT_EQ(rejection(j), "stage 1: bad \"forward_s\" -1: expected a number >= 0");
  j = two_stage_model();
  j["device_tflops"] = 0;
  EXPECT_EQ(rejection(j), "model: bad \"device_tflops\" 0: expected a number > 0");
  j = two_stage_model();
  j["microbatches"] = "many";
  EXPECT_EQ(rejection(j), "model: \"microbatches\" \"many\": expected an integer");
  j = two_stage_model();
  j["edges"].push_back({{"from", 1}, {"to", 0}, {"time_s", 1}});
  EXPECT_EQ(rejection(j), "bad edge 1->0: expected 0 <= from < to < 2 (the virtual stages)");
}

}  // namespace
}  // namespace meshcast::pipeline
