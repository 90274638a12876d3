#include "meshcast/pipeline/render.h"

#include <gtest/gtest.h>

namespace meshcast::pipeline {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(PipelineRenderTest, GanttHasARowPerStageAndABarPerStep) {
  const auto s = make_schedule(ScheduleKind::eager_1f1b, 3, 4);
  const auto r = simulate_pipeline(s, uniform_costs(3, 1, 2, 0.5));
  const std::string svg = gantt_svg(s, r, "eager <test>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  for (int d = 0; d < 3; ++d) EXPECT_EQ(count(svg, "stage " + std::to_string(d) + "<"), 1);
  EXPECT_EQ(count(svg, "fill=\"#4e79a7\""), 3 * 4 + 1);  // forwards and the legend's swatch
  EXPECT_EQ(count(svg, "fill=\"#f28e2b\""), 3 * 4 + 1);  // backwards and the legend's
  int comm_spans = 0;
  for (const auto& row : r.timeline)
    for (const auto& span : row) comm_spans += span.kind == SpanKind::comm;
  EXPECT_GT(comm_spans, 0);
  EXPECT_EQ(count(svg, "fill=\"url(#hatch)\""), comm_spans + 1);
  EXPECT_EQ(count(svg, "opacity=\"0.7\"><title>activation"), 2 * 4);
  EXPECT_EQ(count(svg, "opacity=\"0.7\"><title>gradient"), 2 * 4);
  EXPECT_EQ(r.transfers.size(), 2u * 2 * 4);
  EXPECT_NE(svg.find("eager &lt;test&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<test>"), std::string::npos);
}

TEST(PipelineRenderTest, GanttTicksAreRoundNumbersWithinTheMakespan) {
  const auto s = make_schedule(ScheduleKind::one_f_one_b, 4, 8);
  const auto r = simulate_pipeline(s, uniform_costs(4, 1, 2, 0.5));
  ASSERT_GT(r.makespan_s, 40.0);  // a makespan whose fifths are not round (41 s)
  ASSERT_LT(r.makespan_s, 80.0);
  const std::string svg = gantt_svg(s, r, "");
  // 1, 2 or 5 times a power of ten, at most 8 ticks: 0 s, 10 s, 20 s, ... for 40-80 s.
  for (const char* tick : {">0 s<", ">10 s<", ">20 s<", ">40 s<"})
    EXPECT_EQ(count(svg, tick), 1) << tick;
  EXPECT_EQ(count(svg, " s</text>"), static_cast<size_t>(r.makespan_s / 10) + 1);
}

TEST(PipelineRenderTest, TraceHasACompleteEventPerSpanAndTransfer) {
  const auto s = make_schedule(ScheduleKind::interleaved_1f1b, 2, 4, 2);
  const auto r = simulate_pipeline(s, uniform_costs(4, 0.5, 1, 0.25), {.overlap = false});
  const auto trace = chrome_trace(s, r);
  size_t spans = 0;
  for (const auto& row : r.timeline) spans += row.size();
  size_t complete = 0, compute = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_GE(e["dur"].get<double>(), 0);
    if (e["cat"] == "compute") ++compute;
  }
  EXPECT_EQ(complete, spans + r.transfers.size());
  EXPECT_EQ(compute, 2u * 4 * 4);
  EXPECT_EQ(trace["traceEvents"][0]["args"]["name"], "stages");
}

}  // namespace
}  // namespace meshcast::pipeline
