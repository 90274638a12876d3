// lower_bound: DESIGN.md's bound on the time of any plan for a resharding, in seconds.
#pragma once

#include <vector>

#include "meshcast/tasks/unit_task.h"

namespace meshcast {

// max(network term, device term) of DESIGN.md, each host's and device's bytes divided by its
// own bandwidth and the pooled sender term by the senders' summed NIC bandwidth. `tasks` are
// decompose(problem).
double lower_bound(const Resharding& problem, const std::vector<UnitTask>& tasks);

}  // namespace meshcast
