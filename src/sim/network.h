// The links of a cluster (device links and host NICs, each direction) and the route of one hop.
#pragma once

#include <string>
#include <vector>

#include "meshcast/layout/cluster.h"

namespace meshcast::sim {

// Link indices: device d has out-link 2d and in-link 2d+1; NIC k of host h follows all device
// links, out then in, hosts in order. Nothing is stored per device: building one costs a table of
// hosts, whatever the devices per host.
class Network {
 public:
  explicit Network(const Cluster& cluster);

  int links() const { return nic_base_ + 2 * nics_; }
  double capacity(int link) const;
  std::string name(int link) const;
  // The host of a NIC link, -1 for a device link.
  int host_of_nic(int link) const;

  int device_out(DeviceId d) const { return 2 * d; }
  int device_in(DeviceId d) const { return 2 * d + 1; }
  int nic_out(DeviceId d) const {
    return nic_base_ + 2 * (first_nic_[cluster_.host_of(d)] + cluster_.nic_of(d));
  }
  int nic_in(DeviceId d) const { return nic_out(d) + 1; }

  // Links a transfer from `from` to `to` crosses, appended to `out`: none for a device to itself,
  // the two device links inside a host, and the sender's and receiver's NICs between hosts.
  void append_route(DeviceId from, DeviceId to, std::vector<int>& out) const;

 private:
  Cluster cluster_;
  int nic_base_ = 0;
  int nics_ = 0;                // NICs of all hosts
  std::vector<int> first_nic_;  // per host, index of its first NIC among all NICs
};

}  // namespace meshcast::sim
