// meshcast._core: the Python binding. It only converts Python values to the library's types and
// back; planning, simulation, tiles and execution are the library's.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "meshcast/error.h"
#include "meshcast/layout/layout.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/plan/validate.h"
#include "meshcast/planner/lower_bound.h"
#include "meshcast/planner/planner.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/executors.h"
#include "meshcast/runtime/transport.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/suites/bench.h"
#include "meshcast/suites/model.h"

namespace py = pybind11;

namespace meshcast::python {
namespace {

// A Python mc.Layout: its mesh's shape, devices and axis names and its spec's text.
Layout to_layout(const py::handle& layout, int tensor_rank) {
  const py::object mesh = layout.attr("mesh");
  Mesh m(mesh.attr("shape").cast<std::vector<int64_t>>(),
         mesh.attr("devices").cast<std::vector<DeviceId>>());
  const SpecContext context{tensor_rank, m.rank(),
                            mesh.attr("axis_names").cast<std::vector<std::string>>()};
  return Layout{std::move(m),
                parse_sharding_spec(layout.attr("spec_text").cast<std::string>(), context)};
}

Cluster to_cluster(const py::handle& cluster) {
  Cluster c;
  c.hosts = cluster.attr("hosts").cast<int>();
  c.devices_per_host = cluster.attr("devices_per_host").cast<int>();
  c.nic_bandwidth = gbps_to_bytes(cluster.attr("nic_gbps").cast<double>());
  c.device_bandwidth = gbps_to_bytes(cluster.attr("dev_gbps").cast<double>());
  c.latency = cluster.attr("latency_us").cast<double>() * 1e-6;
  c.nics_per_host = cluster.attr("nics_per_host").cast<int>();
  for (double gbps : cluster.attr("host_nic_gbps").cast<std::vector<double>>())
    c.host_nic_bandwidth.push_back(gbps_to_bytes(gbps));
  c.host_nics = cluster.attr("host_nics").cast<std::vector<int>>();
  c.validate();
  return c;
}

// The keyword arguments of mc.Cluster that make `c` (Gbps, microseconds; per-host lists empty
// where the cluster is uniform).
py::dict cluster_fields(const Cluster& c) {
  py::dict d;
  d["hosts"] = c.hosts;
  d["devices_per_host"] = c.devices_per_host;
  d["nic_gbps"] = bytes_to_gbps(c.nic_bandwidth);
  d["dev_gbps"] = bytes_to_gbps(c.device_bandwidth);
  d["latency_us"] = c.latency * 1e6;
  d["nics_per_host"] = c.nics_per_host;
  py::list host_nic_gbps;
  for (double bytes : c.host_nic_bandwidth) host_nic_gbps.append(bytes_to_gbps(bytes));
  d["host_nic_gbps"] = host_nic_gbps;
  d["host_nics"] = c.host_nics;
  return d;
}

// `text` parsed by the library's parse_json (its depth bound); a ParseError says `not_json` first.
nlohmann::json json_document(const std::string& text, std::string_view not_json) {
  try {
    return parse_json(text);
  } catch (const ParseError& e) {
    throw ParseError(fmt::format("{}: {}", not_json, e.what()));
  }
}

// mc.Cluster.load: the cluster of a cluster document (docs/json.md), as `--cluster FILE` reads it.
py::dict cluster_document(const std::string& text) {
  Cluster c = cluster_from_json(json_document(text, "not a JSON document"));
  c.validate();
  return cluster_fields(c);
}

py::tuple box_to_tuple(const Box& box) {
  py::tuple t(box.rank());
  for (int d = 0; d < box.rank(); ++d) t[d] = py::make_tuple(box.dims[d].lo, box.dims[d].hi);
  return t;
}

// {device: ((lo, hi), ...)} of every device of the layout, in mesh order.
py::dict tiles(const std::vector<int64_t>& shape, const py::handle& layout) {
  const TensorSpec tensor{shape, DType::float32};
  tensor.validate();
  const Layout l = to_layout(layout, tensor.rank());
  l.validate(tensor);
  py::dict out;
  const auto boxes = device_tiles(tensor, l);
  for (int64_t i = 0; i < l.mesh.size(); ++i)
    out[py::int_(l.mesh.device_at(i))] = box_to_tuple(boxes[i]);
  return out;
}

// The global shape whose tiles have these shapes: per dim, the sum of its distinct parts' sizes.
std::vector<int64_t> global_shape(const std::map<DeviceId, std::vector<int64_t>>& tile_shapes,
                                  const py::handle& layout) {
  const int rank = static_cast<int>(tile_shapes.begin()->second.size());
  const Layout l = to_layout(layout, rank);
  std::vector<std::map<int64_t, int64_t>> parts(rank);  // per dim: part index -> size
  for (int64_t i = 0; i < l.mesh.size(); ++i) {
    const auto it = tile_shapes.find(l.mesh.device_at(i));
    if (it == tile_shapes.end()) continue;
    if (static_cast<int>(it->second.size()) != rank)
      throw InvalidArgument(fmt::format("shards: device {} has {} dims, device {} has {}",
                                        it->first, it->second.size(), tile_shapes.begin()->first,
                                        rank));
    const auto coords = l.mesh.coords_of(i);
    for (int d = 0; d < rank; ++d) parts[d][l.part_index(d, coords)] = it->second[d];
  }
  // Parts no shard holds count as empty (mc.shard leaves out empty tiles); a shard missing for
  // another reason makes the tile shapes disagree with this shape, which unshard reports.
  std::vector<int64_t> shape(rank, 0);
  for (int d = 0; d < rank; ++d)
    for (const auto& [part, size] : parts[d]) shape[d] += size;
  return shape;
}

std::string alpa_spec(const py::handle& layout, int tensor_rank) {
  return to_layout(layout, tensor_rank).spec.to_string();
}

// One tensor of mc.plan: (name, shape, dtype, src layout, dst layout).
using TensorArgs =
    std::tuple<std::string, std::vector<int64_t>, std::string, py::object, py::object>;

// The tensors of mc.plan as a batch, on no cluster yet (`batched` false: errors name "src"/"dst"
// without the tensor).
Batch to_batch(const std::vector<TensorArgs>& tensors, bool batched) {
  Batch batch;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, shape, dtype, src, dst] = tensors[i];
    const std::string where = batched ? fmt::format("tensors[{}] '{}': ", i, name) : "";
    TensorResharding t{.name = name};
    try {
      t.tensor = {shape, parse_dtype(dtype)};
      t.tensor.validate();
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(where + e.what());
    }
    for (auto [layout, side, label] : {std::tuple{&src, &t.src, "src"}, {&dst, &t.dst, "dst"}}) {
      try {
        *side = to_layout(*layout, t.tensor.rank());
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("{}{}: {}", where, label, e.what()));
      }
    }
    batch.tensors.push_back(std::move(t));
  }
  return batch;
}

// mc.plan of one tensor (`batched` false: errors name "src"/"dst" as before) or of a batch.
Plan plan(const std::vector<TensorArgs>& tensors, bool batched, const py::handle& cluster,
          const std::string& strategy, const std::optional<std::string>& balance, bool split,
          int64_t chunk_bytes, double search_effort, std::optional<int64_t> bucket_bytes) {
  Batch batch = to_batch(tensors, batched);
  batch.cluster = to_cluster(cluster);
  PlanOptions options{.strategy = parse_strategy(strategy),
                      .split = split,
                      .chunk_bytes = chunk_bytes,
                      .search_effort = search_effort};
  if (balance) options.balance = parse_balance(*balance);
  options.bucket_bytes = bucket_bytes;
  if (chunk_bytes < 0)
    throw InvalidArgument(fmt::format("bad chunk_bytes {}: expected >= 0", chunk_bytes));
  if (search_effort < 0)
    throw InvalidArgument(fmt::format("bad search_effort {}: expected >= 0", search_effort));
  return batched ? make_plan(batch, options) : make_plan(batch.resharding(0), options);
}

// mc.shrink_batch: the shapes of the batch's tensors once shrink_batch made it about `bytes` bytes.
std::vector<std::vector<int64_t>> shrunk_shapes(const std::vector<TensorArgs>& tensors,
                                                int64_t bytes) {
  if (bytes <= 0) throw InvalidArgument(fmt::format("bad bytes {}: expected > 0", bytes));
  Batch batch = to_batch(tensors, true);
  shrink_batch(batch, bytes);
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& t : batch.tensors) shapes.push_back(t.tensor.shape);
  return shapes;
}

// A library Layout as mc.Layout's parts: (mesh shape, mesh devices, Alpa spec).
py::tuple layout_parts(const Layout& layout) {
  return py::make_tuple(layout.mesh.shape(), layout.mesh.devices(), layout.spec.to_string());
}

// mc.model_batch: model_batch's tensors as (name, shape, dtype, src parts, dst parts) and the
// cluster both sides need (cluster_fields). `dimensions`: (key, value) of make_model_config.
py::tuple model_batch_parts(const std::string& arch, const std::string& preset,
                            const std::vector<std::pair<std::string, int64_t>>& dimensions,
                            const std::string& dtype, const std::string& train,
                            const std::string& serve, const py::handle& cluster) {
  ModelConfig config = make_model_config(arch, preset, dimensions);
  config.dtype = parse_dtype(dtype);
  const Batch batch =
      model_batch(config, parse_model_parallelism(train, ModelSide::train, "train"),
                  parse_model_parallelism(serve, ModelSide::serve, "serve"), to_cluster(cluster));
  py::list tensors;
  for (const TensorResharding& t : batch.tensors)
    tensors.append(py::make_tuple(t.name, t.tensor.shape, std::string(to_string(t.tensor.dtype)),
                                  layout_parts(t.src), layout_parts(t.dst)));
  return py::make_tuple(tensors, cluster_fields(batch.cluster));
}

py::dict op_to_dict(const Op& op) {
  py::dict d;
  d["id"] = op.id;
  d["kind"] = std::string(to_string(op.kind));
  py::list pieces;
  for (const Piece& p : op.pieces) {
    py::dict piece;
    piece["tensor"] = p.tensor;
    piece["task"] = p.task;
    piece["slice"] = box_to_tuple(p.slice);
    piece["bytes"] = p.bytes;
    piece["holder"] = p.holder;
    pieces.append(piece);
  }
  d["pieces"] = pieces;
  d["bytes"] = op.bytes;
  d["sender"] = op.sender ? py::object(py::int_(*op.sender)) : py::object(py::none());
  d["receivers"] = op.receivers;
  d["chunk_bytes"] = op.chunk_bytes;
  return d;
}

// The plan's one tensor, for the members that describe a single tensor; a batch of several says
// where each tensor's are instead of answering with its first.
const TensorResharding& only_resharding(const Plan& plan, std::string_view member) {
  if (plan.batch.tensors.size() != 1)
    throw InvalidArgument(
        fmt::format("plan.{}: the plan moves {} tensors, each with its own; plan.batch lists them",
                    member, plan.batch.tensors.size()));
  return plan.batch.tensors[0];
}
const TensorSpec& only_tensor(const Plan& plan, std::string_view member) {
  return only_resharding(plan, member).tensor;
}

// Bytes of every tensor the plan moves (each counted once).
int64_t tensor_bytes(const Plan& plan) {
  int64_t bytes = 0;
  for (const auto& t : plan.batch.tensors) bytes += t.tensor.bytes();
  return bytes;
}

// plan.batch: one dict per tensor, in plan order.
py::list batch_entries(const Plan& plan) {
  py::list out;
  for (const auto& t : plan.batch.tensors) {
    py::dict d;
    d["name"] = t.name;
    d["shape"] = t.tensor.shape;
    d["dtype"] = std::string(to_string(t.tensor.dtype));
    d["src_spec"] = t.src.spec.to_string();
    d["dst_spec"] = t.dst.spec.to_string();
    d["bytes"] = t.tensor.bytes();
    out.append(d);
  }
  return out;
}

struct Simulation {
  double time_s = 0;
  double lower_bound_s = 0;
  std::vector<LinkStats> busiest_links;
  py::object bound_term;  // {"term", "at", "text"}, or None where the plan's bound is not ours
};

// Plan.simulate: on the plan's own cluster, or on `cluster` (an mc.Cluster) with its bound for it.
Simulation simulate_plan(const Plan& given, int top, const py::object& cluster) {
  const Plan plan = cluster.is_none() ? given : on_cluster(given, to_cluster(cluster));
  const SimResult sim = simulate(plan);
  Simulation s{sim.time_s, plan.lower_bound_s, {}, py::none()};
  for (const LinkStats* l : busiest_links(sim, top)) s.busiest_links.push_back(*l);
  if (const auto bound = explain_plan_bound(plan)) {
    py::dict term;
    term["term"] = std::string(to_string(bound->term));
    term["at"] = bound->at >= 0 ? py::object(py::int_(bound->at)) : py::object(py::none());
    term["text"] = describe(*bound, plan.batch);
    s.bound_term = std::move(term);
  }
  return s;
}

// One array handed to a Resharder: a numpy array (buffer protocol) or a CPU torch tensor (its
// data pointer), viewed without a copy, strided or not.
struct ArrayView {
  std::byte* data = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // bytes (numpy's convention; torch's element strides scaled)
  int64_t itemsize = 0;
  std::string dtype;
  bool contiguous = false;
  bool writable = false;
};

bool is_torch_tensor(const py::handle& value) {
  const py::object type = py::type::of(value);
  return py::str(type.attr("__module__")).cast<std::string>().rfind("torch", 0) == 0 &&
         py::hasattr(value, "data_ptr");
}

// numpy's name of a buffer-protocol element format ("f" -> "float32"), "" when it has none here.
std::string dtype_of_format(std::string_view format, py::ssize_t itemsize) {
  if (!format.empty() && std::string_view("<=@").find(format[0]) != std::string_view::npos)
    format.remove_prefix(1);
  if (format.size() != 1) return std::string(format);
  const std::string bits = std::to_string(itemsize * 8);
  switch (format[0]) {
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
      return "int" + bits;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
      return "uint" + bits;
    case 'e':
    case 'f':
    case 'd':
      return "float" + bits;
    case '?':
      return "bool";
    default:
      return std::string(format);
  }
}

// Where an array goes, for messages: "src[3]", or "src['w1'][3]" in a batch.
struct Slot {
  const char* side;
  std::string_view tensor;
  DeviceId device;
};
std::string to_string(const Slot& slot) {
  return fmt::format("{}{}[{}]", slot.side, slot.tensor, slot.device);
}

// `device_memory`: a torch tensor may live on an accelerator (the torch backend's NCCL group).
ArrayView view_of(const py::handle& value, const Slot& slot, bool device_memory) {
  ArrayView v;
  if (PyObject_CheckBuffer(value.ptr())) {
    const py::buffer_info info = py::reinterpret_borrow<py::buffer>(value).request();
    v.data = static_cast<std::byte*>(info.ptr);
    v.shape.assign(info.shape.begin(), info.shape.end());
    v.dtype = dtype_of_format(info.format, info.itemsize);
    v.strides.assign(info.strides.begin(), info.strides.end());
    v.itemsize = info.itemsize;
    int64_t stride = info.itemsize;
    v.contiguous = true;
    for (int d = static_cast<int>(info.ndim) - 1; d >= 0; --d) {
      if (info.shape[d] > 1 && info.strides[d] != stride) v.contiguous = false;
      stride *= info.shape[d];
    }
    v.writable = !info.readonly;
    return v;
  }
  if (!is_torch_tensor(value))
    throw py::type_error(fmt::format("{}: got {}, expected a numpy array or a CPU torch tensor",
                                     to_string(slot),
                                     py::str(py::type::of(value)).cast<std::string>()));
  const std::string device = py::str(value.attr("device")).cast<std::string>();
  if (device != "cpu" && !device_memory)
    throw py::value_error(fmt::format("{}: a torch tensor on '{}', expected one in CPU memory",
                                      to_string(slot), device));
  // A lazily negated or conjugated tensor (t.neg() views, t.conj() of a complex one) holds the
  // other values in memory: reading or writing its bytes would give the wrong sign.
  for (const char* bit : {"is_neg", "is_conj"})
    if (py::hasattr(value, bit) && value.attr(bit)().cast<bool>())
      throw py::value_error(fmt::format(
          "{}: a torch tensor with {}() set (a lazy view: its memory holds other values), "
          "expected one whose memory holds its values (.resolve_neg() / .resolve_conj() makes one)",
          to_string(slot), bit));
  v.data = reinterpret_cast<std::byte*>(value.attr("data_ptr")().cast<uintptr_t>());
  v.shape = value.attr("shape").cast<std::vector<int64_t>>();
  v.dtype = py::str(value.attr("dtype")).cast<std::string>().substr(6);  // "torch.float32"
  v.contiguous = value.attr("is_contiguous")().cast<bool>();
  v.itemsize = value.attr("element_size")().cast<int64_t>();
  for (int64_t stride : value.attr("stride")().cast<std::vector<int64_t>>())
    v.strides.push_back(stride * v.itemsize);
  v.writable = true;
  return v;
}

// Whether an array of `array_dtype` holds elements of `dtype`: the same name, or uint8 bytes for a
// float8 dtype (numpy has no float8, nor has torch before 2.1).
bool holds_dtype(std::string_view array_dtype, DType dtype) {
  const bool float8 = dtype == DType::float8_e4m3fn || dtype == DType::float8_e5m2;
  return array_dtype == to_string(dtype) || (float8 && array_dtype == "uint8");
}

// An array's memory as an executor takes it: contiguous (no strides), or a strided view whose
// bytes run from its first element to its last (docs/executors.md#bound-tiles).
struct TileMemory {
  std::span<std::byte> bytes;
  std::vector<int64_t> strides;  // elements; empty: contiguous
};

// Checks `value` against the tile `box` of the plan's tensor and returns its memory: a strided
// view (a region of a fused parameter, a transposed array) is passed through, not copied.
TileMemory tile_memory(const py::handle& value, const Box& box, const TensorSpec& tensor,
                       const Slot& slot, bool written, bool device_memory) {
  const ArrayView v = view_of(value, slot, device_memory);
  const auto want_shape = box.extents();
  if (v.shape != want_shape)
    throw py::value_error(fmt::format("{}: shape ({}), expected ({}) (the tile {})",
                                      to_string(slot), fmt::join(v.shape, ", "),
                                      fmt::join(want_shape, ", "), to_string(box)));
  if (!holds_dtype(v.dtype, tensor.dtype))
    throw py::value_error(fmt::format("{}: dtype {}, expected {}", to_string(slot), v.dtype,
                                      to_string(tensor.dtype)));
  if (written && !v.writable)
    throw py::value_error(fmt::format("{}: read-only, expected a writable array", to_string(slot)));
  if (v.contiguous) return {{v.data, static_cast<size_t>(box.volume() * v.itemsize)}, {}};
  TileMemory m;
  int64_t extent = 1;  // elements from the first to the last
  for (size_t d = 0; d < v.strides.size(); ++d) {
    if (v.strides[d] < 0 || v.strides[d] % v.itemsize != 0)
      throw py::value_error(fmt::format(
          "{}: strides ({}) bytes, expected non-negative multiples of the element size {}",
          to_string(slot), fmt::join(v.strides, ", "), v.itemsize));
    m.strides.push_back(v.strides[d] / v.itemsize);
    extent += (v.shape[d] - 1) * m.strides.back();
  }
  m.bytes = {v.data, static_cast<size_t>(extent * v.itemsize)};
  return m;
}

// A key of src or out: a device id (an int) of the tensor's `mesh` on that side.
void check_device_key(const py::handle& key, std::string_view side, std::string_view label,
                      const Mesh& mesh) {
  if (!py::isinstance<py::int_>(key))
    throw py::type_error(fmt::format("{}{}: key {} is not a device id (int)", side, label,
                                     py::repr(key).cast<std::string>()));
  int overflow = 0;
  const long long id = PyLong_AsLongLongAndOverflow(key.ptr(), &overflow);
  const auto& ds = mesh.devices();
  if (overflow != 0 || std::find(ds.begin(), ds.end(), id) == ds.end())
    throw py::value_error(fmt::format("{}{}: device {} is not in the {} mesh (devices {})", side,
                                      label, py::repr(key).cast<std::string>(),
                                      side == "src" ? "source" : "destination",
                                      fmt::join(ds, ",")));
}

// The bytes of one array a run reads (a source) or writes (an output), named as in messages.
struct Region {
  std::span<const std::byte> bytes;  // from its first element to its last
  std::string name;
  bool written = false;
  std::vector<int64_t> strides = {};  // elements; none: contiguous
  std::vector<int64_t> extents = {};
  int64_t itemsize = 1;
};

// A strided region is checked element run by element run, up to this many runs; beyond, by its
// span from its first byte to its last (which may refuse views that do not overlap).
constexpr int64_t kMaxRegionRuns = int64_t{1} << 16;

using ByteRun = std::pair<const std::byte*, const std::byte*>;  // [first, end)

// The bytes a region covers as disjoint runs: a strided view's elements merged into runs as long
// as its inner dims are contiguous (a w13 slot of experts x rows x hidden: one run per expert),
// or its whole span where the runs would be too many or overlap one another.
std::vector<ByteRun> runs_of(const Region& r) {
  const std::byte* first = r.bytes.data();
  const std::vector<ByteRun> span = {{first, first + r.bytes.size()}};
  const auto& strides = r.strides;
  if (strides.empty()) return span;
  int outer = static_cast<int>(strides.size());  // dims [0, outer) are not merged into a run
  int64_t run = 1;                               // elements
  while (outer > 0 && (r.extents[outer - 1] == 1 || strides[outer - 1] == run))
    run *= r.extents[--outer];
  int64_t count = 1;
  for (int d = 0; d < outer; ++d) count *= r.extents[d];
  if (count > kMaxRegionRuns) return span;
  std::vector<ByteRun> runs;
  runs.reserve(count);
  std::vector<int64_t> index(outer, 0);
  for (int64_t k = 0; k < count; ++k) {
    int64_t at = 0;
    for (int d = 0; d < outer; ++d) at += index[d] * strides[d];
    runs.emplace_back(first + at * r.itemsize, first + (at + run) * r.itemsize);
    for (int d = outer - 1; d >= 0 && ++index[d] == r.extents[d]; --d) index[d] = 0;
  }
  std::sort(runs.begin(), runs.end());
  for (size_t i = 1; i < runs.size(); ++i)
    if (runs[i].first < runs[i - 1].second) return span;  // e.g. a stride of 0
  return runs;
}

// An output that shares memory with another output or with a source would be read while it is
// written, or written twice: the shards would come out wrong. Sources may share memory. Views
// into one buffer that interleave without sharing an element (gate and up in an expert's w13
// slot) do not share memory.
void check_no_overlap(std::vector<Region> regions) {
  std::erase_if(regions, [](const Region& r) { return r.bytes.empty(); });
  struct Run {
    ByteRun bytes;
    const Region* region;
  };
  std::vector<Run> runs;
  for (const Region& r : regions)
    for (const ByteRun& b : runs_of(r)) runs.push_back({b, &r});
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.bytes.first < b.bytes.first; });
  // Sweeping by start: a run overlaps an earlier one when it starts before that one's end; the
  // earlier runs reaching furthest (any, and written) are the ones to compare with. A region's
  // own runs are disjoint, so the furthest reaching past a run's start is another region's.
  const Run* furthest = nullptr;
  const Run* furthest_written = nullptr;
  for (const Run& r : runs) {
    const Run* other = r.region->written ? furthest : furthest_written;
    if (other && other->bytes.second > r.bytes.first)
      throw py::value_error(fmt::format(
          "{} and {} share memory: every output needs an array of its own, apart from every "
          "other output and every source",
          other->region->name, r.region->name));
    if (!furthest || r.bytes.second > furthest->bytes.second) furthest = &r;
    if (r.region->written && (!furthest_written || r.bytes.second > furthest_written->bytes.second))
      furthest_written = &r;
  }
}

// A plan compiled once for one executor, run on dicts of arrays.
// The tensors of a plan, in plan order: what a Resharder checks arrays against.
struct PlanTensor {
  std::string name;
  TensorSpec tensor;
  Layout src;
  Layout dst;
};
std::vector<PlanTensor> tensors_of(const Plan& plan) {
  std::vector<PlanTensor> out;
  for (const auto& t : plan.batch.tensors) out.push_back({t.name, t.tensor, t.src, t.dst});
  return out;
}

// The buffers one device passes for one tensor.
struct HereTile {
  int tensor;
  DeviceId device;
  DeviceTiles tiles;
};

// A transport written in Python (meshcast._torch over torch.distributed). The executor's thread
// calls it, taking the GIL only for the call; a Python exception becomes meshcast's (TimeoutError:
// Timeout, any other: Error, its message kept), which wait() raises again in Python.
class PyTransport final : public Transport {
 public:
  // A counter the Python side raises after each completion or error it records (watch_events):
  // poll() enters Python only when it changed. An executor with nothing to do polls every few
  // microseconds; taking the GIL and calling Python each time made every waiting rank of a job
  // (16 on 2 cores on the emulated cluster) burn a core's share, slowing the ranks that move
  // bytes.
  void watch_events(uintptr_t counter) { events_ = reinterpret_cast<uint64_t*>(counter); }

  int rank() const override { return call<int>("rank"); }
  int size() const override { return call<int>("size"); }
  int64_t max_tag() const override { return call<int64_t>("max_tag"); }
  std::string machine() const override { return call<std::string>("machine"); }
  std::string name() const override { return call<std::string>("name"); }
  std::string launch_hint(int devices) const override {
    return call<std::string>("launch_hint", devices);
  }
  bool rendezvous_sends() const override { return call<bool>("rendezvous_sends"); }
  void post_send(int peer, int tag, const std::byte* data, int64_t bytes, bool synchronous,
                 uint64_t cookie) override {
    call<void>("post_send", peer, tag, reinterpret_cast<uintptr_t>(data), bytes, synchronous,
               cookie);
  }
  void post_receive(int peer, int tag, std::byte* data, int64_t bytes, uint64_t cookie) override {
    call<void>("post_receive", peer, tag, reinterpret_cast<uintptr_t>(data), bytes, cookie);
  }
  void poll(std::vector<uint64_t>& completed) override {
    if (events_) {
      const uint64_t events = std::atomic_ref<uint64_t>(*events_).load(std::memory_order_acquire);
      if (events == events_seen_) return;
      events_seen_ = events;
    }
    py::gil_scoped_acquire gil;
    guarded([&] {
      for (const py::handle cookie : method("poll")()) completed.push_back(cookie.cast<uint64_t>());
    });
  }
  std::byte* allocate(int64_t bytes) override {
    return reinterpret_cast<std::byte*>(call<uintptr_t>("allocate", bytes));
  }
  void release(std::byte* memory) override {
    call<void>("release", reinterpret_cast<uintptr_t>(memory));
  }
  bool copies_itself() const override { return call<bool>("copies_itself"); }
  // Strided copies in device memory: the Python side gets the loops as plain numbers.
  void copy(const StridedCopy& c, const std::byte* from, std::byte* to) override {
    const auto loop = [&](const std::array<int64_t, kMaxRank>& a) {
      return std::vector<int64_t>(a.begin(), a.begin() + c.loops);
    };
    call<void>("copy", reinterpret_cast<uintptr_t>(from) + c.from_offset,
               reinterpret_cast<uintptr_t>(to) + c.to_offset, c.run_bytes, loop(c.counts),
               loop(c.from_strides), loop(c.to_strides));
  }

 private:
  uint64_t* events_ = nullptr;  // watch_events' counter, null: poll every time
  uint64_t events_seen_ = 0;
  py::function method(const char* name) const {
    py::function f = py::get_override(static_cast<const Transport*>(this), name);
    if (!f) throw Error(fmt::format("the Python transport has no method {}()", name));
    return f;
  }
  template <typename F>
  static void guarded(F&& body) {
    try {
      body();
    } catch (py::error_already_set& e) {
      const std::string message = py::str(e.value()).cast<std::string>();
      if (e.matches(PyExc_TimeoutError)) throw Timeout(message);
      throw Error(message);
    }
  }
  template <typename R, typename... Args>
  R call(const char* name, Args&&... args) const {
    py::gil_scoped_acquire gil;
    if constexpr (std::is_void_v<R>) {
      guarded([&] { method(name)(std::forward<Args>(args)...); });
    } else {
      std::optional<R> out;
      guarded([&] { out = method(name)(std::forward<Args>(args)...).template cast<R>(); });
      return *out;
    }
  }
};

class Resharder {
 public:
  // `transport`: a Python Transport (backend "torch"), None otherwise. A timeout raises on every
  // backend, where the CLI's watchdog ends the process: the host process is the user's.
  Resharder(Plan plan, const std::string& backend, int threads, double timeout_s,
            int64_t max_staging_bytes, py::object transport, bool ordered)
      : plan_(std::move(plan)),
        tensors_(tensors_of(plan_)),
        transport_(std::move(transport)),
        executor_(transport_.is_none()
                      ? make_executor(backend, {.threads = threads,
                                                .max_staging_bytes = max_staging_bytes,
                                                .timeout_s = timeout_s})
                      : make_transport_executor(transport_.cast<std::shared_ptr<Transport>>(),
                                                {.max_staging_bytes = max_staging_bytes,
                                                 .ordered = ordered,
                                                 .timeout_s = timeout_s,
                                                 .backend = backend})) {
    {
      py::gil_scoped_release release;
      compiled_ = executor_->compile(plan_);
    }
    for (DeviceId device : compiled_->devices_here())
      for (size_t i = 0; i < tensors_.size(); ++i)
        here_.push_back(
            {static_cast<int>(i), device, tiles_of(plan_.batch, static_cast<int>(i), device)});
  }

  // A run still in flight finishes before its buffers' owners and the plan go; its failure
  // (a peer that died, a timeout) was never asked for, and a destructor cannot raise it.
  ~Resharder() {
    if (state_ != State::running) return;
    py::gil_scoped_release release;
    try {
      compiled_->wait();
    } catch (const std::exception&) {
    }
  }
  Resharder(const Resharder&) = delete;
  Resharder& operator=(const Resharder&) = delete;

  std::vector<DeviceId> devices_here() const { return compiled_->devices_here(); }
  int64_t staging_bytes() const { return compiled_->staging_bytes(); }
  std::vector<std::string> tensor_names() const {
    std::vector<std::string> names;
    for (const auto& t : tensors_) names.push_back(t.name);
    return names;
  }

  // `src` and `out` hold one {device: array} per tensor of the plan (`out` entries may be None).
  // Checks every array, allocating missing outputs with `allocate(shape, dtype)`, then starts.
  // wait() returns the outputs: {name: {device: array}} when `batched`, else the one dict.
  void start(const py::list& src, const py::list& out, const py::object& allocate, bool batched) {
    // The state changes under the GIL, and is claimed before any Python code runs (allocate,
    // a torch tensor's attributes), which may let another thread in.
    if (state_ != State::idle)
      throw std::runtime_error(
          "start(): a run is in flight (started, not yet waited for): wait() for it first; one "
          "Resharder runs one plan at a time");
    state_ = State::starting;
    try {
      check_and_start(src, out, allocate, batched);
    } catch (...) {
      state_ = State::idle;
      keep_.clear();
      result_ = py::none();
      throw;
    }
    state_ = State::running;
  }

  // (seconds, the outputs of the run in flight).
  py::tuple wait() {
    if (state_ == State::idle) throw std::runtime_error("wait(): nothing was started");
    if (state_ != State::running)
      throw std::runtime_error(fmt::format(
          "wait(): another thread is {} the run in flight; one Resharder runs one plan at a time",
          state_ == State::starting ? "starting" : "already waiting for"));
    state_ = State::waiting;
    RunTiming timing;
    try {
      py::gil_scoped_release release;
      timing = compiled_->wait();
    } catch (...) {  // the run is over (the torch backend's faults raise)
      state_ = State::idle;
      keep_.clear();
      result_ = py::none();
      throw;
    }
    state_ = State::idle;
    keep_.clear();
    return py::make_tuple(timing.seconds, std::exchange(result_, py::none()));
  }

 private:
  // start() once its state is claimed: the arrays checked and bound, missing outputs allocated.
  void check_and_start(const py::list& src, const py::list& out, const py::object& allocate,
                       bool batched) {
    py::list outputs;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const std::string label = tensor_label(i);
      const PlanTensor& t = tensors_[i];
      const py::object given_out = out[i];
      if (!given_out.is_none() && !py::isinstance<py::dict>(given_out))
        throw py::type_error(
            fmt::format("out{}: expected a dict {{device: array}} or None", label));
      outputs.append(given_out.is_none() ? py::dict() : py::dict(given_out));
      for (const auto& [side, given, layout] :
           {std::tuple{"src", py::dict(src[i]), &t.src}, {"out", py::dict(outputs[i]), &t.dst}})
        for (const auto& [key, value] : given) check_device_key(key, side, label, layout->mesh);
    }
    std::vector<DeviceBuffers> buffers;
    std::vector<Region> regions;
    std::vector<py::object> keep;
    for (const auto& [tensor, device, tiles] : here_) {
      const PlanTensor& t = tensors_[tensor];
      const std::string label = tensor_label(tensor);
      const py::dict given_src = src[tensor];
      const py::dict given_out = outputs[tensor];
      DeviceBuffers b{.device = device, .tensor = tensor};
      const py::int_ key(device);
      if (!tiles.src.empty()) {
        if (!given_src.contains(key))
          throw py::value_error(fmt::format("src{}: no shard for device {}, expected its tile {}",
                                            label, device, to_string(tiles.src)));
        const py::object value = given_src[key];
        const Slot slot{"src", label, device};
        TileMemory m = tile_memory(value, tiles.src, t.tensor, slot, false, !transport_.is_none());
        b.src = m.bytes;
        b.src_strides = m.strides;
        regions.push_back({b.src, to_string(slot), false, std::move(m.strides), tiles.src.extents(),
                           dtype_size(t.tensor.dtype)});
        keep.push_back(value);
      }
      if (!tiles.dst.empty()) {
        if (!given_out.contains(key)) {
          if (!py::object(out[tensor]).is_none())
            throw py::value_error(fmt::format("out{}: no array for device {}, expected its tile {}",
                                              label, device, to_string(tiles.dst)));
          given_out[key] = allocate(tiles.dst.extents(), std::string(to_string(t.tensor.dtype)));
        }
        const py::object value = given_out[key];
        const Slot slot{"out", label, device};
        TileMemory m = tile_memory(value, tiles.dst, t.tensor, slot, true, !transport_.is_none());
        b.dst = m.bytes;
        b.dst_strides = m.strides;
        regions.push_back({b.dst, to_string(slot), true, std::move(m.strides), tiles.dst.extents(),
                           dtype_size(t.tensor.dtype)});
        keep.push_back(value);
      }
      buffers.push_back(b);
    }
    check_no_overlap(regions);
    py::object result = outputs[0];
    if (batched) {
      py::dict by_name;
      for (size_t i = 0; i < tensors_.size(); ++i) by_name[py::str(tensors_[i].name)] = outputs[i];
      result = by_name;
    }
    buffers_ = std::move(buffers);
    keep_ = std::move(keep);
    result_ = std::move(result);
    py::gil_scoped_release release;
    compiled_->start(buffers_);
  }

  // "['name']" for a tensor of a batch, "" for a single tensor: messages say src['w1'][3].
  std::string tensor_label(size_t i) const {
    return tensors_.size() > 1 ? fmt::format("['{}']", tensors_[i].name) : "";
  }

  Plan plan_;
  std::vector<PlanTensor> tensors_;
  py::object transport_;  // kept alive while the executor calls it
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<CompiledPlan> compiled_;
  std::vector<HereTile> here_;  // the tiles of devices_here(), for every tensor
  std::vector<DeviceBuffers> buffers_;
  std::vector<py::object> keep_;    // the arrays of the run in flight stay alive until wait()
  py::object result_ = py::none();  // what wait() returns for the run in flight
  // A run's life; a thread that finds it busy gets an error, never another thread's outputs.
  enum class State { idle, starting, running, waiting };
  State state_ = State::idle;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "meshcast's C++ library; use the meshcast package";
  // Translators are tried newest first: the base class goes first.
  py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<InvalidArgument>(m, "InvalidArgument", PyExc_ValueError);
  py::register_exception<ParseError>(m, "ParseError", PyExc_ValueError);
  py::register_exception<Timeout>(m, "Timeout", PyExc_TimeoutError);

  // Subclassed in Python by meshcast._torch.TorchTransport.
  py::class_<Transport, PyTransport, std::shared_ptr<Transport>>(m, "Transport")
      .def(py::init<>())
      .def(
          "watch_events",
          [](Transport& t, uintptr_t counter) {
            dynamic_cast<PyTransport&>(t).watch_events(counter);
          },
          py::arg("counter"));

  m.def("tiles", &tiles, py::arg("shape"), py::arg("layout"));
  m.def("global_shape", &global_shape, py::arg("tile_shapes"), py::arg("layout"));
  m.def("alpa_spec", &alpa_spec, py::arg("layout"), py::arg("tensor_rank"));
  m.def("plan", &plan, py::arg("tensors"), py::arg("batched"), py::arg("cluster"),
        py::arg("strategy"), py::arg("balance"), py::arg("split"), py::arg("chunk_bytes"),
        py::arg("search_effort"), py::arg("bucket_bytes"));
  m.def("shrunk_shapes", &shrunk_shapes, py::arg("tensors"), py::arg("bytes"));
  m.def("cluster_document", &cluster_document, py::arg("text"));
  m.def("model_batch", &model_batch_parts, py::arg("arch"), py::arg("preset"),
        py::arg("dimensions"), py::arg("dtype"), py::arg("train"), py::arg("serve"),
        py::arg("cluster"));
  m.def("model_dimension_keys", [] {
    std::vector<std::string> keys;
    for (std::string_view k : model_dimension_keys()) keys.emplace_back(k);
    return keys;
  });

  py::class_<LinkStats>(m, "Link")
      .def_readonly("name", &LinkStats::name)
      .def_readonly("bytes", &LinkStats::bytes)
      .def_readonly("busy_s", &LinkStats::busy_s)
      .def_readonly("bandwidth", &LinkStats::bandwidth)
      .def("__repr__", [](const LinkStats& l) {
        return fmt::format("Link('{}', bytes={}, busy_s={:g})", l.name, l.bytes, l.busy_s);
      });
  py::class_<Simulation>(m, "Simulation")
      .def_readonly("time_s", &Simulation::time_s)
      .def_readonly("lower_bound_s", &Simulation::lower_bound_s)
      .def_readonly("busiest_links", &Simulation::busiest_links)
      .def_readonly("bound_term", &Simulation::bound_term)
      .def("__repr__", [](const Simulation& s) {
        return fmt::format("Simulation(time_s={:g}, lower_bound_s={:g})", s.time_s,
                           s.lower_bound_s);
      });

  py::class_<Plan>(m, "Plan")
      .def_property_readonly("ops",
                             [](const Plan& p) {
                               py::list ops;
                               for (const Op& op : p.ops) ops.append(op_to_dict(op));
                               return ops;
                             })
      .def_readonly("lower_bound_s", &Plan::lower_bound_s)
      .def_readonly("network_bytes", &Plan::network_bytes)
      .def_property_readonly("cluster_devices",
                             [](const Plan& p) { return p.batch.cluster.devices(); })
      .def_property_readonly("strategy",
                             [](const Plan& p) { return std::string(to_string(p.strategy)); })
      .def_property_readonly("balance",
                             [](const Plan& p) { return std::string(to_string(p.balance)); })
      .def_property_readonly("shape", [](const Plan& p) { return only_tensor(p, "shape").shape; })
      .def_property_readonly(
          "dtype",
          [](const Plan& p) { return std::string(to_string(only_tensor(p, "dtype").dtype)); })
      .def_property_readonly(
          "src_spec",
          [](const Plan& p) { return only_resharding(p, "src_spec").src.spec.to_string(); })
      .def_property_readonly(
          "dst_spec",
          [](const Plan& p) { return only_resharding(p, "dst_spec").dst.spec.to_string(); })
      .def_property_readonly("batch", &batch_entries)
      .def_property_readonly("bytes", &tensor_bytes)
      .def_property_readonly("tensors",
                             [](const Plan& p) {
                               std::vector<std::string> names;
                               for (const auto& t : p.batch.tensors) names.push_back(t.name);
                               return names;
                             })
      .def("to_json", [](const Plan& p) { return plan_to_json(p).dump(); })
      .def_static(
          "from_json",
          [](const std::string& text) {
            Plan plan = plan_from_json(json_document(text, "plan document is not JSON"));
            validate_plan(plan);
            return plan;
          },
          py::arg("text"))
      .def("simulate", &simulate_plan, py::arg("top") = 5, py::arg("cluster") = py::none())
      .def("__eq__", [](const Plan& a, const Plan& b) { return a == b; })
      .def("__repr__", [](const Plan& p) {
        if (p.batch.tensors.size() > 1)
          return fmt::format("Plan({} ops, {} tensors, {} bytes, lower_bound_s={:g})", p.ops.size(),
                             p.batch.tensors.size(), tensor_bytes(p), p.lower_bound_s);
        const TensorResharding& t = p.batch.tensors[0];
        return fmt::format("Plan({} ops, {} {} {} -> {}, lower_bound_s={:g})", p.ops.size(),
                           shape_to_string(t.tensor.shape, 'x'), to_string(t.tensor.dtype),
                           t.src.spec.to_string(), t.dst.spec.to_string(), p.lower_bound_s);
      });

  py::class_<Resharder>(m, "Resharder")
      .def(py::init<Plan, const std::string&, int, double, int64_t, py::object, bool>(),
           py::arg("plan"), py::arg("backend"), py::arg("threads"), py::arg("timeout_s"),
           py::arg("max_staging_bytes"), py::arg("transport") = py::none(),
           py::arg("ordered") = false)
      .def_property_readonly("staging_bytes", &Resharder::staging_bytes)
      .def_property_readonly("devices", &Resharder::devices_here)
      .def_property_readonly("tensor_names", &Resharder::tensor_names)
      .def("start", &Resharder::start, py::arg("src"), py::arg("out"), py::arg("allocate"),
           py::arg("batched"))
      .def("wait", &Resharder::wait);
}

}  // namespace meshcast::python
