// Chrome / Perfetto trace of a simulated plan: one track per device and one counter per NIC.
#pragma once

#include <nlohmann/json.hpp>

#include "meshcast/sim/simulator.h"

namespace meshcast {

// {"traceEvents": [...], "displayTimeUnit": "ms", "meshcast_version"}: a process per host, a
// thread per device with one slice per op it takes part in, and a counter per NIC direction with
// its rate in Gbps. `result` must come from simulate(plan, cluster, {.record_link_rates = true}).
nlohmann::json chrome_trace(const Plan& plan, const Cluster& cluster, const SimResult& result);

}  // namespace meshcast
