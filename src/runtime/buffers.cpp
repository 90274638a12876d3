#include "meshcast/runtime/buffers.h"

#include <algorithm>
#include <cstring>

#include "meshcast/layout/tile_elements.h"

namespace meshcast {
namespace {

uint64_t pattern_value(int64_t global_index) {
  // splitmix64: neighbouring indices get unrelated bytes.
  uint64_t x = static_cast<uint64_t>(global_index) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool in_mesh(const Mesh& mesh, DeviceId device) {
  return std::find(mesh.devices().begin(), mesh.devices().end(), device) != mesh.devices().end();
}

bool in_meshes(const TensorResharding& t, DeviceId device) {
  return in_mesh(t.src.mesh, device) || in_mesh(t.dst.mesh, device);
}

// The poison: every byte of element g is the complement of the pattern's, so an element that
// is never written differs from the pattern whatever its value and dtype.
void fill_poison(const Box& box, const std::vector<int64_t>& shape, int elem_size,
                 std::span<std::byte> buffer) {
  for_each_tile_element(box, shape, [&](int64_t g, int64_t position) {
    const uint64_t v = ~pattern_value(g);
    std::memcpy(buffer.data() + position * elem_size, &v, elem_size);
  });
}

}  // namespace

DeviceTiles tiles_of(const Batch& batch, int tensor, DeviceId device) {
  const TensorResharding& t = batch.tensors.at(tensor);
  Box empty = full_box(t.tensor.shape);
  for (auto& d : empty.dims) d = {0, 0};
  DeviceTiles tiles{empty, empty};
  const auto find = [&](const Layout& layout, Box& tile) {
    const auto& devices = layout.mesh.devices();
    const auto it = std::find(devices.begin(), devices.end(), device);
    if (it != devices.end()) tile = tile_at(t.tensor, layout, it - devices.begin());
  };
  find(t.src, tiles.src);
  find(t.dst, tiles.dst);
  return tiles;
}

DeviceTiles tiles_of(const Resharding& problem, DeviceId device) {
  return tiles_of(Batch::of_one(problem), 0, device);
}

std::vector<TileBuffers> allocate_tile_buffers(const Batch& batch,
                                               const std::vector<DeviceId>& devices) {
  std::vector<TileBuffers> buffers;
  for (DeviceId d : devices)
    for (int t = 0; t < static_cast<int>(batch.tensors.size()); ++t) {
      if (!in_meshes(batch.tensors[t], d)) continue;
      const DeviceTiles tiles = tiles_of(batch, t, d);
      const int64_t elem = dtype_size(batch.tensors[t].tensor.dtype);
      buffers.push_back({d, t, std::vector<std::byte>(tiles.src.volume() * elem),
                         std::vector<std::byte>(tiles.dst.volume() * elem)});
    }
  return buffers;
}

int64_t tile_bytes(const Batch& batch, const std::vector<DeviceId>& devices) {
  int64_t bytes = 0;
  for (DeviceId d : devices)
    for (int t = 0; t < static_cast<int>(batch.tensors.size()); ++t) {
      if (!in_meshes(batch.tensors[t], d)) continue;
      const DeviceTiles tiles = tiles_of(batch, t, d);
      bytes +=
          (tiles.src.volume() + tiles.dst.volume()) * dtype_size(batch.tensors[t].tensor.dtype);
    }
  return bytes;
}

std::vector<TileBuffers> allocate_tile_buffers(const Resharding& problem,
                                               const std::vector<DeviceId>& devices) {
  return allocate_tile_buffers(Batch::of_one(problem), devices);
}

std::vector<DeviceBuffers> buffer_views(std::vector<TileBuffers>& buffers) {
  std::vector<DeviceBuffers> views;
  views.reserve(buffers.size());
  for (auto& b : buffers) views.push_back({b.device, b.src, b.dst, b.tensor});
  return views;
}

void fill_pattern(const Box& box, const std::vector<int64_t>& shape, int elem_size,
                  std::span<std::byte> buffer) {
  for_each_tile_element(box, shape, [&](int64_t g, int64_t position) {
    const uint64_t v = pattern_value(g);
    std::memcpy(buffer.data() + position * elem_size, &v, elem_size);
  });
}

int64_t count_pattern_errors(const Box& box, const std::vector<int64_t>& shape, int elem_size,
                             std::span<const std::byte> buffer) {
  int64_t errors = 0;
  for_each_tile_element(box, shape, [&](int64_t g, int64_t position) {
    const uint64_t v = pattern_value(g);
    errors += std::memcmp(buffer.data() + position * elem_size, &v, elem_size) != 0;
  });
  return errors;
}

void prepare_tiles(const Batch& batch, std::vector<TileBuffers>& buffers) {
  for (auto& b : buffers) {
    const TensorSpec& tensor = batch.tensors.at(b.tensor).tensor;
    fill_pattern(tiles_of(batch, b.tensor, b.device).src, tensor.shape, dtype_size(tensor.dtype),
                 b.src);
    fill_poison(tiles_of(batch, b.tensor, b.device).dst, tensor.shape, dtype_size(tensor.dtype),
                b.dst);
  }
}

void prepare_tiles(const Resharding& problem, std::vector<TileBuffers>& buffers) {
  prepare_tiles(Batch::of_one(problem), buffers);
}

int64_t count_destination_errors(const Batch& batch, const std::vector<TileBuffers>& buffers) {
  int64_t errors = 0;
  for (const auto& b : buffers) {
    const TensorSpec& tensor = batch.tensors.at(b.tensor).tensor;
    errors += count_pattern_errors(tiles_of(batch, b.tensor, b.device).dst, tensor.shape,
                                   dtype_size(tensor.dtype), b.dst);
  }
  return errors;
}

int64_t count_destination_errors(const Resharding& problem,
                                 const std::vector<TileBuffers>& buffers) {
  return count_destination_errors(Batch::of_one(problem), buffers);
}

}  // namespace meshcast
