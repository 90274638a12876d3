// `meshcast plan`: plan a resharding or a batch (or load / check a plan file) and report its cost.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>

#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/plan/json.h"
#include "meshcast/planner/estimate.h"
#include "meshcast/planner/lower_bound.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct PlanVerbOptions {
  PlanSourceOptions source;
  bool json = false;
  std::string check_file;
  int limit = 10;
};

// The first `limit` ops, one per line, in plan order.
void print_ops(const Plan& plan, int limit) {
  const int shown = std::min<int>(limit, static_cast<int>(plan.ops.size()));
  if (shown > 0) fmt::print("first {} ops:\n", shown);
  for (int i = 0; i < shown; ++i) {
    const Op& op = plan.ops[i];
    const Piece& first = op.pieces.at(0);
    const std::string more =
        op.pieces.size() > 1 ? fmt::format(" +{} pieces", op.pieces.size() - 1) : "";
    fmt::print("  {:>5} {:<9} tensor {:>3} task {:>4} {}{} {} from {} to [{}]{}\n", op.id,
               to_string(op.kind), first.tensor, first.task, to_string(first.slice), more,
               human_bytes(static_cast<double>(op.bytes)),
               op.sender ? fmt::format("{}", *op.sender) : "-", fmt::join(op.receivers, ","),
               op.chunk_bytes > 0
                   ? fmt::format(" chunks of {}", human_bytes(static_cast<double>(op.chunk_bytes)))
                   : "");
  }
}

// `time`: the plan's estimate.
void print_summary(const Plan& plan, double time, int limit) {
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
  fmt::print("lower bound: {}\n", human_seconds(plan.lower_bound_s));
  if (plan.lower_bound_s > 0) {
    if (const auto bound = explain_plan_bound(plan))
      fmt::print("bound term:  {}\n", describe(*bound, plan.batch));
    fmt::print("estimate:    {} ({:.3f}x the lower bound)\n", human_seconds(time),
               time / plan.lower_bound_s);
  } else {
    fmt::print("estimate:    {} (no network or device traffic needed)\n", human_seconds(time));
  }
  print_ops(plan, limit);
}

}  // namespace

void add_plan_verb(CLI::App& app) {
  auto options = std::make_shared<PlanVerbOptions>();
  auto* verb =
      app.add_subcommand("plan", "Plan a resharding: ops, NIC bytes, lower bound, estimate");
  const auto source = add_plan_source_options(*verb, options->source);
  auto* json = verb->add_flag("--json", options->json, "Print the plan document (docs/json.md)");
  verb->add_option("--limit", options->limit, "Ops to list in the text output")
      ->capture_default_str()
      ->check(in_range(0))
      ->excludes(json);
  auto* cluster = add_cluster_file_option(*verb, options->source);
  auto* check = verb->add_option("--check", options->check_file,
                                 "Validate this plan document and report it (exit 2 when invalid)");
  for (CLI::Option* option : source) check->excludes(option);
  check->excludes(cluster);
  verb->callback([options] {
    if (!options->check_file.empty()) {
      const Plan plan = load_plan_file(options->check_file);
      fmt::print("{}: valid plan, {} ops\n", options->check_file, plan.ops.size());
      print_summary(plan, estimate(plan), options->limit);
      return;
    }
    if (options->json) {
      std::cout << plan_to_json(plan_from_options(options->source)).dump() << '\n';
      return;
    }
    const auto [plan, time] = estimated_plan_from_options(options->source);
    print_summary(plan, time, options->limit);
  });
}

}  // namespace meshcast::cli
