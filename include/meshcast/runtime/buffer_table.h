// The tile buffers a run was given, checked against the tiles and looked up by (device, tensor).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/placement.h"
#include "meshcast/runtime/strided_copy.h"

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
  // buffer's size differs from its tile's bytes (with strides: from its first element to its
  // last), strides are not one non-negative value per dimension or make two destination
  // elements share memory, a device is not one of devices() or a tensor not one of the batch's,
  // a (device, tensor) is given twice, or one with a non-empty tile is missing. Returns whether
  // some tile's strides differ from the previous bind's (the first bind: from row-major), so
  // that the copies planned for them must be planned again. Allocates nothing unless strides
  // are given.
  bool bind(std::span<const DeviceBuffers> buffers);

  const std::byte* src(DeviceId device, int tensor) const { return src_[slot(device, tensor)]; }
  std::byte* dst(DeviceId device, int tensor) const { return dst_[slot(device, tensor)]; }
  const DeviceTiles& tiles(DeviceId device, int tensor) const {
    return tiles_[slot(device, tensor)];
  }
  // Where a place's bytes sit as bound: a tile through the strides it was given, a staging
  // buffer row-major over its box.
  BufferView view(const Place& place) const;

 private:
  size_t slot(DeviceId device, int tensor) const {
    return static_cast<size_t>(position_[device]) * tensor_names_.size() + tensor;
  }

  std::vector<DeviceId> devices_here_;
  std::vector<std::string> tensor_names_;
  std::vector<int> elem_size_;  // per tensor
  std::vector<int> position_;   // per device of the cluster: index in devices_here_, or -1
  // Per (device here, tensor), device-major:
  std::vector<DeviceTiles> tiles_;
  std::vector<const std::byte*> src_;
  std::vector<std::byte*> dst_;
  std::vector<char> bound_;
  // Per slot and side (src, dst): index into strides_ (element strides), or -1 for row-major;
  // those of the previous bind in previous_*.
  std::vector<int> src_layout_, dst_layout_, previous_src_layout_, previous_dst_layout_;
  std::vector<std::array<int64_t, kMaxRank>> strides_, previous_strides_;
};

}  // namespace meshcast
