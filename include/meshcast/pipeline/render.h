// Pictures of a simulated pipeline: an SVG Gantt chart and a Chrome/Perfetto trace.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "meshcast/pipeline/schedule.h"
#include "meshcast/pipeline/simulator.h"

namespace meshcast::pipeline {

// One row per stage: forwards and backwards in two colors labelled with their microbatch, time
// blocked on transfers hatched grey, idle time left blank, and each transfer drawn as a line from
// its sender's row to its receiver's row over the time it took.
std::string gantt_svg(const Schedule& schedule, const PipelineResult& result,
                      std::string_view title = "");

// Chrome trace event format ("traceEvents", complete events in microseconds): process 0 has one
// thread per stage with its compute and blocked spans, process 1 one thread per sender->receiver
// pair with its transfers. Opens in chrome://tracing and ui.perfetto.dev.
nlohmann::json chrome_trace(const Schedule& schedule, const PipelineResult& result);

}  // namespace meshcast::pipeline
