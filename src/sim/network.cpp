#include "network.h"

#include <fmt/format.h>

#include <algorithm>

namespace meshcast::sim {

Network::Network(const Cluster& cluster) : cluster_(cluster) {
  nic_base_ = 2 * cluster.devices();
  first_nic_.reserve(cluster.hosts);
  for (int h = 0; h < cluster.hosts; ++h) {
    first_nic_.push_back(nics_);
    nics_ += cluster.nics_of(h);
  }
}

double Network::capacity(int link) const {
  if (link < nic_base_) return cluster_.device_bandwidth_of(link / 2);
  return cluster_.single_nic_bandwidth_of(host_of_nic(link));
}

int Network::host_of_nic(int link) const {
  if (link < nic_base_) return -1;
  const int nic = (link - nic_base_) / 2;
  if (cluster_.host_nics.empty()) return nic / cluster_.nics_per_host;
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
