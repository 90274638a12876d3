// Where each op of a plan reads and writes on every device: the backend-neutral part of compiling.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "meshcast/plan/plan.h"
#include "meshcast/runtime/buffers.h"

namespace meshcast {

enum class BufferKind : uint8_t { src, dst, staging };

// Memory of one device that holds part of one tensor: its source tile, its destination tile or
// one of its staging buffers, laid out row-major over `box`.
struct Place {
  DeviceId device = 0;
  BufferKind kind = BufferKind::src;
  int staging = -1;  // index into Placement::staging[device]
  Box box = {};
  int tensor = 0;

  bool operator==(const Place&) const = default;
};

// Where one piece of an op is read and kept. A receiver keeps the piece in its destination tile
// when the piece's box lies inside it; otherwise (a relay outside the destination mesh, an
// allgather member that only forwards) in a staging buffer made for that piece, and the part that
// does fall inside its tile is copied there too.
struct PiecePlacement {
  std::optional<Place> source;      // send, broadcast, copy: where the sender reads the piece
  std::vector<Place> part_sources;  // allgather: where receiver i holds allgather_part(slice, n, i)
  std::vector<Place> targets;       // where receiver i keeps the piece
  std::vector<std::optional<Box>> spills;  // receiver i: slice ∩ its dst tile, when staged
};

struct OpPlacement {
  std::vector<PiecePlacement> pieces;  // one per piece of the op, in its order
};

// One staging buffer: a box of one tensor, at `offset` in its device's staging memory.
struct StagedBox {
  int tensor = 0;
  Box box;
  int64_t offset = 0;
};

struct Placement {
  std::vector<OpPlacement> ops;                 // one per plan op, in plan order
  std::vector<std::vector<DeviceTiles>> tiles;  // per tensor, per device of the cluster
  std::vector<std::vector<StagedBox>> staging;  // per device: the boxes of its staging buffers
  // Per device: bytes of its staging memory. A staging buffer lives from the op that fills it to
  // the last op that reads it; buffers whose lives do not overlap in plan order share memory, so
  // a relay that forwards a model piece by piece holds one piece at a time, not the model.
  std::vector<int64_t> staging_bytes;
  // Per op: earlier ops it must wait for besides the plan's rule (op_dependencies), because it
  // fills staging memory that an earlier buffer used: every op that filled or read the buffer
  // last held there. Devices overlap ops (docs/concepts.md), so an earlier life in plan order is
  // not over in time until its last reader has finished. Sorted, distinct, all < the op.
  std::vector<std::vector<int>> reuse_waits;
  std::vector<std::vector<int>> ops_of;  // per device: indices of its ops, in plan order
};

// The ops each op of `plan` waits for when executed: the plan's rule (op_dependencies, docs/
// concepts.md) and the staging-memory reuse of `placement` (Placement::reuse_waits). Sorted,
// distinct, all < the op, so every executor that honours them runs any plan without deadlock.
std::vector<std::vector<int>> execution_dependencies(const Plan& plan, const Placement& placement);

// Follows the plan in order, tracking what each device holds. Throws InvalidArgument naming the
// op when a device is outside the cluster, an op has the wrong participants for its kind, or a
// device must send a box it does not hold at that point.
Placement place_plan(const Plan& plan);

// Throws InvalidArgument when `needed` bytes of staging memory are more than `limit` (0: no
// limit), naming both: a run that would exceed its memory bound is refused before any byte moves.
void check_staging_limit(int64_t needed, int64_t limit, std::string_view where);

}  // namespace meshcast
