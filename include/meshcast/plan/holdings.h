// The one rule for what a device holds while a plan runs, shared by validate_plan and the
// executors' placement (place_plan), so that a plan the validator accepts is one the executors
// can run.
#pragma once

#include <optional>

#include "meshcast/layout/box.h"

namespace meshcast {

inline constexpr int kHeldInSourceTile = -1;

// Where a device holds `box` of one tensor: kHeldInSourceTile when its source tile (null when
// it has none) contains it, else the index in `received` (its receipts in plan order, read
// through `box_of`) of the latest one that contains it; nullopt when it does not hold it.
// Pieces received by separate ops are not joined: an executor sends from one buffer, so a plan
// that needs a joined box must send it in pieces.
template <typename Receipts, typename BoxOf>
std::optional<int> find_holding(const Box* source_tile, const Receipts& received, BoxOf box_of,
                                const Box& box) {
  if (source_tile && source_tile->contains(box)) return kHeldInSourceTile;
  for (int i = static_cast<int>(received.size()) - 1; i >= 0; --i)
    if (box_of(received[i]).contains(box)) return i;
  return std::nullopt;
}

}  // namespace meshcast
