// Mesh: an N-D row-major array of distinct device ids, with the default host placement of
// docs/concepts.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/layout/cluster.h"

namespace meshcast {

class Mesh {
 public:
  Mesh() = default;  // empty placeholder, to be assigned
  // Explicit device list, row-major over `shape`. Throws InvalidArgument on non-positive axis
  // sizes, a device count that differs from the shape's product, negative ids or repeats.
  Mesh(std::vector<int64_t> shape, std::vector<DeviceId> devices);

  // Default placement: the last axis lies inside a host (local devices 0..d-1) and the other
  // axes span consecutive hosts starting at `first_host`. A 1-D mesh is one host.
  static Mesh placed(std::vector<int64_t> shape, int first_host, int devices_per_host);

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<DeviceId>& devices() const { return devices_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return static_cast<int64_t>(devices_.size()); }
  DeviceId device_at(int64_t flat_index) const { return devices_[flat_index]; }
  // Row-major coordinates of a flat position.
  std::vector<int64_t> coords_of(int64_t flat_index) const;
  // Hosts the mesh needs when placed by default: product of all axes but the last.
  int64_t host_span() const;
  // Throws InvalidArgument naming the device when a device id is outside the cluster.
  void check_fits(const Cluster& cluster) const;

  bool operator==(const Mesh&) const = default;

 private:
  std::vector<int64_t> shape_;
  std::vector<DeviceId> devices_;
};

// Parses "2x4" (or "2,4"). Throws InvalidArgument on malformed or non-positive axes.
std::vector<int64_t> parse_mesh_shape(std::string_view text);
// Parses "0,1,2,3". Throws InvalidArgument on anything but non-negative integers.
std::vector<DeviceId> parse_device_list(std::string_view text);
std::string mesh_shape_to_string(const std::vector<int64_t>& shape);

}  // namespace meshcast
