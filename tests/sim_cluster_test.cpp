// Clusters with several NICs per host and per-host overrides, and their JSON form.
#include <gtest/gtest.h>

#include "meshcast/error.h"
#include "meshcast/layout/cluster.h"
#include "meshcast/plan/json.h"

namespace meshcast {
namespace {

Cluster eight_gpus_four_nics() {
  return Cluster{.hosts = 3, .devices_per_host = 8, .nic_bandwidth = 1e9, .nics_per_host = 4};
}

TEST(ClusterNicsTest, EachDeviceUsesItsRail) {
  const Cluster c = eight_gpus_four_nics();
  const int expected[8] = {0, 1, 2, 3, 0, 1, 2, 3};
  for (int host = 0; host < c.hosts; ++host)
    for (int local = 0; local < 8; ++local)
      EXPECT_EQ(c.nic_of(c.device_id(host, local)), expected[local]) << host << " " << local;
  Cluster more_nics_than_devices = c;
  more_nics_than_devices.devices_per_host = 2;
  EXPECT_EQ(more_nics_than_devices.nic_of(0), 0);
  EXPECT_EQ(more_nics_than_devices.nic_of(1), 1);
}

TEST(ClusterNicsTest, HostBandwidthCountsEveryNic) {
  Cluster c = eight_gpus_four_nics();
  EXPECT_EQ(c.single_nic_bandwidth_of(1), 1e9);
  EXPECT_EQ(c.nic_bandwidth_of(1), 4e9);
  c.host_nics = {4, 2, 1};
  c.host_nic_bandwidth = {1e9, 3e9, 5e9};
  EXPECT_EQ(c.nics_of(1), 2);
  EXPECT_EQ(c.nic_bandwidth_of(1), 6e9);
  EXPECT_EQ(c.nic_bandwidth_of(2), 5e9);
  EXPECT_EQ(c.nic_of(c.device_id(2, 7)), 0);
  EXPECT_EQ(c.nic_of(c.device_id(1, 4)), 0);
  EXPECT_EQ(c.nic_of(c.device_id(1, 5)), 1);
  EXPECT_NO_THROW(c.validate());
}

// A host sends and receives only through NICs its devices use, each at most at their links' rate.
TEST(ClusterNicsTest, HostBandwidthCountsWhatItsDevicesCanFill) {
  Cluster c{.hosts = 2, .devices_per_host = 4, .nic_bandwidth = 1e9, .device_bandwidth = 10e9};
  c.nics_per_host = 8;  // NICs 4..7 have no device
  EXPECT_EQ(c.nic_bandwidth_of(0), 4e9);
  c.devices_per_host = 1;  // one device, on NIC 0 alone
  EXPECT_EQ(c.nic_bandwidth_of(0), 1e9);
  c.nic_bandwidth = 30e9;  // its link is slower than that NIC
  EXPECT_EQ(c.nic_bandwidth_of(0), 10e9);
}

// Each NIC's share: the devices on it, and what it carries at most.
TEST(ClusterNicsTest, EachRailCarriesWhatItsDevicesCanFill) {
  Cluster c{.hosts = 2, .devices_per_host = 8, .nic_bandwidth = 30e9, .device_bandwidth = 10e9};
  c.nics_per_host = 3;  // devices 0, 3, 6 on NIC 0; 1, 4, 7 on NIC 1; 2, 5 on NIC 2
  EXPECT_EQ(c.devices_on_nic(1, 0), 3);
  EXPECT_EQ(c.devices_on_nic(1, 1), 3);
  EXPECT_EQ(c.devices_on_nic(1, 2), 2);
  EXPECT_EQ(c.rail_bandwidth_of(1, 0), 30e9);
  EXPECT_EQ(c.rail_bandwidth_of(1, 2), 20e9);  // two links of 10e9
  EXPECT_EQ(c.nic_bandwidth_of(1), 80e9);
  c.devices_per_host = 2;  // NIC 2 has no device
  EXPECT_EQ(c.devices_on_nic(0, 1), 1);
  EXPECT_EQ(c.devices_on_nic(0, 2), 0);
  EXPECT_EQ(c.rail_bandwidth_of(0, 2), 0);
}

TEST(ClusterNicsTest, DefaultIsOneNicPerHost) {
  const Cluster c{.hosts = 2, .devices_per_host = 4};
  EXPECT_EQ(c.nics_of(0), 1);
  EXPECT_EQ(c.nic_of(3), 0);
  EXPECT_EQ(c.nic_bandwidth_of(1), c.nic_bandwidth);
}

// Gbps in, as the CLI, the cluster files and Python take bandwidths; bytes/s in the fields.
TEST(ClusterGbpsTest, FromGbpsConvertsToBytesPerSecond) {
  const Cluster c = Cluster::from_gbps({.hosts = 4,
                                        .devices_per_host = 8,
                                        .nic_gbps = 100,
                                        .dev_gbps = 900,
                                        .latency_s = 2e-6,
                                        .nics_per_host = 2});
  EXPECT_EQ(c.hosts, 4);
  EXPECT_EQ(c.devices_per_host, 8);
  EXPECT_EQ(c.nic_bandwidth, 12.5e9);
  EXPECT_EQ(c.device_bandwidth, 112.5e9);
  EXPECT_EQ(c.latency, 2e-6);
  EXPECT_EQ(c.nics_per_host, 2);
  // Its defaults are a Cluster's defaults.
  EXPECT_EQ(Cluster::from_gbps({}), Cluster{});
}

TEST(ClusterNicsTest, ValidateNamesTheBadCount) {
  Cluster c = eight_gpus_four_nics();
  c.nics_per_host = 0;
  EXPECT_THROW(
      {
        try {
          c.validate();
        } catch (const InvalidArgument& e) {
          EXPECT_STREQ(e.what(), "bad NICs per host 0: expected 1..1024");
          throw;
        }
      },
      InvalidArgument);
  c = eight_gpus_four_nics();
  c.host_nics = {1, 2};
  try {
    c.validate();
    FAIL() << "accepted two NIC counts for three hosts";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "per-host NIC counts list 2 entries, expected 3");
  }
  c.host_nics = {1, -2, 1};
  try {
    c.validate();
    FAIL() << "accepted a negative NIC count";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "bad NIC count -2 for host 1: expected 1..1024");
  }
}

// A cluster file with a huge host count is refused before anything is sized by it, and a device
// count beyond int never wraps around.
TEST(ClusterNicsTest, ValidateRefusesClustersBeyondTheLimits) {
  const auto message_of = [](const Cluster& c) -> std::string {
    try {
      c.validate();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message_of({.hosts = 2'000'000'000, .devices_per_host = 8}),
            "cluster of 2000000000 hosts x 8 devices has 16000000000 devices: expected at most "
            "4194304");
  EXPECT_EQ(message_of({.hosts = 1 << 19, .devices_per_host = 8}), "accepted");
  EXPECT_EQ(message_of({.hosts = 2, .devices_per_host = 8, .nics_per_host = 5000}),
            "bad NICs per host 5000: expected 1..1024");
}

TEST(ClusterNicsTest, JsonKeepsNicCountsAndOverrides) {
  Cluster c = eight_gpus_four_nics();
  c.host_nics = {4, 2, 1};
  c.host_nic_bandwidth = {gbps_to_bytes(25), gbps_to_bytes(50), gbps_to_bytes(100)};
  const auto j = cluster_to_json(c);
  EXPECT_EQ(j["nics_per_host"], 4);
  EXPECT_EQ(j["host_nics"], nlohmann::json({4, 2, 1}));
  EXPECT_EQ(cluster_from_json(nlohmann::json::parse(j.dump())), c);
}

TEST(ClusterNicsTest, SmallClusterFileFillsTheRestFromDefaults) {
  const Cluster defaults{.hosts = 2, .devices_per_host = 8};
  const Cluster c = cluster_from_json(
      nlohmann::json::parse(R"({"nics_per_host": 4, "nic_gbps": 100})"), defaults);
  EXPECT_EQ(c.hosts, 2);
  EXPECT_EQ(c.nics_per_host, 4);
  EXPECT_EQ(c.nic_bandwidth_of(0), 4 * gbps_to_bytes(100));
  EXPECT_THROW(cluster_from_json(nlohmann::json::parse(R"({"nics_per_host": 0})"), defaults),
               ParseError);
  EXPECT_THROW(cluster_from_json(nlohmann::json::parse(R"({"host_nics": [1]})"), defaults),
               ParseError);
  EXPECT_THROW(cluster_from_json(nlohmann::json::parse(R"({"host_nics": "four"})"), defaults),
               ParseError);
}

// What `meshcast calibrate -o testbed.json` writes is read back by every --cluster FILE: the
// calibration samples it carries are accepted and change nothing.
TEST(ClusterJsonTest, CalibrateDocumentIsReadBackAsACluster) {
  const Cluster c{.hosts = 5, .devices_per_host = 4, .nic_bandwidth = gbps_to_bytes(0.273)};
  nlohmann::json doc = cluster_to_json(c);
  doc["meshcast_version"] = "0.1.0";
  doc["calibration"] = {{"host_names", {"emu-h0", "emu-h1"}}, {"nic_gbps_samples", {0.27, 0.28}}};
  EXPECT_EQ(cluster_from_json(doc), c);
  doc["calibrations"] = 1;
  EXPECT_THROW(cluster_from_json(doc), ParseError);
}

}  // namespace
}  // namespace meshcast
