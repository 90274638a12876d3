#include "meshcast/suites/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>

#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/plan/lower_bound.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// A `src` -> `dst` resharding of `tensor` on the paper's cluster, the destination on the hosts
// after the source's.
Resharding on_paper_cluster(const TensorSpec& tensor, std::vector<int64_t> src_mesh,
                            const std::string& src_spec, std::vector<int64_t> dst_mesh,
                            const std::string& dst_spec, int devices_per_host) {
  Resharding p;
  p.tensor = tensor;
  const int src_hosts = static_cast<int>(src_mesh[0]);
  const int dst_hosts = static_cast<int>(dst_mesh[0]);
  p.src =
      Layout{Mesh::placed(std::move(src_mesh), 0, devices_per_host), ShardingSpec::parse(src_spec)};
  p.dst = Layout{Mesh::placed(std::move(dst_mesh), src_hosts, devices_per_host),
                 ShardingSpec::parse(dst_spec)};
  p.cluster = paper_cluster(src_hosts + dst_hosts);
  p.cluster.devices_per_host = devices_per_host;
  p.validate();
  return p;
}

std::string mesh_text(const Mesh& mesh) {
  return fmt::format("({})", fmt::join(mesh.shape(), ","));
}

std::string describe(const Resharding& p) {
  return fmt::format("{} {} -> {} {}", mesh_text(p.src.mesh), p.src.spec.to_string(),
                     mesh_text(p.dst.mesh), p.dst.spec.to_string());
}

bool wanted(const std::vector<int>& numbers, int number) {
  return numbers.empty() || std::find(numbers.begin(), numbers.end(), number) != numbers.end();
}

// A spec of `rank` dims over a (hosts, devices) mesh: each axis shards a random dim or none.
std::string random_spec(std::mt19937& rng, int rank) {
  std::vector<std::string> dims(rank);
  for (int axis = 0; axis < 2; ++axis) {
    const int dim = static_cast<int>(rng() % (rank + 1));
    if (dim < rank) dims[dim] += std::to_string(axis);
  }
  std::string spec;
  for (const auto& d : dims) spec += d.empty() ? "R" : fmt::format("S{}", d);
  return spec;
}

}  // namespace

std::vector<BenchCase> paper_suite(const std::vector<int>& numbers) {
  std::vector<BenchCase> suite;
  for (auto& c : paper_cases())
    if (wanted(numbers, c.number))
      suite.push_back({std::to_string(c.number), c.description, std::move(c.problem)});
  return suite;
}

std::vector<BenchCase> single_sender_suite() {
  const std::vector<std::vector<int64_t>> meshes = {{1, 1}, {1, 2}, {1, 3}, {1, 4},
                                                    {2, 2}, {3, 2}, {4, 2}};
  const std::vector<std::pair<int64_t, std::string>> sizes = {{int64_t{1} << 30, "1 GiB"},
                                                              {1'000'000, "1 MB"},
                                                              {16'000'000, "16 MB"},
                                                              {64'000'000, "64 MB"}};
  std::vector<BenchCase> suite;
  for (const auto& [bytes, size_name] : sizes)
    for (const auto& mesh : meshes) {
      const TensorSpec vector{{bytes / 4}, DType::int32};
      BenchCase c;
      c.label = fmt::format("{}x{}", mesh[0], mesh[1]);
      if (bytes != sizes[0].first) c.label += fmt::format("/{}MB", bytes / 1'000'000);
      c.problem = on_paper_cluster(vector, {1, 1}, "R", mesh, "R", 4);
      c.description = fmt::format("{} {}", describe(c.problem), size_name);
      suite.push_back(std::move(c));
    }
  return suite;
}

std::vector<BenchCase> random_suite(unsigned seed, int count) {
  if (count <= 0) throw InvalidArgument(fmt::format("bad --count {}: expected > 0", count));
  std::mt19937 rng(seed);
  const auto axis = [&rng] { return static_cast<int64_t>(1 + rng() % 4); };
  // 512 MiB of int32 whose dims split evenly over any mesh axis up to 4 and products of two.
  const TensorSpec tensor{{1024, 512, 256}, DType::int32};
  std::vector<BenchCase> suite;
  for (int i = 0; i < count; ++i) {
    const std::vector<int64_t> src{axis(), axis()};
    const std::vector<int64_t> dst{axis(), axis()};
    const std::string src_spec = random_spec(rng, 3);
    const std::string dst_spec = random_spec(rng, 3);
    BenchCase c;
    c.label = fmt::format("r{}", i + 1);
    c.problem = on_paper_cluster(tensor, src, src_spec, dst, dst_spec, 4);
    c.description = describe(c.problem);
    suite.push_back(std::move(c));
  }
  return suite;
}

std::vector<BenchCase> grown_paper_suite(const std::vector<int>& numbers, int hosts) {
  if (hosts < 2 || hosts % 2 != 0)
    throw InvalidArgument(fmt::format("bad host count {}: expected an even number >= 2", hosts));
  const int factor = hosts / 2;
  std::vector<BenchCase> suite;
  for (const auto& c : paper_cases())
    if (wanted(numbers, c.number)) {
      const Resharding& p = c.problem;
      TensorSpec tensor = p.tensor;
      tensor.shape[0] *= factor;
      BenchCase grown;
      grown.label = std::to_string(c.number);
      grown.problem =
          on_paper_cluster(tensor, {p.src.mesh.shape()[0] * factor, 8}, p.src.spec.to_string(),
                           {p.dst.mesh.shape()[0] * factor, 8}, p.dst.spec.to_string(), 8);
      grown.description = describe(grown.problem);
      suite.push_back(std::move(grown));
    }
  return suite;
}

std::string StrategyChoice::name() const {
  if (strategy != Strategy::broadcast) return std::string(to_string(strategy));
  return fmt::format("broadcast/{}", to_string(balance));
}

std::vector<StrategyChoice> all_strategies() {
  return {{Strategy::send_recv, Balance::size},
          {Strategy::allgather, Balance::size},
          {Strategy::broadcast, Balance::none},
          {Strategy::broadcast, Balance::size},
          {Strategy::broadcast, Balance::order}};
}

std::vector<StrategyChoice> parse_strategies(std::string_view text) {
  const auto known = all_strategies();
  std::vector<StrategyChoice> chosen;
  for (std::string_view entry : split_commas(text)) {
    const std::string name =
        entry == "broadcast" ? std::string("broadcast/order") : std::string(entry);
    auto it = std::find_if(known.begin(), known.end(),
                           [&](const StrategyChoice& s) { return s.name() == name; });
    if (it == known.end()) {
      std::vector<std::string> names;
      for (const auto& s : known) names.push_back(s.name());
      throw InvalidArgument(fmt::format("bad strategy '{}' in --strategies: expected one of {}",
                                        entry, fmt::join(names, ", ")));
    }
    chosen.push_back(*it);
  }
  return chosen;
}

std::vector<int> parse_case_numbers(std::string_view text) {
  std::vector<int> numbers;
  for (std::string_view entry : split_commas(text)) {
    int n = 0;
    const auto [end, error] = std::from_chars(entry.data(), entry.data() + entry.size(), n);
    if (error != std::errc() || end != entry.data() + entry.size() || n < 1 || n > 8)
      throw InvalidArgument(fmt::format("bad case '{}' in --cases: expected numbers 1..8", entry));
    numbers.push_back(n);
  }
  return numbers;
}

void check_backend(std::string_view backend) {
  if (backend != "sim" && backend != "local" && backend != "mpi")
    throw InvalidArgument(fmt::format("bad --backend '{}': expected sim, local or mpi", backend));
}

int64_t task_upper_bound(const Resharding& problem) {
  int64_t bound = 1;
  for (int d = 0; d < problem.tensor.rank(); ++d)
    bound *=
        std::min(problem.tensor.shape[d], problem.src.parts_of(d) + problem.dst.parts_of(d) - 1);
  return bound;
}

Cluster with_links(Cluster topology, const Cluster& links) {
  topology.nic_bandwidth = links.nic_bandwidth;
  topology.device_bandwidth = links.device_bandwidth;
  topology.latency = links.latency;
  topology.nics_per_host = links.nics_per_host;
  return topology;
}

double BenchRow::effective_gbps() const {
  return bytes_to_gbps(static_cast<double>(tensor_bytes) / time_s);
}

namespace {

// Bytes this machine can still give: MemAvailable, or less when a cgroup (v2) limit is nearer.
int64_t available_memory() {
  int64_t available = std::numeric_limits<int64_t>::max();
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    int64_t kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") available = kib * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  std::ifstream max_file("/sys/fs/cgroup/memory.max");
  std::ifstream current_file("/sys/fs/cgroup/memory.current");
  int64_t limit = 0;
  int64_t current = 0;
  if (max_file >> limit && current_file >> current)  // "max" (no limit) fails to parse
    available = std::min(available, limit - current);
  return available;
}

// Open MPI's count of ranks on this machine and the world rank of the first of them (ranks are
// devices, placed in order); 1 and 0 outside mpirun.
std::pair<int, int> local_ranks() {
  const auto env = [](const char* name, int fallback) {
    const char* value = std::getenv(name);
    return value ? std::atoi(value) : fallback;
  };
  const int size = env("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  const int first = env("OMPI_COMM_WORLD_RANK", 0) - env("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  return {size, first};
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30));
}

}  // namespace

void check_tile_memory(const Batch& batch, std::string_view backend, int64_t max_memory,
                       std::string_view shrink) {
  std::vector<DeviceId> here;
  if (backend == "mpi") {
    const auto [size, first] = local_ranks();
    for (int d = first; d < first + size && d < batch.cluster.devices(); ++d) here.push_back(d);
  } else {
    for (DeviceId d = 0; d < batch.cluster.devices(); ++d) here.push_back(d);
  }
  const int64_t needed = tile_bytes(batch, here);
  const int64_t available = max_memory > 0 ? max_memory : available_memory();
  if (needed <= available) return;
  int64_t total = 0;
  for (const auto& t : batch.tensors) total += t.tensor.bytes();
  const std::string what =
      batch.tensors.size() == 1
          ? fmt::format("{} tensor", shape_to_string(batch.tensors[0].tensor.shape, 'x'))
          : fmt::format("{} tensors", batch.tensors.size());
  throw InvalidArgument(
      fmt::format("the tiles of {} device(s) on this machine need {} ({} of {}), more than the {} "
                  "{}: expected a smaller tensor ({})",
                  here.size(), gib(needed), what, gib(total), gib(available),
                  max_memory > 0 ? "of --max-memory" : "this machine has available", shrink));
}

BenchRow measure_row(const BenchCase& bench_case, const StrategyChoice& choice,
                     std::string_view backend, Executor* executor, const MeasureOptions& measure,
                     int64_t max_memory) {
  check_backend(backend);
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  BenchRow row{.label = bench_case.label, .description = bench_case.description, .choice = choice};
  row.tensor_bytes = bench_case.problem.tensor.bytes();
  const auto in = host_in_bytes(bench_case.problem, decompose(bench_case.problem));
  row.bus_bytes = in.empty() ? 0 : *std::max_element(in.begin(), in.end());
  const auto planning = Clock::now();
  const auto make = [&] {
    Plan plan = make_plan(bench_case.problem,
                          PlanOptions{.strategy = choice.strategy, .balance = choice.balance});
    if (executor) check_tile_memory(plan.batch, backend, max_memory, "a smaller --bytes");
    return plan;
  };
  const Plan plan = executor ? plan_on_leader(*executor, make) : make();
  row.plan_s = seconds_since(planning);
  row.ops = static_cast<int64_t>(plan.ops.size());
  row.lower_bound_s = plan.lower_bound_s;
  const auto measuring = Clock::now();
  if (executor) {
    const Measurement m = meshcast::measure(*executor, plan, measure);
    if (measure.verify && !m.verified)
      throw std::runtime_error(fmt::format("case {} {}: {} of {} destination elements wrong",
                                           bench_case.label, choice.name(), m.errors, m.checked));
    row.time_s = m.median_s;
  } else {
    row.time_s = simulate(plan).time_s;
  }
  row.measure_s = seconds_since(measuring);
  if (executor && executor->is_leader()) row.predicted_s = simulate(plan).time_s;
  return row;
}

Plan plan_on_leader(Executor& executor, const std::function<Plan()>& make) {
  std::string text;
  if (executor.is_leader()) {
    try {
      text = plan_to_json(make()).dump();
    } catch (const Error& e) {
      text = fmt::format("!{}", e.what());
    }
  }
  text = executor.share_from_leader(std::move(text));
  if (text.starts_with('!')) throw InvalidArgument(text.substr(1));
  return plan_from_json(parse_json(text));
}

std::optional<std::string> fit_cluster(Resharding& problem, int devices) {
  Cluster& c = problem.cluster;
  if (c.devices() > devices || devices % c.devices_per_host != 0)
    return fmt::format("needs {} devices ({} hosts x {}); {} ranks cannot play it", c.devices(),
                       c.hosts, c.devices_per_host, devices);
  c.hosts = devices / c.devices_per_host;
  // Idle hosts get the cluster-wide NIC figures.
  if (!c.host_nic_bandwidth.empty()) c.host_nic_bandwidth.resize(c.hosts, c.nic_bandwidth);
  if (!c.host_nics.empty()) c.host_nics.resize(c.hosts, c.nics_per_host);
  return std::nullopt;
}

void shrink_tensor(Resharding& problem, int64_t bytes) {
  TensorSpec& t = problem.tensor;
  if (bytes <= 0 || t.bytes() <= bytes) return;
  const int64_t row_bytes = t.bytes() / t.shape[0];
  t.shape[0] = std::max<int64_t>(1, bytes / row_bytes);
}

void fill_speedups(std::vector<BenchRow>& rows) {
  std::map<std::string, double> send_recv;
  for (const auto& r : rows)
    if (r.choice.strategy == Strategy::send_recv) send_recv[r.label] = r.time_s;
  for (auto& r : rows) {
    auto it = send_recv.find(r.label);
    r.speedup = it == send_recv.end() ? 0 : it->second / r.time_s;
  }
}

}  // namespace meshcast
