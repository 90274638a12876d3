// estimate: a fast analytic time of a plan on its cluster, and the bytes each host NIC carries.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast {

// Seconds to play the plan with the execution semantics of docs/concepts.md on a serial-resource
// model: an op starts once each of its devices has finished its earlier ops in plan order, and each
// host NIC direction carries one op at a time (the earliest idle window after the devices are
// ready). Durations: send = lat + bytes / slowest link; broadcast = (chunks + hops - 1) * (lat +
// chunk / slowest hop); allgather (ring on one host) = (n - 1) * (lat + part / device link); copy =
// lat + bytes / device link. Never below lower_bound of the same problem; balance=order minimizes
// it.
double estimate(const Plan& plan);

// Bytes through one host's NIC in each direction.
struct HostTraffic {
  int64_t out_bytes = 0;
  int64_t in_bytes = 0;
};

// One entry per host of the plan's cluster.
std::vector<HostTraffic> host_traffic(const Plan& plan);

}  // namespace meshcast
