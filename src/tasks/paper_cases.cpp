#include "meshcast/tasks/paper_cases.h"

#include <fmt/format.h>

#include "meshcast/error.h"

namespace meshcast {

Cluster paper_cluster(int hosts) {
  return Cluster{.hosts = hosts,
                 .devices_per_host = 4,
                 .nic_bandwidth = gbps_to_bytes(10),
                 .device_bandwidth = gbps_to_bytes(100),
                 .latency = 5e-6};
}

std::vector<PaperCase> paper_cases(int scale) {
  struct Row {
    int number;
    int src_hosts, dst_hosts;
    const char* src_spec;
    const char* dst_spec;
    std::vector<int64_t> shape;
  };
  const std::vector<int64_t> big{1024, 1024, 512};
  const std::vector<Row> rows = {
      {1, 2, 2, "S0RR", "S0RR", big}, {2, 2, 2, "RRR", "S0RR", big},
      {3, 2, 2, "RS0R", "S0RR", big}, {4, 2, 2, "RS01R", "S01RR", big},
      {5, 2, 2, "S1RR", "S0RR", big}, {6, 2, 3, "S0RR", "S0RR", {3072, 1024, 170}},
      {7, 1, 2, "S1RR", "RRR", big},  {8, 2, 2, "RS0R", "RRS0", big},
  };
  if (scale <= 0) throw InvalidArgument(fmt::format("bad scale {}: expected > 0", scale));
  std::vector<PaperCase> cases;
  for (const auto& r : rows) {
    if (r.shape[0] % scale != 0)
      throw InvalidArgument(
          fmt::format("bad scale {}: it must divide the first dimension {}", scale, r.shape[0]));
    PaperCase c;
    c.number = r.number;
    c.problem.tensor = TensorSpec{r.shape, DType::int32};
    c.problem.tensor.shape[0] /= scale;
    c.problem.src = Layout{Mesh::placed({r.src_hosts, 4}, 0, 4), ShardingSpec::parse(r.src_spec)};
    c.problem.dst =
        Layout{Mesh::placed({r.dst_hosts, 4}, r.src_hosts, 4), ShardingSpec::parse(r.dst_spec)};
    c.problem.cluster = paper_cluster(r.src_hosts + r.dst_hosts);
    c.description =
        fmt::format("({},4) {} -> ({},4) {}", r.src_hosts, r.src_spec, r.dst_hosts, r.dst_spec);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace meshcast
