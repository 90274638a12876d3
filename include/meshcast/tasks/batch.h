// Batch: many tensors resharded together on one cluster. A single tensor is a batch of one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshcast/layout/cluster.h"
#include "meshcast/layout/layout.h"
#include "meshcast/layout/tensor.h"
#include "meshcast/tasks/unit_task.h"

namespace meshcast {

// One tensor of a batch: its unique name, shape, dtype, source and destination layouts. Meshes
// may differ from tensor to tensor (e.g. the pipeline stages of a trainer).
struct TensorResharding {
  std::string name = {};
  TensorSpec tensor = {};
  Layout src = {};
  Layout dst = {};

  bool operator==(const TensorResharding&) const = default;
};

struct Batch {
  Cluster cluster;
  std::vector<TensorResharding> tensors;

  // Throws InvalidArgument on a bad cluster, no tensors, or a tensor with an empty or repeated
  // name, a bad shape, spec or mesh, or a mesh that does not fit the cluster; the message names
  // the tensor by index and name ("tensors[3] 'layers.0.wq': source: ...").
  void validate() const;
  // Bytes of all tensors together.
  int64_t bytes() const;
  // The resharding of tensor `index` alone on the batch's cluster.
  Resharding resharding(size_t index) const;
  // The batch holding `problem` alone, under `name`.
  static Batch of_one(const Resharding& problem, std::string name = "tensor");

  bool operator==(const Batch&) const = default;
};

// "tensors[3] 'layers.0.wq'": how every message about one tensor of a batch names it.
std::string tensor_label(const Batch& batch, size_t index);

// The canonical unit tasks of each tensor (decompose(batch.resharding(i)) at index i). Validates
// the batch first.
std::vector<std::vector<UnitTask>> decompose(const Batch& batch);

}  // namespace meshcast
