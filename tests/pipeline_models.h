// Small pipeline models for the runtime's tests, on the local backend and under mpirun, and the
// check both run: every schedule x strategy x overlap with real compute matches the whole model.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshcast/pipeline/runtime.h"

namespace meshcast::pipeline::test_models {

using nlohmann::json;

// Three stages of two devices on three hosts: the middle stage holds the activation replicated,
// so every strategy has real work (a scatter of rows, then a gather of them).
inline json chain_model(double forward_s = 0.001) {
  json j = json::parse(R"({
    "cluster": {"hosts": 3, "devices_per_host": 2, "nic_gbps": 10, "dev_gbps": 100},
    "microbatches": 4,
    "stages": [
      {"mesh": "2", "first_host": 0, "forward_s": 0.001},
      {"mesh": "2", "first_host": 1, "forward_s": 0.001},
      {"mesh": "2", "first_host": 2, "forward_s": 0.001}
    ],
    "edges": [
      {"from": 0, "to": 1, "tensors": [{"shape": [8, 6], "src_spec": "S0R", "dst_spec": "RR"}]},
      {"from": 1, "to": 2, "tensors": [{"shape": [8, 6], "src_spec": "RR", "dst_spec": "S0R"}]}
    ]
  })");
  for (auto& st : j["stages"]) st["forward_s"] = forward_s;
  return j;
}

// U-Transformer-like: four stages with skip connections 0->3 and 0->2 (two tensors), stage 2
// replicated.
inline json skip_model() {
  return json::parse(R"({
    "cluster": {"hosts": 4, "devices_per_host": 2, "nic_gbps": 10, "dev_gbps": 100},
    "microbatches": 4,
    "stages": [
      {"mesh": "2", "first_host": 0, "forward_s": 0.001},
      {"mesh": "2", "first_host": 1, "forward_s": 0.001},
      {"mesh": "2", "first_host": 2, "forward_s": 0.001},
      {"mesh": "2", "first_host": 3, "forward_s": 0.001}
    ],
    "edges": [
      {"from": 0, "to": 1, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "S0R"}]},
      {"from": 1, "to": 2, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "RR"}]},
      {"from": 2, "to": 3, "tensors": [{"shape": [12, 5], "src_spec": "RR", "dst_spec": "S0R"}]},
      {"from": 0, "to": 3, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "S0R"}]},
      {"from": 0, "to": 2, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "RR"},
                                       {"shape": [12, 5], "src_spec": "S0R", "dst_spec": "RR"}]}
    ]
  })");
}

// Interleaving: three stages of two devices on three hosts, two chunks each (chunk c of stage d is
// model stage 3c + d, on stage d's mesh), so that the chain 0->1->...->5 goes twice through the
// stages, plus a skip connection 0->4 that shares stage 0's channel to stage 1 with the chain's
// 0->1 and 3->4. Stages 1 and 4 hold the activation replicated.
inline json interleaved_model() {
  return json::parse(R"({
    "cluster": {"hosts": 3, "devices_per_host": 2, "nic_gbps": 10, "dev_gbps": 100},
    "microbatches": 6,
    "stages": [
      {"mesh": "2", "first_host": 0, "forward_s": 0.001},
      {"mesh": "2", "first_host": 1, "forward_s": 0.001},
      {"mesh": "2", "first_host": 2, "forward_s": 0.001},
      {"mesh": "2", "first_host": 0, "forward_s": 0.001},
      {"mesh": "2", "first_host": 1, "forward_s": 0.001},
      {"mesh": "2", "first_host": 2, "forward_s": 0.001}
    ],
    "edges": [
      {"from": 0, "to": 1, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "RR"}]},
      {"from": 1, "to": 2, "tensors": [{"shape": [12, 5], "src_spec": "RR", "dst_spec": "S0R"}]},
      {"from": 2, "to": 3, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "S0R"}]},
      {"from": 3, "to": 4, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "RR"}]},
      {"from": 4, "to": 5, "tensors": [{"shape": [12, 5], "src_spec": "RR", "dst_spec": "S0R"}]},
      {"from": 0, "to": 4, "tensors": [{"shape": [12, 5], "src_spec": "S0R", "dst_spec": "RR"}]}
    ]
  })");
}
constexpr int kInterleavedChunks = 2;

// Real compute, every generated schedule x strategy x overlap: every weight gradient within 1e-5
// of the whole model's, and the measured peak in-flight activations equal the schedule's.
// `whole_timeline`: this process holds every stage, so every transfer was recorded here.
// With `chunks` > 1 the model's stages are virtual stages and the schedule is interleaved-1F1B.
inline void check_every_method(const PipelineModel& model, const ExecutorFactory& make_executor,
                               bool whole_timeline, int chunks = 1) {
  const std::vector<ScheduleKind> kinds =
      chunks == 1 ? generated_kinds() : std::vector{ScheduleKind::interleaved_1f1b};
  for (ScheduleKind kind : kinds)
    for (Strategy strategy : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast})
      for (bool overlap : {true, false}) {
        SCOPED_TRACE(fmt::format("{} model stages, {} chunks, {}, {}, overlap {}",
                                 model.stages.size(), chunks, to_string(kind), to_string(strategy),
                                 overlap));
        const Schedule schedule = make_schedule(
            kind, static_cast<int>(model.stages.size()) / chunks, model.microbatches, chunks);
        const RuntimeResult r = run_pipeline(model, schedule, make_executor,
                                             {.compute = ComputeMode::real,
                                              .strategy = strategy,
                                              .overlap = overlap,
                                              .warmup_iterations = 0});
        ASSERT_TRUE(r.gradient_error.has_value());
        EXPECT_LE(*r.gradient_error, 1e-5);
        EXPECT_GT(r.measured.makespan_s, 0);
        std::vector<int> measured;
        for (const auto& st : r.measured.stages) measured.push_back(st.peak_in_flight);
        EXPECT_EQ(measured, r.predicted_peak_in_flight);
        if (whole_timeline) {
          EXPECT_EQ(r.measured.transfers.size(), 2 * model.microbatches * model.edges.size());
        }
      }
}

}  // namespace meshcast::pipeline::test_models
