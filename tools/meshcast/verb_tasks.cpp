// `meshcast tasks`: the unit tasks of one resharding, as a summary or as JSON.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>

#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/plan/json.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct TasksOptions {
  LayoutOptions layout;
  bool json = false;
  int limit = 10;
};

void print_text(const Resharding& p, const std::vector<UnitTask>& tasks, int limit) {
  int64_t total = 0;
  std::map<int, int64_t> per_host;  // bytes each receiver host must take in
  for (const auto& t : tasks) {
    total += t.bytes;
    std::map<int, bool> hosts;
    for (auto r : t.receivers) hosts[p.cluster.host_of(r)] = true;
    for (const auto& [h, _] : hosts) per_host[h] += t.bytes;
  }
  print_problem_header(Batch::of_one(p));
  fmt::print("unit tasks: {}   task bytes: {} ({} B)\n", tasks.size(),
             human_bytes(static_cast<double>(total)), total);
  for (const auto& [h, bytes] : per_host)
    fmt::print("  receiver host {:>4}: {}\n", h, human_bytes(static_cast<double>(bytes)));
  const int shown = std::min<int>(limit, static_cast<int>(tasks.size()));
  if (shown > 0) fmt::print("first {} tasks:\n", shown);
  for (int i = 0; i < shown; ++i) {
    const auto& t = tasks[i];
    fmt::print("  {:>5} {} {} senders [{}] receivers [{}]\n", i, to_string(t.slice),
               human_bytes(static_cast<double>(t.bytes)), fmt::join(t.senders, ","),
               fmt::join(t.receivers, ","));
  }
}

}  // namespace

void add_tasks_verb(CLI::App& app) {
  auto options = std::make_shared<TasksOptions>();
  auto* verb = app.add_subcommand("tasks", "Decompose a resharding into unit tasks");
  add_layout_options(*verb, options->layout);
  auto* json = verb->add_flag("--json", options->json, "Print the JSON document (docs/json.md)");
  verb->add_option("--limit", options->limit, "Tasks to list in the text output")
      ->capture_default_str()
      ->check(in_range(0))
      ->excludes(json);
  verb->callback([options] {
    const Resharding problem = make_resharding(options->layout);
    const auto tasks = decompose(problem);
    if (options->json) {
      nlohmann::json j = {{"meshcast_version", kVersion}};
      j.update(resharding_to_json(problem));
      j["tasks"] = nlohmann::json::array();
      for (const auto& t : tasks) j["tasks"].push_back(task_to_json(t));
      std::cout << j.dump() << '\n';
    } else {
      print_text(problem, tasks, options->limit);
    }
  });
}

}  // namespace meshcast::cli
