// estimate: the time of a plan on its cluster, and the bytes each host NIC carries.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast {

// Seconds to play the plan on its cluster: the flow-level simulator's time (docs/simulator.md),
// the same number simulate(plan).time_s gives, and the one balance=order minimizes. Never below
// lower_bound of the same problem.
double estimate(const Plan& plan);

// Bytes through one host's NIC in each direction.
struct HostTraffic {
  int64_t out_bytes = 0;
  int64_t in_bytes = 0;
};

// One entry per host of the plan's cluster.
std::vector<HostTraffic> host_traffic(const Plan& plan);

}  // namespace meshcast
