// lower_bound: the bound of docs/concepts.md on the time of any plan for a batch, in seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/plan/plan.h"
#include "meshcast/tasks/batch.h"

namespace meshcast {

// max(network term, device term) over all tensors' unit tasks together, plus one per-message
// latency when anything has to move (docs/concepts.md#lower-bound): each host's and device's
// bytes divided by its own bandwidth and the pooled sender term by the senders' summed NIC
// bandwidth. `tasks` are decompose(batch).
double lower_bound(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks);
// The bound of Batch::of_one(problem); `tasks` are decompose(problem).
double lower_bound(const Resharding& problem, const std::vector<UnitTask>& tasks);

// The terms of the bound, as docs/concepts.md#lower-bound names them.
enum class BoundTerm {
  none,          // nothing has to move
  in,            // in(h) / nic(h): what a host takes in over its NICs
  beside,        // (beside(h) + in(h)) / (links(h) + nic(h))
  out,           // out(h): what only a host holds, sent out over its NICs
  ports,         // ports(h): the send ports of a host's devices
  first,         // first(∪ HS(t), Σ b) over the batch's tasks that must cross a NIC
  first_tensor,  // the same over one tensor's tasks
  held,          // first(S, held(S)) for a set S of hosts
  held_ports,    // ports(S): the send ports of a set S of hosts' devices
  hops,          // the send-port seconds of every hop, over the cluster's devices
  dev_in,        // dev_in(d) / dev(d): what a device takes in over its link
  dev_only,      // dev_only(d) / dev(d): what only a device holds, sent over its link
  dev_held,      // dev_held(S) / Σ dev: what only a set of devices holds
  near,          // near(d): what a sole holder on its host passes to the devices beside it
  copy,          // copy(t): a holder's op on its own slices
  taken,         // taken(R) / (links(R) + min(nic(R), nic outside R)): the hosts that take bytes
};
std::string_view to_string(BoundTerm term);

// The bound with the term that reaches it (the first of equal terms, in the order above; terms a
// billionth apart count as equal) and where: a host for in, beside, out and ports, a device for
// dev_in, dev_only and near, a tensor (its index in the batch) for first_tensor, -1 for the others.
struct LowerBound {
  double seconds = 0;
  BoundTerm term = BoundTerm::none;
  int64_t at = -1;

  bool operator==(const LowerBound&) const = default;
};
// lower_bound(batch, tasks) and the term that decides it.
LowerBound explain_lower_bound(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks);
// One line for people: the term, where, and what it counts, e.g. "in(h) of host 3: what the host
// takes in over its NICs, at their bandwidth".
std::string describe(const LowerBound& bound, const Batch& batch);
// The bound of `plan` counted again on its batch, with its term; none where that is not the
// plan's lower_bound_s (a plan document of another version, or edited).
std::optional<LowerBound> explain_plan_bound(const Plan& plan);

// in(h) of docs/concepts.md for every host: the bytes host h must take in over its NICs in any
// plan (slices its receivers need and none of its devices holds). Its maximum over time is the
// NIC bandwidth figure (nicbw) of `meshcast bench`.
std::vector<double> host_in_bytes(const Resharding& problem, const std::vector<UnitTask>& tasks);

}  // namespace meshcast
