// lower_bound: the bound of docs/concepts.md on the time of any plan for a batch, in seconds.
#pragma once

#include <vector>

#include "meshcast/tasks/batch.h"

namespace meshcast {

// max(network term, device term) over all tensors' unit tasks together, plus one per-message
// latency when anything has to move (docs/concepts.md#lower-bound): each host's and device's
// bytes divided by its own bandwidth and the pooled sender term by the senders' summed NIC
// bandwidth. `tasks` are decompose(batch).
double lower_bound(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks);
// The bound of Batch::of_one(problem); `tasks` are decompose(problem).
double lower_bound(const Resharding& problem, const std::vector<UnitTask>& tasks);

// in(h) of docs/concepts.md for every host: the bytes host h must take in over its NICs in any
// plan (slices its receivers need and none of its devices holds). Its maximum over time is the
// NIC bandwidth figure (nicbw) of `meshcast bench`.
std::vector<double> host_in_bytes(const Resharding& problem, const std::vector<UnitTask>& tasks);

}  // namespace meshcast
