#include "meshcast/plan/chain_window.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshcast {

double chain_hop_bandwidth(const Cluster& cluster, DeviceId from, DeviceId to) {
  double rate = std::min(cluster.device_bandwidth_of(from), cluster.device_bandwidth_of(to));
  const int a = cluster.host_of(from);
  const int b = cluster.host_of(to);
  if (a != b)
    rate = std::min({rate, cluster.single_nic_bandwidth_of(a), cluster.single_nic_bandwidth_of(b)});
  return rate;
}

int64_t chain_chunk(const Op& op, const Cluster& cluster) {
  if (op.bytes <= 0) return 1;
  if (op.kind == OpKind::broadcast && op.chunk_bytes > 0) return std::min(op.chunk_bytes, op.bytes);
  const bool crosses_hosts =
      op.sender && std::any_of(op.receivers.begin(), op.receivers.end(), [&](DeviceId r) {
        return cluster.host_of(r) != cluster.host_of(*op.sender);
      });
  return crosses_hosts ? std::min(op.bytes, kCrossHostChunk) : op.bytes;
}

int chain_window(int64_t chunk, double bandwidth, double latency) {
  const double in_flight = bandwidth * 2 * latency;  // bytes that fill one round trip
  if (!(in_flight > 0) || chunk <= 0) return kChainMinWindow;
  const double chunks = std::ceil(in_flight / static_cast<double>(chunk));
  return static_cast<int>(std::clamp(chunks, double{kChainMinWindow}, double{kChainMaxWindow}));
}

double chain_window_rate(int64_t bytes, int64_t chunk, int window, double latency) {
  const int64_t chunks = chunk > 0 ? (bytes + chunk - 1) / chunk : 1;
  if (chunks <= 1 || !(latency > 0)) return std::numeric_limits<double>::infinity();
  return static_cast<double>(bytes) * window / (static_cast<double>(chunks - 1) * 2 * latency);
}

}  // namespace meshcast
