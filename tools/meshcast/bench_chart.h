// The SVG chart of `meshcast bench --svg`: effective bandwidth as grouped bars, one group per case.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "meshcast/suites/bench.h"

namespace meshcast::cli {

// One group of bars per case (in row order), one bar per strategy, each bar labelled with its
// strategy and value, and a dashed mark at the bandwidth of the case's lower bound.
std::string bench_chart_svg(const std::vector<BenchRow>& rows, std::string_view title);

}  // namespace meshcast::cli
