// A cluster document as `--cluster FILE` loads it; an accepted cluster writes and reads back
// with the same sizes and (to rounding of the Gbps conversion) the same figures.
#include <cmath>

#include "fuzz.h"
#include "meshcast/plan/json.h"

namespace {
bool close(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const Cluster c = cluster_from_json(parse_json(fuzz::as_text(data, size)));
    c.validate();
    const Cluster back = cluster_from_json(parse_json(cluster_to_json(c).dump()));
    fuzz::require(back.hosts == c.hosts && back.devices_per_host == c.devices_per_host &&
                      back.nics_per_host == c.nics_per_host && back.host_nics == c.host_nics &&
                      back.host_nic_bandwidth.size() == c.host_nic_bandwidth.size(),
                  "cluster sizes");
    fuzz::require(close(back.nic_bandwidth, c.nic_bandwidth) &&
                      close(back.device_bandwidth, c.device_bandwidth) &&
                      close(back.latency, c.latency),
                  "cluster figures");
    for (size_t h = 0; h < c.host_nic_bandwidth.size(); ++h)
      fuzz::require(close(back.host_nic_bandwidth[h], c.host_nic_bandwidth[h]), "host NIC");
  });
}
