// Internal to the planner layer: fusing small transfers into buckets.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast::detail {

// Fuses sends and broadcasts smaller than `bucket_bytes` from one host to the same set of
// receivers into one op each (a bucket of pieces, packed in plan order, at most `bucket_bytes` in all) at
// the position of the first of them, with its sender and chain order. Only pieces the bucket's
// sender holds in its source tile are fused, so moving a piece earlier never sends what the
// sender has not received yet. Small tensors whose ops the planner gave different holders or
// chain orders (on several NICs, chains enter hosts at different devices) thus still fuse: a
// chain pays a latency per device, so one chain per tensor through every serving device of a
// large cluster costs more than all the tensors' bytes. A bucket's
// broadcast chunk is chosen again for its size (`chunk_bytes` when > 0). Broadcasts of at least
// `bucket_bytes` from one sender device along one chain (the same receivers in the same order)
// fuse the same way into streams of up to `bucket_bytes` per device of the chain: each of them
// paid a latency per device and the chain's fill, which one chain per expert tile through a
// thousand serving GPUs multiplied by hundreds. 0 fuses nothing.
std::vector<Op> bucket_ops(const Batch& batch, std::vector<Op> ops, int64_t bucket_bytes,
                           int64_t chunk_bytes);

}  // namespace meshcast::detail
