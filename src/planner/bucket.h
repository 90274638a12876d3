// Internal to the planner layer: fusing small transfers into buckets.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast::detail {

// Fuses sends and broadcasts smaller than `bucket_bytes` that share a sender and a receiver
// chain into one op each (a bucket of pieces, packed in plan order, at most `bucket_bytes` in
// all) at the position of the first of them. Only pieces the sender holds in its source tile are
// fused, so moving a piece earlier never sends what the sender has not received yet. A bucket's
// broadcast chunk is chosen again for its size (`chunk_bytes` when > 0). 0 fuses nothing.
std::vector<Op> bucket_ops(const Batch& batch, std::vector<Op> ops, int64_t bucket_bytes,
                           int64_t chunk_bytes);

}  // namespace meshcast::detail
