#include "meshcast/runtime/buffer_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshcast/error.h"
#include "meshcast/runtime/buffers.h"

namespace meshcast {

std::vector<DeviceId> mesh_devices(const Resharding& problem) {
  std::vector<DeviceId> devices = problem.src.mesh.devices();
  const auto& dst = problem.dst.mesh.devices();
  devices.insert(devices.end(), dst.begin(), dst.end());
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

BufferTable::BufferTable(const Resharding& problem, std::vector<DeviceId> devices_here)
    : devices_here_(std::move(devices_here)),
      src_bytes_(problem.cluster.devices(), -1),
      dst_bytes_(problem.cluster.devices(), -1),
      src_(problem.cluster.devices(), nullptr),
      dst_(problem.cluster.devices(), nullptr),
      bound_(problem.cluster.devices(), 0) {
  const int64_t elem = dtype_size(problem.tensor.dtype);
  for (DeviceId d : devices_here_) {
    const DeviceTiles tiles = tiles_of(problem, d);
    src_bytes_[d] = tiles.src.volume() * elem;
    dst_bytes_[d] = tiles.dst.volume() * elem;
  }
}

void BufferTable::bind(std::span<const DeviceBuffers> buffers) {
  std::fill(bound_.begin(), bound_.end(), 0);
  for (const DeviceBuffers& b : buffers) {
    const DeviceId d = b.device;
    if (d < 0 || d >= static_cast<DeviceId>(src_bytes_.size()) || src_bytes_[d] < 0)
      throw InvalidArgument(
          fmt::format("buffers given for device {}, which is not one of this "
                      "process's devices [{}]",
                      d, fmt::join(devices_here_, ",")));
    if (bound_[d]) throw InvalidArgument(fmt::format("buffers for device {} given twice", d));
    if (static_cast<int64_t>(b.src.size()) != src_bytes_[d])
      throw InvalidArgument(
          fmt::format("device {}: source buffer has {} bytes, but its source tile needs {}", d,
                      b.src.size(), src_bytes_[d]));
    if (static_cast<int64_t>(b.dst.size()) != dst_bytes_[d])
      throw InvalidArgument(fmt::format(
          "device {}: destination buffer has {} bytes, but its destination tile needs {}", d,
          b.dst.size(), dst_bytes_[d]));
    bound_[d] = 1;
    src_[d] = b.src.data();
    dst_[d] = b.dst.data();
  }
  for (DeviceId d : devices_here_)
    if (!bound_[d] && (src_bytes_[d] > 0 || dst_bytes_[d] > 0))
      throw InvalidArgument(fmt::format(
          "no buffers given for device {}, whose tiles need {} source and {} destination bytes", d,
          src_bytes_[d], dst_bytes_[d]));
}

}  // namespace meshcast
