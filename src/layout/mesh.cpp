#include "meshcast/layout/mesh.h"

#include <fmt/format.h>

#include <charconv>
#include <unordered_set>

#include "meshcast/checked.h"
#include "meshcast/error.h"

namespace meshcast {
namespace {

// The device count of a mesh shape; throws InvalidArgument unless the shape has an axis, every
// axis is positive and the count is at most kMaxDevices, the bound a cluster has too.
int64_t device_count(const std::vector<int64_t>& shape) {
  if (shape.empty()) throw InvalidArgument("bad mesh: expected at least one axis");
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] <= 0)
      throw InvalidArgument(fmt::format("bad mesh shape {}: axis {} is {}, expected > 0",
                                        mesh_shape_to_string(shape), i, shape[i]));
  const auto n = checked_product(shape);
  if (!n || *n > kMaxDevices)
    throw InvalidArgument(fmt::format("mesh {} has {} devices: expected at most {}",
                                      mesh_shape_to_string(shape),
                                      n ? fmt::format("{}", *n) : "more than 2^63", kMaxDevices));
  return *n;
}

// A device id given by the user: 0..kMaxDevices-1, the ids any cluster can have.
void check_device_id(int64_t id) {
  if (id < 0 || id >= kMaxDevices)
    throw InvalidArgument(fmt::format("bad device id {}: expected 0..{}", id, kMaxDevices - 1));
}

// Splits on any of `separators`; every item must be a non-negative integer.
std::vector<int64_t> parse_integers(std::string_view text, std::string_view separators,
                                    std::string_view what, std::string_view example) {
  std::vector<int64_t> values;
  size_t pos = 0;
  while (true) {
    const size_t end = text.find_first_of(separators, pos);
    const auto item = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 0)
      throw InvalidArgument(
          fmt::format("bad {} '{}': '{}' is not a non-negative integer "
                      "(expected e.g. {})",
                      what, text, item, example));
    values.push_back(value);
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return values;
}

}  // namespace

Mesh::Mesh(std::vector<int64_t> shape, std::vector<DeviceId> devices)
    : shape_(std::move(shape)), devices_(std::move(devices)) {
  const int64_t count = device_count(shape_);
  if (static_cast<int64_t>(devices_.size()) != count)
    throw InvalidArgument(fmt::format("mesh {} needs {} devices, the device list has {}",
                                      mesh_shape_to_string(shape_), count, devices_.size()));
  std::unordered_set<DeviceId> seen;
  for (auto d : devices_) {
    check_device_id(d);
    if (!seen.insert(d).second)
      throw InvalidArgument(fmt::format("device {} appears twice in the device list of mesh {}", d,
                                        mesh_shape_to_string(shape_)));
  }
}

Mesh Mesh::placed(std::vector<int64_t> shape, int first_host, int devices_per_host) {
  const int64_t count = device_count(shape);
  if (first_host < 0)
    throw InvalidArgument(fmt::format("bad first host {}: expected >= 0", first_host));
  const int64_t per_host = shape.back();
  if (per_host > devices_per_host)
    throw InvalidArgument(
        fmt::format("mesh {} puts {} devices on each host, but hosts have {} devices",
                    mesh_shape_to_string(shape), per_host, devices_per_host));
  // Ids grow with the flat index: the last one, in int64, is the largest.
  const int64_t last_id =
      (first_host + (count - 1) / per_host) * int64_t{devices_per_host} + (count - 1) % per_host;
  if (last_id >= kMaxDevices)
    throw InvalidArgument(fmt::format(
        "mesh {} placed from host {} on hosts of {} devices needs device ids beyond {}: expected "
        "ids below {}",
        mesh_shape_to_string(shape), first_host, devices_per_host, kMaxDevices - 1, kMaxDevices));
  std::vector<DeviceId> devices;
  devices.reserve(count);
  for (int64_t i = 0; i < count; ++i)
    devices.push_back(
        static_cast<DeviceId>((first_host + i / per_host) * devices_per_host + i % per_host));
  return Mesh(std::move(shape), std::move(devices));
}

std::vector<int64_t> Mesh::coords_of(int64_t flat_index) const {
  std::vector<int64_t> coords(shape_.size());
  for (int i = rank() - 1; i >= 0; --i) {
    coords[i] = flat_index % shape_[i];
    flat_index /= shape_[i];
  }
  return coords;
}

int64_t Mesh::host_span() const {
  return size() / shape_.back();
}

void Mesh::check_fits(const Cluster& cluster) const {
  for (auto d : devices_)
    if (d >= cluster.devices())
      throw InvalidArgument(fmt::format(
          "mesh {} uses device {}, but the cluster has {} hosts x {} devices (ids 0..{})",
          mesh_shape_to_string(shape_), d, cluster.hosts, cluster.devices_per_host,
          cluster.devices() - 1));
}

std::vector<int64_t> parse_mesh_shape(std::string_view text) {
  auto shape = parse_integers(text, "x,", "mesh shape", "2x4");
  for (auto n : shape)
    if (n <= 0)
      throw InvalidArgument(
          fmt::format("bad mesh shape '{}': axis size {} must be positive", text, n));
  device_count(shape);
  return shape;
}

std::vector<DeviceId> parse_device_list(std::string_view text) {
  std::vector<DeviceId> ids;
  for (auto v : parse_integers(text, ",", "device list", "0,1,2,3")) {
    check_device_id(v);
    ids.push_back(static_cast<DeviceId>(v));
  }
  return ids;
}

std::string mesh_shape_to_string(const std::vector<int64_t>& shape) {
  return fmt::format("{}", fmt::join(shape, "x"));
}

}  // namespace meshcast
