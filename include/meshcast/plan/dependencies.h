// When an op of a plan may start (devices send one op at a time, receive passively): the one rule
// the simulator and the executors play (docs/concepts.md, "Execution").
#pragma once

#include <span>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast {

// Calls `f` with each device that sends in `op`: the sender of a send, broadcast or copy, every
// relay of a broadcast (every receiver but the last), every member of an allgather.
template <class F>
void for_each_sending_device(const Op& op, F&& f) {
  const auto n = op.receivers.size();
  if (op.kind == OpKind::allgather) {
    for (DeviceId r : op.receivers) f(r);
    return;
  }
  if (op.sender) f(*op.sender);
  for (size_t i = 0; i + 1 < n; ++i) f(op.receivers[i]);
}

// deps[k]: the earlier ops (sorted, distinct, all < k) that op k of `ops` waits for. A device
// sends in one op at a time, in plan order, and receives passively (any number of ops may deliver
// to it at once). Op k waits for (1) the previous op in plan order in which each device that sends
// in k also sends (the sender of a send or broadcast, every relay of a broadcast, i.e. every
// receiver but the last, every member of an allgather, the device of a copy) and (2) for every
// piece a device contributes to k (the sender of a send, broadcast or copy; an allgather member
// its part), the op through which the device holds that piece when it holds it through a receipt
// (find_holding in meshcast/plan/holdings.h: its source tile first, else its latest receipt
// containing it). Ops are expected well-formed (validate_plan); a piece of an unknown tensor adds
// no data dependency.
std::vector<std::vector<int>> op_dependencies(const Batch& batch, std::span<const Op> ops);

}  // namespace meshcast
