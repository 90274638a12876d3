// Internal to the planner layer: fusing small transfers into buckets.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast::detail {

// Fuses sends and broadcasts smaller than `bucket_bytes` from one host to the same set of
// receivers into one op each (a bucket of pieces, packed in plan order, at most `bucket_bytes` in
// all) at the position of the first of them, with its sender and chain order. Only pieces the
// bucket's sender holds in its source tile are fused, so moving a piece earlier never sends what
// the sender has not received yet. Small tensors whose ops the planner gave different holders or
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

// `ops` with each broadcast whose chain passes several devices of each of several other hosts, and
// whose latencies (one per device) outweigh its bytes on one NIC, cut in two stages: a chain from
// its sender through one device of each host (the one of the host's receivers that such chains
// entered least so far), then, from each of those and from the sender for its own host, a chain
// through the host's other receivers, after every other op: placed between the chains that cross
// every host, each would make the next wait for the whole of the last. (A broadcast that reaches
// a device sending what it received keeps its chain.) A chain holds every device it passes until
// it ends: the
// small replicated tensors of a weight sync (norms, routers) bound for each of 2,048 serving GPUs
// held them all for 10 ms per bucket (2,048 latencies), where the devices that only receive are
// now held for the few latencies of their own host.
// Returns nothing where no broadcast is cut.
std::optional<std::vector<Op>> host_chains(const Batch& batch, const std::vector<Op>& ops,
                                           int64_t chunk_bytes);

}  // namespace meshcast::detail
