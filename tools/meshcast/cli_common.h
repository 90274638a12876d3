// Options shared by the meshcast verbs: the layout of a resharding and the cluster it runs on.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "meshcast/pipeline/schedule.h"
#include "meshcast/plan/plan.h"
#include "meshcast/planner/planner.h"
#include "meshcast/tasks/unit_task.h"

namespace meshcast::cli {

struct LayoutOptions {
  int paper_case = 0;  // 1..8 picks a case of docs/paper-cases.md instead of the options below
  int scale = 1;       // divides the paper case's first dimension
  std::string shape;
  std::string dtype = "float32";
  std::string src_mesh;
  std::string src_spec;
  std::string dst_mesh;  // defaults to src_mesh
  std::string dst_spec;
  std::string src_axes;      // mesh axis names for JAX PartitionSpecs, e.g. dp,tp
  std::string dst_axes;      // defaults to src_axes
  int devices_per_host = 0;  // 0: the larger last axis of the two meshes
  int hosts = 0;             // 0: as many as the meshes need
  std::optional<int> dst_host_offset;
  std::string src_devices;
  std::string dst_devices;
};

struct ClusterOptions {
  double nic_gbps = 10;
  double dev_gbps = 100;
  double latency_us = 5;
  int nics_per_host = 1;  // each at nic_gbps; local device l on NIC l mod K
};

// Add the options and return them. --paper-case excludes the layout options it replaces and
// --scale needs --paper-case: an option that would be ignored is an error.
std::vector<CLI::Option*> add_layout_options(CLI::App& verb, LayoutOptions& options);
std::vector<CLI::Option*> add_cluster_options(CLI::App& verb, ClusterOptions& options);
// Sets the link figures and NICs per host of `cluster` from the cluster options.
void set_links(Cluster& cluster, const ClusterOptions& options);
// --timeout S of the verbs that run on real backends (meshcast::Watchdog): `phases` names what
// one phase is for this verb, e.g. "compiling, one run, the verification".
CLI::Option* add_timeout_option(CLI::App& verb, double& timeout_s, const std::string& phases);

// The resharding the options describe, with hosts counted from the meshes and bandwidths from
// `cluster`. Throws InvalidArgument naming the bad option.
Resharding make_resharding(const LayoutOptions& layout, const ClusterOptions& cluster = {});

// How a verb gets its plan: loaded from --plan, or made by make_plan from the layout, cluster
// and planner options (shared by plan, simulate and run).
struct PlanSourceOptions {
  LayoutOptions layout;
  ClusterOptions cluster;
  std::string strategy = "broadcast";
  std::string balance;  // empty: the strategy's default (PlanOptions)
  bool split = false;
  double search_effort = 1;
  int64_t chunk_bytes = 0;
  int64_t bucket_bytes = -1;  // -1: default_bucket_bytes of the cluster
  std::string plan_file;      // --plan: a plan document replaces all options above
  std::string batch_file;     // --batch: a batch file replaces the layout and cluster options
  // --cluster (plan, simulate; not added by add_plan_source_options, as `run` gives it another
  // meaning): a cluster document whose keys replace the cluster the plan is made for, or that a
  // --plan document is played on.
  std::string cluster_file;

  // The planner options of the command line (strategy, balance, split, chunk, bucket, effort).
  PlanOptions plan_options() const;
};

// Adds the layout and cluster options, --strategy, --balance, --split, --search-effort,
// --chunk-bytes, --bucket-bytes, --plan and --batch; --plan excludes all the others and --batch the
// layout and cluster options. Returns them all.
std::vector<CLI::Option*> add_plan_source_options(CLI::App& verb, PlanSourceOptions& options);
// Adds --cluster FILE (PlanSourceOptions::cluster_file) and returns it.
CLI::Option* add_cluster_file_option(CLI::App& verb, PlanSourceOptions& options);
// Reads a plan document (docs/json.md) and validates it. Throws ParseError or InvalidArgument
// naming the file and the problem.
Plan load_plan_file(const std::string& path);
// Reads a batch file (docs/json.md) and validates it. Throws ParseError or InvalidArgument naming
// the file, the tensor and the problem.
Batch load_batch_file(const std::string& path);
// Reads a cluster document (docs/json.md); missing keys keep `defaults`. Throws ParseError or
// InvalidArgument naming the file and the problem.
Cluster load_cluster_file(const std::string& path, const Cluster& defaults);

// The plan of --plan, or make_plan over the batch of --batch or the resharding the layout options
// describe; with --cluster, on that cluster (a --plan document's bound counted again for it).
// Throws InvalidArgument naming a bad option.
Plan plan_from_options(const PlanSourceOptions& options);
// plan_from_options and its estimate, the planner's own simulation of the plan reused where it
// ran one.
EstimatedPlan estimated_plan_from_options(const PlanSourceOptions& options);

// Atop text reports. One tensor: two lines naming it, its meshes, specs and the cluster. A larger
// batch: its size and cluster, then one line per tensor class (names equal but for their numbers,
// e.g. layers.*.mlp.up.weight) with the count, the bytes and the first tensor's layouts.
void print_problem_header(const Batch& batch);

// Seconds in the unit that suits them, with 4 significant digits: "1.722 s", "18.04 ms",
// "887.0 µs", "0 s"; text reports print every time with it.
std::string human_seconds(double seconds);

// "2.00 GiB (2147483648 B)"-style human sizes for text reports.
std::string human_bytes(double bytes);

// Writes `text` to `path` whole or not at all (a temporary file renamed into place). Throws
// InvalidArgument naming the path when it cannot be written.
void write_text_file(const std::string& path, std::string_view text);

// A schedule from a file: its text form, or JSON (a schedule document, or one that nests it under
// "schedule"). Throws InvalidArgument when unreadable, ParseError when malformed.
pipeline::Schedule load_schedule_file(const std::string& path);

}  // namespace meshcast::cli
