// How an executor plays a chain hop over the network, and so how the simulator times one
// (docs/concepts.md#chain-window-the-simulator-charges-what-the-executors-do,
// docs/executors.md#the-mpi-transport): the chunk it cuts a message into and the chunks it keeps
// in flight, from the link's bandwidth x round trip.
#pragma once

#include <cstdint>

#include "meshcast/plan/plan.h"

namespace meshcast {

// Chunk of a message that crosses hosts when the plan gives none: below Open MPI's TCP eager limit
// (64 KiB), so that no chunk needs a rendezvous handshake (docs/executors.md#the-mpi-transport).
inline constexpr int64_t kCrossHostChunk = 63 * 1024;
// Chunks a chain hop keeps in flight at least: one arriving while the next is sent.
inline constexpr int kChainMinWindow = 2;
// Chunks a chain hop keeps in flight at most: the receives a hop keeps posted ahead, so that every
// chunk in flight lands in a posted receive, in the message's own memory (the transport buffers
// none), and a long message in small chunks does not fill the request array every poll scans.
inline constexpr int kChainMaxWindow = 64;

// The bytes per second a hop from device `from` to `to` can carry: the slower device link, and
// across hosts the slower of the two NICs (what the simulator's route through them allows).
double chain_hop_bandwidth(const Cluster& cluster, DeviceId from, DeviceId to);

// The chunk an executor cuts op `op` into: the plan's chunk of a broadcast; otherwise, across
// hosts, kCrossHostChunk; within a host, the whole message. Never more than the message.
int64_t chain_chunk(const Op& op, const Cluster& cluster);

// Chunks of `chunk` bytes a hop of `bandwidth` bytes/s keeps in flight so that the wire stays
// full: its bandwidth x round trip (2 x `latency`), in whole chunks, within kChainMinWindow and
// kChainMaxWindow.
int chain_window(int64_t chunk, double bandwidth, double latency);

// The fastest a hop moves `bytes` in chunks of `chunk` with `window` chunks in flight and
// `latency` each way: after the first chunk, `window` chunks per round trip (infinite for one
// chunk or no latency). With the window bandwidth x round trip it is at least the bandwidth.
double chain_window_rate(int64_t bytes, int64_t chunk, int window, double latency);

}  // namespace meshcast
