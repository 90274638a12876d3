// Unit-task decomposition of one resharding (docs/concepts.md): per-dimension interval
// intersection.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/layout/box.h"
#include "meshcast/layout/cluster.h"
#include "meshcast/layout/layout.h"
#include "meshcast/layout/tensor.h"

namespace meshcast {

// One resharding problem: a tensor moving from the `src` layout to the `dst` layout on `cluster`.
struct Resharding {
  TensorSpec tensor;
  Layout src;
  Layout dst;
  Cluster cluster;

  // Throws InvalidArgument on a bad tensor, spec, mesh, or a mesh that does not fit the cluster.
  void validate() const;
  bool operator==(const Resharding&) const = default;
};

// slice = S ∩ D for a distinct source tile S and distinct destination tile D that overlap;
// senders = replicas(S), receivers = replicas(D), both in mesh order.
struct UnitTask {
  Box slice;
  int64_t bytes = 0;
  std::vector<DeviceId> senders;
  std::vector<DeviceId> receivers;

  bool operator==(const UnitTask&) const = default;
};

// The canonical unit tasks, ordered by slice (lexicographic by lower corner). Runs in time
// proportional to the devices plus the tasks it returns, not to source x destination tiles.
std::vector<UnitTask> decompose(const Resharding& problem);

}  // namespace meshcast
