#include "meshcast/pipeline/runtime.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "meshcast/error.h"
#include "meshcast/runtime/local/local_executor.h"
#include "pipeline_models.h"

namespace meshcast::pipeline {
namespace {

using nlohmann::json;

std::unique_ptr<Executor> local_executor() {
  return make_local_executor({.threads = 1});
}

RuntimeResult play(const PipelineModel& model, ScheduleKind kind, const RuntimeOptions& options) {
  const Schedule schedule =
      make_schedule(kind, static_cast<int>(model.stages.size()), model.microbatches);
  return run_pipeline(model, schedule, local_executor, options);
}

std::string rejection(const PipelineModel& model, const Schedule& schedule,
                      const RuntimeOptions& options = {}) {
  try {
    run_pipeline(model, schedule, local_executor, options);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "accepted";
}

// The proof that schedules and reshardings are right: every weight gradient of the pipelined run
// equals the whole model's, for every schedule, strategy and overlap, with and without skips.
TEST(PipelineRuntime, RealGradientsMatchTheWholeModelForEveryMethod) {
  for (const json& doc : {test_models::chain_model(), test_models::skip_model()})
    test_models::check_every_method(model_from_json(doc), local_executor, true);
}

TEST(PipelineRuntime, MeasuredPeakInFlightEqualsTheSchedulesPrediction) {
  const PipelineModel model = model_from_json(test_models::skip_model());
  for (ScheduleKind kind : generated_kinds()) {
    SCOPED_TRACE(to_string(kind));
    const RuntimeResult r = play(model, kind, {.warmup_iterations = 0});
    std::vector<int> measured;
    for (const auto& st : r.measured.stages) measured.push_back(st.peak_in_flight);
    EXPECT_EQ(measured, r.predicted_peak_in_flight);
    EXPECT_EQ(r.predicted_peak_in_flight,
              peak_in_flight(make_schedule(kind, 4, model.microbatches)));
  }
}

// Every compute step of the measured timeline waits for its input: a forward of stage i+1 starts
// after the transfer of its activation arrived, which started after stage i's forward ended.
TEST(PipelineRuntime, StagesComputeOnlyOnArrivedData) {
  const PipelineModel model = model_from_json(test_models::chain_model());
  const RuntimeResult r = play(model, ScheduleKind::eager_1f1b, {.warmup_iterations = 0});
  for (const auto& t : r.measured.transfers) {
    const auto& producer = r.measured.timeline[t.from_stage];
    const auto& consumer = r.measured.timeline[t.to_stage];
    const SpanKind pass = t.payload == Payload::activation ? SpanKind::forward : SpanKind::backward;
    auto find = [&](const std::vector<Span>& spans) {
      return *std::find_if(spans.begin(), spans.end(), [&](const Span& s) {
        return s.kind == pass && s.microbatch == t.microbatch;
      });
    };
    EXPECT_GE(t.start, find(producer).end);
    EXPECT_GE(find(consumer).start, t.end);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The paper's claim for eager-1F1B: a transfer time c (0 < c <= F) costs 2(n-1)c in total, for
// any number of microbatches, because the extra warm-up forwards hide it.
TEST(PipelineRuntime, EagerOneFOneBGrowsByTwoNMinusOneTransferDelays) {
  const double forward = 0.03, delay = 0.015;
  json doc = test_models::chain_model(forward);
  doc["stages"].push_back({{"mesh", "2"}, {"first_host", 3}, {"forward_s", forward}});
  doc["cluster"]["hosts"] = 4;
  doc["edges"].push_back(
      {{"from", 2},
       {"to", 3},
       {"tensors", {{{"shape", {8, 6}}, {"src_spec", "S0R"}, {"dst_spec", "RR"}}}}});
  doc["stages"][0]["backward_s"] = forward;  // B = F for every stage
  for (auto& st : doc["stages"]) st["backward_s"] = forward;
  doc["microbatches"] = 4;
  const PipelineModel model = model_from_json(doc);
  const int n = 4;
  std::vector<double> growth;
  // Five repeats, the median: sleeping threads wake late on a loaded machine.
  for (int repeat = 0; repeat < 5; ++repeat) {
    const double free =
        play(model, ScheduleKind::eager_1f1b, {.warmup_iterations = 0}).measured.makespan_s;
    const double delayed =
        play(model, ScheduleKind::eager_1f1b, {.transfer_delay_s = delay, .warmup_iterations = 0})
            .measured.makespan_s;
    growth.push_back((delayed - free) / (2 * (n - 1) * delay));
  }
  EXPECT_NEAR(median(growth), 1.0, 0.35);
}

TEST(PipelineRuntime, RefusesWhatItCannotPlay) {
  const PipelineModel model = model_from_json(test_models::chain_model());
  // Stage 1 waits for the gradient of microbatch 0 before it forwards microbatch 1, which stage 2
  // needs before it runs the backward of microbatch 0.
  const Schedule deadlock =
      schedule_from_text("stage 0: F0 F1 B0 B1\nstage 1: F0 B0 F1 B1\nstage 2: F0 F1 B0 B1\n");
  EXPECT_NE(rejection(model, deadlock).find("deadlock"), std::string::npos);

  EXPECT_NE(rejection(model, make_schedule(ScheduleKind::gpipe, 2, 4)).find("3 stages"),
            std::string::npos);

  json fixed = test_models::chain_model();
  fixed["edges"][1] = {{"from", 1}, {"to", 2}, {"time_s", 0.1}};
  EXPECT_NE(rejection(model_from_json(fixed), make_schedule(ScheduleKind::gpipe, 3, 4))
                .find("edge 1->2 gives a fixed time"),
            std::string::npos);

  json mixed = test_models::chain_model();
  mixed["edges"][1]["tensors"][0]["src_spec"] = "S0R";  // stage 1 receives RR, sends S0R
  EXPECT_NE(rejection(model_from_json(mixed), make_schedule(ScheduleKind::gpipe, 3, 4),
                      {.compute = ComputeMode::real})
                .find("one tile per device"),
            std::string::npos);

  EXPECT_NE(rejection(model, make_schedule(ScheduleKind::gpipe, 3, 4), {.transfer_delay_s = -1})
                .find("bad transfer delay -1"),
            std::string::npos);
  EXPECT_THROW(parse_compute_mode("fast"), InvalidArgument);
  EXPECT_THROW(scale_tensors(model, 0), InvalidArgument);
  EXPECT_EQ(scale_tensors(model, 0.5).edges[0].tensors[0].tensor.shape,
            (std::vector<int64_t>{4, 3}));
}

}  // namespace
}  // namespace meshcast::pipeline
