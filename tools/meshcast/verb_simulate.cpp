// `meshcast simulate`: plays a plan on the flow-level simulator and reports its time against
// the lower bound, the busiest links, and optionally a Chrome/Perfetto trace.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/planner/lower_bound.h"
#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/sim/trace.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct SimulateOptions {
  PlanSourceOptions source;  // its --cluster: the cluster planned for and played on
  int top = 5;
  bool json = false;
  std::string trace_file;
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Report {
  Plan plan;
  SimResult sim;
  double lower_bound_s = 0;
  std::optional<LowerBound> bound;  // with its term; none where the plan's bound is not ours
  double plan_s = 0;
  double sim_s = 0;
};

Report run_simulation(const SimulateOptions& o) {
  Report r;
  auto start = Clock::now();
  r.plan = plan_from_options(o.source);
  r.plan_s = seconds_since(start);
  r.lower_bound_s = r.plan.lower_bound_s;
  start = Clock::now();
  r.sim = simulate(r.plan, r.plan.batch.cluster, {.record_link_rates = !o.trace_file.empty()});
  r.sim_s = seconds_since(start);
  r.bound = explain_plan_bound(r.plan);
  return r;
}

double effective_gbps(const Report& r) {
  return bytes_to_gbps(static_cast<double>(r.plan.batch.bytes()) / r.sim.time_s);
}

void print_text(const Report& r, int top) {
  const Plan& plan = r.plan;
  const Cluster& c = plan.batch.cluster;
  std::array<int64_t, 4> kinds{};
  for (const Op& op : plan.ops) ++kinds[static_cast<int>(op.kind)];
  if (plan.batch.tensors.size() == 1) {
    const TensorResharding& t = plan.batch.tensors[0];
    fmt::print("{} {} -> {} {}, tensor {} ({})\n", mesh_shape_to_string(t.src.mesh.shape()),
               t.src.spec.to_string(), mesh_shape_to_string(t.dst.mesh.shape()),
               t.dst.spec.to_string(), shape_to_string(t.tensor.shape, 'x'),
               human_bytes(static_cast<double>(t.tensor.bytes())));
  } else {
    print_problem_header(plan.batch);
  }
  fmt::print(
      "cluster: {} hosts x {} devices, {} NIC(s) per host at {:g} Gbps, {:g} Gbps device "
      "links, {:g} us latency{}\n",
      c.hosts, c.devices_per_host, c.nics_per_host, bytes_to_gbps(c.nic_bandwidth),
      bytes_to_gbps(c.device_bandwidth), c.latency * 1e6,
      c.host_nics.empty() && c.host_nic_bandwidth.empty() ? "" : " (per-host overrides)");
  fmt::print("plan: {} balance {}, {} ops ({} send, {} broadcast, {} allgather, {} copy)\n",
             to_string(plan.strategy), to_string(plan.balance), plan.ops.size(), kinds[0], kinds[1],
             kinds[2], kinds[3]);
  fmt::print("simulated time   {}\n", human_seconds(r.sim.time_s));
  // A plan of copies only has a zero bound: no ratio to speak of.
  fmt::print("lower bound      {}   ratio {}\n", human_seconds(r.lower_bound_s),
             r.lower_bound_s > 0 ? fmt::format("{:.3f}", r.sim.time_s / r.lower_bound_s) : "-");
  if (r.lower_bound_s > 0)
    fmt::print("bound term       {}\n",
               r.bound ? describe(*r.bound, plan.batch)
                       : "- (the plan document's bound is not this version's count)");
  fmt::print("effective bw     {:.2f} Gbps (tensor bits / time)\n", effective_gbps(r));
  fmt::print("wall clock       planning {}, simulation {} ({} flows, {} steps)\n",
             human_seconds(r.plan_s), human_seconds(r.sim_s), r.sim.flows, r.sim.events);
  const auto links = busiest_links(r.sim, top);
  if (!links.empty()) fmt::print("busiest links        busy   utilization  bytes\n");
  for (const LinkStats* l : links)
    fmt::print("  {:<16} {:>10}   {:>9.1f}%   {}\n", l->name, human_seconds(l->busy_s),
               100.0 * static_cast<double>(l->bytes) / (l->bandwidth * r.sim.time_s),
               human_bytes(static_cast<double>(l->bytes)));
}

// The bound's term (docs/json.md): null where the plan's bound is not this version's count.
nlohmann::json bound_term_json(const Report& r) {
  if (!r.bound) return nullptr;
  nlohmann::json j{{"term", to_string(r.bound->term)}, {"text", describe(*r.bound, r.plan.batch)}};
  j["at"] = r.bound->at >= 0 ? nlohmann::json(r.bound->at) : nlohmann::json(nullptr);
  return j;
}

nlohmann::json to_json(const Report& r) {
  using nlohmann::json;
  json ops = json::array();
  for (const OpTiming& t : r.sim.ops)
    ops.push_back({{"id", t.id}, {"start_s", t.start_s}, {"end_s", t.end_s}});
  json links = json::array();
  for (const LinkStats& l : r.sim.links)
    if (l.bytes > 0)
      links.push_back({{"name", l.name},
                       {"gbps", bytes_to_gbps(l.bandwidth)},
                       {"busy_s", l.busy_s},
                       {"bytes", l.bytes}});
  return {{"meshcast_version", kVersion},
          {"strategy", to_string(r.plan.strategy)},
          {"balance", to_string(r.plan.balance)},
          {"cluster", cluster_to_json(r.plan.batch.cluster)},
          {"tensor_bytes", r.plan.batch.bytes()},
          {"tensors", r.plan.batch.tensors.size()},
          {"time_s", r.sim.time_s},
          {"lower_bound_s", r.lower_bound_s},
          {"ratio", r.sim.time_s / r.lower_bound_s},
          {"bound_term", bound_term_json(r)},
          {"effective_gbps", effective_gbps(r)},
          {"plan_s", r.plan_s},
          {"sim_s", r.sim_s},
          {"ops", std::move(ops)},
          {"links", std::move(links)}};
}

}  // namespace

void add_simulate_verb(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* verb = app.add_subcommand(
      "simulate", "Play a plan on the flow-level network simulator (time, bound, busiest links)");
  add_plan_source_options(*verb, o->source);
  add_cluster_file_option(*verb, o->source);
  verb->add_option("--top", o->top, "Busiest links to list")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_flag("--json", o->json, "Print the JSON document (docs/json.md)");
  verb->add_option("--trace", o->trace_file,
                   "Write a Chrome/Perfetto trace: a track per device, a counter per NIC");
  verb->callback([o] {
    const Report r = run_simulation(*o);
    if (!o->trace_file.empty())
      write_text_file(
          o->trace_file,
          fmt::format("{}\n", chrome_trace(r.plan, r.plan.batch.cluster, r.sim).dump()));
    if (o->json)
      std::cout << to_json(r).dump() << '\n';
    else
      print_text(r, o->top);
  });
}

}  // namespace meshcast::cli
