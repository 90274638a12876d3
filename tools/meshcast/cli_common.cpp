#include "cli_common.h"

#include "cli_errors.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/plan/validate.h"
#include "meshcast/planner/estimate.h"
#include "meshcast/planner/planner.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast::cli {

std::vector<CLI::Option*> add_layout_options(CLI::App& verb, LayoutOptions& o) {
  auto* paper_case = verb.add_option("--paper-case", o.paper_case,
                                     "Use case 1..8 of the paper's suite (docs/paper-cases.md) "
                                     "instead of the layout options below")
                         ->check(in_range(1, 8));
  auto* scale = verb.add_option("--scale", o.scale,
                                "Divide the paper case's first dimension by this (with "
                                "--paper-case; the layout options give the shape directly)")
                    ->capture_default_str()
                    ->check(in_range(1));
  scale->needs(paper_case);
  const std::vector<CLI::Option*> layout = {
      verb.add_option("--shape", o.shape, "Global tensor shape, e.g. 1024,1024,512"),
      verb.add_option("--dtype", o.dtype,
                      "int8|uint8|int32|int64|float16|bfloat16|float32|float64|float8_e4m3fn|"
                      "float8_e5m2 (default float32)"),
      verb.add_option("--src-mesh", o.src_mesh, "Source mesh shape, e.g. 2x4"),
      verb.add_option("--src-spec", o.src_spec,
                      "Source sharding spec: S0RR, Shard(0),Replicate() or P(dp,None)"),
      verb.add_option("--dst-mesh", o.dst_mesh, "Destination mesh shape (default: the source's)"),
      verb.add_option("--dst-spec", o.dst_spec,
                      "Destination sharding spec: RRS0, Replicate(),Shard(1) or P(None,tp)"),
      verb.add_option("--src-axes", o.src_axes,
                      "Names of the source mesh axes for a PartitionSpec, e.g. dp,tp"),
      verb.add_option("--dst-axes", o.dst_axes,
                      "Names of the destination mesh axes (default: --src-axes)"),
      verb.add_option("--devices-per-host", o.devices_per_host,
                      "Devices per host (default: the larger last mesh axis)")
          ->check(in_range(1)),
      verb.add_option("--hosts", o.hosts,
                      "Hosts in the cluster (default: as many as the meshes need)")
          ->check(in_range(1)),
      verb.add_option("--dst-host-offset", o.dst_host_offset,
                      "First host of the destination mesh (default: the next host after the "
                      "source)")
          ->check(in_range(0)),
      verb.add_option("--src-devices", o.src_devices, "Explicit row-major source device ids"),
      verb.add_option("--dst-devices", o.dst_devices, "Explicit row-major destination device ids")};
  for (CLI::Option* option : layout) paper_case->excludes(option);
  std::vector<CLI::Option*> all = {paper_case, scale};
  all.insert(all.end(), layout.begin(), layout.end());
  return all;
}

std::vector<CLI::Option*> add_cluster_options(CLI::App& verb, ClusterOptions& o) {
  return {verb.add_option("--nic-gbps", o.nic_gbps, "Host NIC bandwidth per direction, Gbps")
              ->capture_default_str()
              ->check(positive()),
          verb.add_option("--dev-gbps", o.dev_gbps, "Device link bandwidth per direction, Gbps")
              ->capture_default_str()
              ->check(positive()),
          verb.add_option("--latency-us", o.latency_us, "Per-message latency, microseconds")
              ->capture_default_str()
              ->check(in_range(0)),
          verb.add_option("--nics-per-host", o.nics_per_host,
                          "NICs per host, each at --nic-gbps; local device l uses NIC l mod K")
              ->capture_default_str()
              ->check(in_range(1, kMaxNicsPerHost))};
}

CLI::Option* add_timeout_option(CLI::App& verb, double& timeout_s, const std::string& phases) {
  return verb
      .add_option("--timeout", timeout_s,
                  fmt::format("Seconds a process may wait in one phase ({}) before it names that "
                              "phase and exits 3 (mpirun then stops every rank); 0, or above "
                              "1e9 (about 31.7 years): forever",
                              phases))
      ->capture_default_str()
      ->check(in_range(0));
}

namespace {

// The mesh of one side; `side` ("source", "destination") prefixes any error.
Mesh make_mesh(std::string_view side, const std::vector<int64_t>& shape, const std::string& devices,
               int first_host, int devices_per_host) {
  try {
    if (devices.empty()) return Mesh::placed(shape, first_host, devices_per_host);
    return Mesh(shape, parse_device_list(devices));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{} mesh: {}", side, e.what()));
  }
}

// "dp,tp" -> {"dp", "tp"}; "" -> {} (axes numbered 0, 1, ...).
std::vector<std::string> parse_axis_names(const std::string& text) {
  std::vector<std::string> names;
  if (text.empty()) return names;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    names.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

Layout make_layout(Mesh mesh, const std::string& spec, const std::string& axes, int tensor_rank,
                   const char* option) {
  try {
    const SpecContext context{tensor_rank, mesh.rank(), parse_axis_names(axes)};
    return Layout{std::move(mesh), parse_sharding_spec(spec, context)};
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", option, e.what()));
  }
}

int hosts_used(const Mesh& mesh, int devices_per_host) {
  const auto& d = mesh.devices();
  return *std::max_element(d.begin(), d.end()) / devices_per_host + 1;
}

}  // namespace

void set_links(Cluster& cluster, const ClusterOptions& c) {
  cluster.nic_bandwidth = gbps_to_bytes(c.nic_gbps);
  cluster.device_bandwidth = gbps_to_bytes(c.dev_gbps);
  cluster.latency = c.latency_us * 1e-6;
  cluster.nics_per_host = c.nics_per_host;
}

Resharding make_resharding(const LayoutOptions& o, const ClusterOptions& c) {
  if (o.paper_case != 0) {
    const auto cases = paper_cases(o.scale);
    if (o.paper_case < 1 || o.paper_case > static_cast<int>(cases.size()))
      throw InvalidArgument(
          fmt::format("bad --paper-case {}: expected 1..{}", o.paper_case, cases.size()));
    Resharding p = cases[o.paper_case - 1].problem;
    set_links(p.cluster, c);
    return p;
  }
  for (const auto& [value, name] : {std::pair{&o.shape, "--shape"},
                                    {&o.src_mesh, "--src-mesh"},
                                    {&o.src_spec, "--src-spec"},
                                    {&o.dst_spec, "--dst-spec"}})
    if (value->empty())
      throw InvalidArgument(fmt::format("missing {} (or give --paper-case 1..8)", name));
  Resharding p;
  p.tensor.shape = parse_shape(o.shape);
  p.tensor.dtype = parse_dtype(o.dtype);
  const auto src_shape = parse_mesh_shape(o.src_mesh);
  const auto dst_shape = parse_mesh_shape(o.dst_mesh.empty() ? o.src_mesh : o.dst_mesh);
  if (o.devices_per_host < 0)
    throw InvalidArgument(
        fmt::format("bad --devices-per-host {}: expected > 0", o.devices_per_host));
  const int per_host = o.devices_per_host > 0
                           ? o.devices_per_host
                           : static_cast<int>(std::max(src_shape.back(), dst_shape.back()));
  if (o.dst_host_offset && *o.dst_host_offset < 0)
    throw InvalidArgument(
        fmt::format("bad --dst-host-offset {}: expected >= 0", *o.dst_host_offset));

  Mesh src = make_mesh("source", src_shape, o.src_devices, 0, per_host);
  const int dst_first = o.dst_host_offset.value_or(hosts_used(src, per_host));
  Mesh dst = make_mesh("destination", dst_shape, o.dst_devices, dst_first, per_host);

  p.cluster.devices_per_host = per_host;
  if (o.hosts < 0) throw InvalidArgument(fmt::format("bad --hosts {}: expected > 0", o.hosts));
  p.cluster.hosts =
      o.hosts > 0 ? o.hosts : std::max(hosts_used(src, per_host), hosts_used(dst, per_host));
  set_links(p.cluster, c);
  const int rank = p.tensor.rank();
  p.src = make_layout(std::move(src), o.src_spec, o.src_axes, rank, "--src-spec");
  p.dst = make_layout(std::move(dst), o.dst_spec, o.dst_axes.empty() ? o.src_axes : o.dst_axes,
                      rank, "--dst-spec");
  p.validate();
  return p;
}

std::vector<CLI::Option*> add_plan_source_options(CLI::App& verb, PlanSourceOptions& o) {
  std::vector<CLI::Option*> options = add_layout_options(verb, o.layout);
  const size_t add_layout_options_count = options.size();
  const auto cluster = add_cluster_options(verb, o.cluster);
  const size_t add_cluster_options_count = cluster.size();
  options.insert(options.end(), cluster.begin(), cluster.end());
  options.push_back(verb.add_option("--strategy", o.strategy, "send_recv|allgather|broadcast")
                        ->capture_default_str());
  options.push_back(verb.add_option(
      "--balance", o.balance, "none|size|order (default: order for broadcast, size otherwise)"));
  options.push_back(
      verb.add_flag("--split", o.split,
                    "Let several replica hosts each send a part of a slice when that is faster"));
  options.push_back(verb.add_option("--search-effort", o.search_effort,
                                    "Improvement search of --balance order: 0 greedy only, 2 "
                                    "twice the default")
                        ->capture_default_str()
                        ->check(in_range(0)));
  options.push_back(
      verb.add_option("--chunk-bytes", o.chunk_bytes, "Broadcast pipelining chunk (0: automatic)")
          ->capture_default_str()
          ->check(in_range(0)));
  options.push_back(
      verb.add_option("--bucket-bytes", o.bucket_bytes,
                      "Fuse smaller sends of one sender and receiver chain into messages of up "
                      "to this size (0: none; default: 99 x latency x NIC bandwidth)")
          ->check(in_range(0)));
  auto* plan = verb.add_option("--plan", o.plan_file,
                               "Load this plan document instead of planning (it fixes the "
                               "layout, cluster and planner options, so they cannot be given)");
  // A batch replaces the layout and cluster options; a plan document replaces them all.
  auto* batch = verb.add_option("--batch", o.batch_file,
                                "Plan the tensors of this batch file together (docs/json.md); it "
                                "replaces the layout and cluster options");
  for (CLI::Option* option : options) plan->excludes(option);
  plan->excludes(batch);
  const size_t layout_and_cluster = add_layout_options_count + add_cluster_options_count;
  for (size_t i = 0; i < layout_and_cluster; ++i) batch->excludes(options[i]);
  options.push_back(plan);
  options.push_back(batch);
  return options;
}

CLI::Option* add_cluster_file_option(CLI::App& verb, PlanSourceOptions& o) {
  return verb.add_option("--cluster", o.cluster_file,
                         "Cluster document (docs/json.md), e.g. from meshcast calibrate: its keys "
                         "replace the cluster the plan is made for, or that a --plan document "
                         "is played on");
}

Plan load_plan_file(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "plan");
  try {
    Plan plan = plan_from_json(j);
    validate_plan(plan);
    return plan;
  } catch (const ParseError& e) {
    throw ParseError(fmt::format("plan file '{}': {}", path, e.what()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("plan file '{}': {}", path, e.what()));
  }
}

Batch load_batch_file(const std::string& path) {
  const nlohmann::json j = read_json_file(path, "batch");
  try {
    return batch_from_json(j);
  } catch (const ParseError& e) {
    throw ParseError(fmt::format("batch file '{}': {}", path, e.what()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("batch file '{}': {}", path, e.what()));
  }
}

Cluster load_cluster_file(const std::string& path, const Cluster& defaults) {
  const nlohmann::json j = read_json_file(path, "cluster");
  try {
    Cluster cluster = cluster_from_json(j, defaults);
    cluster.validate();
    return cluster;
  } catch (const ParseError& e) {
    throw ParseError(fmt::format("cluster file '{}': {}", path, e.what()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("cluster file '{}': {}", path, e.what()));
  }
}

pipeline::Schedule load_schedule_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw InvalidArgument(
        fmt::format("cannot read schedule file '{}': {}", path,
                    std::filesystem::exists(path) ? "not readable" : "no such file"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && text[first] == '{';
  const nlohmann::json j = is_json ? read_json_file(path, "schedule") : nlohmann::json();
  try {
    if (!is_json) return pipeline::schedule_from_text(text);
    // A document of `meshcast schedule --format json` nests the schedule under "schedule".
    if (!j.contains("schedule")) return pipeline::schedule_from_json(j);
    check_keys(j, "document", {"schedule"}, {"meshcast_version", "costs", "simulation"});
    return pipeline::schedule_from_json(j["schedule"]);
  } catch (const ParseError& e) {
    throw ParseError(fmt::format("schedule file '{}': {}", path, e.what()));
  }
}

PlanOptions PlanSourceOptions::plan_options() const {
  PlanOptions options{.strategy = parse_strategy(strategy),
                      .split = split,
                      .chunk_bytes = chunk_bytes,
                      .search_effort = search_effort};
  if (!balance.empty()) options.balance = parse_balance(balance);
  if (bucket_bytes >= 0) options.bucket_bytes = bucket_bytes;
  return options;
}

namespace {

// Runs `fit` (which puts meshes on the cluster of --cluster), its errors naming the file.
template <class Fit>
void fit_to_cluster_file(const PlanSourceOptions& o, const Fit& fit) {
  try {
    fit();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(
        fmt::format("cluster file '{}' does not fit the meshes: {}", o.cluster_file, e.what()));
  }
}

// The batch of --batch, or the resharding the layout options describe, on --cluster's cluster.
Batch batch_from_options(const PlanSourceOptions& o) {
  Batch batch = o.batch_file.empty() ? Batch::of_one(make_resharding(o.layout, o.cluster))
                                     : load_batch_file(o.batch_file);
  if (o.cluster_file.empty()) return batch;
  batch.cluster = load_cluster_file(o.cluster_file, batch.cluster);
  fit_to_cluster_file(o, [&] { batch.validate(); });
  return batch;
}

// The plan of --plan, on --cluster's cluster (on_cluster).
Plan plan_file_on_cluster_file(const PlanSourceOptions& o) {
  Plan plan = load_plan_file(o.plan_file);
  if (o.cluster_file.empty()) return plan;
  const Cluster cluster = load_cluster_file(o.cluster_file, plan.batch.cluster);
  fit_to_cluster_file(o, [&] { plan = on_cluster(std::move(plan), cluster); });
  return plan;
}

// A progress line on stderr while balance order's search runs past a second, only when stderr is
// a terminal: the candidate plans simulated so far and the fastest one's ratio to the bound. It is
// cleared when the planning ends.
class PlanningLine {
 public:
  using Clock = std::chrono::steady_clock;

  PlanningLine() : shown_(isatty(STDERR_FILENO) != 0) {}
  PlanningLine(const PlanningLine&) = delete;
  PlanningLine& operator=(const PlanningLine&) = delete;
  ~PlanningLine() {
    if (printed_) fmt::print(stderr, "\r\033[K");
  }
  // `options` with this line following its search.
  PlanOptions following(PlanOptions options) {
    if (shown_) options.on_progress = [this](const PlanProgress& p) { show(p); };
    return options;
  }

 private:
  void show(const PlanProgress& p) {
    const auto now = Clock::now();
    if (now - start_ < std::chrono::seconds(1) || now - shown_at_ < std::chrono::milliseconds(250))
      return;
    shown_at_ = now;
    printed_ = true;
    fmt::print(stderr,
               "\r\033[Kplanning: {} candidate plans simulated in {:.1f} s, the fastest {:.3f}x "
               "the lower bound",
               p.candidates, std::chrono::duration<double>(now - start_).count(), p.best_ratio);
  }

  bool shown_;
  bool printed_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point shown_at_ = {};
};

}  // namespace

Plan plan_from_options(const PlanSourceOptions& o) {
  if (!o.plan_file.empty()) return plan_file_on_cluster_file(o);
  PlanningLine line;
  return make_plan(batch_from_options(o), line.following(o.plan_options()));
}

EstimatedPlan estimated_plan_from_options(const PlanSourceOptions& o) {
  if (o.plan_file.empty()) {
    PlanningLine line;
    return make_estimated_plan(batch_from_options(o), line.following(o.plan_options()));
  }
  Plan plan = plan_file_on_cluster_file(o);
  const double estimate_s = estimate(plan);
  return {std::move(plan), estimate_s};
}

namespace {

// A tensor's class: its name with every run of digits replaced by '*' (layers.*.attn.q.weight).
std::string tensor_class(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(name[i]))) {
      out += '*';
      while (i + 1 < name.size() && std::isdigit(static_cast<unsigned char>(name[i + 1]))) ++i;
    } else {
      out += name[i];
    }
  }
  return out;
}

// "3 hosts x 4 devices", and the NICs where a host has several: ", 2 NICs each".
std::string hosts_text(const Cluster& c) {
  std::string text = fmt::format("{} hosts x {} devices", c.hosts, c.devices_per_host);
  if (!c.host_nics.empty())
    text += ", NICs per host as the cluster lists them";
  else if (c.nics_per_host > 1)
    text += fmt::format(", {} NICs each", c.nics_per_host);
  return text;
}

}  // namespace

void print_problem_header(const Batch& batch) {
  if (batch.tensors.size() > 1) {
    fmt::print("batch of {} tensors, {}, on {}\n", batch.tensors.size(),
               human_bytes(static_cast<double>(batch.bytes())), hosts_text(batch.cluster));
    struct Class {
      int count = 0;
      int64_t bytes = 0;
      const TensorResharding* first = nullptr;
    };
    std::vector<std::string> order;  // classes in order of first appearance
    std::map<std::string, Class> classes;
    for (const auto& t : batch.tensors) {
      const std::string name = tensor_class(t.name);
      Class& c = classes[name];
      if (c.count++ == 0) {
        c.first = &t;
        order.push_back(name);
      }
      c.bytes += t.tensor.bytes();
    }
    for (const auto& name : order) {
      const Class& c = classes[name];
      const TensorResharding& t = *c.first;
      fmt::print("  {:<32} x{:<5} {:>12}  {} {}  {} {} -> {} {}\n", name, c.count,
                 human_bytes(static_cast<double>(c.bytes)), shape_to_string(t.tensor.shape, 'x'),
                 to_string(t.tensor.dtype), mesh_shape_to_string(t.src.mesh.shape()),
                 t.src.spec.to_string(), mesh_shape_to_string(t.dst.mesh.shape()),
                 t.dst.spec.to_string());
    }
    return;
  }
  const Resharding p = batch.resharding(0);
  fmt::print("tensor {} {} ({})\n", shape_to_string(p.tensor.shape, 'x'), to_string(p.tensor.dtype),
             human_bytes(static_cast<double>(p.tensor.bytes())));
  fmt::print("src {} {} -> dst {} {} on {}\n", mesh_shape_to_string(p.src.mesh.shape()),
             p.src.spec.to_string(), mesh_shape_to_string(p.dst.mesh.shape()),
             p.dst.spec.to_string(), hosts_text(p.cluster));
}

std::string human_seconds(double seconds) {
  if (seconds == 0) return "0 s";
  const double magnitude = std::abs(seconds);
  if (magnitude >= 1) return fmt::format("{:.4g} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.4g} ms", seconds * 1e3);
  if (magnitude >= 1e-6) return fmt::format("{:.4g} µs", seconds * 1e6);
  return fmt::format("{:.4g} ns", seconds * 1e9);
}

std::string human_bytes(double bytes) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

void write_text_file(const std::string& path, std::string_view text) {
  const std::string temporary = fmt::format("{}.tmp", path);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      throw InvalidArgument(fmt::format("cannot write '{}': expected a writable path", path));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw InvalidArgument(fmt::format("cannot write '{}': expected a writable path", path));
  }
}

}  // namespace meshcast::cli
