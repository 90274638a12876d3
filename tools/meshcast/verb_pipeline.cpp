// `meshcast pipeline`: simulate a model configuration under the paper's communication methods and
// each one-chunk schedule, with transfer times from our planner and network simulator, side by
// side.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "cli_common.h"
#include "meshcast/error.h"
#include "meshcast/pipeline/model.h"
#include "meshcast/pipeline/render.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

using namespace meshcast::pipeline;

struct PipelineVerbOptions {
  std::string config;
  std::string format = "text";
  int microbatches = 0;  // 0: the config's
  std::string method = "broadcast+overlap+eager-1f1b";
  std::string svg;
  std::string trace;
};

// One row of the comparison: a schedule, how transfers are made, and whether they overlap.
struct Variant {
  std::string name;
  ScheduleKind kind;
  TransferMethod transfer;
  bool overlap;
};

// The paper's end-to-end methods (PAPER.md), then every schedule with broadcast and overlap.
std::vector<Variant> paper_methods() {
  return {
      {"send_recv", ScheduleKind::one_f_one_b, {Strategy::send_recv}, false},
      {"allgather (alpa)", ScheduleKind::one_f_one_b, {Strategy::allgather}, false},
      {"broadcast", ScheduleKind::one_f_one_b, {Strategy::broadcast}, false},
      {"broadcast+overlap", ScheduleKind::one_f_one_b, {Strategy::broadcast}, true},
      {"broadcast+overlap+eager-1f1b", ScheduleKind::eager_1f1b, {Strategy::broadcast}, true},
      {"free (signal)", ScheduleKind::one_f_one_b, {std::nullopt}, true},
  };
}
std::vector<Variant> schedule_variants() {
  std::vector<Variant> out;
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::eager_1f1b})
    out.push_back({std::string(to_string(kind)), kind, {Strategy::broadcast}, true});
  return out;
}

struct Row {
  Variant variant;
  Schedule schedule;
  PipelineResult result;
  double samples_per_s = 0;
};

Row run(const PipelineModel& model, const Variant& v,
        std::map<std::string, PipelineCosts>& cost_cache) {
  const std::string key = to_string(v.transfer);
  if (!cost_cache.contains(key)) cost_cache[key] = model_costs(model, v.transfer);
  Row row{v, make_schedule(v.kind, static_cast<int>(model.stages.size()), model.microbatches), {}};
  row.result = simulate_pipeline(row.schedule, cost_cache[key], {.overlap = v.overlap});
  row.samples_per_s = row.result.microbatches_per_s * model.samples_per_microbatch;
  return row;
}

int peak_microbatches(const PipelineResult& r) {
  int peak = 0;
  for (const auto& st : r.stages) peak = std::max(peak, st.peak_in_flight);
  return peak;
}
double peak_bytes(const PipelineResult& r) {
  double peak = 0;
  for (const auto& st : r.stages) peak = std::max(peak, st.peak_activation_bytes);
  return peak;
}

std::string table(const std::vector<Row>& rows, const Row& baseline) {
  std::string out = fmt::format(
      "{:<30} {:<11} {:<10} {:<7} {:>11} {:>11} {:>8} {:>7} {:>8} {:>11}\n", "method", "schedule",
      "transfer", "overlap", "makespan_s", "samples/s", "vs alpa", "bubble", "peak_mb", "peak_act");
  for (const auto& r : rows)
    out += fmt::format(
        "{:<30} {:<11} {:<10} {:<7} {:>11.4f} {:>11.2f} {:>+7.1f}% {:>6.1f}% {:>8} {:>11}\n",
        r.variant.name, to_string(r.variant.kind), to_string(r.variant.transfer),
        r.variant.overlap ? "yes" : "no", r.result.makespan_s, r.samples_per_s,
        100 * (r.samples_per_s / baseline.samples_per_s - 1), 100 * r.result.bubble_fraction,
        peak_microbatches(r.result),
        peak_bytes(r.result) > 0 ? human_bytes(peak_bytes(r.result)) : "-");
  return out;
}

std::string model_text(const PipelineModel& m, const std::map<std::string, PipelineCosts>& costs) {
  std::string out = fmt::format(
      "{}: {} stages, {} microbatches x {} samples, {} hosts x {} devices, NIC {} Gbps, device "
      "link {} Gbps\n",
      m.name.empty() ? "model" : m.name, m.stages.size(), m.microbatches, m.samples_per_microbatch,
      m.cluster.hosts, m.cluster.devices_per_host, bytes_to_gbps(m.cluster.nic_bandwidth),
      bytes_to_gbps(m.cluster.device_bandwidth));
  for (size_t i = 0; i < m.stages.size(); ++i)
    out += fmt::format("  stage {}: mesh {} devices [{}]  forward {:.4f} s  backward {:.4f} s\n", i,
                       mesh_shape_to_string(m.stages[i].mesh.shape()),
                       fmt::join(m.stages[i].mesh.devices(), ","), m.stages[i].forward_s,
                       m.stages[i].backward_s);
  for (size_t e = 0; e < m.edges.size(); ++e) {
    out += fmt::format("  edge {}->{} activation/gradient s:", m.edges[e].edge.from,
                       m.edges[e].edge.to);
    for (const auto& [name, c] : costs)
      if (name != "free")
        out +=
            fmt::format("  {} {:.4f}/{:.4f}", name, c.edges[e].activation_s, c.edges[e].gradient_s);
    out += '\n';
  }
  return out;
}

nlohmann::json rows_json(const std::vector<Row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j = {{"name", r.variant.name},
                        {"schedule", to_string(r.variant.kind)},
                        {"transfer", to_string(r.variant.transfer)},
                        {"overlap", r.variant.overlap},
                        {"samples_per_s", r.samples_per_s}};
    j.update(result_to_json(r.result));
    out.push_back(std::move(j));
  }
  return out;
}

PipelineModel load_model(const PipelineVerbOptions& o) {
  std::ifstream in(o.config);
  if (!in) throw InvalidArgument(fmt::format("cannot read '{}': expected a model file", o.config));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw ParseError(fmt::format("cannot parse '{}': {}", o.config, e.what()));
  }
  PipelineModel m = model_from_json(j);
  if (o.microbatches < 0)
    throw InvalidArgument(fmt::format("bad --microbatches {}: expected >= 1", o.microbatches));
  if (o.microbatches > 0) m.microbatches = o.microbatches;
  return m;
}

void run_verb(const PipelineVerbOptions& o) {
  const PipelineModel model = load_model(o);
  std::map<std::string, PipelineCosts> costs;
  std::vector<Row> methods, schedules;
  for (const auto& v : paper_methods()) methods.push_back(run(model, v, costs));
  for (const auto& v : schedule_variants()) schedules.push_back(run(model, v, costs));
  const Row& alpa = methods[1];

  const Row* shown = nullptr;
  for (const auto* rows : {&methods, &schedules})
    for (const auto& r : *rows)
      if (!shown && r.variant.name == o.method) shown = &r;
  if (!shown && (!o.svg.empty() || !o.trace.empty())) {
    std::vector<std::string> names;
    for (const auto* rows : {&methods, &schedules})
      for (const auto& r : *rows) names.push_back(r.variant.name);
    throw InvalidArgument(
        fmt::format("bad --method '{}': expected one of {}", o.method, fmt::join(names, ", ")));
  }
  // Build every output before writing any, so that an error leaves nothing half-written.
  std::string report;
  if (o.format == "json") {
    nlohmann::json j = {{"meshcast_version", kVersion}};
    j["model"] = {{"name", model.name},
                  {"microbatches", model.microbatches},
                  {"samples_per_microbatch", model.samples_per_microbatch},
                  {"edges", nlohmann::json::array()}};
    for (size_t e = 0; e < model.edges.size(); ++e) {
      nlohmann::json times;
      for (const auto& [name, c] : costs)
        times[name] = {c.edges[e].activation_s, c.edges[e].gradient_s};
      j["model"]["edges"].push_back(
          {{"from", model.edges[e].edge.from}, {"to", model.edges[e].edge.to}, {"times", times}});
    }
    j["methods"] = rows_json(methods);
    j["schedules"] = rows_json(schedules);
    report = j.dump() + "\n";
  } else {
    report = model_text(model, costs) + "\npaper's methods:\n" + table(methods, alpa) +
             "\nschedules with broadcast transfers and overlap:\n" + table(schedules, alpa);
  }
  const std::string title = shown ? fmt::format("{}, {}", model.name, shown->variant.name) : "";
  const std::string svg = o.svg.empty() ? "" : gantt_svg(shown->schedule, shown->result, title);
  std::string trace;
  if (!o.trace.empty()) {
    nlohmann::json t = {{"meshcast_version", kVersion}};
    t.update(chrome_trace(shown->schedule, shown->result));
    trace = t.dump() + "\n";
  }
  if (!o.svg.empty()) write_text_file(o.svg, svg);
  if (!o.trace.empty()) write_text_file(o.trace, trace);
  std::cout << report;
}

}  // namespace

void add_pipeline_verb(CLI::App& app) {
  auto o = std::make_shared<PipelineVerbOptions>();
  auto* verb = app.add_subcommand(
      "pipeline",
      "Compare communication methods and schedules on a model configuration (docs/json.md)");
  verb->add_option("--config", o->config, "Model JSON: stages, meshes, activations, cluster")
      ->required();
  verb->add_option("--format", o->format, "text|json")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  verb->add_option("--microbatches,-m", o->microbatches, "Override the config's microbatches");
  verb->add_option("--method", o->method, "The row --svg and --trace draw")->capture_default_str();
  verb->add_option("--svg", o->svg, "Write the Gantt chart of --method to this file");
  verb->add_option("--trace", o->trace, "Write the Chrome trace of --method to this file");
  verb->callback([o] { run_verb(*o); });
}

}  // namespace meshcast::cli
