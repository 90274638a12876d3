#include "bench_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace meshcast::cli {
namespace {

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// Colours by strategy, so a strategy looks the same in every group.
std::string_view colour_of(const StrategyChoice& choice) {
  switch (choice.strategy) {
    case Strategy::send_recv:
      return "#b0b0b0";
    case Strategy::allgather:
      return "#8c9eb5";
    case Strategy::broadcast:
      break;
  }
  switch (choice.balance) {
    case Balance::none:
      return "#f2b880";
    case Balance::size:
      return "#e08a3c";
    case Balance::order:
      return "#b5520f";
  }
  return "#000000";
}

// A round axis step giving about five ticks up to `top`.
double tick_step(double top) {
  const double raw = top / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * magnitude) return m * magnitude;
  return 10 * magnitude;
}

}  // namespace

std::string bench_chart_svg(const std::vector<BenchRow>& rows, std::string_view title) {
  // Cases in first-seen order, each with its rows.
  std::vector<std::vector<const BenchRow*>> groups;
  for (const auto& r : rows) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.front()->label == r.label; });
    if (it == groups.end())
      groups.push_back({&r});
    else
      it->push_back(&r);
  }
  double top = 0;
  for (const auto& r : rows)
    top = std::max({top, r.effective_gbps(), bytes_to_gbps(r.tensor_bytes / r.lower_bound_s)});
  top = top > 0 ? top * 1.1 : 1;
  const double step = tick_step(top);
  top = std::ceil(top / step) * step;

  constexpr int kBar = 26, kGap = 34, kLeft = 60, kTop = 50, kPlot = 300, kBottom = 150;
  int bars = 0;
  for (const auto& g : groups) bars += static_cast<int>(g.size());
  const int width = kLeft + bars * kBar + static_cast<int>(groups.size()) * kGap + 20;
  const int height = kTop + kPlot + kBottom;
  const auto y_of = [&](double gbps) { return kTop + kPlot * (1 - gbps / top); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"15\">{3}</text>\n",
      width, height, kLeft, escape(title));
  for (double v = 0; v <= top + step / 2; v += step) {
    svg += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>\n"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
        kLeft, width - 20, y_of(v), kLeft - 6, y_of(v) + 4, v);
  }
  svg += fmt::format(
      "<text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">effective "
      "bandwidth, Gbps (tensor bits / time)</text>\n",
      kTop + kPlot / 2);

  int x = kLeft + kGap / 2;
  for (const auto& group : groups) {
    const int group_left = x;
    for (const BenchRow* r : group) {
      const double gbps = r->effective_gbps();
      const double y = y_of(gbps);
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"/>\n"
          "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"9\">{:.1f}</text>\n"
          "<text transform=\"translate({},{}) rotate(-60)\" text-anchor=\"end\" "
          "font-size=\"10\">{}</text>\n",
          x + 2, y, kBar - 4, kTop + kPlot - y, colour_of(r->choice), x + kBar / 2, y - 3, gbps,
          x + kBar / 2 + 3, kTop + kPlot + 8, escape(r->choice.name()));
      x += kBar;
    }
    // The lower bound caps every strategy's bandwidth: draw it across the group.
    const BenchRow& first = *group.front();
    const double bound_y = y_of(bytes_to_gbps(first.tensor_bytes / first.lower_bound_s));
    svg += fmt::format(
        "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c00000\" "
        "stroke-dasharray=\"4,3\"/>\n"
        "<text x=\"{}\" y=\"{:.1f}\" fill=\"#c00000\" font-size=\"9\">bound</text>\n",
        group_left, x, bound_y, bound_y, x + 2, bound_y + 3);
    svg += fmt::format(
        "<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" font-weight=\"bold\">case {2}</text>\n"
        "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\" font-size=\"8\">{4}</text>\n",
        (group_left + x) / 2, kTop + kPlot + kBottom - 26, escape(first.label),
        kTop + kPlot + kBottom - 12, escape(first.description));
    x += kGap;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace meshcast::cli
