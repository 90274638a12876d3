// Internal to the plan layer: the analytic cost model that estimate() reports and balance=order
// minimizes. Devices and host NIC directions are serial resources with a time they become free.
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

class Timeline {
 public:
  explicit Timeline(const Resharding& problem);

  struct Slot {
    double start = 0;
    double finish = 0;
  };
  // When `op` would run if placed now, without placing it.
  Slot probe(const Op& op) const;
  // Places `op` after everything placed on its resources; returns its slot.
  Slot place(const Op& op);
  double makespan() const { return makespan_; }

 private:
  struct Cost {
    double duration = 0;
    std::vector<int> resources;
  };
  Cost cost_of(const Op& op) const;
  int nic_out(int host) const { return devices_ + host; }
  int nic_in(int host) const { return devices_ + hosts_ + host; }

  const Resharding* problem_;
  int devices_;
  int hosts_;
  std::vector<double> free_at_;
  double makespan_ = 0;
};

}  // namespace meshcast::detail
