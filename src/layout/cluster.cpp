#include "meshcast/layout/cluster.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshcast/error.h"

namespace meshcast {

Cluster Cluster::from_gbps(const ClusterGbps& figures) {
  return {.hosts = figures.hosts,
          .devices_per_host = figures.devices_per_host,
          .nic_bandwidth = gbps_to_bytes(figures.nic_gbps),
          .device_bandwidth = gbps_to_bytes(figures.dev_gbps),
          .latency = figures.latency_s,
          .nics_per_host = figures.nics_per_host};
}

double Cluster::nic_bandwidth_of(int host) const {
  double total = 0;
  for (int n = 0; n < std::min(nics_of(host), devices_per_host); ++n)
    total += rail_bandwidth_of(host, n);
  return total;
}

int Cluster::devices_on_nic(int host, int nic) const {
  // The devices l with l mod nics == nic: devices_per_host / nics of them, one more on each of the
  // first devices_per_host % nics NICs.
  const int nics = nics_of(host);
  return devices_per_host / nics + (nic < devices_per_host % nics ? 1 : 0);
}

double Cluster::rail_bandwidth_of(int host, int nic) const {
  return std::min(single_nic_bandwidth_of(host), devices_on_nic(host, nic) * device_bandwidth);
}

double Cluster::single_nic_bandwidth_of(int host) const {
  return host_nic_bandwidth.empty() ? nic_bandwidth : host_nic_bandwidth[host];
}

int Cluster::nics_of(int host) const {
  return host_nics.empty() ? nics_per_host : host_nics[host];
}

int Cluster::nic_of(DeviceId device) const {
  return local_of(device) % nics_of(host_of(device));
}

double Cluster::device_bandwidth_of(DeviceId) const {
  return device_bandwidth;
}

void Cluster::validate() const {
  if (hosts <= 0) throw InvalidArgument(fmt::format("bad host count {}: expected > 0", hosts));
  if (devices_per_host <= 0)
    throw InvalidArgument(fmt::format("bad devices per host {}: expected > 0", devices_per_host));
  if (const int64_t n = int64_t{hosts} * devices_per_host; n > kMaxDevices)
    throw InvalidArgument(
        fmt::format("cluster of {} hosts x {} devices has {} devices: expected "
                    "at most {}",
                    hosts, devices_per_host, n, kMaxDevices));
  if (!(nic_bandwidth > 0))
    throw InvalidArgument(fmt::format("bad NIC bandwidth {} B/s: expected > 0", nic_bandwidth));
  if (!(device_bandwidth > 0))
    throw InvalidArgument(
        fmt::format("bad device bandwidth {} B/s: expected > 0", device_bandwidth));
  if (!(latency >= 0))
    throw InvalidArgument(fmt::format("bad latency {} s: expected >= 0", latency));
  if (nics_per_host <= 0 || nics_per_host > kMaxNicsPerHost)
    throw InvalidArgument(
        fmt::format("bad NICs per host {}: expected 1..{}", nics_per_host, kMaxNicsPerHost));
  if (!host_nics.empty()) {
    if (static_cast<int>(host_nics.size()) != hosts)
      throw InvalidArgument(
          fmt::format("per-host NIC counts list {} entries, expected {}", host_nics.size(), hosts));
    for (int h = 0; h < hosts; ++h)
      if (host_nics[h] <= 0 || host_nics[h] > kMaxNicsPerHost)
        throw InvalidArgument(fmt::format("bad NIC count {} for host {}: expected 1..{}",
                                          host_nics[h], h, kMaxNicsPerHost));
  }
  if (!host_nic_bandwidth.empty()) {
    if (static_cast<int>(host_nic_bandwidth.size()) != hosts)
      throw InvalidArgument(fmt::format("per-host NIC bandwidths list {} entries, expected {}",
                                        host_nic_bandwidth.size(), hosts));
    for (int h = 0; h < hosts; ++h)
      if (!(host_nic_bandwidth[h] > 0))
        throw InvalidArgument(fmt::format("bad NIC bandwidth {} B/s for host {}: expected > 0",
                                          host_nic_bandwidth[h], h));
  }
}

}  // namespace meshcast
