// `meshcast schedule`: generate or check a pipeline schedule, simulate it with uniform costs, and
// print it as text, JSON, CSV, lowered sends/receives, an SVG Gantt chart or a Chrome trace.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/error.h"
#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/render.h"
#include "meshcast/pipeline/simulator.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

using namespace meshcast::pipeline;

struct ScheduleOptions {
  std::string kind;
  int stages = 0;
  int microbatches = 0;
  int chunks = 1;
  std::string check_file;
  std::string format = "text";
  std::string output;
  double forward_s = 1;
  double backward_s = 1;
  double transfer_s = 0;
  bool no_overlap = false;
};

Schedule schedule_of(const ScheduleOptions& o) {
  if (!o.check_file.empty()) return load_schedule_file(o.check_file);
  if (o.kind.empty()) throw InvalidArgument("missing --kind: expected it (or --check FILE)");
  if (o.stages == 0)
    throw InvalidArgument(fmt::format(
        "missing --stages (-n): expected the number of stages of the {} schedule", o.kind));
  if (o.microbatches == 0)
    throw InvalidArgument(fmt::format(
        "missing --microbatches (-m): expected the microbatches of the {} schedule", o.kind));
  return make_schedule(parse_schedule_kind(o.kind), o.stages, o.microbatches, o.chunks);
}

std::string summary_text(const Schedule& s, const ScheduleOptions& o, const PipelineResult& r) {
  std::string out = fmt::format(
      "{}: {} stages x {} microbatches{} (F {} s, B {} s, transfer {} s, {})\n", to_string(s.kind),
      s.stages, s.microbatches, s.chunks > 1 ? fmt::format(" x {} chunks", s.chunks) : "",
      o.forward_s, o.backward_s, o.transfer_s, o.no_overlap ? "no overlap" : "overlap");
  out += schedule_to_text(s);
  out += fmt::format("makespan {:.6g} s   bubble {:.1f}%   {:.6g} microbatches/s\n", r.makespan_s,
                     100 * r.bubble_fraction, r.microbatches_per_s);
  out += fmt::format("{:>5} {:>10} {:>16} {:>18} {:>10} {:>15}\n", "stage", "busy_s",
                     "transfer_wait_s", "dependency_wait_s", "idle_s", "peak_in_flight");
  for (size_t d = 0; d < r.stages.size(); ++d) {
    const auto& st = r.stages[d];
    out += fmt::format("{:>5} {:>10.6g} {:>16.6g} {:>18.6g} {:>10.6g} {:>15}\n", d, st.busy_s,
                       st.transfer_wait_s, st.dependency_wait_s, st.idle_s, st.peak_in_flight);
  }
  return out;
}

std::string render(const ScheduleOptions& o) {
  const Schedule s = schedule_of(o);
  const auto edges = chain_edges(s.virtual_stages());
  if (o.format == "csv" || o.format == "lowered") {
    validate(s, edges);
    return o.format == "csv" ? schedule_to_csv(s) : lowered_to_text(s, lower(s, edges));
  }
  // The simulation refuses a schedule that deadlocks with validate()'s message: validating it
  // first would lower and play it twice.
  const PipelineResult r = simulate_pipeline(
      s, uniform_costs(s.virtual_stages(), o.forward_s, o.backward_s, o.transfer_s),
      {.overlap = !o.no_overlap});
  if (o.format == "text") return summary_text(s, o, r);
  if (o.format == "svg")
    return gantt_svg(s, r, fmt::format("{} {}x{}", to_string(s.kind), s.stages, s.microbatches));
  nlohmann::json j = {{"meshcast_version", kVersion}};
  if (o.format == "trace") {
    j.update(chrome_trace(s, r));
  } else {
    j["schedule"] = schedule_to_json(s);
    j["costs"] = {{"forward_s", o.forward_s},
                  {"backward_s", o.backward_s},
                  {"transfer_s", o.transfer_s},
                  {"overlap", !o.no_overlap}};
    j["simulation"] = result_to_json(r);
  }
  return j.dump() + "\n";
}

}  // namespace

void add_schedule_verb(CLI::App& app) {
  auto o = std::make_shared<ScheduleOptions>();
  auto* verb = app.add_subcommand(
      "schedule", "Generate or check a pipeline schedule and simulate it with uniform costs");
  const std::vector<CLI::Option*> generator = {
      verb->add_option("--kind", o->kind, "gpipe|1f1b|eager-1f1b|interleaved-1f1b"),
      verb->add_option("--stages,-n", o->stages, "Pipeline stages (meshes)")->check(in_range(1)),
      verb->add_option("--microbatches,-m", o->microbatches, "Microbatches per iteration")
          ->check(in_range(1)),
      verb->add_option("--chunks,-v", o->chunks, "Model chunks per stage (interleaved-1f1b)")
          ->capture_default_str()
          ->check(in_range(1))};
  auto* check =
      verb->add_option("--check", o->check_file,
                       "Validate the schedule in this file (text rows or JSON) instead of "
                       "generating one (so it excludes --kind, -n, -m and -v)");
  for (CLI::Option* option : generator) check->excludes(option);
  verb->add_option("--format", o->format, "text|json|csv|lowered|svg|trace")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "csv", "lowered", "svg", "trace"}));
  verb->add_option("--output,-o", o->output, "Write to this file instead of standard output");
  verb->add_option("--forward-s", o->forward_s, "Forward time of a chunk, seconds")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_option("--backward-s", o->backward_s, "Backward time of a chunk, seconds")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_option("--transfer-s", o->transfer_s,
                   "Time of each cross-stage transfer (activation or gradient), seconds")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_flag("--no-overlap", o->no_overlap,
                 "Sends block their sender until done (no separate communication stream)");
  verb->callback([o] {
    const std::string text = render(*o);
    if (o->output.empty())
      std::cout << text;
    else
      write_text_file(o->output, text);
  });
}

}  // namespace meshcast::cli
