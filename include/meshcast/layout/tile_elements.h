// Visiting the elements of a tile with their global indices, to fill and check tile buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/layout/box.h"

namespace meshcast {

// Calls visit(global_index, position) for every element of `box`, a box of a tensor of `shape`:
// `global_index` is the element's row-major index in the whole tensor, `position` its row-major
// index inside the tile (0, 1, ...), i.e. where it lies in a tile buffer. The innermost
// dimension is a straight loop, so filling or checking a tile costs little more than a memcpy.
template <typename Visit>
void for_each_tile_element(const Box& box, const std::vector<int64_t>& shape, Visit&& visit) {
  if (box.empty()) return;
  const int rank = box.rank();
  std::vector<int64_t> index(rank);
  for (int d = 0; d < rank; ++d) index[d] = box.dims[d].lo;
  const int64_t inner = box.dims[rank - 1].size();
  int64_t position = 0;
  while (true) {
    int64_t g = 0;
    for (int d = 0; d < rank; ++d) g = g * shape[d] + index[d];
    for (int64_t i = 0; i < inner; ++i, ++position) visit(g + i, position);
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++index[d] < box.dims[d].hi) break;
      index[d] = box.dims[d].lo;
    }
    if (d < 0) return;
  }
}

}  // namespace meshcast
