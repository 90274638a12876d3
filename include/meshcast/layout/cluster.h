// Cluster: hosts x devices per host with NIC and device-link bandwidths, the cost model's
// constants.
#pragma once

#include <cstdint>
#include <vector>

namespace meshcast {

using DeviceId = int;

// The uniform cluster of DESIGN.md. Bandwidths are bytes per second in each direction.
// Optional per-host overrides make a cluster heterogeneous: when `host_nic_bandwidth` is
// non-empty it has one entry per host and replaces `nic_bandwidth` for that host.
struct Cluster {
  int hosts = 1;
  int devices_per_host = 1;
  double nic_bandwidth = 10e9 / 8;      // 10 Gbps
  double device_bandwidth = 100e9 / 8;  // 100 Gbps, NVLink/PCIe class
  double latency = 5e-6;                // seconds per message
  std::vector<double> host_nic_bandwidth = {};

  int devices() const { return hosts * devices_per_host; }
  int host_of(DeviceId device) const { return device / devices_per_host; }
  int local_of(DeviceId device) const { return device % devices_per_host; }
  DeviceId device_id(int host, int local) const { return host * devices_per_host + local; }
  double nic_bandwidth_of(int host) const;
  double device_bandwidth_of(DeviceId device) const;
  // Throws InvalidArgument on non-positive sizes, bandwidths, negative latency or overrides of
  // the wrong length.
  void validate() const;

  bool operator==(const Cluster&) const = default;
};

// Gbps (1e9 bits/s) to bytes per second and back, for CLI options and reports.
constexpr double gbps_to_bytes(double gbps) {
  return gbps * 1e9 / 8;
}
constexpr double bytes_to_gbps(double bytes_per_s) {
  return bytes_per_s * 8 / 1e9;
}

}  // namespace meshcast
