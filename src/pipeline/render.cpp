#include "meshcast/pipeline/render.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace meshcast::pipeline {
namespace {

constexpr double kLeft = 90;     // room for row labels
constexpr double kWidth = 1000;  // time axis
constexpr double kTop = 58;      // room for the title and the legend
constexpr double kRow = 30;
constexpr double kBar = 22;
constexpr const char* kForwardColor = "#4e79a7";
constexpr const char* kBackwardColor = "#f28e2b";
constexpr const char* kActivationColor = "#2b5d8a";
constexpr const char* kGradientColor = "#c0661a";

std::string escape_xml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string span_name(const Schedule& s, const Span& span) {
  if (span.kind == SpanKind::comm) return "comm";
  return to_string(Step{span.kind == SpanKind::forward ? Pass::forward : Pass::backward,
                        span.microbatch, span.chunk},
                   s.chunks > 1);
}

// The tick spacing: 1, 2 or 5 times a power of ten, giving at most 8 ticks over `span`.
double tick_step(double span) {
  const double rough = span / 8;
  const double power = std::pow(10.0, std::floor(std::log10(rough)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= rough) return m * power;
  return 10 * power;
}

}  // namespace

std::string gantt_svg(const Schedule& s, const PipelineResult& r, std::string_view title) {
  const double makespan = r.makespan_s > 0 ? r.makespan_s : 1;
  const double scale = kWidth / makespan;
  const double height = kTop + s.stages * kRow + 40;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#eeeeee\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#999999\" stroke-width=\"2\"/>"
      "</pattern></defs>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{:.0f}\" y=\"20\" font-size=\"14\">{}</text>\n",
      kLeft + kWidth + 20, height, kLeft,
      escape_xml(fmt::format("{}{}makespan {:.6g} s, bubble {:.1f}%", title,
                             title.empty() ? "" : ": ", r.makespan_s, 100 * r.bubble_fraction)));
  // The legend, on its own line under the title: a swatch and a word per kind of mark.
  double legend_x = kLeft;
  for (const auto& [fill, label] : {std::pair<std::string, std::string>{kForwardColor, "forward"},
                                    {kBackwardColor, "backward"},
                                    {"url(#hatch)", "stream blocked at a receive or send"},
                                    {kActivationColor, "activation transfer"},
                                    {kGradientColor, "gradient transfer"}}) {
    svg += fmt::format(
        "<rect x=\"{:.0f}\" y=\"32\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{:.0f}\" y=\"42\">{}</text>\n",
        legend_x, fill, legend_x + 16, label);
    legend_x += 16 + 6.5 * static_cast<double>(label.size()) + 18;
  }
  for (int d = 0; d < s.stages; ++d) {
    const double y = kTop + d * kRow;
    svg += fmt::format(
        "<text x=\"5\" y=\"{:.1f}\">stage {}</text>\n"
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fafafa\" "
        "stroke=\"#dddddd\"/>\n",
        y + kBar * 0.7, d, kLeft, y, kWidth, kBar);
    for (const auto& span : r.timeline[d]) {
      const double x = kLeft + span.start * scale;
      const double w = std::max(0.5, (span.end - span.start) * scale);
      const char* fill = span.kind == SpanKind::forward    ? kForwardColor
                         : span.kind == SpanKind::backward ? kBackwardColor
                                                           : "url(#hatch)";
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\" "
          "stroke=\"white\" stroke-width=\"0.5\"><title>{} [{:.6g}, {:.6g}) s</title></rect>\n",
          x, y, w, kBar, fill, span_name(s, span), span.start, span.end);
      const std::string label = span.kind == SpanKind::comm ? "" : span_name(s, span);
      if (!label.empty() && w >= 7.0 * static_cast<double>(label.size()))
        svg += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.1f}\" fill=\"white\" text-anchor=\"middle\">{}</text>\n",
            x + w / 2, y + kBar * 0.7, label);
    }
  }
  for (const auto& t : r.transfers) {
    const bool down = t.to_stage > t.from_stage;
    const double y1 = kTop + t.from_stage * kRow + (down ? kBar : 0);
    const double y2 = kTop + t.to_stage * kRow + (down ? 0 : kBar);
    svg += fmt::format(
        "<line x1=\"{:.2f}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"1\" opacity=\"0.7\"><title>{} of microbatch {}: stage {} -> {}, "
        "[{:.6g}, {:.6g}) s</title></line>\n",
        kLeft + t.start * scale, y1, kLeft + t.end * scale, y2,
        t.payload == Payload::activation ? kActivationColor : kGradientColor,
        t.payload == Payload::activation ? "activation" : "gradient", t.microbatch, t.from_stage,
        t.to_stage, t.start, t.end);
  }
  const double axis = kTop + s.stages * kRow + 5;
  svg += fmt::format(
      "<line x1=\"{:.0f}\" y1=\"{:.1f}\" x2=\"{:.0f}\" y2=\"{:.1f}\" stroke=\"black\"/>\n", kLeft,
      axis, kLeft + kWidth, axis);
  const double step = tick_step(makespan);
  for (int k = 0; k * step <= makespan * (1 + 1e-9); ++k) {
    const double x = kLeft + k * step * scale;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:.6g} s</text>\n",
        x, axis, axis + 4, axis + 16, k * step);
  }
  svg += "</svg>\n";
  return svg;
}

nlohmann::json chrome_trace(const Schedule& s, const PipelineResult& r) {
  nlohmann::json events = nlohmann::json::array();
  auto meta = [&](int pid, int tid, const std::string& what, const std::string& name) {
    events.push_back(
        {{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", what}, {"args", {{"name", name}}}});
  };
  meta(0, 0, "process_name", "stages");
  meta(1, 0, "process_name", "transfers");
  for (int d = 0; d < s.stages; ++d) {
    meta(0, d, "thread_name", fmt::format("stage {}", d));
    for (const auto& span : r.timeline[d])
      events.push_back({{"ph", "X"},
                        {"pid", 0},
                        {"tid", d},
                        {"name", span_name(s, span)},
                        {"cat", span.kind == SpanKind::comm ? "comm" : "compute"},
                        {"ts", span.start * 1e6},
                        {"dur", (span.end - span.start) * 1e6}});
  }
  std::map<std::pair<int, int>, int> pair_thread;
  for (const auto& t : r.transfers) {
    auto [it, added] =
        pair_thread.try_emplace({t.from_stage, t.to_stage}, static_cast<int>(pair_thread.size()));
    if (added)
      meta(1, it->second, "thread_name", fmt::format("{} -> {}", t.from_stage, t.to_stage));
    events.push_back(
        {{"ph", "X"},
         {"pid", 1},
         {"tid", it->second},
         {"name", fmt::format("{}{}", t.payload == Payload::activation ? 'a' : 'g', t.microbatch)},
         {"cat", t.payload == Payload::activation ? "activation" : "gradient"},
         {"ts", t.start * 1e6},
         {"dur", (t.end - t.start) * 1e6}});
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace meshcast::pipeline
