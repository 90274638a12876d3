#include "meshcast/planner/estimate.h"

#include "meshcast/sim/simulator.h"

namespace meshcast {

double estimate(const Plan& plan) {
  return simulate_time(plan.batch, plan.ops).time_s;
}

std::vector<HostTraffic> host_traffic(const Plan& plan) {
  const Cluster& cluster = plan.batch.cluster;
  std::vector<HostTraffic> traffic(cluster.hosts);
  for (const Op& op : plan.ops) {
    if (op.kind != OpKind::send && op.kind != OpKind::broadcast) continue;
    DeviceId prev = *op.sender;
    for (DeviceId r : op.receivers) {
      if (cluster.host_of(prev) != cluster.host_of(r)) {
        traffic[cluster.host_of(prev)].out_bytes += op.bytes;
        traffic[cluster.host_of(r)].in_bytes += op.bytes;
      }
      prev = r;
    }
  }
  return traffic;
}

}  // namespace meshcast
