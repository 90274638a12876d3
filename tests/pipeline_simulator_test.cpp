#include "meshcast/pipeline/simulator.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "meshcast/error.h"

namespace meshcast::pipeline {
namespace {

double makespan(ScheduleKind kind, int n, int m, double c, bool overlap = true) {
  const auto s = make_schedule(kind, n, m);
  return simulate_pipeline(s, uniform_costs(n, 1, 1, c), {.overlap = overlap}).makespan_s;
}

// Every stage's spans are disjoint and in order; every transfer starts after the compute that
// produced it and ends before the compute that needs it; transfers on one pair do not overlap.
void expect_causal(const Schedule& s, const PipelineCosts& costs, const PipelineResult& r) {
  const double eps = 1e-9;
  // (virtual stage, pass, microbatch) -> [start, end)
  std::map<std::tuple<int, Pass, int>, std::pair<double, double>> compute;
  for (int d = 0; d < s.stages; ++d) {
    double last_end = 0;
    for (const auto& span : r.timeline[d]) {
      EXPECT_GE(span.start, last_end - eps) << "stage " << d;
      EXPECT_LE(span.start, span.end);
      last_end = span.end;
      if (span.kind == SpanKind::comm) continue;
      const Pass pass = span.kind == SpanKind::forward ? Pass::forward : Pass::backward;
      compute[{s.virtual_stage(d, span.chunk), pass, span.microbatch}] = {span.start, span.end};
    }
  }
  ASSERT_EQ(compute.size(), 2u * s.virtual_stages() * s.microbatches);
  std::map<std::pair<int, int>, double> pair_free;
  for (const auto& t : r.transfers) {
    const Edge e = costs.edges[t.message / 2 / s.microbatches].edge;
    const bool act = t.payload == Payload::activation;
    const auto producer =
        compute[{act ? e.from : e.to, act ? Pass::forward : Pass::backward, t.microbatch}];
    const auto consumer =
        compute[{act ? e.to : e.from, act ? Pass::forward : Pass::backward, t.microbatch}];
    EXPECT_GE(t.start, producer.second - eps);
    EXPECT_LE(t.end, consumer.first + eps);
    const double alone = act ? costs.edges[t.message / 2 / s.microbatches].activation_s
                             : costs.edges[t.message / 2 / s.microbatches].gradient_s;
    EXPECT_GE(t.end - t.start, alone - eps);
    auto& free_at = pair_free[{t.from_stage, t.to_stage}];
    EXPECT_GE(t.start, free_at - eps);
    free_at = t.end;
  }
}

TEST(PipelineSimulatorTest, FreeCommunicationTakesTwoTimesMPlusNMinusOneTicks) {
  for (int n : {1, 2, 4, 8})
    for (int m : {1, 4, 8, 32}) {
      const double ticks = 2.0 * (m + n - 1);
      for (bool overlap : {true, false}) {
        EXPECT_DOUBLE_EQ(makespan(ScheduleKind::one_f_one_b, n, m, 0, overlap), ticks);
        EXPECT_DOUBLE_EQ(makespan(ScheduleKind::eager_1f1b, n, m, 0, overlap), ticks);
        EXPECT_DOUBLE_EQ(makespan(ScheduleKind::gpipe, n, m, 0, overlap), ticks);
        EXPECT_DOUBLE_EQ(makespan(ScheduleKind::interleaved_1f1b, n, m, 0, overlap), ticks);
      }
      const auto gpipe =
          simulate_pipeline(make_schedule(ScheduleKind::gpipe, n, m), uniform_costs(n, 1, 1, 0));
      EXPECT_NEAR(gpipe.bubble_fraction, (n - 1.0) / (m + n - 1), 1e-12) << n << "x" << m;
      EXPECT_DOUBLE_EQ(gpipe.microbatches_per_s, m / ticks);
    }
}

// The paper's claim: with a cross-stage delay c <= the forward time and overlap on, eager-1F1B
// only pays the transfers of the pipeline's fill and drain, 2(n-1)c, whatever m is; 1F1B pays a
// transfer on the critical path of every steady-state step, so its extra time grows with m.
// Checked with F = B = 1 and with the usual B = 2F.
TEST(PipelineSimulatorTest, EagerHidesTransfersWhileOneFOneBPaysThemPerMicrobatch) {
  for (double backward : {1.0, 2.0})
    for (int n : {2, 4, 6})
      for (double c : {0.25, 0.5, 1.0}) {
        double previous_f1b_extra = -1;
        for (int m : {8, 16, 32}) {
          auto run = [&](ScheduleKind kind, double transfer) {
            return simulate_pipeline(make_schedule(kind, n, m),
                                     uniform_costs(n, 1, backward, transfer))
                .makespan_s;
          };
          const double free = (1 + backward) * (m + n - 1);
          ASSERT_DOUBLE_EQ(run(ScheduleKind::eager_1f1b, 0), free);
          ASSERT_DOUBLE_EQ(run(ScheduleKind::one_f_one_b, 0), free);
          const auto where = ::testing::Message()
                             << "B=" << backward << " n=" << n << " m=" << m << " c=" << c;
          EXPECT_NEAR(run(ScheduleKind::eager_1f1b, c), free + 2 * (n - 1) * c, 1e-9) << where;
          const double f1b_extra = run(ScheduleKind::one_f_one_b, c) - free;
          EXPECT_GT(f1b_extra, 2 * (n - 1) * c + 1e-9) << where;
          EXPECT_GT(f1b_extra, previous_f1b_extra + 1e-9) << where;
          previous_f1b_extra = f1b_extra;
        }
      }
}

TEST(PipelineSimulatorTest, OverlapNeverLosesAndBlockingPaysEveryTransfer) {
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::eager_1f1b})
    for (int n : {2, 4})
      for (int m : {4, 8}) {
        const double overlapped = makespan(kind, n, m, 0.5, true);
        const double blocking = makespan(kind, n, m, 0.5, false);
        EXPECT_LE(overlapped, blocking + 1e-9) << to_string(kind);
        // Blocking: every stage's stream carries its own sends besides its compute.
        const auto r = simulate_pipeline(make_schedule(kind, n, m), uniform_costs(n, 1, 1, 0.5),
                                         {.overlap = false});
        for (int d = 0; d < n; ++d) {
          const int links = (d > 0) + (d + 1 < n);
          EXPECT_GE(r.stages[d].transfer_wait_s, links * m * 0.5 - 1e-9) << d;
        }
      }
}

TEST(PipelineSimulatorTest, FreeTransfersLeaveOnlyDependencyWaits) {
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::eager_1f1b})
    for (bool overlap : {true, false}) {
      const auto free = simulate_pipeline(make_schedule(kind, 4, 8), uniform_costs(4, 1, 2, 0),
                                          {.overlap = overlap});
      const auto paid = simulate_pipeline(make_schedule(kind, 4, 8), uniform_costs(4, 1, 2, 0.5),
                                          {.overlap = overlap});
      double dependency = 0, transfer = 0;
      for (int d = 0; d < 4; ++d) {
        EXPECT_EQ(free.stages[d].transfer_wait_s, 0) << to_string(kind) << d;
        dependency += free.stages[d].dependency_wait_s;
        transfer += paid.stages[d].transfer_wait_s;
        EXPECT_LE(paid.stages[d].transfer_wait_s + paid.stages[d].dependency_wait_s,
                  paid.stages[d].idle_s + 1e-9);
      }
      EXPECT_GT(dependency, 0) << to_string(kind);  // the pipeline's fill and drain
      EXPECT_GT(transfer, 0) << to_string(kind);
    }
}

TEST(PipelineSimulatorTest, TimelinesAreCausal) {
  for (auto kind : generated_kinds())
    for (int n : {1, 2, 4})
      for (int m : {4, 8})
        for (bool overlap : {true, false}) {
          const int chunks = kind == ScheduleKind::interleaved_1f1b ? 2 : 1;
          const auto s = make_schedule(kind, n, m, chunks);
          auto costs = uniform_costs(s.virtual_stages(), 1, 2, 0.7);
          costs.stages[0].forward_s = 1.5;  // uneven stages
          const auto r = simulate_pipeline(s, costs, {.overlap = overlap});
          expect_causal(s, costs, r);
        }
}

TEST(PipelineSimulatorTest, InterleavingShrinksTheBubbleByTheChunks) {
  // Megatron-LM: with v chunks of 1/v the work each, the bubble is (n-1)(F+B)/v.
  for (int n : {2, 4})
    for (int v : {1, 2, 4}) {
      const int m = 2 * n;
      const auto s = make_schedule(ScheduleKind::interleaved_1f1b, n, m, v);
      const auto r = simulate_pipeline(s, uniform_costs(n * v, 1.0 / v, 1.0 / v, 0));
      EXPECT_NEAR(r.makespan_s, 2.0 * m + 2.0 * (n - 1) / v, 1e-9) << "n=" << n << " v=" << v;
    }
}

TEST(PipelineSimulatorTest, ConcurrentTransfersLeavingOneStageShareItsPort) {
  // Stage 0 sends microbatch 0 to stage 1 and, by a skip connection, to stage 2 at once.
  const auto s = make_schedule(ScheduleKind::gpipe, 3, 1);
  PipelineCosts costs = uniform_costs(3, 1, 1, 1);
  costs.edges.push_back({{0, 2}, 1, 1});
  const auto r = simulate_pipeline(s, costs);
  int from_zero = 0;
  for (const auto& t : r.transfers)
    if (t.from_stage == 0) {
      ++from_zero;
      EXPECT_DOUBLE_EQ(t.start, 1);
      EXPECT_DOUBLE_EQ(t.end, 3);  // two flows at half rate each
    }
  EXPECT_EQ(from_zero, 2);
  expect_causal(s, costs, r);
  // Stage 2 needs stage 1's output (F on [3,4], arrives at 5) and the skip activation (at 3).
  ASSERT_EQ(r.timeline[2].front().kind, SpanKind::comm);  // waiting for its inputs
  EXPECT_DOUBLE_EQ(r.timeline[2].front().end, 5);
  EXPECT_EQ(r.timeline[2][1].kind, SpanKind::forward);
  EXPECT_DOUBLE_EQ(r.timeline[2][1].start, 5);
}

TEST(PipelineSimulatorTest, TransfersOnOnePairRunInOrder) {
  // c > F: the second activation waits for the first on the same link.
  const auto s = make_schedule(ScheduleKind::eager_1f1b, 2, 2);
  const auto r = simulate_pipeline(s, uniform_costs(2, 1, 1, 2));
  ASSERT_GE(r.transfers.size(), 2u);
  EXPECT_DOUBLE_EQ(r.transfers[0].start, 1);
  EXPECT_DOUBLE_EQ(r.transfers[0].end, 3);
  EXPECT_DOUBLE_EQ(r.transfers[1].start, 3);
  EXPECT_DOUBLE_EQ(r.transfers[1].end, 5);
}

TEST(PipelineSimulatorTest, ReportsMemoryInMicrobatchesAndBytes) {
  const int n = 4, m = 8;
  auto costs = uniform_costs(n, 1, 1, 0);
  for (int i = 0; i < n; ++i) costs.stages[i].activation_bytes = 1000.0 * (i + 1);
  const auto eager = simulate_pipeline(make_schedule(ScheduleKind::eager_1f1b, n, m), costs);
  const auto f1b = simulate_pipeline(make_schedule(ScheduleKind::one_f_one_b, n, m), costs);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(eager.stages[i].peak_in_flight, 2 * (n - i) - 1);
    EXPECT_EQ(f1b.stages[i].peak_in_flight, n - i);
    EXPECT_DOUBLE_EQ(eager.stages[i].peak_activation_bytes, 1000.0 * (i + 1) * (2 * (n - i) - 1));
    EXPECT_DOUBLE_EQ(f1b.stages[i].busy_s, 2.0 * m);
    EXPECT_DOUBLE_EQ(f1b.stages[i].idle_s, f1b.makespan_s - 2.0 * m);
  }
  const auto j = result_to_json(eager);
  EXPECT_EQ(j["stages"][0]["peak_in_flight"], 7);
}

TEST(PipelineSimulatorTest, RejectsBadCosts) {
  const auto s = make_schedule(ScheduleKind::one_f_one_b, 3, 4);
  EXPECT_THROW(simulate_pipeline(s, uniform_costs(2, 1, 1, 0)), InvalidArgument);
  auto costs = uniform_costs(3, 1, 1, 0);
  costs.stages[1].backward_s = -1;
  try {
    simulate_pipeline(s, costs);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "bad backward time -1 of 1: expected a finite time >= 0");
  }
  costs = uniform_costs(3, 1, 1, 0);
  costs.edges.push_back({{2, 1}, 0, 0});
  EXPECT_THROW(simulate_pipeline(s, costs), InvalidArgument);
}

TEST(PipelineSimulatorTest, ReportsDeadlockOfABrokenSchedule) {
  const auto s = schedule_from_text("F0 B0 F1 B1\nF1 B1 F0 B0\n");
  EXPECT_THROW(simulate_pipeline(s, uniform_costs(2, 1, 1, 0.1)), InvalidArgument);
}

}  // namespace
}  // namespace meshcast::pipeline
