#include "meshcast/plan/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>

#include "meshcast/error.h"
#include "meshcast/layout/layout.h"
#include "meshcast/plan/holdings.h"

namespace meshcast {
namespace {

// The tile each device of one layout's mesh holds (devices outside the mesh are absent): sparse,
// so that a batch of many tensors on a large cluster stays small.
using TilesByDevice = std::unordered_map<DeviceId, Box>;

TilesByDevice tiles_by_device(const TensorSpec& tensor, const Layout& layout) {
  TilesByDevice tiles;
  const auto boxes = device_tiles(tensor, layout);
  for (int64_t i = 0; i < layout.mesh.size(); ++i)
    tiles.emplace(layout.mesh.device_at(i), boxes[i]);
  return tiles;
}

const Box* find_tile(const TilesByDevice& tiles, DeviceId d) {
  const auto it = tiles.find(d);
  return it == tiles.end() ? nullptr : &it->second;
}

struct Received {
  Box box;
  int op;
};

// Replays a plan op by op, tracking what each device has received per unit task of each tensor.
// Task slices of one tensor are disjoint and every op's slice lies in its task's slice, so boxes
// of different tasks never overlap and each (device, tensor, task) list stays pairwise disjoint:
// volumes then decide coverage.
class Checker {
 public:
  explicit Checker(const Plan& plan) : plan_(plan), tasks_(decompose(plan.batch)) {
    int64_t base = 0;
    for (size_t t = 0; t < tasks_.size(); ++t) {
      task_base_.push_back(base);
      base += static_cast<int64_t>(tasks_[t].size());
      const TensorResharding& tensor = plan.batch.tensors[t];
      src_.push_back(tiles_by_device(tensor.tensor, tensor.src));
      dst_.push_back(tiles_by_device(tensor.tensor, tensor.dst));
    }
    total_tasks_ = base;
  }

  void run() {
    for (int i = 0; i < static_cast<int>(plan_.ops.size()); ++i) check_op(i, plan_.ops[i]);
    check_complete();
  }

 private:
  // "task 3" in a batch of one; "tensors[2] 'b' task 3" in a larger batch.
  std::string task_label(int tensor, int task) const {
    if (plan_.batch.tensors.size() == 1) return fmt::format("task {}", task);
    return fmt::format("{} task {}", tensor_label(plan_.batch, tensor), task);
  }

  [[noreturn]] void fail(const Op& op, const std::string& what) const {
    const bool known_tensor =
        op.tensor >= 0 && op.tensor < static_cast<int>(plan_.batch.tensors.size());
    throw InvalidArgument(fmt::format(
        "op {} ({} of {}): {}", op.id, to_string(op.kind),
        known_tensor ? task_label(op.tensor, op.task) : fmt::format("tensor {}", op.tensor), what));
  }

  std::vector<Received>& received(DeviceId d, int tensor, int task) {
    return received_[static_cast<int64_t>(d) * total_tasks_ + task_base_[tensor] + task];
  }

  int64_t received_volume(DeviceId d, int tensor, int task, const Box& box) {
    int64_t volume = 0;
    for (const Received& r : received(d, tensor, task)) volume += intersect(r.box, box).volume();
    return volume;
  }

  bool holds(DeviceId d, int tensor, int task, const Box& box) {
    return find_holding(
               find_tile(src_[tensor], d), received(d, tensor, task),
               [](const Received& r) -> const Box& { return r.box; }, box)
        .has_value();
  }

  void check_device(const Op& op, DeviceId d, std::string_view role) const {
    if (d < 0 || d >= plan_.batch.cluster.devices())
      fail(op, fmt::format("{} {} is not a device of the cluster (0..{})", role, d,
                           plan_.batch.cluster.devices() - 1));
  }

  void check_shape(const Op& op) const {
    const int n = static_cast<int>(op.receivers.size());
    switch (op.kind) {
      case OpKind::send:
        if (n != 1) fail(op, fmt::format("a send has {} receivers, expected 1", n));
        break;
      case OpKind::copy:
        if (n != 1 || op.receivers[0] != *op.sender)
          fail(op, fmt::format("a copy must have its sender {} as its only receiver, got [{}]",
                               *op.sender, fmt::join(op.receivers, ",")));
        break;
      case OpKind::broadcast:
        if (n < 1) fail(op, "a broadcast has no receivers");
        break;
      case OpKind::allgather: {
        if (n < 2) fail(op, fmt::format("an allgather has {} devices, expected at least 2", n));
        const Cluster& c = plan_.batch.cluster;
        for (DeviceId r : op.receivers)
          if (c.host_of(r) != c.host_of(op.receivers[0]))
            fail(op, fmt::format("allgather devices [{}] are not on one host",
                                 fmt::join(op.receivers, ",")));
        break;
      }
    }
  }

  void check_op(int index, const Op& op) {
    if (op.id != index)
      throw InvalidArgument(fmt::format(
          "op at position {} has id {}: expected ids 0..n-1 in plan order", index, op.id));
    if (op.tensor < 0 || op.tensor >= static_cast<int>(tasks_.size()))
      fail(op, fmt::format("tensor {} does not exist: the batch has {} tensors", op.tensor,
                           tasks_.size()));
    const auto& tasks = tasks_[op.tensor];
    if (op.task < 0 || op.task >= static_cast<int>(tasks.size()))
      fail(op, fmt::format("task {} does not exist: the {} has {} unit tasks", op.task,
                           tasks_.size() == 1 ? std::string("problem")
                                              : tensor_label(plan_.batch, op.tensor),
                           tasks.size()));
    const UnitTask& task = tasks[op.task];
    const auto& dst = dst_[op.tensor];
    if (op.slice.rank() != task.slice.rank() || op.slice.empty() || !task.slice.contains(op.slice))
      fail(op, fmt::format("slice {} is not a non-empty part of the task's slice {}",
                           to_string(op.slice), to_string(task.slice)));
    const int64_t bytes =
        op.slice.volume() * dtype_size(plan_.batch.tensors[op.tensor].tensor.dtype);
    if (op.bytes != bytes)
      fail(op, fmt::format("bytes {} do not match the slice's {}", op.bytes, bytes));
    if (op.chunk_bytes < 0) fail(op, fmt::format("chunk_bytes {} is negative", op.chunk_bytes));
    const bool wants_sender = op.kind != OpKind::allgather;
    if (op.sender.has_value() != wants_sender)
      fail(op, wants_sender ? "the sender is missing" : "an allgather has no sender");
    if (op.sender) check_device(op, *op.sender, "sender");
    for (DeviceId r : op.receivers) {
      check_device(op, r, "receiver");
      if (std::count(op.receivers.begin(), op.receivers.end(), r) > 1)
        fail(op, fmt::format("receiver {} is listed twice", r));
      if (op.kind != OpKind::copy && op.sender == r)
        fail(op, fmt::format("device {} is both sender and receiver; use a copy", r));
      if (!find_tile(dst, r))
        fail(op, fmt::format("receiver {} is not in the destination mesh", r));
    }
    check_shape(op);

    // What each receiver gets from this op, checked against what it held before it.
    std::vector<std::pair<DeviceId, Box>> gets;
    if (op.kind == OpKind::allgather) {
      const int n = static_cast<int>(op.receivers.size());
      for (int i = 0; i < n; ++i) {
        const Box own = allgather_part(op.slice, n, i);
        if (!own.empty() && !holds(op.receivers[i], op.tensor, op.task, own))
          fail(op, fmt::format("device {} does not hold its part {} before the allgather",
                               op.receivers[i], to_string(own)));
        for (int j = 0; j < n; ++j) {
          const Box part = allgather_part(op.slice, n, j);
          if (j != i && !part.empty()) gets.emplace_back(op.receivers[i], part);
        }
      }
    } else {
      if (!holds(*op.sender, op.tensor, op.task, op.slice))
        fail(op, fmt::format("sender {} does not hold {} at that point", *op.sender,
                             to_string(op.slice)));
      for (DeviceId r : op.receivers) gets.emplace_back(r, op.slice);
    }
    for (const auto& [d, box] : gets) {
      const Box& tile = *find_tile(dst, d);
      if (!tile.contains(box))
        fail(op, fmt::format("device {} receives {} outside its destination tile {}", d,
                             to_string(box), to_string(tile)));
      for (const Received& r : received(d, op.tensor, op.task))
        if (!intersect(r.box, box).empty())
          fail(op, fmt::format("device {} receives {} a second time (op {} delivered it)", d,
                               to_string(intersect(r.box, box)), r.op));
    }
    for (const auto& [d, box] : gets) received(d, op.tensor, op.task).push_back({box, op.id});
  }

  // Each destination tile is the union of the slices of the tasks its device receives.
  void check_complete() {
    for (int tensor = 0; tensor < static_cast<int>(tasks_.size()); ++tensor)
      for (int t = 0; t < static_cast<int>(tasks_[tensor].size()); ++t) {
        const UnitTask& task = tasks_[tensor][t];
        for (DeviceId d : task.receivers) {
          const int64_t got = received_volume(d, tensor, t, task.slice);
          if (got != task.slice.volume())
            throw InvalidArgument(fmt::format(
                "device {} receives {} of the {} elements of {} (slice {}): the plan is "
                "incomplete",
                d, got, task.slice.volume(), task_label(tensor, t), to_string(task.slice)));
        }
      }
  }

  const Plan& plan_;
  const std::vector<std::vector<UnitTask>> tasks_;
  std::vector<int64_t> task_base_;  // per tensor: index of its first task among all tensors'
  int64_t total_tasks_ = 0;
  std::vector<TilesByDevice> src_;  // per tensor
  std::vector<TilesByDevice> dst_;
  std::unordered_map<int64_t, std::vector<Received>> received_;
};

}  // namespace

void validate_plan(const Plan& plan) {
  plan.batch.validate();
  Checker(plan).run();
}

}  // namespace meshcast
