// Reshardings grown to many hosts for the benchmarks: `hosts` x 8 devices on each side.
#pragma once

#include <vector>

#include "meshcast/tasks/unit_task.h"

namespace meshcast::bench {

// Source on hosts 0..hosts-1, destination on the following hosts, 8 devices per host.
inline Resharding grown(int hosts, const char* src_spec, const char* dst_spec,
                        std::vector<int64_t> shape = {8192, 1024, 512}) {
  Resharding p;
  p.tensor = {std::move(shape), DType::float16};
  p.src = Layout{Mesh::placed({hosts, 8}, 0, 8), ShardingSpec::parse(src_spec)};
  p.dst = Layout{Mesh::placed({hosts, 8}, hosts, 8), ShardingSpec::parse(dst_spec)};
  p.cluster = Cluster{.hosts = 2 * hosts, .devices_per_host = 8};
  return p;
}

}  // namespace meshcast::bench
