#include <gtest/gtest.h>

#include "meshcast/error.h"
#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/schedule.h"

namespace meshcast::pipeline {
namespace {

std::string rejection(const Schedule& s, const std::vector<Edge>& edges) {
  try {
    validate(s, edges);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "accepted";
}
std::string row_text(const Schedule& s) {
  std::string out;
  for (const auto& step : s.order[0]) out += (out.empty() ? "" : " ") + to_string(step, true);
  return out;
}
std::string rejection(const Schedule& s) {
  return rejection(s, chain_edges(s.virtual_stages()));
}

TEST(PipelineValidateTest, AcceptsEveryGeneratedSchedule) {
  for (auto kind : generated_kinds())
    for (int n : {1, 2, 3, 5})
      for (int m : {1, 2, 5, 10}) {
        const int chunks = kind == ScheduleKind::interleaved_1f1b && m % n == 0 ? 3 : 1;
        const auto s = make_schedule(kind, n, m, chunks);
        EXPECT_EQ(rejection(s), "accepted") << to_string(kind) << " n=" << n << " m=" << m;
      }
}

TEST(PipelineValidateTest, AcceptsSkipConnections) {
  // U-Net-like: stage 0 feeds stages 2 and 3 besides the chain.
  auto edges = chain_edges(4);
  edges.push_back({0, 3});
  edges.push_back({0, 2});
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::eager_1f1b})
    EXPECT_EQ(rejection(make_schedule(kind, 4, 6), edges), "accepted") << to_string(kind);
}

TEST(PipelineValidateTest, NamesMissingAndRepeatedSteps) {
  EXPECT_EQ(rejection(schedule_from_text("F0 F1 B0 B1\nF0 B0 F1\n")),
            "stage 1 lacks B1: expected every microbatch's forward and backward once");
  EXPECT_EQ(rejection(schedule_from_text("F0 F1 B0 B1 F1\nF0 B0 F1 B1\n")),
            "stage 0 step 4: F1 appears twice (first at step 1)");
  Schedule s = schedule_from_text("F0 F1 B0 B1\nF0 B0 F1 B1 F2\n");
  s.microbatches = 2;
  EXPECT_EQ(rejection(s),
            "stage 1 step 4: F2 is outside the schedule's 2 microbatches and 1 chunks");
  s.microbatches = 20'000'000;  // as a document may declare
  EXPECT_EQ(rejection(s),
            "schedule too large: 2 stages x 20000000 microbatches x 1 chunks = 40000000 "
            "microbatch-chunks, expected at most 1000000");
  s.microbatches = 2;
  s.order.pop_back();
  EXPECT_EQ(rejection(s), "schedule has 1 rows for 2 stages: expected one per stage");
}

TEST(PipelineValidateTest, NamesBackwardBeforeItsForward) {
  EXPECT_EQ(rejection(schedule_from_text("F0 B1 F1 B0\nF0 B0 F1 B1\n")),
            "stage 0 step 1: B1 comes before its forward F1 (step 2)");
}

// Each stage is locally fine, but stage 0 waits for microbatch 0's gradient before it sends
// microbatch 1's activation, and stage 1 runs microbatch 1 first.
TEST(PipelineValidateTest, FindsDeadlockAcrossStages) {
  EXPECT_EQ(rejection(schedule_from_text("F0 B0 F1 B1\nF1 B1 F0 B0\n")),
            "deadlock: stage 0 at step 1 (B0) waits for the gradient of microbatch 0 from stage "
            "1; stage 1 at step 0 (F1) waits for the activation of microbatch 1 from stage 0");
}

TEST(PipelineValidateTest, ChecksOrderBetweenChunksOfOneStage) {
  Schedule s = make_schedule(ScheduleKind::interleaved_1f1b, 1, 2, 2);
  EXPECT_EQ(rejection(s), "accepted");
  EXPECT_EQ(row_text(s), "0F0 1F0 1B0 0F1 0B0 1F1 1B1 0B1");
  // Swap the first two steps: chunk 1's forward of microbatch 0 now runs before chunk 0's.
  std::swap(s.order[0][0], s.order[0][1]);
  EXPECT_EQ(rejection(s), "stage 0 step 0: 1F0 comes before 0F0 (step 1) that it needs");
  // Chunk 0's backward of microbatch 0 needs chunk 1's.
  s = make_schedule(ScheduleKind::interleaved_1f1b, 1, 2, 2);
  std::swap(s.order[0][2], s.order[0][4]);
  EXPECT_EQ(rejection(s), "stage 0 step 2: 0B0 comes before 1B0 (step 4) that it needs");
}

TEST(PipelineValidateTest, RejectsBadEdges) {
  const auto s = make_schedule(ScheduleKind::gpipe, 3, 2);
  EXPECT_EQ(rejection(s, {{0, 1}, {1, 3}}),
            "bad edge 1->3: expected 0 <= from < to < 3 (the virtual stages)");
  EXPECT_EQ(rejection(s, {{1, 0}}),
            "bad edge 1->0: expected 0 <= from < to < 3 (the virtual stages)");
  EXPECT_EQ(rejection(s, {{0, 1}, {0, 1}}), "edge 0->1 is given twice");
}

TEST(PipelineValidateTest, LoweringPlacesSendsAfterAndReceivesBefore) {
  const auto s = make_schedule(ScheduleKind::one_f_one_b, 2, 2);
  const auto lowered = lower(s, chain_edges(2));
  EXPECT_EQ(lowered_to_text(s, lowered),
            "stage 0: F0 send(a0->1) F1 send(a1->1) recv(g0<-1) B0 recv(g1<-1) B1\n"
            "stage 1: recv(a0<-0) F0 B0 send(g0->0) recv(a1<-0) F1 B1 send(g1->0)\n");
  // Every send has exactly one matching receive.
  std::vector<int> sends(lowered.messages.size()), recvs(lowered.messages.size());
  for (const auto& program : lowered.programs)
    for (const auto& a : program) {
      if (a.kind == ActionKind::send) ++sends[a.message];
      if (a.kind == ActionKind::recv) ++recvs[a.message];
    }
  EXPECT_EQ(sends, recvs);
  EXPECT_EQ(std::count(sends.begin(), sends.end(), 1), 4);
}

}  // namespace
}  // namespace meshcast::pipeline
