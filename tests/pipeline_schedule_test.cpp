#include "meshcast/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <sstream>

#include "meshcast/error.h"
#include "meshcast/pipeline/lower.h"

namespace meshcast::pipeline {
namespace {

std::string row(const Schedule& s, int stage) {
  std::string out;
  for (const auto& step : s.order[stage]) {
    if (!out.empty()) out += ' ';
    out += to_string(step, s.chunks > 1);
  }
  return out;
}

// the paper's per-device orders for n = 4, m = 8.
TEST(PipelineScheduleTest, PaperOrdersForFourStagesEightMicrobatches) {
  const auto f1b = make_schedule(ScheduleKind::one_f_one_b, 4, 8);
  EXPECT_EQ(row(f1b, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  const auto eager = make_schedule(ScheduleKind::eager_1f1b, 4, 8);
  EXPECT_EQ(row(eager, 0), "F0 F1 F2 F3 F4 F5 F6 B0 F7 B1 B2 B3 B4 B5 B6 B7");
  EXPECT_EQ(row(eager, 1), "F0 F1 F2 F3 F4 B0 F5 B1 F6 B2 F7 B3 B4 B5 B6 B7");
  EXPECT_EQ(row(eager, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  EXPECT_EQ(row(eager, 3), row(f1b, 3));
  const auto gpipe = make_schedule(ScheduleKind::gpipe, 4, 8);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(row(gpipe, i), "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
}

TEST(PipelineScheduleTest, WarmupForwardsAreCappedByMicrobatches) {
  const auto eager = make_schedule(ScheduleKind::eager_1f1b, 4, 3);
  EXPECT_EQ(row(eager, 0), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(row(eager, 2), "F0 F1 F2 B0 B1 B2");  // 2(4-2)-1 = 3
  EXPECT_EQ(row(eager, 3), "F0 B0 F1 B1 F2 B2");
}

// Peak in-flight microbatches n-i (1F1B) and 2(n-i)-1 (eager), both capped by m.
TEST(PipelineScheduleTest, PeakInFlightMatchesWarmup) {
  for (int n : {2, 4, 7})
    for (int m : {1, 3, 8, 33}) {
      const auto f1b = peak_in_flight(make_schedule(ScheduleKind::one_f_one_b, n, m));
      const auto eager = peak_in_flight(make_schedule(ScheduleKind::eager_1f1b, n, m));
      const auto gpipe = peak_in_flight(make_schedule(ScheduleKind::gpipe, n, m));
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(f1b[i], std::min(n - i, m)) << "n=" << n << " m=" << m << " i=" << i;
        EXPECT_EQ(eager[i], std::min(2 * (n - i) - 1, m)) << "n=" << n << " m=" << m << " i=" << i;
        EXPECT_EQ(gpipe[i], m);
      }
    }
}

TEST(PipelineScheduleTest, InterleavedWithOneChunkIsEager) {
  for (int n : {1, 3, 4})
    for (int m : {1, 5, 8}) {
      auto inter = make_schedule(ScheduleKind::interleaved_1f1b, n, m, 1);
      inter.kind = ScheduleKind::eager_1f1b;
      EXPECT_EQ(inter, make_schedule(ScheduleKind::eager_1f1b, n, m)) << n << "x" << m;
    }
}

TEST(PipelineScheduleTest, InterleavedRunsEveryChunkInChunkOrder) {
  const auto s = make_schedule(ScheduleKind::interleaved_1f1b, 4, 8, 2);
  EXPECT_EQ(s.virtual_stages(), 8);
  // Stage 0 runs chunk 0 of microbatches 0..3, chunk 1 of the same, then 2(n-1) + (v-1)n + 1 = 11
  // forwards before its first backward, which is chunk 1's.
  EXPECT_EQ(row(s, 0).substr(0, 51), "0F0 0F1 0F2 0F3 1F0 1F1 1F2 1F3 0F4 0F5 0F6 1B0 0F7");
  // The last stage's first backward is chunk 1 of microbatch 0.
  const auto& last = s.order[3];
  const auto first_b = std::find_if(last.begin(), last.end(),
                                    [](const Step& st) { return st.pass == Pass::backward; });
  ASSERT_NE(first_b, last.end());
  EXPECT_EQ(to_string(*first_b, true), "1B0");
  for (int d = 0; d < 4; ++d) EXPECT_EQ(s.order[d].size(), 2u * 2 * 8);
  EXPECT_NO_THROW(validate(s));
}

TEST(PipelineScheduleTest, RejectsBadSizes) {
  EXPECT_THROW(make_schedule(ScheduleKind::gpipe, 0, 4), InvalidArgument);
  EXPECT_THROW(make_schedule(ScheduleKind::gpipe, 4, 0), InvalidArgument);
  EXPECT_THROW(make_schedule(ScheduleKind::gpipe, 4, 4, 2), InvalidArgument);
  try {
    make_schedule(ScheduleKind::one_f_one_b, 100000, 100000);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "schedule too large: 100000 stages x 100000 microbatches x 1 chunks = "
                 "10000000000 microbatch-chunks, expected at most 1000000");
  }
  try {
    make_schedule(ScheduleKind::interleaved_1f1b, 4, 6, 2);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "interleaved-1f1b needs the microbatches (6) to be a multiple of the stages (4)");
  }
  EXPECT_THROW(parse_schedule_kind("zigzag"), InvalidArgument);
  EXPECT_EQ(parse_schedule_kind("eager-1f1b"), ScheduleKind::eager_1f1b);
}

TEST(PipelineScheduleTest, StepsParseAndPrint) {
  EXPECT_EQ(parse_step("F3"), (Step{Pass::forward, 3, 0}));
  EXPECT_EQ(parse_step("1B2"), (Step{Pass::backward, 2, 1}));
  EXPECT_EQ(to_string(Step{Pass::backward, 2, 1}, true), "1B2");
  EXPECT_EQ(to_string(Step{Pass::backward, 2, 1}), "B2");
  for (const char* bad : {"", "X3", "F", "F-1", "FF", "F3x", "aF1"})
    EXPECT_THROW(parse_step(bad), ParseError) << bad;
}

TEST(PipelineScheduleTest, TextJsonAndCsvFormsRoundTrip) {
  for (auto kind : generated_kinds()) {
    const int chunks = kind == ScheduleKind::interleaved_1f1b ? 2 : 1;
    Schedule s = make_schedule(kind, 3, 6, chunks);
    const auto from_json = schedule_from_json(schedule_to_json(s));
    EXPECT_EQ(from_json, s) << to_string(kind);
    auto from_text = schedule_from_text(schedule_to_text(s));
    from_text.kind = kind;
    EXPECT_EQ(from_text, s) << to_string(kind);
  }
  const auto s = make_schedule(ScheduleKind::one_f_one_b, 2, 2);
  EXPECT_EQ(schedule_to_text(s), "stage 0: F0 F1 B0 B1\nstage 1: F0 B0 F1 B1\n");
  EXPECT_EQ(schedule_to_csv(s), "stage,step0,step1,step2,step3\n0,F0,F1,B0,B1\n1,F0,B0,F1,B1\n");
  const auto j = schedule_to_json(s);
  EXPECT_EQ(j["kind"], "1f1b");
  EXPECT_EQ(j["order"][1][1], "B0");
}

TEST(PipelineScheduleTest, TextParserNamesBadRows) {
  EXPECT_THROW(schedule_from_text(""), ParseError);
  try {
    schedule_from_text("stage 0: F0 B0\nstage 2: F0 B0\n");
    FAIL() << "expected ParseError";
  } catch (const ParseError& e) {
    EXPECT_STREQ(e.what(), "bad schedule row 'stage 2: F0 B0': expected 'stage 1: F0 ...'");
  }
  const auto s = schedule_from_text("F0 F1 B0 B1\n\nF0 B0 F1 B1\n");
  EXPECT_EQ(s.stages, 2);
  EXPECT_EQ(s.microbatches, 2);
  EXPECT_THROW(schedule_from_json(nlohmann::json{{"order", {{"F0", 3}}}}), ParseError);
  EXPECT_THROW(schedule_from_json(nlohmann::json::array()), ParseError);
}

}  // namespace
}  // namespace meshcast::pipeline
