// validate_plan: checks that a plan delivers every destination element exactly once.
#pragma once

#include "meshcast/plan/plan.h"

namespace meshcast {

// Throws InvalidArgument naming the op and the problem unless: ids are 0..n-1 in order; every
// op's kind, task, slice (inside its task's slice), bytes, sender and receivers are well formed
// (devices in the cluster, receivers distinct and in the destination mesh, allgather devices
// on one host); each sender holds the op's slice when the op runs (its source tile, or what it
// received earlier), each allgather device holds its allgather_part beforehand; no device
// receives an element twice; and at the end every destination device holds its whole tile.
// Exact: received boxes of one device and task are kept pairwise disjoint and compared by
// volume.
void validate_plan(const Plan& plan);

}  // namespace meshcast
