// Tile buffers of a batch and the fill/check pattern that tests, the CLI and benchmarks use. Each
// function taking a Resharding is the same function on Batch::of_one of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshcast/runtime/executor.h"

namespace meshcast {

// The boxes one device holds of one tensor: its tile of the source and of the destination
// layout. A device outside a mesh gets an empty box of the tensor's rank.
struct DeviceTiles {
  Box src;
  Box dst;
};
DeviceTiles tiles_of(const Batch& batch, int tensor, DeviceId device);
DeviceTiles tiles_of(const Resharding& problem, DeviceId device);

// Tile memory of one device and one tensor, owned by the caller of an executor.
struct TileBuffers {
  DeviceId device = 0;
  int tensor = 0;
  std::vector<std::byte> src;
  std::vector<std::byte> dst;
};

// Bytes of the source and destination tiles of `devices` over every tensor of `batch`: what
// allocate_tile_buffers allocates for them.
int64_t tile_bytes(const Batch& batch, const std::vector<DeviceId>& devices);

// Buffers sized for the tiles of each of `devices` (zero-filled): one per (device, tensor) whose
// source or destination mesh holds the device, device-major.
std::vector<TileBuffers> allocate_tile_buffers(const Batch& batch,
                                               const std::vector<DeviceId>& devices);
std::vector<TileBuffers> allocate_tile_buffers(const Resharding& problem,
                                               const std::vector<DeviceId>& devices);
std::vector<DeviceBuffers> buffer_views(std::vector<TileBuffers>& buffers);

// The pattern: element g (row-major global index) holds the low `elem_size` bytes of a 64-bit
// hash of g, so a misplaced, missing or stale element is caught whatever the dtype.
void fill_pattern(const Box& box, const std::vector<int64_t>& shape, int elem_size,
                  std::span<std::byte> buffer);
// The poison: every byte of element g is the complement of the pattern's, so an element that
// is never written differs from the pattern whatever its value and dtype.
void fill_poison(const Box& box, const std::vector<int64_t>& shape, int elem_size,
                 std::span<std::byte> buffer);
// Elements of `box` in `buffer` that differ from the pattern.
int64_t count_pattern_errors(const Box& box, const std::vector<int64_t>& shape, int elem_size,
                             std::span<const std::byte> buffer);

// Every source tile filled with the pattern and every destination tile with a poison byte.
void prepare_tiles(const Batch& batch, std::vector<TileBuffers>& buffers);
void prepare_tiles(const Resharding& problem, std::vector<TileBuffers>& buffers);
// Pattern errors over every destination tile of `buffers` (each element of each tensor).
int64_t count_destination_errors(const Batch& batch, const std::vector<TileBuffers>& buffers);
int64_t count_destination_errors(const Resharding& problem,
                                 const std::vector<TileBuffers>& buffers);

// The memory of some devices for a batch as its owners hold it: each tile in its own row-major
// buffer, or, where the batch binds it (src_buffer / dst_buffer, docs/json.md#batch-file), as a
// region of a per-device buffer shared with the other tiles bound there, which is just large
// enough for them. `views` are what an executor is given (bound tiles with strides).
struct DeviceMemory {
  struct Buffer {
    DeviceId device = 0;
    bool src = true;   // a source-side buffer (else destination-side)
    std::string name;  // the binding's buffer; empty: one tile's own buffer
    int elem_size = 1;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
    std::vector<std::pair<int, Box>> regions;  // (tensor, its region of the buffer)
  };
  std::vector<Buffer> buffers;
  std::vector<DeviceBuffers> views;  // one per (device, tensor) whose meshes hold the device

  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&&) = default;  // views point into buffers: moved, never copied
  DeviceMemory& operator=(DeviceMemory&&) = default;
};
DeviceMemory allocate_device_memory(const Batch& batch, const std::vector<DeviceId>& devices);

// Every byte of every buffer set to a sentinel, then the source tiles filled with the pattern and
// the destination tiles with the poison.
void prepare_memory(const Batch& batch, DeviceMemory& memory);

struct MemoryCheck {
  int64_t elements = 0;        // destination elements checked
  int64_t errors = 0;          // of them, those that differ from the pattern
  int64_t outside_bytes = 0;   // bytes of the buffers outside every tile's region
  int64_t outside_errors = 0;  // of them, those no longer the sentinel (a run touched them)
};
// After a run of a memory prepared by prepare_memory: every destination element against the
// pattern, and every byte outside the bound regions (of source and destination buffers) against
// the sentinel.
MemoryCheck check_memory(const Batch& batch, const DeviceMemory& memory);

}  // namespace meshcast
