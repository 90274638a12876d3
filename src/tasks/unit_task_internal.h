// What Resharding and Batch share: checking one tensor's layouts, decomposing a checked tensor.
#pragma once

#include <vector>

#include "meshcast/tasks/unit_task.h"

namespace meshcast {

// Throws InvalidArgument on a bad tensor, spec or mesh, or a mesh outside `cluster` (which must
// be valid).
void validate_tensor_layouts(const TensorSpec& tensor, const Layout& src, const Layout& dst,
                             const Cluster& cluster);
// decompose() without the checks: the caller has validated the tensor and its layouts.
std::vector<UnitTask> decompose_valid(const TensorSpec& tensor, const Layout& src,
                                      const Layout& dst);

}  // namespace meshcast
