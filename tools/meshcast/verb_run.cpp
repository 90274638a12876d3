// `meshcast run`: plays a plan on real buffers with the local or the mpi executor and reports the
// median time, the effective bandwidth, the simulator's prediction and the verification.
#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "cli_common.h"
#include "cli_errors.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/runtime/executors.h"
#include "meshcast/runtime/measure.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/suites/bench.h"
#include "meshcast/version.h"
#include "verbs.h"

namespace meshcast::cli {
namespace {

struct RunOptions {
  PlanSourceOptions source;
  std::string backend = "local";
  int threads = 0;
  bool mpi_bcast = false;
  MeasureOptions measure;
  bool json = false;
  std::string cluster_file;
  int64_t max_memory = 0;         // 0: what the machine has available
  int64_t max_staging_bytes = 0;  // 0: no limit
};

int local_threads(const RunOptions& o) {
  return o.threads > 0 ? o.threads
                       : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string backend_line(const RunOptions& o, int processes) {
  if (o.backend == "local") return fmt::format("local, {} worker threads", local_threads(o));
  return fmt::format("mpi, {} ranks, {} broadcasts", processes,
                     o.mpi_bcast ? "MPI_Bcast" : "chain");
}

struct Report {
  Plan plan;
  Cluster predicted_on;
  double predicted_s = 0;
  Measurement m;
  int processes = 1;

  double effective_gbps() const {
    return bytes_to_gbps(static_cast<double>(plan.batch.bytes()) / m.median_s);
  }
};

void print_text(const RunOptions& o, const Report& r) {
  const Batch& b = r.plan.batch;
  const auto& c = b.cluster;
  fmt::print("backend {}\n", backend_line(o, r.processes));
  const std::string what =
      b.tensors.size() == 1
          ? fmt::format("tensor {} {}", shape_to_string(b.tensors[0].tensor.shape, 'x'),
                        to_string(b.tensors[0].tensor.dtype))
          : fmt::format("{} tensors", b.tensors.size());
  fmt::print("plan {}/{}: {} ops, {} ({}), {} hosts x {} devices\n", to_string(r.plan.strategy),
             to_string(r.plan.balance), r.plan.ops.size(), what,
             human_bytes(static_cast<double>(b.bytes())), c.hosts, c.devices_per_host);
  const auto [lo, hi] = std::minmax_element(r.m.times_s.begin(), r.m.times_s.end());
  fmt::print("time: median {} over {} iterations (+{} warmup), min {}, max {}\n",
             human_seconds(r.m.median_s), o.measure.iters, o.measure.warmup, human_seconds(*lo),
             human_seconds(*hi));
  fmt::print("effective bandwidth: {:.3f} GB/s ({:.2f} Gbps; tensor bytes / median time)\n",
             r.effective_gbps() / 8, r.effective_gbps());
  fmt::print(
      "predicted: {} by the simulator on {:g} Gbps NICs, {:g} Gbps device links "
      "(measured / predicted {:.3f})\n",
      human_seconds(r.predicted_s), bytes_to_gbps(r.predicted_on.nic_bandwidth),
      bytes_to_gbps(r.predicted_on.device_bandwidth), r.m.median_s / r.predicted_s);
  if (o.measure.verify && r.m.outside_checked > 0)
    fmt::print(
        "verify: {} destination elements checked, {} wrong; {} bytes of bound buffers outside "
        "the tiles checked, {} changed{}\n",
        r.m.checked, r.m.errors, r.m.outside_checked, r.m.outside_errors,
        r.m.verified ? "" : ": FAILED");
  else if (o.measure.verify)
    fmt::print("verify: {} destination elements checked, {} wrong{}\n", r.m.checked, r.m.errors,
               r.m.verified ? "" : ": FAILED");
  else
    fmt::print("verify: off (--verify checks every destination element)\n");
}

nlohmann::json to_json(const RunOptions& o, const Report& r) {
  nlohmann::json j = {{"meshcast_version", kVersion},
                      {"backend", o.backend},
                      {"processes", r.processes},
                      {"strategy", to_string(r.plan.strategy)},
                      {"balance", to_string(r.plan.balance)},
                      {"ops", r.plan.ops.size()},
                      {"tensor_bytes", r.plan.batch.bytes()},
                      {"tensors", r.plan.batch.tensors.size()},
                      {"iters", o.measure.iters},
                      {"warmup", o.measure.warmup},
                      {"times_s", r.m.times_s},
                      {"median_s", r.m.median_s},
                      {"wall_times_s", r.m.wall_times_s},
                      {"wall_median_s", r.m.wall_median_s},
                      {"effective_gbps", r.effective_gbps()},
                      {"predicted_s", r.predicted_s},
                      {"predicted_cluster", cluster_to_json(r.predicted_on)},
                      {"verified", r.m.verified},
                      {"errors", o.measure.verify ? nlohmann::json(r.m.errors) : nullptr},
                      {"checked", r.m.checked}};
  j["outside_errors"] = o.measure.verify ? nlohmann::json(r.m.outside_errors) : nullptr;
  j["outside_checked"] = r.m.outside_checked;
  if (o.backend == "local") j["threads"] = local_threads(o);
  if (o.backend == "mpi") j["broadcast"] = o.mpi_bcast ? "mpi_bcast" : "chain";
  return j;
}

Report run_plan(Executor& executor, const RunOptions& o) {
  Report r;
  r.plan = plan_on_leader(executor, [&] {
    Plan plan = plan_from_options(o.source);
    check_tile_memory(plan.batch, o.backend, o.max_memory,
                      "--scale N with --paper-case, a smaller --shape, or a plan of one");
    return plan;
  });
  r.predicted_on = r.plan.batch.cluster;
  if (!o.cluster_file.empty()) {
    // Every rank reads it and checks that the plan's meshes fit it before any byte moves.
    r.predicted_on = load_cluster_file(o.cluster_file, r.plan.batch.cluster);
    Batch on_predicted = r.plan.batch;
    on_predicted.cluster = r.predicted_on;
    try {
      on_predicted.validate();
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(
          fmt::format("cluster file '{}' does not fit the plan: {}", o.cluster_file, e.what()));
    }
  }
  r.m = measure(executor, r.plan, o.measure);
  r.processes = static_cast<int>(executor.sum_over_processes(1));
  if (executor.is_leader()) r.predicted_s = simulate(r.plan, r.predicted_on).time_s;
  return r;
}

}  // namespace

void add_run_verb(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* verb = app.add_subcommand(
      "run", "Play a plan on real buffers (in-process, or one MPI rank per device under mpirun)");
  add_plan_source_options(*verb, o->source);
  verb->add_option("--backend", o->backend,
                   "local (threads in this process) or mpi (mpirun -np <devices> meshcast run ...)")
      ->capture_default_str();
  verb->add_option("--threads", o->threads, "Worker threads of the local backend (0: one per core)")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_flag("--mpi-bcast", o->mpi_bcast,
                 "mpi backend: broadcasts with MPI_Bcast on cached communicators instead of the "
                 "chunked chain");
  verb->add_option("--iters", o->measure.iters, "Timed iterations")
      ->capture_default_str()
      ->check(in_range(1, kMaxIterations));
  verb->add_option("--warmup", o->measure.warmup, "Untimed iterations first")
      ->capture_default_str()
      ->check(in_range(0, kMaxIterations));
  verb->add_flag("--verify", o->measure.verify,
                 "Check every destination element against the pattern of its global index");
  add_timeout_option(*verb, o->measure.timeout_s, "compiling, one run, the verification");
  verb->add_option("--cluster", o->cluster_file,
                   "Cluster document for the simulator's prediction (default: the plan's cluster)");
  verb->add_option("--max-memory", o->max_memory,
                   "Refuse to run when the tiles on this machine need more bytes than this "
                   "(default: the memory available)")
      ->check(in_range(1));
  verb->add_option("--max-staging-bytes", o->max_staging_bytes,
                   "Refuse a plan whose staging memory (relayed boxes, packed messages) in one "
                   "process is larger (0: no limit)")
      ->capture_default_str()
      ->check(in_range(0));
  verb->add_flag("--json", o->json, "Print the JSON document (docs/json.md)");
  verb->callback([o] {
    auto executor = make_executor(o->backend, {.threads = o->threads,
                                               .mpi_bcast = o->mpi_bcast,
                                               .max_staging_bytes = o->max_staging_bytes});
    Report report;
    try {
      report = run_plan(*executor, *o);
    } catch (const Error&) {
      if (executor->is_leader()) throw;
      executor.reset();
      std::exit(2);  // the leader prints the one message
    }
    if (executor->is_leader()) {
      if (o->json)
        std::cout << to_json(*o, report).dump() << '\n';
      else
        print_text(*o, report);
      std::cout.flush();
    }
    if (o->measure.verify && !report.m.verified) {
      executor.reset();
      std::exit(1);
    }
  });
}

}  // namespace meshcast::cli
