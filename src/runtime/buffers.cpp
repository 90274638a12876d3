#include "meshcast/runtime/buffers.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "meshcast/layout/tile_elements.h"
#include "meshcast/runtime/strided_copy.h"

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

void fill_poison(const Box& box, const std::vector<int64_t>& shape, int elem_size,
                 std::span<std::byte> buffer) {
  for_each_tile_element(box, shape, [&](int64_t g, int64_t position) {
    const uint64_t v = ~pattern_value(g);
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

namespace {

// The byte a buffer holds at `position` outside every region: varies with the position, so that
// bytes copied from elsewhere do not pass for it.
std::byte sentinel(int64_t position) {
  return static_cast<std::byte>((position * 167 + 91) & 0xff);
}

// A tile as its view gives it: row-major over the tile, or through the element strides given.
BufferView tile_view(const Box& tile, const std::vector<int64_t>& strides, int elem_size) {
  if (strides.empty()) return row_major_view(tile, elem_size);
  BufferView view{tile, {}};
  for (size_t d = 0; d < strides.size(); ++d) view.strides[d] = strides[d] * elem_size;
  return view;
}

// Calls `f(tensor, tile, view, bytes)` for the source and the destination tile of every view.
template <typename F>
void for_each_tile(const Batch& batch, const std::vector<DeviceBuffers>& views, bool src, F f) {
  for (const DeviceBuffers& b : views) {
    const DeviceTiles tiles = tiles_of(batch, b.tensor, b.device);
    const int elem = dtype_size(batch.tensors[b.tensor].tensor.dtype);
    if (src)
      f(b.tensor, tiles.src, tile_view(tiles.src, b.src_strides, elem), b.src.data());
    else
      f(b.tensor, tiles.dst, tile_view(tiles.dst, b.dst_strides, elem), b.dst.data());
  }
}

}  // namespace

DeviceMemory allocate_device_memory(const Batch& batch, const std::vector<DeviceId>& devices) {
  DeviceMemory memory;
  std::map<std::tuple<DeviceId, bool, std::string>, size_t> bound;  // -> index in buffers
  // Where each view's tiles go: (buffer, region), filled in once every buffer has its shape.
  struct Pending {
    size_t buffer = 0;
    Box region;
  };
  std::vector<std::pair<std::optional<Pending>, std::optional<Pending>>> pending;
  for (DeviceId d : devices)
    for (int t = 0; t < static_cast<int>(batch.tensors.size()); ++t) {
      const TensorResharding& tr = batch.tensors[t];
      if (!in_meshes(tr, d)) continue;
      const DeviceTiles tiles = tiles_of(batch, t, d);
      memory.views.push_back({.device = d, .tensor = t});
      auto& where = pending.emplace_back();
      for (const bool src : {true, false}) {
        const Box& tile = src ? tiles.src : tiles.dst;
        if (tile.empty()) continue;
        const auto& binding = src ? tr.src_buffer : tr.dst_buffer;
        const int elem = dtype_size(tr.tensor.dtype);
        size_t index = memory.buffers.size();
        Box region = full_box(tile.extents());
        if (binding) {
          region = bound_region(*binding, tile);
          const auto [it, fresh] = bound.try_emplace({d, src, binding->name}, index);
          if (fresh)
            memory.buffers.push_back({d,
                                      src,
                                      binding->name,
                                      elem,
                                      std::vector<int64_t>(binding->offset.size(), 0),
                                      {},
                                      {}});
          index = it->second;
        } else {
          memory.buffers.push_back({d, src, "", elem, {}, {}, {}});
        }
        DeviceMemory::Buffer& buffer = memory.buffers[index];
        for (int k = 0; k < region.rank(); ++k)
          if (static_cast<int>(buffer.shape.size()) <= k)
            buffer.shape.push_back(region.dims[k].hi);
          else
            buffer.shape[k] = std::max(buffer.shape[k], region.dims[k].hi);
        buffer.regions.emplace_back(t, region);
        (src ? where.first : where.second) = Pending{index, region};
      }
    }
  for (auto& buffer : memory.buffers) {
    int64_t elements = 1;
    for (int64_t n : buffer.shape) elements *= n;
    buffer.bytes.resize(elements * buffer.elem_size);
  }
  for (size_t v = 0; v < memory.views.size(); ++v) {
    DeviceBuffers& view = memory.views[v];
    for (const bool src : {true, false}) {
      const auto& at = src ? pending[v].first : pending[v].second;
      if (!at) continue;
      DeviceMemory::Buffer& buffer = memory.buffers[at->buffer];
      const bool is_bound = !buffer.name.empty();
      const BufferView whole = row_major_view(full_box(buffer.shape), buffer.elem_size);
      const Box& region = at->region;
      const int lead = region.rank() - batch.tensors[view.tensor].tensor.rank();
      std::vector<int64_t> strides;
      int64_t extent = 1;  // elements from the region's first to its last, inclusive
      for (int k = lead; k < region.rank(); ++k) {
        strides.push_back(whole.strides[k] / buffer.elem_size);
        extent += (region.dims[k].size() - 1) * strides.back();
      }
      std::byte* first = buffer.bytes.data() + offset_in(region, whole);
      const std::span<std::byte> bytes(first, extent * buffer.elem_size);
      if (src) {
        view.src = bytes;
        if (is_bound) view.src_strides = std::move(strides);
      } else {
        view.dst = bytes;
        if (is_bound) view.dst_strides = std::move(strides);
      }
    }
  }
  return memory;
}

void prepare_memory(const Batch& batch, DeviceMemory& memory) {
  for (auto& buffer : memory.buffers)
    for (size_t i = 0; i < buffer.bytes.size(); ++i)
      buffer.bytes[i] = sentinel(static_cast<int64_t>(i));
  for (const bool src : {true, false})
    for_each_tile(batch, memory.views, src,
                  [&](int t, const Box& tile, const BufferView& view, const std::byte* at) {
                    const TensorSpec& tensor = batch.tensors[t].tensor;
                    const int elem = dtype_size(tensor.dtype);
                    std::vector<std::byte> packed(tile.volume() * elem);
                    (src ? fill_pattern : fill_poison)(tile, tensor.shape, elem, packed);
                    run_strided_copy(
                        plan_strided_copy(tile, row_major_view(tile, elem), view, elem),
                        packed.data(), const_cast<std::byte*>(at));
                  });
}

MemoryCheck check_memory(const Batch& batch, const DeviceMemory& memory) {
  MemoryCheck check;
  for_each_tile(batch, memory.views, false,
                [&](int t, const Box& tile, const BufferView& view, const std::byte* at) {
                  const TensorSpec& tensor = batch.tensors[t].tensor;
                  const int elem = dtype_size(tensor.dtype);
                  std::vector<std::byte> packed(tile.volume() * elem);
                  run_strided_copy(plan_strided_copy(tile, view, row_major_view(tile, elem), elem),
                                   at, packed.data());
                  check.elements += tile.volume();
                  check.errors += count_pattern_errors(tile, tensor.shape, elem, packed);
                });
  for (const auto& buffer : memory.buffers) {
    // Marks the bytes of every region, then checks the others.
    std::vector<std::byte> inside(buffer.bytes.size(), std::byte{0});
    const Box whole = full_box(buffer.shape);
    for (const auto& [t, region] : buffer.regions) {
      const std::vector<std::byte> ones(region.volume() * buffer.elem_size, std::byte{1});
      run_strided_copy(plan_strided_copy(region, region, whole, buffer.elem_size), ones.data(),
                       inside.data());
    }
    for (size_t i = 0; i < buffer.bytes.size(); ++i)
      if (inside[i] == std::byte{0}) {
        ++check.outside_bytes;
        check.outside_errors += buffer.bytes[i] != sentinel(static_cast<int64_t>(i));
      }
  }
  return check;
}

}  // namespace meshcast
