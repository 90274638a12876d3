#include "meshcast/plan/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "meshcast/error.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/version.h"

namespace meshcast {
namespace {

using nlohmann::json;

// The JSON integer `j` as T, or ParseError naming the value (`what`: its name, or a callable that
// makes it only for the message) when it is not an integer that fits T: ids and counts are never
// narrowed silently.
template <typename T, typename What>
T integer_as(const json& j, const What& what) {
  const auto fail = [&] {
    std::string name;
    if constexpr (std::is_invocable_v<What>)
      name = what();
    else
      name = what;
    return ParseError(fmt::format("{} is {}: expected an integer in {}..{}", name, json_excerpt(j),
                                  std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  };
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) throw fail();
    return static_cast<T>(v);
  }
  if (!j.is_number_integer()) throw fail();
  const int64_t v = j.get<int64_t>();
  if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) throw fail();
  return static_cast<T>(v);
}

// std::vector of an integer type (read element by element, range-checked).
template <typename T>
struct is_integer_vector : std::false_type {};
template <typename T>
struct is_integer_vector<std::vector<T>> : std::is_integral<T> {};

// j[key], or ParseError naming the key. A reference: a layout's or a plan's value is not copied.
const json& member(const json& j, std::string_view key, std::string_view where) {
  if (!j.is_object()) throw ParseError(fmt::format("{}: missing key '{}'", where, key));
  const auto it = j.find(key);
  if (it == j.end()) throw ParseError(fmt::format("{}: missing key '{}'", where, key));
  return *it;
}

// j[key] as T, or ParseError naming the key and what was expected. Integers (alone or in
// arrays) are range-checked instead of narrowed.
template <typename T>
T field(const json& j, std::string_view key, std::string_view where) {
  const json& value = member(j, key, where);
  const std::string what = fmt::format("{}: '{}'", where, key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return integer_as<T>(value, what);
  } else if constexpr (is_integer_vector<T>::value) {
    if (!value.is_array()) throw ParseError(fmt::format("{}: expected an array of integers", what));
    T out;
    out.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i)
      out.push_back(integer_as<typename T::value_type>(
          value[i], [&] { return fmt::format("{}[{}]", what, i); }));
    return out;
  } else {
    try {
      return value.get<T>();
    } catch (const json::exception& e) {
      throw ParseError(fmt::format("{}: bad value for '{}': {}", where, key, e.what()));
    }
  }
}

template <typename T>
T field_or(const json& j, std::string_view key, std::string_view where, T fallback) {
  return j.is_object() && j.contains(key) ? field<T>(j, key, where) : fallback;
}

json layout_to_json(const Layout& layout) {
  return {{"mesh", layout.mesh.shape()},
          {"devices", layout.mesh.devices()},
          {"spec", layout.spec.to_string()}};
}

// Without "devices", `placement` (when given) places the mesh by default from its first host.
struct DefaultPlacement {
  int first_host;
  int devices_per_host;
};

// A layout of a tensor of `tensor_rank` dims; its spec in any vocabulary (docs/concepts.md), a
// PartitionSpec naming the axes listed under the optional "axes".
Layout layout_from_json(const json& j, std::string_view where, int tensor_rank,
                        std::optional<DefaultPlacement> placement = {}) {
  if (placement)
    check_keys(j, where, {"mesh", "spec"}, {"devices", "axes"});
  else
    check_keys(j, where, {"mesh", "devices", "spec"}, {"axes"});
  try {
    auto shape = field<std::vector<int64_t>>(j, "mesh", where);
    Mesh mesh =
        placement && !(j.is_object() && j.contains("devices"))
            ? Mesh::placed(std::move(shape), placement->first_host, placement->devices_per_host)
            : Mesh(std::move(shape), field<std::vector<DeviceId>>(j, "devices", where));
    const SpecContext context{
        tensor_rank, mesh.rank(),
        field_or<std::vector<std::string>>(j, "axes", where, std::vector<std::string>{})};
    return Layout{std::move(mesh),
                  parse_sharding_spec(field<std::string>(j, "spec", where), context)};
  } catch (const InvalidArgument& e) {
    throw ParseError(fmt::format("{}: {}", where, e.what()));
  }
}

}  // namespace

json cluster_to_json(const Cluster& cluster) {
  json j = {{"hosts", cluster.hosts},
            {"devices_per_host", cluster.devices_per_host},
            {"nic_gbps", bytes_to_gbps(cluster.nic_bandwidth)},
            {"dev_gbps", bytes_to_gbps(cluster.device_bandwidth)},
            {"latency_us", cluster.latency * 1e6},
            {"nics_per_host", cluster.nics_per_host}};
  if (!cluster.host_nics.empty()) j["host_nics"] = cluster.host_nics;
  if (!cluster.host_nic_bandwidth.empty()) {
    json per_host = json::array();
    for (double b : cluster.host_nic_bandwidth) per_host.push_back(bytes_to_gbps(b));
    j["host_nic_gbps"] = per_host;
  }
  return j;
}

Cluster cluster_from_json(const json& j, const Cluster& defaults) {
  constexpr std::string_view where = "cluster";
  // meshcast_version and calibration (the samples behind the figures, not read): the cluster
  // documents of `meshcast calibrate` carry them, and they are read back as clusters.
  check_keys(j, where, {},
             {"hosts", "devices_per_host", "nic_gbps", "dev_gbps", "latency_us", "nics_per_host",
              "host_nics", "host_nic_gbps", "meshcast_version", "calibration"});
  Cluster c = defaults;
  c.hosts = field_or(j, "hosts", where, c.hosts);
  c.devices_per_host = field_or(j, "devices_per_host", where, c.devices_per_host);
  c.nic_bandwidth = gbps_to_bytes(field_or(j, "nic_gbps", where, bytes_to_gbps(c.nic_bandwidth)));
  c.device_bandwidth =
      gbps_to_bytes(field_or(j, "dev_gbps", where, bytes_to_gbps(c.device_bandwidth)));
  c.latency = field_or(j, "latency_us", where, c.latency * 1e6) / 1e6;
  c.nics_per_host = field_or(j, "nics_per_host", where, c.nics_per_host);
  if (j.contains("host_nics")) c.host_nics = field<std::vector<int>>(j, "host_nics", where);
  if (j.contains("host_nic_gbps")) {
    c.host_nic_bandwidth.clear();
    for (double g : field<std::vector<double>>(j, "host_nic_gbps", where))
      c.host_nic_bandwidth.push_back(gbps_to_bytes(g));
  }
  try {
    c.validate();
  } catch (const InvalidArgument& e) {
    throw ParseError(fmt::format("{}: {}", where, e.what()));
  }
  return c;
}

json resharding_to_json(const Resharding& p) {
  return {{"tensor",
           {{"shape", p.tensor.shape},
            {"dtype", to_string(p.tensor.dtype)},
            {"bytes", p.tensor.bytes()}}},
          {"src", layout_to_json(p.src)},
          {"dst", layout_to_json(p.dst)},
          {"cluster", cluster_to_json(p.cluster)}};
}

namespace {

// {"shape", "dtype"} of a tensor document, read into `tensor`.
void read_tensor_spec(const json& j, std::string_view where, TensorSpec& tensor) {
  tensor.shape = field<std::vector<int64_t>>(j, "shape", where);
  try {
    tensor.dtype = parse_dtype(field<std::string>(j, "dtype", where));
  } catch (const InvalidArgument& e) {
    throw ParseError(fmt::format("{}: {}", where, e.what()));
  }
}

}  // namespace

Resharding resharding_from_json(const json& j) {
  Resharding p;
  const json& tensor = member(j, "tensor", "document");
  check_keys(tensor, "tensor", {"shape", "dtype"}, {"bytes"});
  read_tensor_spec(tensor, "tensor", p.tensor);
  p.src = layout_from_json(member(j, "src", "document"), "src", p.tensor.rank());
  p.dst = layout_from_json(member(j, "dst", "document"), "dst", p.tensor.rank());
  p.cluster = cluster_from_json(member(j, "cluster", "document"));
  try {
    p.validate();
  } catch (const InvalidArgument& e) {
    throw ParseError(e.what());
  }
  return p;
}

json batch_to_json(const Batch& batch) {
  json tensors = json::array();
  for (const auto& t : batch.tensors) {
    json& j = tensors.emplace_back(json{{"name", t.name},
                                        {"shape", t.tensor.shape},
                                        {"dtype", to_string(t.tensor.dtype)},
                                        {"src", layout_to_json(t.src)},
                                        {"dst", layout_to_json(t.dst)}});
    for (const auto& [key, binding] :
         {std::pair{"src_buffer", &t.src_buffer}, std::pair{"dst_buffer", &t.dst_buffer}})
      if (*binding) j[key] = {{"name", (*binding)->name}, {"offset", (*binding)->offset}};
  }
  return {{"cluster", cluster_to_json(batch.cluster)}, {"tensors", std::move(tensors)}};
}

namespace {

// A tensor's optional "src_buffer" / "dst_buffer": {"name", "offset"}.
std::optional<BufferBinding> binding_from_json(const json& t, const char* key,
                                               const std::string& where) {
  if (!t.contains(key)) return std::nullopt;
  const json& j = t.at(key);
  const std::string at = fmt::format("{}: {}", where, key);
  check_keys(j, at, {"name", "offset"});
  return BufferBinding{field<std::string>(j, "name", at),
                       field<std::vector<int64_t>>(j, "offset", at)};
}

// The batch of a document whose keys the caller has checked (a batch file or a plan).
Batch batch_from_object(const json& j) {
  Batch batch;
  batch.cluster = cluster_from_json(member(j, "cluster", "batch"));
  const json& tensors = member(j, "tensors", "batch");
  if (!tensors.is_array())
    throw ParseError("batch: bad value for 'tensors': expected an array of tensors");
  const int per_host = batch.cluster.devices_per_host;
  batch.tensors.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& t = tensors[i];
    std::string where = fmt::format("tensors[{}]", i);
    // Name the tensor in every message about it, a missing or unknown key too, when its name
    // can be read.
    if (t.is_object() && t.contains("name") && t.at("name").is_string())
      where = fmt::format("tensors[{}] '{}'", i, t.at("name").get<std::string>());
    check_keys(t, where, {"name", "shape", "dtype", "src", "dst"}, {"src_buffer", "dst_buffer"});
    TensorResharding tr;
    tr.name = field<std::string>(t, "name", where);
    read_tensor_spec(t, where, tr.tensor);
    // Default placement as the layout options give it: the source from host 0, the destination
    // from the host after the source's last one.
    tr.src = layout_from_json(member(t, "src", where), where + ": src", tr.tensor.rank(),
                              DefaultPlacement{0, per_host});
    const auto& src_devices = tr.src.mesh.devices();
    const int after_src =
        src_devices.empty()
            ? 0
            : *std::max_element(src_devices.begin(), src_devices.end()) / per_host + 1;
    tr.dst = layout_from_json(member(t, "dst", where), where + ": dst", tr.tensor.rank(),
                              DefaultPlacement{after_src, per_host});
    tr.src_buffer = binding_from_json(t, "src_buffer", where);
    tr.dst_buffer = binding_from_json(t, "dst_buffer", where);
    batch.tensors.push_back(std::move(tr));
  }
  try {
    batch.validate();
  } catch (const InvalidArgument& e) {
    throw ParseError(e.what());
  }
  return batch;
}

}  // namespace

Batch batch_from_json(const json& j) {
  check_keys(j, "batch", {"cluster", "tensors"}, {"meshcast_version"});
  return batch_from_object(j);
}

json box_to_json(const Box& box) {
  json j = json::array();
  for (const auto& d : box.dims) j.push_back({d.lo, d.hi});
  return j;
}

Box box_from_json(const json& j) {
  if (!j.is_array())
    throw ParseError(fmt::format("bad slice {}: expected [[lo,hi],...]", json_excerpt(j)));
  if (j.size() > static_cast<size_t>(kMaxRank))
    throw ParseError(fmt::format("bad slice {}: {} dimensions, expected at most {}",
                                 json_excerpt(j), j.size(), kMaxRank));
  Box box;
  for (const auto& d : j) {
    if (!d.is_array() || d.size() != 2 || !d[0].is_number_integer() || !d[1].is_number_integer())
      throw ParseError(fmt::format("bad slice {}: expected [[lo,hi],...]", json_excerpt(j)));
    box.dims.push_back({d[0].get<int64_t>(), d[1].get<int64_t>()});
  }
  return box;
}

json task_to_json(const UnitTask& task) {
  return {{"slice", box_to_json(task.slice)},
          {"bytes", task.bytes},
          {"senders", task.senders},
          {"receivers", task.receivers}};
}

json plan_to_json(const Plan& plan) {
  json j = {{"meshcast_version", kVersion},
            {"strategy", to_string(plan.strategy)},
            {"balance", to_string(plan.balance)}};
  j.update(batch_to_json(plan.batch));
  json ops = json::array();
  for (const auto& op : plan.ops) {
    json pieces = json::array();
    for (const Piece& p : op.pieces) {
      json piece = {{"tensor", p.tensor},
                    {"task", p.task},
                    {"slice", box_to_json(p.slice)},
                    {"bytes", p.bytes}};
      if (p.holder >= 0) piece["holder"] = p.holder;
      pieces.push_back(std::move(piece));
    }
    ops.push_back({{"id", op.id},
                   {"kind", to_string(op.kind)},
                   {"pieces", std::move(pieces)},
                   {"bytes", op.bytes},
                   {"sender", op.sender ? json(*op.sender) : json(nullptr)},
                   {"receivers", op.receivers},
                   {"chunk_bytes", op.chunk_bytes}});
  }
  j["ops"] = std::move(ops);
  j["lower_bound_s"] = plan.lower_bound_s;
  j["network_bytes"] = plan.network_bytes;
  return j;
}

Plan plan_from_json(const json& j) {
  // A plan of one tensor written before batches existed holds "tensor", "src" and "dst".
  const bool of_batch = j.is_object() && j.contains("tensors");
  if (of_batch)
    check_keys(j, "plan", {"strategy", "balance", "cluster", "tensors", "ops"},
               {"meshcast_version", "lower_bound_s", "network_bytes"});
  else
    check_keys(j, "plan", {"strategy", "balance", "tensor", "src", "dst", "cluster", "ops"},
               {"meshcast_version", "lower_bound_s", "network_bytes"});
  Plan plan;
  plan.batch = of_batch ? batch_from_object(j) : Batch::of_one(resharding_from_json(j));
  try {
    plan.strategy = parse_strategy(field<std::string>(j, "strategy", "plan"));
    plan.balance = parse_balance(field<std::string>(j, "balance", "plan"));
    const json& ops = member(j, "ops", "plan");
    if (!ops.is_array()) throw ParseError("plan: 'ops' must be an array");
    for (size_t i = 0; i < ops.size(); ++i) {
      const json& o = ops[i];
      const std::string where = fmt::format("ops[{}]", i);
      // Ops written before buckets existed hold their one piece's tensor, task and slice.
      const bool of_pieces = o.is_object() && o.contains("pieces");
      if (of_pieces)
        check_keys(o, where, {"id", "kind", "pieces", "bytes", "receivers"},
                   {"sender", "chunk_bytes"});
      else
        check_keys(o, where, {"id", "kind", "task", "slice", "bytes", "receivers"},
                   {"tensor", "sender", "chunk_bytes"});
      Op op;
      op.id = field<int>(o, "id", where);
      op.kind = parse_op_kind(field<std::string>(o, "kind", where));
      op.bytes = field<int64_t>(o, "bytes", where);
      if (of_pieces) {
        const json& pieces = o.at("pieces");
        if (!pieces.is_array() || pieces.empty())
          throw ParseError(fmt::format("{}: 'pieces' must be a non-empty array", where));
        for (size_t k = 0; k < pieces.size(); ++k) {
          const json& p = pieces[k];
          const std::string at = fmt::format("{}.pieces[{}]", where, k);
          check_keys(p, at, {"tensor", "task", "slice", "bytes"}, {"holder"});
          op.pieces.push_back({field<int>(p, "tensor", at), field<int>(p, "task", at),
                               box_from_json(member(p, "slice", at)),
                               field<int64_t>(p, "bytes", at), field_or<int>(p, "holder", at, -1)});
        }
      } else {
        op.pieces.push_back({field_or<int>(o, "tensor", where, 0), field<int>(o, "task", where),
                             box_from_json(member(o, "slice", where)), op.bytes});
      }
      if (o.contains("sender") && !o.at("sender").is_null())
        op.sender = field<DeviceId>(o, "sender", where);
      op.receivers = field<std::vector<DeviceId>>(o, "receivers", where);
      op.chunk_bytes = field_or<int64_t>(o, "chunk_bytes", where, 0);
      plan.ops.push_back(std::move(op));
    }
  } catch (const InvalidArgument& e) {
    throw ParseError(fmt::format("plan: {}", e.what()));
  }
  plan.lower_bound_s = field_or<double>(j, "lower_bound_s", "plan", 0.0);
  plan.network_bytes = field_or<int64_t>(j, "network_bytes", "plan", 0);
  return plan;
}

}  // namespace meshcast
