// `meshcast pipeline`: simulate a model configuration under the paper's communication methods and
// each one-chunk schedule, with transfer times from our planner and network simulator, side by
// side.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/duration.h"
#include "meshcast/error.h"
#include "meshcast/pipeline/model.h"
#include "meshcast/pipeline/render.h"
#include "meshcast/pipeline/runtime.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/runtime/executors.h"
#include "meshcast/suites/bench.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

using namespace meshcast::pipeline;

struct PipelineVerbOptions {
  std::string config;
  std::string format = "text";
  int microbatches = 0;  // 0: the config's
  int chunks = 1;        // model chunks per stage: the config's stages are virtual stages
  std::string method = "broadcast+overlap+eager-1f1b";
  std::string svg;
  std::string trace;
  // --run: play the methods on real buffers.
  bool run = false;
  std::string backend = "local";
  std::string compute = "timed";
  double size_factor = 1;
  std::optional<std::string> scale;  // refused: --scale means another thing in the other verbs
  bool verify = false;
  bool no_overlap = false;
  std::string cluster;
  std::string schedule_file;
  double transfer_delay_s = 0;
  bool emulate_network = false;
  int repeats = 1;
  double timeout_s = kDefaultTimeoutS;
};

// One row of the comparison: a schedule, how transfers are made, and whether they overlap.
struct Variant {
  std::string name;
  ScheduleKind kind;
  TransferMethod transfer;
  bool overlap;
};

// The paper's end-to-end methods (docs/pipeline.md), then every schedule with broadcast and
// overlap.
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
// With several chunks per stage: interleaved-1F1B under each transfer method, with overlap.
std::vector<Variant> interleaved_variants() {
  std::vector<Variant> out;
  for (auto strategy : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast})
    out.push_back(
        {std::string(to_string(strategy)), ScheduleKind::interleaved_1f1b, {strategy}, true});
  out.push_back({"free (signal)", ScheduleKind::interleaved_1f1b, {std::nullopt}, true});
  return out;
}

struct Row {
  Variant variant;
  Schedule schedule;
  PipelineResult result;
  double samples_per_s = 0;
};

// The config's stages are the virtual stages of `chunks` chunks per stage (load_model checked).
Row run(const PipelineModel& model, int chunks, const Variant& v,
        std::map<std::string, PipelineCosts>& cost_cache) {
  const std::string key = to_string(v.transfer);
  if (!cost_cache.contains(key)) cost_cache[key] = model_costs(model, v.transfer);
  Row row{v,
          make_schedule(v.kind, static_cast<int>(model.stages.size()) / chunks, model.microbatches,
                        chunks),
          {}};
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

// The method and schedule columns of a table: as wide as their longest entry, and never narrower
// than the paper's methods need (30 and 11), so that those tables keep one layout.
struct NameColumns {
  size_t method = 30;
  size_t schedule = 11;
  void fit(std::string_view method_name, std::string_view schedule_name) {
    method = std::max(method, method_name.size());
    schedule = std::max(schedule, schedule_name.size());
  }
};

std::string table(const std::vector<Row>& rows, const Row& baseline) {
  NameColumns w;
  for (const auto& r : rows) w.fit(r.variant.name, to_string(r.variant.kind));
  std::string out =
      fmt::format("{:<{}} {:<{}} {:<10} {:<7} {:>11} {:>11} {:>8} {:>7} {:>8} {:>11}\n", "method",
                  w.method, "schedule", w.schedule, "transfer", "overlap", "makespan_s",
                  "samples/s", "vs alpa", "bubble", "peak_mb", "peak_act");
  for (const auto& r : rows)
    out += fmt::format(
        "{:<{}} {:<{}} {:<10} {:<7} {:>11.4f} {:>11.2f} {:>+7.1f}% {:>6.1f}% {:>8} {:>11}\n",
        r.variant.name, w.method, to_string(r.variant.kind), w.schedule,
        to_string(r.variant.transfer), r.variant.overlap ? "yes" : "no", r.result.makespan_s,
        r.samples_per_s, 100 * (r.samples_per_s / baseline.samples_per_s - 1),
        100 * r.result.bubble_fraction, peak_microbatches(r.result),
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
  const nlohmann::json j = read_json_file(o.config, "pipeline config");
  PipelineModel m = [&] {
    try {
      return model_from_json(j);
    } catch (const ParseError& e) {
      throw ParseError(fmt::format("pipeline config '{}': {}", o.config, e.what()));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("pipeline config '{}': {}", o.config, e.what()));
    }
  }();
  if (o.microbatches < 0)
    throw InvalidArgument(fmt::format("bad --microbatches {}: expected >= 1", o.microbatches));
  if (o.microbatches > 0) m.microbatches = o.microbatches;
  if (o.chunks < 1 || m.stages.size() % o.chunks != 0)
    throw InvalidArgument(fmt::format(
        "bad --chunks {}: expected a divisor of the config's {} stages (its virtual stages: chunk "
        "c of stage d is config stage c * stages + d)",
        o.chunks, m.stages.size()));
  if (!o.cluster.empty()) {
    m.cluster = load_cluster_file(o.cluster, m.cluster);
    for (size_t i = 0; i < m.stages.size(); ++i) {
      try {
        m.stages[i].mesh.check_fits(m.cluster);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(
            fmt::format("stage {} does not fit the cluster of '{}': {}", i, o.cluster, e.what()));
      }
    }
  }
  if (o.size_factor != 1) m = shrink_tensors(std::move(m), o.size_factor);
  return m;
}

// One method played on real buffers next to its simulation.
struct Played {
  Row simulated;
  RuntimeResult measured;
};

std::optional<bool> verified(const PipelineVerbOptions& o, const RuntimeResult& r) {
  if (!o.verify) return std::nullopt;
  return r.gradient_error && *r.gradient_error <= 1e-5;
}

std::string played_table(const PipelineVerbOptions& o, const std::vector<Played>& rows) {
  const Played* alpa = nullptr;
  for (const auto& p : rows)
    if (p.simulated.variant.name == "allgather (alpa)") alpa = &p;
  NameColumns w;
  for (const auto& p : rows) w.fit(p.simulated.variant.name, to_string(p.simulated.schedule.kind));
  std::string out =
      fmt::format("{:<{}} {:<{}} {:<10} {:<7} {:>11} {:>11} {:>6} {:>9} {:>9} {:>8}\n", "method",
                  w.method, "schedule", w.schedule, "transfer", "overlap", "measured_s",
                  "simulated_s", "ratio", "gain_meas", "gain_sim", "verified");
  for (const auto& p : rows) {
    const double measured = p.measured.measured.makespan_s;
    const double simulated = p.simulated.result.makespan_s;
    const auto gain = [&](double alpa_s, double own_s) {
      return alpa ? fmt::format("{:+.1f}%", 100 * (alpa_s / own_s - 1)) : std::string("-");
    };
    const auto v = verified(o, p.measured);
    out += fmt::format(
        "{:<{}} {:<{}} {:<10} {:<7} {:>11.4f} {:>11.4f} {:>6.3f} {:>9} {:>9} {:>8}\n",
        p.simulated.variant.name, w.method, to_string(p.simulated.schedule.kind), w.schedule,
        to_string(p.simulated.variant.transfer), p.simulated.variant.overlap ? "yes" : "no",
        measured, simulated, simulated > 0 ? measured / simulated : 0.0,
        alpa ? gain(alpa->measured.measured.makespan_s, measured) : "-",
        alpa ? gain(alpa->simulated.result.makespan_s, simulated) : "-",
        v ? (*v ? "yes" : "NO") : "-");
  }
  out +=
      "\nper stage (measured busy / blocked at transfers / idle seconds, peak in-flight "
      "activations "
      "measured (schedule's)):\n";
  for (const auto& p : rows) {
    out += fmt::format("  {}:\n", p.simulated.variant.name);
    const auto& stages = p.measured.measured.stages;
    for (size_t i = 0; i < stages.size(); ++i)
      out += fmt::format("    stage {}: busy {:.4f}  wait {:.4f}  idle {:.4f}  in-flight {} ({})\n",
                         i, stages[i].busy_s, stages[i].transfer_wait_s, stages[i].idle_s,
                         stages[i].peak_in_flight, p.measured.predicted_peak_in_flight[i]);
  }
  return out;
}

nlohmann::json played_json(const PipelineVerbOptions& o, const std::vector<Played>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : rows) {
    nlohmann::json stages = nlohmann::json::array();
    std::vector<int> peaks;
    for (const auto& st : p.measured.measured.stages) {
      stages.push_back({{"busy_s", st.busy_s},
                        {"blocked_s", st.transfer_wait_s},
                        {"idle_s", st.idle_s},
                        {"peak_in_flight", st.peak_in_flight}});
      peaks.push_back(st.peak_in_flight);
    }
    const auto v = verified(o, p.measured);
    out.push_back(
        {{"method", p.simulated.variant.name},
         {"schedule", to_string(p.simulated.schedule.kind)},
         {"transfer", to_string(p.simulated.variant.transfer)},
         {"overlap", p.simulated.variant.overlap},
         {"measured_s", p.measured.measured.makespan_s},
         {"simulated_s", p.simulated.result.makespan_s},
         {"peak_in_flight", peaks},
         {"predicted_peak_in_flight", p.measured.predicted_peak_in_flight},
         {"gradient_error", p.measured.gradient_error ? nlohmann::json(*p.measured.gradient_error)
                                                      : nlohmann::json(nullptr)},
         {"verified", v ? nlohmann::json(*v) : nlohmann::json(nullptr)},
         {"stages", std::move(stages)}});
  }
  return out;
}

// "out.svg" -> "out-simulated.svg"
std::string simulated_path(const std::string& path) {
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return path + "-simulated";
  return path.substr(0, dot) + "-simulated" + path.substr(dot);
}

// Refuses, before any buffer is allocated, a run whose buffers on this machine need more memory
// than it has. The leader's machine decides, and every process throws its message alike.
void check_buffer_memory(Executor& reporter, const PipelineVerbOptions& o,
                         const PipelineModel& model, ComputeMode compute, int microbatches) {
  std::string refusal;
  if (reporter.is_leader()) {
    try {
      const std::vector<DeviceId> here = devices_on_this_machine(model.cluster, o.backend);
      check_memory(
          pipeline_buffer_bytes(model, microbatches, compute, here),
          fmt::format("the pipeline's buffers of {} device(s) on this machine", here.size()),
          fmt::format("every edge tensor's tiles for {} microbatches, both directions{}",
                      microbatches,
                      compute == ComputeMode::real ? ", and the blocks' weights" : ""),
          0, "smaller tensors (--size-factor F < 1) or fewer microbatches (-m)");
    } catch (const InvalidArgument& e) {
      refusal = e.what();
    }
  }
  refusal = reporter.share_from_leader(refusal);
  if (!refusal.empty()) throw InvalidArgument(refusal);
}

void play_verb(const PipelineVerbOptions& o, const PipelineModel& model) {
  if (o.backend != "local" && (!o.svg.empty() || !o.trace.empty()))
    throw InvalidArgument(
        "--svg and --trace draw the whole measured timeline, which only --backend local holds "
        "in one process");
  const ComputeMode compute = parse_compute_mode(o.compute);
  if (o.verify && compute != ComputeMode::real)
    throw InvalidArgument("--verify compares gradients: it needs --compute real");
  std::vector<Variant> variants;
  std::optional<Schedule> custom;
  if (!o.schedule_file.empty()) {
    custom = load_schedule_file(o.schedule_file);
    if (o.chunks != 1 && o.chunks != custom->chunks)
      throw InvalidArgument(fmt::format("--chunks {} differs from the {} chunks of schedule '{}'",
                                        o.chunks, custom->chunks, o.schedule_file));
    variants.push_back(
        {"custom (" + o.schedule_file + ")", ScheduleKind::custom, {Strategy::broadcast}, true});
  } else if (o.chunks > 1) {
    for (const auto& v : interleaved_variants())
      if (v.transfer.strategy) variants.push_back(v);
  } else {
    for (const auto& v : paper_methods())
      if (v.transfer.strategy) variants.push_back(v);
    for (const auto& v : schedule_variants()) variants.push_back(v);
  }
  for (auto& v : variants)
    if (o.no_overlap) v.overlap = false;
  if (!o.svg.empty() || !o.trace.empty()) {
    std::vector<std::string> names;
    for (const auto& v : variants) names.push_back(v.name);
    if (!custom && std::find(names.begin(), names.end(), o.method) == names.end())
      throw InvalidArgument(
          fmt::format("bad --method '{}': expected one of {}", o.method, fmt::join(names, ", ")));
  }
  const ExecutorFactory make = [&o] { return make_executor(o.backend, {.threads = 2}); };
  std::unique_ptr<Executor> reporter = make();  // is_leader()
  check_buffer_memory(*reporter, o, model, compute,
                      custom ? custom->microbatches : model.microbatches);
  std::map<std::string, PipelineCosts> costs;
  std::vector<Played> rows;
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    if (reporter->is_leader())
      std::cerr << fmt::format("meshcast pipeline: playing {} ({}/{})\n", v.name, i + 1,
                               variants.size());
    Row simulated;
    if (custom) {
      const std::string key = to_string(v.transfer);
      costs[key] = model_costs(model, v.transfer);
      simulated = Row{v, *custom, simulate_pipeline(*custom, costs[key], {.overlap = v.overlap})};
    } else {
      simulated = run(model, o.chunks, v, costs);
    }
    std::optional<PipelineCosts> network;
    if (o.emulate_network) network = costs.at(to_string(v.transfer));
    RuntimeResult measured = run_pipeline(model, simulated.schedule, make,
                                          {.compute = compute,
                                           .strategy = *v.transfer.strategy,
                                           .overlap = v.overlap,
                                           .transfer_delay_s = o.transfer_delay_s,
                                           .emulated_network = std::move(network),
                                           .iterations = o.repeats,
                                           .timeout_s = o.timeout_s});
    rows.push_back({std::move(simulated), std::move(measured)});
  }
  std::string report;
  if (o.format == "json") {
    nlohmann::json j = {{"meshcast_version", kVersion},
                        {"model", {{"name", model.name}, {"microbatches", model.microbatches}}},
                        {"compute", to_string(compute)},
                        {"backend", o.backend},
                        {"repeats", o.repeats},
                        {"methods", played_json(o, rows)}};
    report = j.dump() + "\n";
  } else {
    report = model_text(model, costs) +
             fmt::format("\nplayed ({} compute, {} backend):\n", to_string(compute), o.backend) +
             played_table(o, rows);
  }
  const Played* shown = custom ? &rows.front() : nullptr;
  for (const auto& p : rows)
    if (!shown && p.simulated.variant.name == o.method) shown = &p;
  if (!o.svg.empty()) {
    const std::string title = fmt::format("{}, {}", model.name, shown->simulated.variant.name);
    const std::string measured =
        gantt_svg(shown->simulated.schedule, shown->measured.measured, title + " (measured)");
    const std::string simulated =
        gantt_svg(shown->simulated.schedule, shown->simulated.result, title + " (simulated)");
    write_text_file(o.svg, measured);
    write_text_file(simulated_path(o.svg), simulated);
  }
  if (!o.trace.empty()) {
    nlohmann::json t = {{"meshcast_version", kVersion}};
    t.update(chrome_trace(shown->simulated.schedule, shown->measured.measured));
    write_text_file(o.trace, t.dump() + "\n");
  }
  if (reporter->is_leader()) std::cout << report;
  for (const auto& p : rows)
    if (verified(o, p.measured) == false)
      throw std::runtime_error(fmt::format(
          "verification failed: {} gradients differ from the whole model's by {:.3g} (relative), "
          "expected <= 1e-5",
          p.simulated.variant.name, *p.measured.gradient_error));
}

void run_verb(const PipelineVerbOptions& o) {
  if (o.scale)
    throw InvalidArgument(fmt::format(
        "bad --scale {}: pipeline has no --scale (in tasks, plan, simulate and run it divides a "
        "paper case's first dimension): expected --size-factor F, which multiplies every tensor "
        "dimension by 0 < F <= 1",
        *o.scale));
  const PipelineModel model = load_model(o);
  if (o.run) return play_verb(o, model);
  std::map<std::string, PipelineCosts> costs;
  std::vector<Row> methods, schedules;
  const bool interleaved = o.chunks > 1;
  for (const auto& v : interleaved ? interleaved_variants() : paper_methods())
    methods.push_back(run(model, o.chunks, v, costs));
  if (!interleaved)
    for (const auto& v : schedule_variants()) schedules.push_back(run(model, o.chunks, v, costs));
  // Alpa's transfers: allgather (with interleaving, the same schedule as every other row).
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
    report = model_text(model, costs) +
             (interleaved ? fmt::format("\ninterleaved-1f1b, {} chunks per stage, overlap "
                                        "(vs alpa: vs the allgather row):\n{}",
                                        o.chunks, table(methods, alpa))
                          : "\npaper's methods:\n" + table(methods, alpa) +
                                "\nschedules with broadcast transfers and overlap:\n" +
                                table(schedules, alpa));
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
  verb->add_option("--microbatches,-m", o->microbatches, "Override the config's microbatches")
      ->check(in_range(1));
  verb->add_option(
          "--chunks,-v", o->chunks,
          "Model chunks per stage: the config's stages are virtual stages (chunk c of "
          "stage d = config stage c*n+d, n = stages / chunks) played with interleaved-1f1b")
      ->capture_default_str()
      ->check(in_range(1));
  verb->add_option("--method", o->method, "The row --svg and --trace draw")->capture_default_str();
  verb->add_option("--svg", o->svg, "Write the Gantt chart of --method to this file");
  verb->add_option("--trace", o->trace, "Write the Chrome trace of --method to this file");
  verb->add_flag("--run", o->run,
                 "Play the methods on real buffers and print measured next to simulated times");
  verb->add_option("--backend", o->backend,
                   "--run: local (stages on threads) or mpi (one rank per device, under mpirun)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "mpi"}));
  verb->add_option("--compute", o->compute,
                   "--run: timed (each step sleeps its configured time) or real (fp32 blocks)")
      ->capture_default_str()
      ->check(CLI::IsMember({"timed", "real"}));
  verb->add_option("--size-factor", o->size_factor,
                   "Multiply every tensor dimension by this (0 < F <= 1), e.g. to run --compute "
                   "real at test sizes")
      ->capture_default_str()
      ->check(positive(1));
  // Not in --help: named only so that the error can point to --size-factor.
  verb->add_option("--scale", o->scale)->group("");
  verb->add_flag("--verify", o->verify,
                 "--run --compute real: check every weight gradient against the whole model's");
  verb->add_flag("--no-overlap", o->no_overlap,
                 "--run: every method waits at each send until its transfer is done");
  verb->add_option("--cluster", o->cluster,
                   "Cluster JSON (e.g. from meshcast calibrate) replacing the config's");
  verb->add_option("--schedule", o->schedule_file,
                   "--run: play this schedule file (text or JSON) with broadcast transfers");
  verb->add_option("--transfer-delay", o->transfer_delay_s,
                   "--run: every transfer takes at least this many seconds")
      ->capture_default_str()
      ->check(in_range(0, kLongestSeconds));
  verb->add_option("--repeats", o->repeats,
                   "--run: measured iterations per method; the one of median makespan is reported")
      ->capture_default_str()
      ->check(in_range(1, 1000));
  add_timeout_option(*verb, o->timeout_s, "--run: compiling, one iteration, the gradient check");
  verb->add_flag("--emulate-network", o->emulate_network,
                 "--run: every transfer takes its simulated time, concurrent ones sharing ports as "
                 "in the simulator (local backend)");
  verb->callback([o] { run_verb(*o); });
}

}  // namespace meshcast::cli
