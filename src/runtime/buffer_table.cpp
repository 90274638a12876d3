#include "meshcast/runtime/buffer_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshcast/error.h"
#include "meshcast/runtime/buffers.h"

namespace meshcast {

std::vector<DeviceId> mesh_devices(const Batch& batch) {
  std::vector<DeviceId> devices;
  for (const auto& t : batch.tensors)
    for (const Mesh* mesh : {&t.src.mesh, &t.dst.mesh})
      devices.insert(devices.end(), mesh->devices().begin(), mesh->devices().end());
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

std::vector<DeviceId> mesh_devices(const Resharding& problem) {
  return mesh_devices(Batch::of_one(problem));
}

BufferTable::BufferTable(const Batch& batch, std::vector<DeviceId> devices_here)
    : devices_here_(std::move(devices_here)), position_(batch.cluster.devices(), -1) {
  for (const auto& t : batch.tensors) tensor_names_.push_back(t.name);
  const size_t slots = devices_here_.size() * tensor_names_.size();
  src_bytes_.assign(slots, 0);
  dst_bytes_.assign(slots, 0);
  src_.assign(slots, nullptr);
  dst_.assign(slots, nullptr);
  bound_.assign(slots, 0);
  for (size_t i = 0; i < devices_here_.size(); ++i)
    position_[devices_here_[i]] = static_cast<int>(i);
  for (DeviceId d : devices_here_)
    for (int t = 0; t < static_cast<int>(tensor_names_.size()); ++t) {
      const DeviceTiles tiles = tiles_of(batch, t, d);
      const int64_t elem = dtype_size(batch.tensors[t].tensor.dtype);
      src_bytes_[slot(d, t)] = tiles.src.volume() * elem;
      dst_bytes_[slot(d, t)] = tiles.dst.volume() * elem;
    }
}

void BufferTable::bind(std::span<const DeviceBuffers> buffers) {
  const int tensors = static_cast<int>(tensor_names_.size());
  const auto label = [&](int t) { return fmt::format("tensors[{}] '{}'", t, tensor_names_[t]); };
  // Checks everything first, so that a bad call leaves the previous binding untouched.
  std::fill(bound_.begin(), bound_.end(), 0);
  for (const DeviceBuffers& b : buffers) {
    const DeviceId d = b.device;
    if (d < 0 || d >= static_cast<DeviceId>(position_.size()) || position_[d] < 0)
      throw InvalidArgument(
          fmt::format("buffers given for device {}, which is not one of this "
                      "process's devices [{}]",
                      d, fmt::join(devices_here_, ",")));
    if (b.tensor < 0 || b.tensor >= tensors)
      throw InvalidArgument(
          fmt::format("device {}: buffers given for tensor {}, but the batch has tensors 0..{}", d,
                      b.tensor, tensors - 1));
    const size_t s = slot(d, b.tensor);
    if (bound_[s])
      throw InvalidArgument(fmt::format("device {}, {}: buffers given twice", d, label(b.tensor)));
    if (static_cast<int64_t>(b.src.size()) != src_bytes_[s])
      throw InvalidArgument(
          fmt::format("device {}, {}: source buffer has {} bytes, but its source tile needs {}", d,
                      label(b.tensor), b.src.size(), src_bytes_[s]));
    if (static_cast<int64_t>(b.dst.size()) != dst_bytes_[s])
      throw InvalidArgument(fmt::format(
          "device {}, {}: destination buffer has {} bytes, but its destination tile needs {}", d,
          label(b.tensor), b.dst.size(), dst_bytes_[s]));
    bound_[s] = 1;
  }
  for (DeviceId d : devices_here_)
    for (int t = 0; t < tensors; ++t)
      if (const size_t s = slot(d, t); !bound_[s] && (src_bytes_[s] > 0 || dst_bytes_[s] > 0))
        throw InvalidArgument(
            fmt::format("no buffers given for device {}, {}, whose tiles need {} source and {} "
                        "destination bytes",
                        d, label(t), src_bytes_[s], dst_bytes_[s]));
  std::fill(src_.begin(), src_.end(), nullptr);
  std::fill(dst_.begin(), dst_.end(), nullptr);
  for (const DeviceBuffers& b : buffers) {
    src_[slot(b.device, b.tensor)] = b.src.data();
    dst_[slot(b.device, b.tensor)] = b.dst.data();
  }
}

}  // namespace meshcast
