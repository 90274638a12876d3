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
  EXPECT_EQ(count(svg, "fill=\"#4e79a7\""), 3 * 4);  // forwards
  EXPECT_EQ(count(svg, "fill=\"#f28e2b\""), 3 * 4);  // backwards
  int comm_spans = 0;
  for (const auto& row : r.timeline)
    for (const auto& span : row) comm_spans += span.kind == SpanKind::comm;
  EXPECT_GT(comm_spans, 0);
  EXPECT_EQ(count(svg, "fill=\"url(#hatch)\""), comm_spans);
  EXPECT_EQ(count(svg, "opacity=\"0.7\"><title>activation"), 2 * 4);
  EXPECT_EQ(count(svg, "opacity=\"0.7\"><title>gradient"), 2 * 4);
  EXPECT_EQ(r.transfers.size(), 2u * 2 * 4);
  EXPECT_NE(svg.find("eager &lt;test&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<test>"), std::string::npos);
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
