// The tile buffers a run was given, checked against the tiles and looked up by (device, tensor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshcast/runtime/executor.h"

namespace meshcast {

// Devices of every tensor's source and destination mesh, sorted, each once.
std::vector<DeviceId> mesh_devices(const Batch& batch);
std::vector<DeviceId> mesh_devices(const Resharding& problem);

class BufferTable {
 public:
  // `devices_here`: the devices whose buffers this process passes.
  BufferTable(const Batch& batch, std::vector<DeviceId> devices_here);

  const std::vector<DeviceId>& devices() const { return devices_here_; }
  // Throws InvalidArgument naming the device and the tensor, before anything is bound, when a
  // buffer's size differs from its tile's bytes, a device is not one of devices() or a tensor
  // not one of the batch's, a (device, tensor) is given twice, or one with a non-empty tile is
  // missing. Allocates nothing.
  void bind(std::span<const DeviceBuffers> buffers);

  const std::byte* src(DeviceId device, int tensor) const { return src_[slot(device, tensor)]; }
  std::byte* dst(DeviceId device, int tensor) const { return dst_[slot(device, tensor)]; }

 private:
  size_t slot(DeviceId device, int tensor) const {
    return static_cast<size_t>(position_[device]) * tensor_names_.size() + tensor;
  }

  std::vector<DeviceId> devices_here_;
  std::vector<std::string> tensor_names_;
  std::vector<int> position_;  // per device of the cluster: index in devices_here_, or -1
  // Per (device here, tensor), device-major:
  std::vector<int64_t> src_bytes_;
  std::vector<int64_t> dst_bytes_;
  std::vector<const std::byte*> src_;
  std::vector<std::byte*> dst_;
  std::vector<char> bound_;
};

}  // namespace meshcast
