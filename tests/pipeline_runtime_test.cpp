#include "meshcast/pipeline/runtime.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

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

// Interleaved-1F1B with two chunks per stage: transfers between the virtual stages of two
// stages (the chain twice through the stages, and a skip connection) share one channel per stage
// pair, and every gradient still matches the whole model's.
TEST(PipelineRuntime, InterleavedChunksMatchTheWholeModelForEveryStrategy) {
  const PipelineModel model = model_from_json(test_models::interleaved_model());
  test_models::check_every_method(model, local_executor, true, test_models::kInterleavedChunks);
}

// Measured from what the runtime holds: the forward stashes alive after each step.
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

// The simulator's costs for `model`'s compute times, with every edge taking `activation_s` and
// `gradient_s`.
PipelineCosts costs_of(const PipelineModel& model, double activation_s, double gradient_s) {
  PipelineCosts costs;
  for (const auto& st : model.stages) costs.stages.push_back({st.forward_s, st.backward_s, 0});
  for (const auto& e : model.edges) costs.edges.push_back({e.edge, activation_s, gradient_s});
  return costs;
}

// How late a run's sleeping threads woke: the largest, over the stages, of the measured compute
// time over the configured one (1 on an idle machine).
double compute_stretch(const PipelineResult& measured, const PipelineResult& simulated) {
  double stretch = 0;
  for (size_t d = 0; d < measured.stages.size(); ++d)
    stretch = std::max(stretch, measured.stages[d].busy_s / simulated.stages[d].busy_s);
  return stretch;
}

// Computes more than this much over their configured time: the machine was too loaded to judge a
// time that late wake-ups make longer.
constexpr double kLoadedStretch = 1.05;

// How much longer than their injected `delay` the transfers of `measured` took together (the
// copies themselves take next to nothing): delays that wake late stretch a makespan as late
// computes do. Together, as compute_stretch counts the computes: one of a hundred transfers woke
// up to a third of its delay late on an idle machine.
double transfer_stretch(const PipelineResult& measured, double delay) {
  if (measured.transfers.empty()) return 1;
  double took = 0;
  for (const TransferSpan& t : measured.transfers) took += t.end - t.start;
  return took / (delay * static_cast<double>(measured.transfers.size()));
}

// One attempt of a timing check: what was out of bounds ("" when all was within), and whether
// that is excused because the machine was too loaded (kLoadedStretch).
struct Attempt {
  std::string out_of_bounds;
  bool excused = false;
};

// A timing check on a machine shared with other jobs, where a starved thread can wake many
// milliseconds late for a while: up to three attempts, each printed. It passes at the first
// attempt within bounds; it fails if an attempt was out of bounds on an unloaded machine; when
// every attempt was excused, it says so and is not judged.
void within_three_attempts(const std::function<Attempt()>& attempt) {
  std::string failure;
  for (int i = 1; i <= 3; ++i) {
    const Attempt a = attempt();
    if (a.out_of_bounds.empty()) return;
    fmt::print("attempt {} out of bounds{}: {}\n", i,
               a.excused ? " (excused: computes or delays ran late, the machine is loaded)" : "",
               a.out_of_bounds);
    if (!a.excused) failure = a.out_of_bounds;
  }
  if (!failure.empty())
    ADD_FAILURE() << failure;
  else
    fmt::print("NOT JUDGED: the machine was too loaded in all three attempts\n");
}

// On the simulator's network (each transfer its edge's time, ports shared), the runtime's
// makespan is the simulator's for every schedule, with and without overlap: it posts, queues and
// waits for transfers as the simulator does. Transfers take longer than a forward, so GPipe's
// queue up on their channel, and the skip model's stage 0 sends on three edges at once, which
// share its port. With two interleaved chunks per stage, the edges between the chunks of two
// stages (and a skip connection) share one channel, one message at a time, as in the simulator.
// Sleeping threads wake late on a loaded machine, so measured may exceed simulated a little
// (median of three iterations); measured below simulated would mean the runtime moves more at
// once than the model allows.
TEST(PipelineRuntime, MeasuredMakespanMatchesTheSimulatorOnItsNetwork) {
  json skip = test_models::skip_model();
  json interleaved = test_models::interleaved_model();
  for (json* doc : {&skip, &interleaved})
    for (auto& st : (*doc)["stages"]) st["forward_s"] = 0.01;
  // (interleaved-1f1b with one chunk is eager-1f1b's order)
  const std::vector<ScheduleKind> one_chunk = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                               ScheduleKind::eager_1f1b};
  struct Case {
    json doc;
    int chunks;
    std::vector<ScheduleKind> kinds;
  };
  for (const Case& c :
       {Case{test_models::chain_model(0.01), 1, one_chunk}, Case{skip, 1, one_chunk},
        Case{interleaved, test_models::kInterleavedChunks, {ScheduleKind::interleaved_1f1b}}}) {
    const PipelineModel model = model_from_json(c.doc);
    const PipelineCosts costs = costs_of(model, 0.015, 0.012);
    for (ScheduleKind kind : c.kinds)
      for (bool overlap : {true, false}) {
        const Schedule schedule = make_schedule(
            kind, static_cast<int>(model.stages.size()) / c.chunks, model.microbatches, c.chunks);
        const PipelineResult simulation = simulate_pipeline(schedule, costs, {.overlap = overlap});
        const double simulated = simulation.makespan_s;
        within_three_attempts([&] {
          const PipelineResult run = run_pipeline(model, schedule, local_executor,
                                                  {.overlap = overlap,
                                                   .emulated_network = costs,
                                                   .warmup_iterations = 0,
                                                   .iterations = 3})
                                         .measured;
          const double ratio = run.makespan_s / simulated;
          const std::string line = fmt::format(
              "{} stages, {}, overlap {:d}: measured {:.4f} s, simulated {:.4f} s ({:.3f})",
              model.stages.size(), to_string(kind), overlap, run.makespan_s, simulated, ratio);
          fmt::print("{}\n", line);
          if (ratio >= 0.97 && ratio <= 1.25) return Attempt{};
          // Late wake-ups only lengthen a run: below the simulator is never excused.
          return Attempt{line + ", expected 0.97..1.25",
                         ratio > 1.25 && compute_stretch(run, simulation) > kLoadedStretch};
        });
      }
  }
}

// The paper's claim for eager-1F1B: a transfer time c (0 < c <= F) costs 2(n-1)c in total, for
// any number of microbatches, because the extra warm-up forwards hide it; 1F1B pays more, and
// the more the more microbatches. Measured with an injected delay on every transfer (timed
// compute, in-process copies that take next to no time themselves), each makespan the median of
// three iterations; 1F1B's growth is measured too, so that the test tells the two apart.
TEST(PipelineRuntime, EagerOneFOneBGrowsByTwoNMinusOneTransferDelays) {
  const double forward = 0.02, delay = 0.01;
  const int n = 4;
  json doc = test_models::chain_model(forward);
  doc["stages"].push_back({{"mesh", "2"}, {"first_host", 3}, {"forward_s", forward}});
  doc["cluster"]["hosts"] = n;
  doc["edges"].push_back(
      {{"from", 2},
       {"to", 3},
       {"tensors", {{{"shape", {8, 6}}, {"src_spec", "S0R"}, {"dst_spec", "RR"}}}}});
  for (auto& st : doc["stages"]) st["backward_s"] = forward;  // B = F
  doc["microbatches"] = 2 * n;
  const PipelineModel model = model_from_json(doc);
  const double claim = 2 * (n - 1) * delay;
  double stretch = 0;    // of the attempt's runs' computes
  double transfers = 0;  // and of their transfers
  auto growth = [&](ScheduleKind kind) {
    const Schedule schedule = make_schedule(kind, n, model.microbatches);
    const PipelineResult free = simulate_pipeline(schedule, costs_of(model, 0, 0));
    const double simulated =
        simulate_pipeline(schedule, costs_of(model, delay, delay)).makespan_s - free.makespan_s;
    auto makespan = [&](double c) {
      const PipelineResult run =
          run_pipeline(model, schedule, local_executor,
                       {.transfer_delay_s = c, .warmup_iterations = 0, .iterations = 3})
              .measured;
      stretch = std::max(stretch, compute_stretch(run, free));
      if (c > 0) transfers = std::max(transfers, transfer_stretch(run, c));
      return run.makespan_s;
    };
    return std::pair{makespan(delay) - makespan(0), simulated};
  };
  within_three_attempts([&] {
    stretch = transfers = 0;
    const auto [eager, eager_simulated] = growth(ScheduleKind::eager_1f1b);
    const auto [one_f_one_b, one_f_one_b_simulated] = growth(ScheduleKind::one_f_one_b);
    EXPECT_NEAR(eager_simulated, claim, 1e-9);
    EXPECT_GE(one_f_one_b_simulated, 2 * claim);
    const std::string line = fmt::format(
        "growth by the delays: eager-1f1b {:.4f} s (2(n-1)c = {:.4f} s), 1f1b {:.4f} s "
        "(simulated {:.4f} s); computes up to {:.3f}x their time, delays {:.3f}x",
        eager, claim, one_f_one_b, one_f_one_b_simulated, stretch, transfers);
    fmt::print("{}\n", line);
    // Each within a third, either way; 1F1B's growth clearly above eager-1F1B's.
    const bool within = std::abs(eager / claim - 1) <= 1.0 / 3 &&
                        std::abs(one_f_one_b / one_f_one_b_simulated - 1) <= 1.0 / 3 &&
                        one_f_one_b > 1.5 * eager;
    if (within) return Attempt{};
    return Attempt{line + ": expected each within 1/3 of its figure and 1f1b > 1.5 x eager",
                   std::max(stretch, transfers) > kLoadedStretch};
  });
}

// One stage, no edges: no channel, so the runtime's collectives and the devices it plays come
// from elsewhere; the stage computes every step in the schedule's order. Real compute, whose
// blocks are sized by edge tensors, is refused.
TEST(PipelineRuntime, PlaysAOneStagePipeline) {
  const PipelineModel model = model_from_json(json::parse(R"({
    "cluster": {"hosts": 1, "devices_per_host": 2},
    "microbatches": 3,
    "stages": [{"mesh": "2", "first_host": 0, "forward_s": 0.001, "backward_s": 0.002}],
    "edges": []
  })"));
  const RuntimeResult r = play(model, ScheduleKind::one_f_one_b, {.warmup_iterations = 0});
  ASSERT_EQ(r.measured.timeline.size(), 1u);
  std::vector<std::string> steps;
  for (const Span& s : r.measured.timeline[0])
    steps.push_back(fmt::format("{}{}", s.kind == SpanKind::forward ? 'F' : 'B', s.microbatch));
  EXPECT_EQ(steps, (std::vector<std::string>{"F0", "B0", "F1", "B1", "F2", "B2"}));
  EXPECT_TRUE(r.measured.transfers.empty());
  EXPECT_GE(r.measured.stages[0].busy_s, 3 * (0.001 + 0.002));
  EXPECT_NE(rejection(model, make_schedule(ScheduleKind::one_f_one_b, 1, 3),
                      {.compute = ComputeMode::real})
                .find("the model has no edges (one stage): expected --compute timed"),
            std::string::npos);
}

// What run_pipeline allocates, counted before it does: the tiles of every message (edge tensor,
// microbatch, direction) on the devices asked about, and the blocks' weights with real compute.
TEST(PipelineRuntime, BufferBytesCountEveryMessagesTiles) {
  const PipelineModel model = model_from_json(test_models::chain_model());
  // Edge 0->1: S0R on devices 0,1 (24 floats each) -> RR on 2,3 (48 each), and back; edge 1->2:
  // RR on 2,3 -> S0R on 4,5. Devices 0 and 2 hold per microbatch: device 0 24 + 24 floats of
  // edge 0->1 (activation source, gradient destination), device 2 48 + 48 of edge 0->1 and
  // 48 + 48 of edge 1->2.
  const double per_microbatch = (24 + 24 + 4 * 48) * 4.0;
  EXPECT_EQ(pipeline_buffer_bytes(model, 4, ComputeMode::timed, {0, 2}), 4 * per_microbatch);
  // h = 6: two 6x6 float weights per stage (3), and per stage device asked about (2) two 6x6
  // double gradients, twice.
  EXPECT_EQ(pipeline_buffer_bytes(model, 4, ComputeMode::real, {0, 2}),
            4 * per_microbatch + 3 * 2 * 36 * 4 + 2 * 4 * 36 * 8);
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
  // A delay the clock cannot wait for is refused, not shortened to nothing.
  EXPECT_NE(rejection(model, make_schedule(ScheduleKind::gpipe, 3, 4), {.transfer_delay_s = 1e300})
                .find("bad transfer delay 1e+300 s: expected a time in 0..1e+09 s"),
            std::string::npos);
  // Iteration counts whose sum would overflow an int.
  EXPECT_NE(rejection(model, make_schedule(ScheduleKind::gpipe, 3, 4),
                      {.warmup_iterations = 1, .iterations = 2147483647})
                .find("bad iteration count 2147483647: expected 1..1000000000 runs"),
            std::string::npos);
  // Interleaving: a stage's chunks share its mesh; an edge between two chunks of one stage is
  // not a transfer the runtime plays.
  const Schedule interleaved = make_schedule(ScheduleKind::interleaved_1f1b, 3, 6, 2);
  json moved = test_models::interleaved_model();
  moved["stages"][4]["first_host"] = 2;
  EXPECT_NE(rejection(model_from_json(moved), interleaved)
                .find("model stage 4 is chunk 1 of stage 1, whose chunk 0 (model stage 1) is on "
                      "devices [2,3]: expected the same mesh, got devices [4,5]"),
            std::string::npos);
  json same_stage = test_models::interleaved_model();
  same_stage["edges"].push_back(same_stage["edges"][0]);
  same_stage["edges"].back()["to"] = 3;
  EXPECT_NE(rejection(model_from_json(same_stage), interleaved)
                .find("edge 0->3 joins two chunks of stage 0"),
            std::string::npos);

  EXPECT_THROW(parse_compute_mode("fast"), InvalidArgument);
  EXPECT_THROW(shrink_tensors(model, 0), InvalidArgument);
  EXPECT_EQ(shrink_tensors(model, 0.5).edges[0].tensors[0].tensor.shape,
            (std::vector<int64_t>{4, 3}));
}

}  // namespace
}  // namespace meshcast::pipeline
