// `meshcast bench`: every case of a suite with every strategy, timed by a backend (the simulator
// by default), as a table, JSON or an SVG chart.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "bench_chart.h"
#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/runtime/executors.h"
#include "meshcast/suites/bench.h"
#include "meshcast/suites/weights.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct BenchOptions {
  std::string suite = "paper";
  unsigned seed = 1;
  int count = 10;
  int devices_per_host = 0;  // random: 0 = 4, 2 or 1, drawn per case
  std::string cases;
  std::string strategies;
  bool grow = false;
  std::string grow_hosts = "64,512";
  int64_t max_tasks = 1'000'000;
  std::string backend = "sim";
  int64_t bytes = 0;  // local/mpi: tensors shrunk to about this size (0: default_bytes)
  std::string cluster_file;
  std::string batch_file;         // the weights methods on this batch instead of the suite's models
  int64_t max_memory = 0;         // local/mpi: 0 = the memory available
  int64_t max_staging_bytes = 0;  // local/mpi: 0 = no limit
  MeasureOptions measure{.iters = 3, .warmup = 1, .verify = false};
  bool json = false;
  std::string svg;
};

// A case of the --grow suite that is not run, and why.
struct Skipped {
  std::string label;
  std::string description;
  std::string reason;
};

// A progress line on stderr while rows run, only when stderr is a terminal.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), shown_(isatty(STDERR_FILENO) != 0) {}
  ~Progress() {
    if (shown_) fmt::print(stderr, "\r\033[K");
  }
  void step(const BenchCase& c, const StrategyChoice& s) {
    step(fmt::format("case {} {} {}", c.label, c.description, s.name()));
  }
  void step(std::string_view what) {
    ++done_;
    if (shown_) fmt::print(stderr, "\r\033[K[{}/{}] {}", done_, total_, what);
  }

 private:
  size_t total_;
  size_t done_ = 0;
  bool shown_;
};

std::vector<int> parse_host_counts(const std::string& text) {
  std::vector<int> hosts;
  for (const auto& part : CLI::detail::split(text, ',')) {
    try {
      size_t used = 0;
      const int h = std::stoi(part, &used);
      if (used != part.size() || h < 2 || h % 2 != 0) throw std::invalid_argument(part);
      hosts.push_back(h);
    } catch (const std::exception&) {
      throw InvalidArgument(
          fmt::format("bad host count '{}' in --grow-hosts: expected even numbers >= 2", part));
    }
  }
  return hosts;
}

// `per_host_varies`: the cases have different devices per host (the random suite's layouts say
// each case's hosts x devices).
std::string cluster_line(const Cluster& c, bool per_host_varies = false) {
  return fmt::format("{} devices per host, {:g} Gbps NIC, {:g} Gbps device links, {:g} us latency",
                     per_host_varies ? std::string("case's") : std::to_string(c.devices_per_host),
                     bytes_to_gbps(c.nic_bandwidth), bytes_to_gbps(c.device_bandwidth),
                     c.latency * 1e6);
}

void print_table(const BenchOptions& o, const std::vector<BenchCase>& suite,
                 const std::vector<BenchRow>& rows, const std::vector<Skipped>& skipped) {
  const bool real = o.backend != "sim";
  const auto per_host_varies = [&] {
    return std::any_of(suite.begin(), suite.end(), [&](const BenchCase& c) {
      return c.problem.cluster.devices_per_host != suite.front().problem.cluster.devices_per_host;
    });
  };
  fmt::print("suite {}{}, backend {}; cluster: {}{}\n", o.suite, o.grow ? " --grow" : "", o.backend,
             suite.empty() ? "-" : cluster_line(suite.front().problem.cluster, per_host_varies()),
             o.cluster_file.empty() ? "" : fmt::format(" (links from {})", o.cluster_file));
  size_t width = 6;
  for (const auto& r : rows) width = std::max(width, r.description.size());
  fmt::print("{:<6} {:<{}} {:<16} {:>10} {:>8} {:>7} {:>7} {:>7} {:>8}", "case", "layout", width,
             "strategy", "time", "Gbps", "algbw", "nicbw", "/bound", "speedup");
  if (real) fmt::print(" {:>10} {:>8}", "sim", "meas/sim");
  if (o.grow) fmt::print(" {:>8} {:>10} {:>10}", "ops", "planning", "simulation");
  fmt::print("\n");
  for (const auto& r : rows) {
    fmt::print("{:<6} {:<{}} {:<16} {:>10} {:>8.2f} {:>7.3f} {:>7.3f} {:>7.3f} {:>8}", r.label,
               r.description, width, r.choice.name(), human_seconds(r.time_s), r.effective_gbps(),
               r.algbw_gbs(), r.nicbw_gbs(), r.ratio(),
               r.speedup > 0 ? fmt::format("{:.2f}x", r.speedup) : "-");
    if (real)
      fmt::print(" {:>10} {:>8.3f}", human_seconds(r.predicted_s), r.measured_over_predicted());
    if (o.grow)
      fmt::print(" {:>8} {:>10} {:>10}", r.ops, human_seconds(r.plan_s),
                 human_seconds(r.measure_s));
    fmt::print("\n");
  }
  for (const auto& s : skipped)
    fmt::print("{:<6} {:<{}} skipped: {}\n", s.label, s.description, width, s.reason);
  if (real && o.measure.verify) {
    int64_t checked = 0;
    for (const auto& r : rows) checked += r.checked;
    fmt::print("verify: {} destination elements checked in {} rows, 0 wrong\n", checked,
               rows.size());
  }
  fmt::print(
      "time: {}; Gbps: tensor bits / time; algbw: tensor bytes / time, GB/s; nicbw: the most bytes "
      "a host must take in over its NICs / time, GB/s (docs/cli.md#meshcast-bench); "
      "/bound: time / lower bound; speedup: send_recv's time / time{}\n",
      real ? fmt::format("measured (median of {} runs after {} warm-up{})", o.measure.iters,
                         o.measure.warmup, o.measure.verify ? ", every element verified" : "")
           : "simulated",
      real ? "; sim: the simulator's time for the same plan; meas/sim: time / sim" : "");
}

nlohmann::json to_json(const BenchOptions& o, const std::vector<BenchCase>& suite,
                       const std::vector<BenchRow>& rows, const std::vector<Skipped>& skipped) {
  // Paper cases are numbers; other labels (random r1.., --grow's s) stay strings.
  const auto case_json = [&](const std::string& label) {
    const bool numbered =
        o.suite == "paper" && !label.empty() && std::all_of(label.begin(), label.end(), ::isdigit);
    return numbered ? nlohmann::json(std::stoi(label)) : nlohmann::json(label);
  };
  nlohmann::json j = {{"meshcast_version", kVersion},
                      {"suite", o.suite},
                      {"grow", o.grow},
                      {"backend", o.backend},
                      {"cluster_file", o.cluster_file.empty() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(o.cluster_file)}};
  if (!suite.empty()) j["cluster"] = cluster_to_json(suite.front().problem.cluster);
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    j["rows"].push_back(
        {{"case", case_json(r.label)},
         {"layout", r.description},
         {"strategy", to_string(r.choice.strategy)},
         {"balance", to_string(r.choice.balance)},
         {"time_s", r.time_s},
         {"lower_bound_s", r.lower_bound_s},
         {"ratio", r.ratio()},
         {"bound_term", to_string(r.bound_term)},
         {"effective_gbps", r.effective_gbps()},
         {"algbw_gbs", r.algbw_gbs()},
         {"nicbw_gbs", r.nicbw_gbs()},
         {"speedup", r.speedup > 0 ? nlohmann::json(r.speedup) : nullptr},
         {"predicted_s", r.predicted_s > 0 ? nlohmann::json(r.predicted_s) : nullptr},
         {"measured_over_predicted",
          r.predicted_s > 0 ? nlohmann::json(r.measured_over_predicted()) : nullptr},
         {"tensor_bytes", r.tensor_bytes},
         {"ops", r.ops},
         {"plan_s", r.plan_s},
         {"measure_s", r.measure_s}});
    if (o.backend != "sim" && o.measure.verify) j["rows"].back()["checked"] = r.checked;
  }
  j["skipped"] = nlohmann::json::array();
  for (const auto& s : skipped)
    j["skipped"].push_back(
        {{"case", case_json(s.label)}, {"layout", s.description}, {"reason", s.reason}});
  return j;
}

// Tensor size the real backends use by default: the paper's 2 GiB tensors, replicated over
// meshes, would not fit in a small machine's memory; and on slow links (a testbed's calibrated
// cluster) what one NIC moves in a second, so that the suite takes minutes, not hours.
int64_t default_bytes(const std::optional<Cluster>& links) {
  constexpr int64_t kRealBackendBytes = 64 << 20;
  if (!links) return kRealBackendBytes;
  return std::min(kRealBackendBytes, static_cast<int64_t>(links->nic_bandwidth));
}

// The cluster document of --cluster, whose link figures every case takes on. Per-host figures
// cannot apply to cases of different host counts.
Cluster load_links(const std::string& path) {
  Cluster links = load_cluster_file(path, Cluster{});
  if (!links.host_nic_bandwidth.empty() || !links.host_nics.empty())
    throw InvalidArgument(fmt::format(
        "cluster file '{}' gives per-host NIC figures (host_nic_gbps or host_nics), but the "
        "suite's cases have different host counts: expected cluster-wide nic_gbps and "
        "nics_per_host",
        path));
  return links;
}

void print_weights_table(const BenchOptions& o, const std::vector<WeightsCase>& suite,
                         const std::vector<WeightsRow>& rows, const std::vector<Skipped>& skipped) {
  fmt::print("suite {}, backend {}; cluster: {}\n", o.batch_file.empty() ? o.suite : "batch",
             o.backend, suite.empty() ? "-" : cluster_line(suite.front().batch.cluster));
  size_t width = 5;
  for (const auto& r : rows) width = std::max(width, r.label.size());
  fmt::print("{:<{}} {:<16} {:>8} {:>10} {:>10} {:>7} {:>12} {:>8}\n", "model", width, "method",
             "tensors", "time (s)", "bound (s)", "/bound", "NIC bytes", "joint x");
  std::string last;
  for (const auto& r : rows) {
    if (r.label != last)
      fmt::print("{:<{}} {}, {}\n", r.label, width, r.description,
                 human_bytes(static_cast<double>(r.model_bytes)));
    last = r.label;
    fmt::print("{:<{}} {:<16} {:>8} {:>10.3f} {:>10.3f} {:>7.3f} {:>12} {:>8}\n", "", width,
               to_string(r.method), r.tensors, r.time_s, r.lower_bound_s, r.ratio(),
               human_bytes(static_cast<double>(r.network_bytes)),
               r.joint_speedup > 0 ? fmt::format("{:.2f}x", r.joint_speedup) : "-");
    if (r.predicted_s > 0)
      fmt::print("{:<{}} {:<16} {:>8} {:>10.3f} simulated; measured / simulated {:.3f}\n", "",
                 width, "", "", r.predicted_s, r.time_s / r.predicted_s);
  }
  for (const auto& s : skipped) fmt::print("{} skipped: {}\n", s.label, s.reason);
  fmt::print(
      "time: {}; /bound: time / the batch's lower bound; NIC bytes: bytes sent over host "
      "NICs (simulated); joint x: this method's time / joint's time (joint's speedup over it)\n",
      o.backend == "sim" ? "simulated" : "measured, median of --iters");
}

nlohmann::json weights_json(const BenchOptions& o, const std::vector<WeightsCase>& suite,
                            const std::vector<WeightsRow>& rows,
                            const std::vector<Skipped>& skipped) {
  nlohmann::json j = {{"meshcast_version", kVersion},
                      {"suite", o.batch_file.empty() ? o.suite : "batch"},
                      {"backend", o.backend}};
  if (!suite.empty()) j["cluster"] = cluster_to_json(suite.front().batch.cluster);
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows)
    j["rows"].push_back(
        {{"model", r.label},
         {"description", r.description},
         {"method", to_string(r.method)},
         {"time_s", r.time_s},
         {"lower_bound_s", r.lower_bound_s},
         {"ratio", r.ratio()},
         {"network_bytes", r.network_bytes},
         {"joint_speedup", r.joint_speedup > 0 ? nlohmann::json(r.joint_speedup) : nullptr},
         {"tensors", r.tensors},
         {"model_bytes", r.model_bytes},
         {"ops", r.ops},
         {"plan_s", r.plan_s},
         {"predicted_s", r.predicted_s > 0 ? nlohmann::json(r.predicted_s) : nullptr}});
  j["skipped"] = nlohmann::json::array();
  for (const auto& s : skipped) j["skipped"].push_back({{"model", s.label}, {"reason", s.reason}});
  return j;
}

// The weights suite (or the batch of --batch): whole models, each by every method, simulated or
// measured on real buffers with tensors shrunk to about --bytes in all.
void run_weights(const BenchOptions& o) {
  if (!o.cases.empty() || !o.strategies.empty() || o.grow)
    throw InvalidArgument(
        "--suite weights, --suite weights-moe and --batch run every model with every method: "
        "expected no --cases, --strategies or --grow");
  if (o.bytes < 0) throw InvalidArgument(fmt::format("bad --bytes {}: expected >= 0", o.bytes));
  std::vector<WeightsCase> suite;
  if (o.batch_file.empty()) {
    suite = o.suite == "weights" ? weights_suite() : weights_moe_suite();
  } else {
    Batch batch = load_batch_file(o.batch_file);
    const auto description = fmt::format("{} tensors", batch.tensors.size());
    suite.push_back({std::filesystem::path(o.batch_file).stem().string(), description, batch});
  }
  const auto links =
      o.cluster_file.empty() ? std::nullopt : std::optional<Cluster>(load_links(o.cluster_file));
  if (links)
    for (auto& c : suite) c.batch.cluster = with_links(c.batch.cluster, *links);
  std::unique_ptr<Executor> executor;
  std::vector<Skipped> skipped;
  if (o.backend != "sim") {
    executor = make_executor(o.backend, {.max_staging_bytes = o.max_staging_bytes});
    const int ranks = static_cast<int>(executor->sum_over_processes(1));
    std::vector<WeightsCase> playable;
    for (auto& c : suite) {
      shrink_batch(c.batch, o.bytes > 0 ? o.bytes : default_bytes(links));
      const auto why = o.backend == "mpi" ? fit_cluster(c.batch, ranks) : std::nullopt;
      if (why) {
        skipped.push_back({c.label, c.description, *why});
        continue;
      }
      check_tile_memory(c.batch, o.backend, o.max_memory, "a smaller --bytes");
      playable.push_back(std::move(c));
    }
    suite = std::move(playable);
  }
  const auto methods = all_weights_methods();
  std::vector<WeightsRow> rows;
  {
    Progress progress(suite.size() * methods.size());
    for (const auto& c : suite)
      for (const auto m : methods) {
        progress.step(fmt::format("{} {}", c.label, to_string(m)));
        rows.push_back(weights_row(c, m, executor.get(), o.measure));
      }
  }
  fill_joint_speedups(rows);
  if (executor && !executor->is_leader()) return;
  if (o.json)
    std::cout << weights_json(o, suite, rows, skipped).dump() << '\n';
  else
    print_weights_table(o, suite, rows, skipped);
}

void run_bench(const BenchOptions& o) {
  check_backend(o.backend);
  if (o.devices_per_host > 0 && (o.suite != "random" || o.grow || !o.batch_file.empty()))
    throw InvalidArgument(fmt::format(
        "bad --devices-per-host {} with {}: expected --suite random (it sets its cases' hosts)",
        o.devices_per_host,
        !o.batch_file.empty() ? "--batch"
        : o.grow              ? "--grow"
                              : fmt::format("--suite {}", o.suite)));
  if (o.suite == "weights" || o.suite == "weights-moe" || !o.batch_file.empty())
    return run_weights(o);
  if (o.bytes < 0) throw InvalidArgument(fmt::format("bad --bytes {}: expected >= 0", o.bytes));
  const auto strategies = o.strategies.empty() ? all_strategies() : parse_strategies(o.strategies);
  const auto numbers = o.cases.empty() ? std::vector<int>{} : parse_case_numbers(o.cases);
  if (!o.cases.empty() && o.suite != "paper")
    throw InvalidArgument(fmt::format("--cases picks paper cases; suite '{}' has none", o.suite));
  if (o.grow && o.suite != "paper")
    throw InvalidArgument(fmt::format(
        "bad --suite {} with --grow: expected paper (--grow grows the paper cases)", o.suite));
  if (o.max_tasks <= 0)
    throw InvalidArgument(fmt::format("bad --max-tasks {}: expected > 0", o.max_tasks));

  // local/mpi: the executor first, so that the random suite draws cases that fit the ranks.
  std::unique_ptr<Executor> executor;
  int ranks = 0;
  if (o.backend != "sim") {
    executor = make_executor(o.backend, {.max_staging_bytes = o.max_staging_bytes});
    ranks = static_cast<int>(executor->sum_over_processes(1));
  }
  const auto links =
      o.cluster_file.empty() ? std::nullopt : std::optional<Cluster>(load_links(o.cluster_file));
  std::vector<BenchCase> suite;
  if (o.grow) {
    for (int hosts : parse_host_counts(o.grow_hosts))
      for (auto& c : grown_paper_suite(numbers, hosts)) suite.push_back(std::move(c));
  } else if (o.suite == "paper") {
    suite = paper_suite(numbers);
  } else if (o.suite == "single-sender") {
    suite = single_sender_suite();
  } else if (o.suite == "random") {
    // local/mpi: tensors of the size the real backends play (described as played); under MPI
    // every case fits the ranks started. Hosts of the devices asked for number up to 8.
    const int max_devices =
        o.backend == "mpi" ? ranks : (o.devices_per_host > 0 ? 8 * o.devices_per_host : 32);
    const int64_t bytes =
        !executor ? kRandomSuiteBytes : (o.bytes > 0 ? o.bytes : default_bytes(links));
    suite = random_suite(o.seed, o.count, max_devices, bytes, o.devices_per_host);
  } else {
    throw InvalidArgument(fmt::format(
        "bad --suite '{}': expected paper, single-sender, random, weights or weights-moe",
        o.suite));
  }

  if (links)
    for (auto& c : suite) c.problem.cluster = with_links(c.problem.cluster, *links);

  std::vector<BenchRow> rows;
  std::vector<Skipped> skipped;
  // local/mpi: smaller tensors, and under MPI clusters grown with idle hosts to the ranks started.
  if (executor) {
    std::vector<BenchCase> playable;
    for (auto& c : suite) {
      shrink_tensor(c.problem, o.bytes > 0 ? o.bytes : default_bytes(links));
      const auto why = o.backend == "mpi" ? fit_cluster(c.problem, ranks) : std::nullopt;
      if (why)
        skipped.push_back({c.label, c.description, *why});
      else
        playable.push_back(std::move(c));
    }
    suite = std::move(playable);
  }
  const bool prints = !executor || executor->is_leader();
  {
    Progress progress(suite.size() * strategies.size());
    for (const auto& c : suite) {
      if (const int64_t tasks = task_upper_bound(c.problem); tasks > o.max_tasks) {
        skipped.push_back(
            {c.label, c.description,
             fmt::format("up to {} unit tasks, over --max-tasks {}", tasks, o.max_tasks)});
        continue;
      }
      for (const auto& s : strategies) {
        progress.step(c, s);
        rows.push_back(measure_row(c, s, o.backend, executor.get(), o.measure, o.max_memory));
      }
    }
  }
  fill_speedups(rows);
  if (!prints) return;

  if (!o.svg.empty()) {
    const std::string title =
        fmt::format("meshcast bench --suite {}: effective bandwidth per case ({})", o.suite,
                    o.backend == "sim" ? "simulated" : o.backend);
    write_text_file(o.svg, bench_chart_svg(rows, title));
  }
  if (o.json)
    std::cout << to_json(o, suite, rows, skipped).dump() << '\n';
  else
    print_table(o, suite, rows, skipped);
}

}  // namespace

void add_bench_verb(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* verb = app.add_subcommand(
      "bench", "Time every case of a suite with every strategy (simulated by default)");
  verb->add_option("--suite", o->suite, "paper | single-sender | random | weights | weights-moe")
      ->capture_default_str();
  verb->add_option("--seed", o->seed, "Seed of the random suite")->capture_default_str();
  verb->add_option("--count", o->count, "Cases of the random suite")
      ->capture_default_str()
      ->check(in_range(1));
  verb->add_option("--devices-per-host", o->devices_per_host,
                   "Devices per host of every case of the random suite (default: 4, 2 or 1, drawn "
                   "per case)")
      ->check(in_range(1));
  verb->add_option("--cases", o->cases, "Paper cases to run, e.g. 1,7 (default: all)");
  verb->add_option("--strategies", o->strategies,
                   "Comma-separated: send_recv, allgather, broadcast/none, broadcast/size, "
                   "broadcast/order (default: all)");
  auto* grow = verb->add_flag("--grow", o->grow,
                              "Grow the paper cases to --grow-hosts hosts of 8 devices and report "
                              "planning and simulation time");
  verb->add_option("--grow-hosts", o->grow_hosts, "Host counts a 2-host mesh grows to")
      ->capture_default_str()
      ->needs(grow);
  verb->add_option("--max-tasks", o->max_tasks,
                   "With --grow, skip (and say so) cases that may have more unit tasks")
      ->capture_default_str()
      ->check(in_range(1));
  verb->add_option("--backend", o->backend,
                   "Where times come from: sim, local (threads in this process) or mpi (under "
                   "mpirun, one rank per device)")
      ->capture_default_str();
  verb->add_option("--batch", o->batch_file,
                   "Play this batch file (docs/json.md) by every method of --suite weights "
                   "(joint, per_tensor, full_broadcast, gather_broadcast) instead of a suite");
  verb->add_option("--cluster", o->cluster_file,
                   "Cluster document (e.g. from meshcast calibrate) whose NIC, intra-host and "
                   "latency figures and NICs per host replace every case's; each case keeps its "
                   "hosts and devices per host. Plans, bounds and predictions use them");
  verb->add_option("--bytes", o->bytes,
                   "local/mpi: shrink each tensor's first dimension to about this many bytes "
                   "(--suite weights, --batch: each model's tensors by one factor to about this "
                   "many in all) (0: 64 MiB, or with --cluster what one of its NICs moves in 1 s "
                   "if less)")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_option("--iters", o->measure.iters, "local/mpi: timed iterations per row (median)")
      ->capture_default_str()
      ->check(in_range(1, kMaxIterations));
  verb->add_option("--warmup", o->measure.warmup, "local/mpi: untimed iterations before them")
      ->capture_default_str()
      ->check(in_range(0, kMaxIterations));
  verb->add_flag("--verify", o->measure.verify,
                 "local/mpi: check every destination element of each row's last run");
  add_timeout_option(*verb, o->measure.timeout_s, "compiling, one run, the verification");
  verb->add_option("--max-memory", o->max_memory,
                   "local/mpi: refuse a row whose tiles on this machine need more bytes than this "
                   "(default: the memory available)")
      ->check(in_range(1));
  verb->add_option("--max-staging-bytes", o->max_staging_bytes,
                   "local/mpi: refuse a plan whose staging memory (relayed boxes, packed "
                   "messages) in one process is larger (0: no limit)")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_flag("--json", o->json, "Print the JSON document (docs/json.md)");
  verb->add_option("--svg", o->svg, "Write a grouped bar chart of effective bandwidth here");
  verb->callback([o] { run_bench(*o); });
}

}  // namespace meshcast::cli
