// The tile buffers a run was given, checked against the tiles and looked up by device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "meshcast/runtime/executor.h"

namespace meshcast {

// Devices of the source mesh and the destination mesh, sorted, each once.
std::vector<DeviceId> mesh_devices(const Resharding& problem);

class BufferTable {
 public:
  // `devices_here`: the devices whose buffers this process passes.
  BufferTable(const Resharding& problem, std::vector<DeviceId> devices_here);

  const std::vector<DeviceId>& devices() const { return devices_here_; }
  // Throws InvalidArgument naming the device and both sizes when a buffer's size differs from
  // its tile's bytes, a device is not one of devices() or given twice, or a device with a
  // non-empty tile is missing. Allocates nothing.
  void bind(std::span<const DeviceBuffers> buffers);

  const std::byte* src(DeviceId device) const { return src_[device]; }
  std::byte* dst(DeviceId device) const { return dst_[device]; }

 private:
  std::vector<DeviceId> devices_here_;
  std::vector<int64_t> src_bytes_;  // per device of the cluster; -1: not here
  std::vector<int64_t> dst_bytes_;
  std::vector<const std::byte*> src_;
  std::vector<std::byte*> dst_;
  std::vector<char> bound_;
};

}  // namespace meshcast
