// Internal to the planner: each device's tile of each tensor's source layout, computed on first
// use.
#pragma once

#include <optional>
#include <vector>

#include "meshcast/dense_index.h"
#include "meshcast/plan/plan.h"

namespace meshcast::detail {

class SourceTiles {
 public:
  explicit SourceTiles(const Batch& batch) : batch_(batch), tiles_(batch.tensors.size()) {}

  // Whether `device`'s source tile of `tensor` contains `slice`.
  bool holds(DeviceId device, int tensor, const Box& slice);
  // The devices whose source tile of `tensor` contains `slice`, in mesh order.
  std::vector<DeviceId> holders(int tensor, const Box& slice);

 private:
  struct Tiles {
    std::vector<DeviceId> devices;  // in mesh order
    DenseIndex index;               // of `devices`
    std::vector<Box> boxes;         // by index in `index`
  };
  const Tiles& tiles_of(int tensor);

  const Batch& batch_;
  std::vector<std::optional<Tiles>> tiles_;
};

}  // namespace meshcast::detail
