#include "meshcast/layout/layout.h"

#include "meshcast/error.h"

namespace meshcast {

Interval chunk_part(int64_t length, int64_t parts, int64_t k) {
  const int64_t c = (length + parts - 1) / parts;
  const int64_t lo = std::min(length, k * c);
  return {lo, std::min(length, (k + 1) * c)};
}

int64_t Layout::parts_of(int dim) const {
  int64_t n = 1;
  for (int a : spec.axes_of(dim)) n *= mesh.shape()[a];
  return n;
}

int64_t Layout::part_index(int dim, const std::vector<int64_t>& coords) const {
  int64_t index = 0;
  for (int a : spec.axes_of(dim)) index = index * mesh.shape()[a] + coords[a];
  return index;
}

Interval Layout::part_range(int dim, int64_t length, int64_t part) const {
  if (!spec.nested(dim)) return chunk_part(length, parts_of(dim), part);
  // Mixed-radix digits of `part`, major axis first; each narrows the range of the one before.
  Interval range{0, length};
  int64_t below = parts_of(dim);
  for (int a : spec.axes_of(dim)) {
    const int64_t n = mesh.shape()[a];
    below /= n;
    const Interval sub = chunk_part(range.size(), n, (part / below) % n);
    range = {range.lo + sub.lo, range.lo + sub.hi};
  }
  return range;
}

void Layout::validate(const TensorSpec& tensor) const {
  spec.validate(tensor.rank(), mesh.rank());
}

Box tile_at(const TensorSpec& tensor, const Layout& layout, int64_t flat_index) {
  const auto coords = layout.mesh.coords_of(flat_index);
  Box box;
  box.dims.reserve(tensor.shape.size());
  for (int d = 0; d < tensor.rank(); ++d)
    box.dims.push_back(layout.part_range(d, tensor.shape[d], layout.part_index(d, coords)));
  return box;
}

std::vector<Box> device_tiles(const TensorSpec& tensor, const Layout& layout) {
  std::vector<Box> tiles;
  tiles.reserve(layout.mesh.size());
  for (int64_t i = 0; i < layout.mesh.size(); ++i) tiles.push_back(tile_at(tensor, layout, i));
  return tiles;
}

std::vector<Tile> distinct_tiles(const TensorSpec& tensor, const Layout& layout) {
  const int rank = tensor.rank();
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) count *= layout.parts_of(d);
  std::vector<Tile> tiles(count);
  // Boxes by mixed-radix decoding of the tile index (last dim fastest).
  for (int64_t t = 0; t < count; ++t) {
    tiles[t].box.dims.resize(rank);
    int64_t rest = t;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t parts = layout.parts_of(d);
      tiles[t].box.dims[d] = layout.part_range(d, tensor.shape[d], rest % parts);
      rest /= parts;
    }
  }
  for (int64_t i = 0; i < layout.mesh.size(); ++i) {
    const auto coords = layout.mesh.coords_of(i);
    int64_t t = 0;
    for (int d = 0; d < rank; ++d) t = t * layout.parts_of(d) + layout.part_index(d, coords);
    tiles[t].replicas.push_back(layout.mesh.device_at(i));
  }
  return tiles;
}

}  // namespace meshcast
