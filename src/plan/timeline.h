// Internal to the planner: the analytic cost model balance=order builds its greedy schedules on
// (devices and host NIC directions are serial resources). Plans are judged by the simulator's time
// (estimate()), not by this model.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast::detail {

// Bytes per second of one hop: device links, plus both NICs when the hop crosses hosts.
double hop_rate(const Cluster& cluster, DeviceId from, DeviceId to);

// Chunk minimizing (ceil(bytes/chunk) + hops - 1) * (latency + chunk / rate), in whole elements,
// at least 64 KiB (or the whole message when smaller).
int64_t best_chunk_bytes(int64_t bytes, int hops, double rate, double latency, int element_size);

// How long an op takes and which serial resources (devices, NIC directions) it holds meanwhile.
class CostModel {
 public:
  explicit CostModel(const Batch& batch);
  struct Cost {
    double duration = 0;
    std::vector<int> resources;
  };
  Cost cost_of(const Op& op) const;
  int resources() const { return devices_ + 2 * hosts_; }
  bool is_device(int resource) const { return resource < devices_; }

 private:
  int nic_out(int host) const { return devices_ + host; }
  int nic_in(int host) const { return devices_ + hosts_ + host; }

  const Batch* batch_;
  int devices_;
  int hosts_;
};

struct Slot {
  double start = 0;
  double finish = 0;
};

// Places ops into the earliest window, at or after a release time, in which all their resources
// are idle (earlier gaps included).
class Schedule {
 public:
  explicit Schedule(const Batch& batch);
  const CostModel& model() const { return model_; }
  Slot probe(const Op& op, double release) const;
  Slot insert(const Op& op, double release);
  // Undoes insert(op, ...) that returned `slot`.
  void remove(const Op& op, Slot slot);
  double earliest_start(const std::vector<int>& resources, double duration, double release) const;
  void occupy(const std::vector<int>& resources, Slot slot);

 private:
  CostModel model_;
  std::vector<std::vector<Slot>> busy_;  // per resource, sorted, disjoint
};

}  // namespace meshcast::detail
