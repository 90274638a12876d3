#include "meshcast/suites/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>

#include "meshcast/error.h"
#include "meshcast/layout/layout.h"
#include "meshcast/layout/sharding_spec.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/planner/lower_bound.h"
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

// describe() with the tensor, and device lists where a mesh is not placed by default.
std::string describe_random(const Resharding& p) {
  const auto mesh = [&p](const Mesh& m) {
    for (int first = 0; first < p.cluster.hosts; ++first)
      if (m.host_span() + first <= p.cluster.hosts &&
          Mesh::placed(m.shape(), first, p.cluster.devices_per_host) == m)
        return first == 0 ? mesh_text(m) : fmt::format("{}@h{}", mesh_text(m), first);
    return fmt::format("{}[{}]", mesh_text(m), fmt::join(m.devices(), ","));
  };
  return fmt::format("{} {} {} {} -> {} {} on {}x{}", shape_to_string(p.tensor.shape, 'x'),
                     to_string(p.tensor.dtype), mesh(p.src.mesh), p.src.spec.to_string(),
                     mesh(p.dst.mesh), p.dst.spec.to_string(), p.cluster.hosts,
                     p.cluster.devices_per_host);
}

bool wanted(const std::vector<int>& numbers, int number) {
  return numbers.empty() || std::find(numbers.begin(), numbers.end(), number) != numbers.end();
}

// A spec of `rank` dims over a mesh of `mesh_rank` axes: each axis shards a random dim or none;
// a dim sharded by two axes takes them in either order, or nested (`S0/1`).
std::string random_spec(std::mt19937& rng, int rank, int mesh_rank) {
  std::vector<std::string> dims(rank);
  for (int axis = 0; axis < mesh_rank; ++axis) {
    const int dim = static_cast<int>(rng() % (rank + 1));
    if (dim == rank) continue;
    const std::string a = std::to_string(axis);
    if (dims[dim].empty())
      dims[dim] = a;
    else
      dims[dim] = rng() % 3 == 0 ? dims[dim] + "/" + a : rng() % 2 ? dims[dim] + a : a + dims[dim];
  }
  std::string spec;
  for (const auto& d : dims) spec += d.empty() ? "R" : fmt::format("S{}", d);
  return spec;
}

// `count` distinct ids of 0..devices-1, in random order.
std::vector<DeviceId> random_devices(std::mt19937& rng, int64_t count, int devices) {
  std::vector<DeviceId> ids(devices);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(count);
  return ids;
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

std::vector<BenchCase> random_suite(unsigned seed, int count, int max_devices, int64_t bytes,
                                    int devices_per_host) {
  if (count <= 0) throw InvalidArgument(fmt::format("bad --count {}: expected > 0", count));
  if (max_devices < 1)
    throw InvalidArgument(fmt::format("bad device bound {}: expected >= 1", max_devices));
  if (devices_per_host < 0 || (devices_per_host > 0 && max_devices % devices_per_host != 0))
    throw InvalidArgument(fmt::format(
        "bad --devices-per-host {}: expected a count > 0 that divides the {} devices allowed",
        devices_per_host, max_devices));
  if (bytes < 1) throw InvalidArgument(fmt::format("bad tensor size {} B: expected >= 1", bytes));
  std::mt19937 rng(seed);
  const auto pick = [&rng](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  // Sizes of the dims after the first: uneven over 2, 3 and 4 parts, and too short for some
  // parts (torch.chunk leaves trailing parts empty).
  constexpr std::array<int64_t, 12> kDimSizes = {1, 2, 3, 5, 6, 7, 8, 12, 13, 16, 17, 31};
  constexpr std::array<DType, 8> kDTypes = {DType::int8,    DType::uint8,   DType::int32,
                                            DType::int64,   DType::float16, DType::bfloat16,
                                            DType::float32, DType::float64};
  std::vector<BenchCase> suite;
  for (int i = 0; i < count; ++i) {
    // The cluster: the devices per host asked for, else 4, 2 or 1 (what divides the bound); at
    // most 8 hosts.
    std::vector<int> per_host;
    for (int g : {4, 2})
      if (max_devices % g == 0) per_host.push_back(g);
    if (per_host.empty()) per_host.push_back(1);
    const int g = devices_per_host > 0 ? devices_per_host : per_host[rng() % per_host.size()];
    const int hosts = static_cast<int>(pick(1, std::min(8, max_devices / g)));
    Resharding p;
    p.cluster = paper_cluster(hosts);
    p.cluster.devices_per_host = g;
    // The tensor: every dtype, 1-3 dims, about `bytes` in all.
    const DType dtype = kDTypes[rng() % kDTypes.size()];
    const int rank = static_cast<int>(pick(1, 3));
    std::vector<int64_t> shape(rank);
    int64_t row = dtype_size(dtype);
    for (int d = 1; d < rank; ++d) row *= shape[d] = kDimSizes[rng() % kDimSizes.size()];
    shape[0] = std::max<int64_t>(1, bytes / row + pick(0, 6));
    p.tensor = TensorSpec{shape, dtype};
    // The meshes: 1-D inside a host or 2-D over hosts; the source from host 0, the destination
    // on the next free hosts, overlapping the source (from host 0), or either on an explicit
    // shuffled device list.
    int next_host = 0;
    for (Layout* layout : {&p.src, &p.dst}) {
      const bool two_d = hosts > 1 && rng() % 2;
      std::vector<int64_t> mesh_shape = two_d ? std::vector<int64_t>{pick(1, hosts), pick(1, g)}
                                              : std::vector<int64_t>{pick(1, g)};
      const int64_t span = two_d ? mesh_shape[0] : 1;
      const int placement = static_cast<int>(rng() % 3);
      Mesh mesh;
      if (placement == 0) {
        int64_t devices = 1;
        for (int64_t n : mesh_shape) devices *= n;
        mesh = Mesh(mesh_shape, random_devices(rng, devices, hosts * g));
      } else {
        const int first = placement == 1 && next_host + span <= hosts ? next_host : 0;
        mesh = Mesh::placed(mesh_shape, first, g);
        next_host = static_cast<int>(first + span);
      }
      layout->spec = parse_sharding_spec(random_spec(rng, rank, mesh.rank()));
      layout->mesh = std::move(mesh);
    }
    p.validate();
    BenchCase c;
    c.label = fmt::format("r{}", i + 1);
    c.split = rng() % 2;
    c.problem = std::move(p);
    c.description = describe_random(c.problem) + (c.split ? " split" : "");
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
  // The sharded case (one holder and one receiver per task, 64 tasks per host): what planning
  // time at scale is measured on.
  BenchCase sharded;
  sharded.label = "s";
  sharded.problem = on_paper_cluster(TensorSpec{{8 * int64_t{hosts}, 1024, 512}, DType::float16},
                                     {hosts, 8}, "S0RS1", {hosts, 8}, "S01RR", 8);
  sharded.description = describe(sharded.problem);
  suite.push_back(std::move(sharded));
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

std::string gib(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / (1 << 30));
}

}  // namespace

std::vector<DeviceId> devices_on_this_machine(const Cluster& cluster, std::string_view backend) {
  std::vector<DeviceId> here;
  if (backend == "mpi") {
    const auto [size, first] = local_ranks();
    for (int d = first; d < first + size && d < cluster.devices(); ++d) here.push_back(d);
  } else {
    for (DeviceId d = 0; d < cluster.devices(); ++d) here.push_back(d);
  }
  return here;
}

void check_memory(double needed, std::string_view holder, std::string_view detail,
                  int64_t max_memory, std::string_view expected) {
  const int64_t available = max_memory > 0 ? max_memory : available_memory();
  if (needed <= static_cast<double>(available)) return;
  throw InvalidArgument(
      fmt::format("{} need {} ({}), more than the {} {}: expected {}", holder, gib(needed), detail,
                  gib(static_cast<double>(available)),
                  max_memory > 0 ? "of --max-memory" : "this machine has available", expected));
}

void check_tile_memory(const Batch& batch, std::string_view backend, int64_t max_memory,
                       std::string_view shrink) {
  const std::vector<DeviceId> here = devices_on_this_machine(batch.cluster, backend);
  int64_t total = 0;
  for (const auto& t : batch.tensors) total += t.tensor.bytes();
  const std::string what =
      batch.tensors.size() == 1
          ? fmt::format("{} tensor", shape_to_string(batch.tensors[0].tensor.shape, 'x'))
          : fmt::format("{} tensors", batch.tensors.size());
  check_memory(static_cast<double>(tile_bytes(batch, here)),
               fmt::format("the tiles of {} device(s) on this machine", here.size()),
               fmt::format("{} of {}", what, gib(static_cast<double>(total))), max_memory,
               fmt::format("a smaller tensor ({})", shrink));
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
  row.nic_in_bytes = in.empty() ? 0 : *std::max_element(in.begin(), in.end());
  const auto planning = Clock::now();
  const auto make = [&] {
    Plan plan = make_plan(bench_case.problem, PlanOptions{.strategy = choice.strategy,
                                                          .balance = choice.balance,
                                                          .split = bench_case.split});
    if (executor) check_tile_memory(plan.batch, backend, max_memory, "a smaller --bytes");
    return plan;
  };
  const Plan plan = executor ? plan_on_leader(*executor, make) : make();
  row.plan_s = seconds_since(planning);
  row.ops = static_cast<int64_t>(plan.ops.size());
  row.lower_bound_s = plan.lower_bound_s;
  // (counted again after the planning, so that its unit tasks do not stay in memory through it)
  if (const auto bound = explain_plan_bound(plan)) row.bound_term = bound->term;
  const auto measuring = Clock::now();
  if (executor) {
    const Measurement m = meshcast::measure(*executor, plan, measure);
    if (measure.verify && !m.verified)
      throw std::runtime_error(fmt::format("case {} {}: {} of {} destination elements wrong",
                                           bench_case.label, choice.name(), m.errors, m.checked));
    row.time_s = m.median_s;
    row.checked = m.checked;
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
  Batch batch = Batch::of_one(problem);
  auto why = fit_cluster(batch, devices);
  problem.cluster = batch.cluster;
  return why;
}

std::optional<std::string> fit_cluster(Batch& batch, int devices) {
  Cluster& c = batch.cluster;
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

namespace {

// Rows of a side's largest tile (device 0's: torch.chunk's first), what a binding stacks by.
int64_t first_tile_rows(const TensorSpec& tensor, const Layout& layout) {
  return tile_at(tensor, layout, 0).dims[0].size();
}

// Moves each region stacked along its tensor's dim 0 back by the rows that the regions before it
// in its buffer lost, so that a shrunk model's fused buffers shrink with it: q, k and v stay
// packed in qkv_proj, without the full model's extents between them. `before`: the shapes
// before shrinking. Regions in one lane (one buffer, the same offset outside that dim) keep
// their order and gaps, so they cannot overlap where they did not.
void restack_bindings(Batch& batch, const std::vector<TensorSpec>& before) {
  for (const bool src : {true, false}) {
    using Lane = std::pair<std::string, std::vector<int64_t>>;
    std::map<Lane, std::vector<std::pair<int64_t, size_t>>> lanes;  // -> (offset, tensor)
    for (size_t i = 0; i < batch.tensors.size(); ++i) {
      const auto& binding = src ? batch.tensors[i].src_buffer : batch.tensors[i].dst_buffer;
      if (!binding) continue;
      const size_t d = binding->offset.size() - before[i].shape.size();
      std::vector<int64_t> rest = binding->offset;
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(d));
      lanes[{binding->name, std::move(rest)}].emplace_back(binding->offset[d], i);
    }
    for (auto& [lane, members] : lanes) {
      std::sort(members.begin(), members.end());
      int64_t lost = 0;
      for (const auto& [offset, i] : members) {
        TensorResharding& t = batch.tensors[i];
        const Layout& layout = src ? t.src : t.dst;
        BufferBinding& binding = src ? *t.src_buffer : *t.dst_buffer;
        binding.offset[binding.offset.size() - before[i].shape.size()] = offset - lost;
        lost += first_tile_rows(before[i], layout) - first_tile_rows(t.tensor, layout);
      }
    }
  }
}

}  // namespace

void shrink_batch(Batch& batch, int64_t bytes) {
  const int64_t total = batch.bytes();
  if (bytes <= 0 || total <= bytes) return;
  const double factor = static_cast<double>(bytes) / static_cast<double>(total);
  std::vector<TensorSpec> before;
  for (auto& t : batch.tensors) {
    before.push_back(t.tensor);
    int64_t& rows = t.tensor.shape[0];
    // A dim 0 that both layouts cut evenly stays a multiple of their parts: shrinking a
    // column-parallel weight's 4096 rows to 11 would give the first of 8 tp shards twice the
    // rows of the last and 0 to some, and the model's first hosts most of its bytes.
    int64_t parts = std::lcm(t.src.parts_of(0), t.dst.parts_of(0));
    if (rows % parts != 0) parts = 1;
    rows = std::max<int64_t>(
               1, std::llround(static_cast<double>(rows) * factor / static_cast<double>(parts))) *
           parts;
  }
  restack_bindings(batch, before);
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
