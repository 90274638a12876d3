// `meshcast plan`: plan a resharding or a batch (or load / check a plan file) and report its cost.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>

#include "cli_common.h"
#include "meshcast/plan/estimate.h"
#include "meshcast/plan/json.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct PlanVerbOptions {
  PlanSourceOptions source;
  bool json = false;
  std::string check_file;
};

void print_summary(const Plan& plan) {
  print_problem_header(plan.batch);
  std::map<OpKind, int> kinds;
  for (const Op& op : plan.ops) ++kinds[op.kind];
  std::string counts;
  for (const auto& [kind, n] : kinds) counts += fmt::format(" {} {}", to_string(kind), n);
  fmt::print("strategy {}, balance {}: {} ops ({})\n", to_string(plan.strategy),
             to_string(plan.balance), plan.ops.size(), counts.empty() ? "none" : counts.substr(1));
  fmt::print("network bytes: {} ({} B)\n", human_bytes(static_cast<double>(plan.network_bytes)),
             plan.network_bytes);
  const auto traffic = host_traffic(plan);
  for (int h = 0; h < static_cast<int>(traffic.size()); ++h)
    if (traffic[h].out_bytes > 0 || traffic[h].in_bytes > 0)
      fmt::print("  host {:>4}: out {:>12}  in {:>12}\n", h,
                 human_bytes(static_cast<double>(traffic[h].out_bytes)),
                 human_bytes(static_cast<double>(traffic[h].in_bytes)));
  const double time = estimate(plan);
  fmt::print("lower bound: {:.6f} s\n", plan.lower_bound_s);
  if (plan.lower_bound_s > 0)
    fmt::print("estimate:    {:.6f} s ({:.3f}x the lower bound)\n", time,
               time / plan.lower_bound_s);
  else
    fmt::print("estimate:    {:.6f} s (no network or device traffic needed)\n", time);
}

}  // namespace

void add_plan_verb(CLI::App& app) {
  auto options = std::make_shared<PlanVerbOptions>();
  auto* verb =
      app.add_subcommand("plan", "Plan a resharding: ops, NIC bytes, lower bound, estimate");
  add_plan_source_options(*verb, options->source);
  verb->add_flag("--json", options->json, "Print the plan document (docs/json.md)");
  verb->add_option("--check", options->check_file,
                   "Validate this plan document and report it (exit 2 when invalid)");
  verb->callback([options] {
    if (!options->check_file.empty()) {
      const Plan plan = load_plan_file(options->check_file);
      fmt::print("{}: valid plan, {} ops\n", options->check_file, plan.ops.size());
      print_summary(plan);
      return;
    }
    const Plan plan = plan_from_options(options->source);
    if (options->json)
      std::cout << plan_to_json(plan).dump() << '\n';
    else
      print_summary(plan);
  });
}

}  // namespace meshcast::cli
