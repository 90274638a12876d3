#include "meshcast/plan/estimate.h"

#include "timeline.h"

namespace meshcast {

double estimate(const Plan& plan) {
  detail::Replay timeline(plan.batch);
  for (const Op& op : plan.ops) timeline.place(op);
  return timeline.makespan();
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
