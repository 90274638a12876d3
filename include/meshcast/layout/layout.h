// Layout: a tensor sharded over a mesh; tiles per device and distinct tiles with their replicas.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/layout/box.h"
#include "meshcast/layout/mesh.h"
#include "meshcast/layout/sharding_spec.h"
#include "meshcast/layout/tensor.h"

namespace meshcast {

// Part k of n of [0, length) with torch.chunk semantics: [k*c, min(L, (k+1)*c)), c = ceil(L/n).
// Trailing parts may be empty.
Interval chunk_part(int64_t length, int64_t parts, int64_t k);

struct Layout {
  Mesh mesh;
  ShardingSpec spec;

  // Parts dimension `dim` is split into: product of its mesh axes (1 when replicated).
  int64_t parts_of(int dim) const;
  // Which part of dimension `dim` the device at mesh coordinates `coords` holds.
  int64_t part_index(int dim, const std::vector<int64_t>& coords) const;
  // Part `part` (0..parts_of(dim)-1, numbered as part_index does) of dimension `dim` of length
  // `length`: chunk_part of the whole dim, or for a nested dim chunk_part of the enclosing part
  // axis by axis. Parts are consecutive and in order either way; trailing ones may be empty.
  Interval part_range(int dim, int64_t length, int64_t part) const;
  // Throws InvalidArgument unless the spec fits the tensor rank and the mesh rank.
  void validate(const TensorSpec& tensor) const;

  bool operator==(const Layout&) const = default;
};

// One box of the tensor and every device that holds it, in mesh order.
struct Tile {
  Box box;
  std::vector<DeviceId> replicas;

  bool operator==(const Tile&) const = default;
};

// The box held by the device at mesh position `flat_index` (possibly empty).
Box tile_at(const TensorSpec& tensor, const Layout& layout, int64_t flat_index);
// The tile of each mesh position, in mesh order.
std::vector<Box> device_tiles(const TensorSpec& tensor, const Layout& layout);
// Distinct tiles, row-major over the per-dimension part indices, including empty ones so that
// the index of a tile is the mixed-radix number of its part indices.
std::vector<Tile> distinct_tiles(const TensorSpec& tensor, const Layout& layout);

}  // namespace meshcast
