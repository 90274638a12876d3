#include "timeline.h"

#include <algorithm>

namespace meshcast::detail {

namespace {

// One id per NIC direction of the cluster.
int64_t nic_key(const Cluster& cluster, DeviceId d, bool in) {
  const int64_t nic = int64_t{cluster.host_of(d)} * kMaxNicsPerHost + cluster.nic_of(d);
  return 2 * nic + (in ? 1 : 0);
}

std::vector<int64_t> nic_keys(const Cluster& cluster, const std::vector<int64_t>& devices) {
  std::vector<int64_t> keys;
  keys.reserve(2 * devices.size());
  for (const int64_t id : devices) {
    const auto d = static_cast<DeviceId>(id);
    keys.push_back(nic_key(cluster, d, false));
    keys.push_back(nic_key(cluster, d, true));
  }
  return keys;
}

}  // namespace

CostModel::CostModel(const Batch& batch, const std::vector<DeviceId>& devices,
                     bool receipts_over_nics_at_once)
    : batch_(&batch),
      receipts_over_nics_at_once_(receipts_over_nics_at_once),
      timer_(batch),
      devices_(std::vector<int64_t>(devices.begin(), devices.end())),
      // Of each device once: `devices` names a device for every transfer to or from it.
      nic_directions_(nic_keys(batch.cluster, devices_.ids())) {
  nic_direction_.reserve(2 * devices_.ids().size());
  for (const int64_t id : devices_.ids())
    for (bool in : {false, true})
      nic_direction_.push_back(
          nic_directions_.index_of(nic_key(batch.cluster, static_cast<DeviceId>(id), in)));
}

CostModel::Cost CostModel::cost_of(const Op& op) const {
  const Cluster& cluster = batch_->cluster;
  Cost cost;
  cost.duration = timer_.time_of(op);
  const auto both_ports = [&](DeviceId d) {
    cost.resources.push_back(port(d, false));
    cost.resources.push_back(port(d, true));
  };
  // At most: per receiver its ports and the NICs of the hop into it, and the sender's port.
  cost.resources.reserve(4 * op.receivers.size() + 2);
  if (op.kind == OpKind::send || op.kind == OpKind::broadcast) {
    cost.resources.push_back(port(*op.sender, false));
    DeviceId prev = *op.sender;
    for (DeviceId r : op.receivers) {
      const bool across = cluster.host_of(prev) != cluster.host_of(r);
      if (across) {
        cost.resources.push_back(nic(prev, false));
        cost.resources.push_back(nic(r, true));
      }
      if (!across || !receipts_over_nics_at_once_) cost.resources.push_back(port(r, true));
      if (r != op.receivers.back()) cost.resources.push_back(port(r, false));  // a relay
      prev = r;
    }
  } else if (op.kind == OpKind::copy) {
    both_ports(*op.sender);
  } else {
    for (DeviceId r : op.receivers) both_ports(r);
  }
  // A chain that revisits a host (possible in a loaded plan) still holds its NIC only once.
  std::sort(cost.resources.begin(), cost.resources.end());
  cost.resources.erase(std::unique(cost.resources.begin(), cost.resources.end()),
                       cost.resources.end());
  return cost;
}

Schedule::Schedule(const CostModel& model) : model_(model), busy_(model_.resources()) {}

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

Slot Schedule::probe(const CostModel::Cost& cost, double release) const {
  const double start = earliest_start(cost.resources, cost.duration, release);
  return {start, start + cost.duration};
}

Slot Schedule::insert(const CostModel::Cost& cost, double release) {
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

void Schedule::remove(const CostModel::Cost& cost, Slot slot) {
  for (int r : cost.resources) {
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
