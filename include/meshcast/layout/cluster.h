// Cluster: hosts x devices per host with NIC and device-link bandwidths, the cost model's
// constants.
#pragma once

#include <cstdint>
#include <vector>

namespace meshcast {

using DeviceId = int;

// The most devices (hosts x devices per host) and NICs per host a cluster may have: far above
// today's largest clusters, low enough that per-device and per-NIC tables stay small and device
// ids fit an int.
inline constexpr int64_t kMaxDevices = int64_t{1} << 22;
inline constexpr int kMaxNicsPerHost = 1024;

// A uniform cluster's figures as they are quoted (and as the CLI's --nic-gbps and --dev-gbps, the
// cluster files and Python's mc.Cluster take them): bandwidths in Gbps (1e9 bits/s) each way,
// latency in seconds. Cluster::from_gbps turns them into a Cluster.
struct ClusterGbps {
  int hosts = 1;
  int devices_per_host = 1;
  double nic_gbps = 10;   // one NIC's bandwidth
  double dev_gbps = 100;  // each device's intra-host link
  double latency_s = 5e-6;
  int nics_per_host = 1;
};

// The uniform cluster of docs/concepts.md. Bandwidths are bytes per second in each direction
// (Cluster::from_gbps takes Gbps, as every other interface does).
// A host may have several NICs (e.g. 8 GPUs with 4 NICs): `nic_bandwidth` is one NIC's, and each
// device sends and receives through one NIC of its host (nic_of). Optional per-host overrides
// make a cluster heterogeneous: when `host_nic_bandwidth` (or `host_nics`) is non-empty it has one
// entry per host and replaces `nic_bandwidth` (or `nics_per_host`) for that host.
struct Cluster {
  int hosts = 1;
  int devices_per_host = 1;
  double nic_bandwidth = 10e9 / 8;      // bytes/s: 10 Gbps per NIC
  double device_bandwidth = 100e9 / 8;  // bytes/s: 100 Gbps, NVLink/PCIe class
  double latency = 5e-6;                // seconds per message
  std::vector<double> host_nic_bandwidth = {};
  int nics_per_host = 1;
  std::vector<int> host_nics = {};

  // Cluster::from_gbps({.hosts = 4, .devices_per_host = 8, .nic_gbps = 100, .dev_gbps = 900}):
  // the figures in Gbps converted to the fields' bytes/s (gbps_to_bytes). Not validated (see
  // validate()), as a Cluster filled field by field is not.
  static Cluster from_gbps(const ClusterGbps& figures);

  int devices() const { return hosts * devices_per_host; }
  int host_of(DeviceId device) const { return device / devices_per_host; }
  int local_of(DeviceId device) const { return device % devices_per_host; }
  DeviceId device_id(int host, int local) const { return host * devices_per_host + local; }
  // What the host's devices can send (or receive) over its NICs per second, all NICs together:
  // each NIC carries at most its bandwidth and at most the device links of the devices on it
  // together (a NIC no device uses carries nothing). With one NIC per host and device links at
  // least as fast, that NIC's bandwidth. The lower bound counts hosts with it.
  double nic_bandwidth_of(int host) const;
  // One NIC of the host.
  double single_nic_bandwidth_of(int host) const;
  int nics_of(int host) const;
  // The NIC (0..nics_of(host)-1) a device's inter-host traffic goes through, its rail: local
  // device l on NIC l mod nics, as rail-optimised fabrics wire GPU l to NIC l.
  int nic_of(DeviceId device) const;
  // How many of the host's devices are on its NIC `nic` (0 for a NIC beyond its devices).
  int devices_on_nic(int host, int nic) const;
  // What NIC `nic` of the host carries per second at most (each direction): its bandwidth, and at
  // most the device links of the devices on it together. nic_bandwidth_of sums it over the NICs.
  double rail_bandwidth_of(int host, int nic) const;
  double device_bandwidth_of(DeviceId device) const;
  // Throws InvalidArgument on non-positive sizes, bandwidths, NIC counts, negative latency,
  // overrides of the wrong length, or more than kMaxDevices devices or kMaxNicsPerHost NICs.
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
