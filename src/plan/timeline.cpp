#include "timeline.h"

#include <algorithm>
#include <cmath>

namespace meshcast::detail {

double hop_rate(const Cluster& cluster, DeviceId from, DeviceId to) {
  double rate = std::min(cluster.device_bandwidth_of(from), cluster.device_bandwidth_of(to));
  const int a = cluster.host_of(from);
  const int b = cluster.host_of(to);
  if (a != b) rate = std::min({rate, cluster.nic_bandwidth_of(a), cluster.nic_bandwidth_of(b)});
  return rate;
}

int64_t best_chunk_bytes(int64_t bytes, int hops, double rate, double latency, int element_size) {
  constexpr int64_t kMinChunk = 64 * 1024;
  if (hops <= 1 || bytes <= kMinChunk) return bytes;
  // d/dc of (bytes/c + hops - 1) * (lat + c/rate) is zero at c = sqrt(bytes*lat*rate/(hops-1)).
  const double ideal = std::sqrt(static_cast<double>(bytes) * latency * rate / (hops - 1));
  int64_t chunk = std::clamp(static_cast<int64_t>(ideal), kMinChunk, bytes);
  chunk -= chunk % element_size;
  return std::max<int64_t>(chunk, element_size);
}

CostModel::CostModel(const Batch& batch)
    : batch_(&batch), devices_(batch.cluster.devices()), hosts_(batch.cluster.hosts) {}

CostModel::Cost CostModel::cost_of(const Op& op) const {
  const Cluster& cluster = batch_->cluster;
  const double lat = cluster.latency;
  const auto bytes = static_cast<double>(op.bytes);
  Cost cost;
  switch (op.kind) {
    case OpKind::copy:
      cost.resources = {*op.sender};
      cost.duration = lat + bytes / cluster.device_bandwidth_of(*op.sender);
      break;
    case OpKind::send:
    case OpKind::broadcast: {
      DeviceId prev = *op.sender;
      cost.resources.push_back(prev);
      double rate = cluster.device_bandwidth_of(prev);
      for (DeviceId r : op.receivers) {
        rate = std::min(rate, hop_rate(cluster, prev, r));
        const int a = cluster.host_of(prev);
        const int b = cluster.host_of(r);
        if (a != b) {
          cost.resources.push_back(nic_out(a));
          cost.resources.push_back(nic_in(b));
        }
        cost.resources.push_back(r);
        prev = r;
      }
      const auto hops = static_cast<double>(op.receivers.size());
      const double chunk = op.chunk_bytes > 0 ? std::min<double>(op.chunk_bytes, bytes) : bytes;
      const double steps = std::ceil(bytes / chunk) + hops - 1;
      cost.duration = steps * (lat + chunk / rate);
      break;
    }
    case OpKind::allgather: {
      const int n = static_cast<int>(op.receivers.size());
      double rate = cluster.device_bandwidth_of(op.receivers[0]);
      for (DeviceId r : op.receivers) rate = std::min(rate, cluster.device_bandwidth_of(r));
      const auto part = static_cast<double>(allgather_part_bytes(op, *batch_, 0));
      cost.resources = op.receivers;
      cost.duration = (n - 1) * (lat + part / rate);
      break;
    }
  }
  // A chain that revisits a host (possible in a loaded plan) still holds its NIC only once.
  std::sort(cost.resources.begin(), cost.resources.end());
  cost.resources.erase(std::unique(cost.resources.begin(), cost.resources.end()),
                       cost.resources.end());
  return cost;
}

Schedule::Schedule(const Batch& batch) : model_(batch), busy_(model_.resources()) {}

double Schedule::earliest_start(const std::vector<int>& resources, double duration,
                                double release) const {
  double t = release;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r : resources) {
      const auto& busy = busy_[r];
      // Busy slots are disjoint and sorted, so their finishes are sorted too.
      auto it = std::upper_bound(busy.begin(), busy.end(), t,
                                 [](double v, const Slot& s) { return v < s.finish; });
      for (; it != busy.end() && it->start < t + duration; ++it) {
        t = it->finish;
        moved = true;
      }
    }
  }
  return t;
}

Slot Schedule::probe(const Op& op, double release) const {
  const auto cost = model_.cost_of(op);
  const double start = earliest_start(cost.resources, cost.duration, release);
  return {start, start + cost.duration};
}

Slot Schedule::insert(const Op& op, double release) {
  const auto cost = model_.cost_of(op);
  const double start = earliest_start(cost.resources, cost.duration, release);
  const Slot slot{start, start + cost.duration};
  occupy(cost.resources, slot);
  return slot;
}

// Busy time is kept as merged intervals, so a resource packed back to back (a busy NIC) is one
// interval and the window search stays short.
void Schedule::occupy(const std::vector<int>& resources, Slot slot) {
  for (int r : resources) {
    auto& busy = busy_[r];
    auto next = std::upper_bound(busy.begin(), busy.end(), slot.start,
                                 [](double v, const Slot& s) { return v < s.start; });
    if (next != busy.begin() && std::prev(next)->finish == slot.start) {
      auto prev = std::prev(next);
      prev->finish = slot.finish;
      if (next != busy.end() && next->start == slot.finish) {
        prev->finish = next->finish;
        busy.erase(next);
      }
    } else if (next != busy.end() && next->start == slot.finish) {
      next->start = slot.start;
    } else {
      busy.insert(next, slot);
    }
  }
}

void Schedule::remove(const Op& op, Slot slot) {
  for (int r : model_.cost_of(op).resources) {
    auto& busy = busy_[r];
    // The merged interval that contains the slot, split around it.
    auto it = std::prev(std::upper_bound(busy.begin(), busy.end(), slot.start,
                                         [](double v, const Slot& s) { return v < s.start; }));
    const Slot before{it->start, slot.start};
    const Slot after{slot.finish, it->finish};
    it = busy.erase(it);
    if (after.finish > after.start) it = busy.insert(it, after);
    if (before.finish > before.start) busy.insert(it, before);
  }
}

}  // namespace meshcast::detail
