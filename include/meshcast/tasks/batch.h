// Batch: many tensors resharded together on one cluster. A single tensor is a batch of one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshcast/layout/cluster.h"
#include "meshcast/layout/layout.h"
#include "meshcast/layout/tensor.h"
#include "meshcast/tasks/unit_task.h"

namespace meshcast {

// Where one side of a tensor sits on each device of its mesh: its tile is a region of the
// device's buffer `name` (a serving engine's fused qkv_proj, an expert's slot of w13), whose
// first element is at `offset` (one index per dimension of the buffer; the tensor's dimensions
// are the buffer's last ones, the buffer may have more in front). Each side names its own
// buffers. Bindings change where bytes sit, never what a plan moves (docs/json.md#batch-file).
struct BufferBinding {
  std::string name = {};
  std::vector<int64_t> offset = {};

  bool operator==(const BufferBinding&) const = default;
};

// One tensor of a batch: its unique name, shape, dtype, source and destination layouts, and
// optionally the buffers its tiles are bound into. Meshes may differ from tensor to tensor (e.g.
// the pipeline stages of a trainer).
struct TensorResharding {
  std::string name = {};
  TensorSpec tensor = {};
  Layout src = {};
  Layout dst = {};
  std::optional<BufferBinding> src_buffer = {};
  std::optional<BufferBinding> dst_buffer = {};

  bool operator==(const TensorResharding&) const = default;
};

struct Batch {
  Cluster cluster;
  std::vector<TensorResharding> tensors;

  // Throws InvalidArgument on a bad cluster, no tensors, or a tensor with an empty or repeated
  // name, a bad shape, spec or mesh, a mesh that does not fit the cluster, or a bad binding (an
  // empty name, an offset with fewer entries than the tensor's dimensions or a negative one, a
  // buffer whose tensors differ in dtype or rank, or two regions of one buffer that overlap on
  // a device); the message names the tensor by index and name ("tensors[3] 'layers.0.wq':
  // source: ...").
  void validate() const;
  // Bytes of all tensors together.
  int64_t bytes() const;
  // The resharding of tensor `index` alone on the batch's cluster.
  Resharding resharding(size_t index) const;
  // The batch holding `problem` alone, under `name`.
  static Batch of_one(const Resharding& problem, std::string name = "tensor");

  bool operator==(const Batch&) const = default;
};

// The region of its buffer a tile bound by `binding` takes (buffer indices): one index of each
// leading dimension, then the tile's extents from the offset's last entries.
Box bound_region(const BufferBinding& binding, const Box& tile);

// "tensors[3] 'layers.0.wq'": how every message about one tensor of a batch names it.
std::string tensor_label(const Batch& batch, size_t index);

// The canonical unit tasks of each tensor (decompose(batch.resharding(i)) at index i). Validates
// the batch first.
std::vector<std::vector<UnitTask>> decompose(const Batch& batch);

}  // namespace meshcast
