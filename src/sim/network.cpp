#include "network.h"

#include <fmt/format.h>

#include <algorithm>

namespace meshcast::sim {

Network::Network(const Cluster& cluster) : cluster_(cluster) {
  nic_base_ = 2 * cluster.devices();
  capacity_.reserve(nic_base_);
  for (DeviceId d = 0; d < cluster.devices(); ++d) {
    capacity_.push_back(cluster.device_bandwidth_of(d));
    capacity_.push_back(cluster.device_bandwidth_of(d));
  }
  int nics = 0;
  for (int h = 0; h < cluster.hosts; ++h) {
    first_nic_.push_back(nics);
    nics += cluster.nics_of(h);
    for (int k = 0; k < cluster.nics_of(h); ++k) {
      capacity_.push_back(cluster.single_nic_bandwidth_of(h));
      capacity_.push_back(cluster.single_nic_bandwidth_of(h));
    }
  }
}

int Network::host_of_nic(int link) const {
  if (link < nic_base_) return -1;
  const int nic = (link - nic_base_) / 2;
  return static_cast<int>(std::upper_bound(first_nic_.begin(), first_nic_.end(), nic) -
                          first_nic_.begin() - 1);
}

std::string Network::name(int link) const {
  const char* direction = link % 2 == 0 ? "out" : "in";
  const int host = host_of_nic(link);
  if (host < 0) return fmt::format("dev{}.{}", link / 2, direction);
  return fmt::format("host{}.nic{}.{}", host, (link - nic_base_) / 2 - first_nic_[host], direction);
}

void Network::append_route(DeviceId from, DeviceId to, std::vector<int>& out) const {
  if (from == to) return;
  out.push_back(device_out(from));
  if (cluster_.host_of(from) != cluster_.host_of(to)) {
    out.push_back(nic_out(from));
    out.push_back(nic_in(to));
  }
  out.push_back(device_in(to));
}

}  // namespace meshcast::sim
