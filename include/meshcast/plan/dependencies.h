// When an op of a plan may start under full-duplex execution: the one rule the simulator and the
// executors play (docs/concepts.md, "Execution").
#pragma once

#include <span>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast {

// deps[k]: the earlier ops (sorted, distinct, all < k) that op k of `ops` waits for. Every device
// has a send port and a receive port. A send uses its sender's send port and its receiver's
// receive port; a broadcast its sender's send port, both ports of every relay (receivers but the
// last) and the last receiver's receive port; an allgather both ports of every member; a copy both
// ports of its device. Op k waits for (1) the previous op in plan order on each (device, port) it
// uses and (2) for every piece a device contributes to it (the sender of a send, broadcast or
// copy; an allgather member its part), the op through which the device holds that piece when it
// holds it through a receipt (find_holding in meshcast/plan/holdings.h: its source tile first,
// else its latest receipt containing it). Ops are expected well-formed (validate_plan); a piece
// of an unknown tensor adds no data dependency.
std::vector<std::vector<int>> op_dependencies(const Batch& batch, std::span<const Op> ops);

}  // namespace meshcast
