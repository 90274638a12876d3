// The Chrome/Perfetto trace of a simulated plan: device tracks with their ops, NIC counters.
#include "meshcast/sim/trace.h"

#include <gtest/gtest.h>

namespace meshcast {
namespace {

TEST(SimTraceTest, DeviceTracksHoldTheirOpsAndNicCountersFollowTheRates) {
  Plan plan;
  plan.batch.cluster = Cluster{.hosts = 3, .devices_per_host = 2, .latency = 1e-6};
  plan.batch.tensors.push_back({.name = "vector", .tensor = TensorSpec{{1 << 30}, DType::int8}});
  const int64_t bytes = 125'000'000;  // 0.1 s on a 10 Gbps NIC
  plan.ops.push_back(Op{.id = 0,
                        .kind = OpKind::broadcast,
                        .pieces = {{0, 0, Box{{{0, bytes}}}, bytes}},
                        .bytes = bytes,
                        .sender = 0,
                        .receivers = {2, 4},
                        .chunk_bytes = 1 << 20});
  plan.ops.push_back(Op{.id = 1,
                        .kind = OpKind::send,
                        .pieces = {{0, 0, Box{{{0, bytes}}}, bytes}},
                        .bytes = bytes,
                        .sender = 0,
                        .receivers = {1}});
  const Cluster& c = plan.batch.cluster;
  const SimResult r = simulate(plan, c, {.record_link_rates = true});
  const auto trace = chrome_trace(plan, c, r);
  EXPECT_TRUE(trace.contains("meshcast_version"));

  int thread_names = 0;
  std::vector<nlohmann::json> slices, host0_out;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") ++thread_names;
    if (e["ph"] == "X") slices.push_back(e);
    if (e["ph"] == "C" && e["pid"] == 0 && e["name"] == "nic0.out") host0_out.push_back(e);
  }
  EXPECT_EQ(thread_names, 6);
  // The broadcast on devices 0, 2, 4; the send on devices 0 and 1, after the broadcast (device
  // 0's send port).
  ASSERT_EQ(slices.size(), 5u);
  for (const auto& s : slices) {
    const int op = s["args"]["op"];
    EXPECT_DOUBLE_EQ(s["ts"].get<double>(), r.ops[op].start_s * 1e6);
    EXPECT_DOUBLE_EQ(s["dur"].get<double>(), (r.ops[op].end_s - r.ops[op].start_s) * 1e6);
  }
  EXPECT_EQ(slices[0]["name"], "broadcast 0");
  EXPECT_EQ(slices[0]["pid"], 0);
  EXPECT_EQ(slices[0]["tid"], 0);
  EXPECT_EQ(slices[2]["pid"], 2);  // device 4 is host 2's first device
  EXPECT_GE(slices[4]["ts"].get<double>(),
            slices[0]["ts"].get<double>() + slices[0]["dur"].get<double>());
  // Host 0's NIC sends the broadcast at 10 Gbps, then idles (the send stays inside host 0).
  ASSERT_EQ(host0_out.size(), 2u);
  EXPECT_NEAR(host0_out[0]["args"]["Gbps"].get<double>(), 10.0, 1e-9);
  EXPECT_EQ(host0_out[1]["args"]["Gbps"].get<double>(), 0.0);
  EXPECT_NEAR(host0_out[1]["ts"].get<double>(), r.ops[0].end_s * 1e6, 1e-3);
}

}  // namespace
}  // namespace meshcast
