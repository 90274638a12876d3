#include "meshcast/plan/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshcast/error.h"
#include "meshcast/layout/layout.h"

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
  int64_t order;  // of receipt, over the whole plan
};

// What one device has received of one unit task: pairwise disjoint boxes, kept in order of where
// they start along `dim` (the task slice's longest, along which pieces are cut), so that those
// that may overlap or contain a box are found by binary search (they start less than the longest
// receipt's length before it) rather than by a scan: a relay of a chain cut into hundreds of
// pieces took each piece against all it had.
class Receipts {
 public:
  explicit Receipts(int dim) : dim_(dim) {}

  void add(const Box& box, int op, int64_t order) {
    longest_ = std::max(longest_, hi(box) - lo(box));
    boxes_.insert(first_after(lo(box)), {box, op, order});
  }

  // The first receipt (in order of receipt) that overlaps `box`; nullptr where none does.
  const Received* first_overlap(const Box& box) const {
    const Received* first = nullptr;
    for (auto it = first_after(lo(box) - longest_); it != boxes_.end() && lo(it->box) < hi(box);
         ++it)
      if (!intersect(it->box, box).empty() && (!first || it->order < first->order)) first = &*it;
    return first;
  }

  bool any_contains(const Box& box) const {
    if (box.empty()) return !boxes_.empty();
    for (auto it = first_after(hi(box) - longest_ - 1);
         it != boxes_.end() && lo(it->box) <= lo(box); ++it)
      if (it->box.contains(box)) return true;
    return false;
  }

  int64_t volume_within(const Box& box) const {
    int64_t volume = 0;
    for (const Received& r : boxes_) volume += intersect(r.box, box).volume();
    return volume;
  }

 private:
  int64_t lo(const Box& box) const { return dim_ < 0 ? 0 : box.dims[dim_].lo; }
  int64_t hi(const Box& box) const { return dim_ < 0 ? 1 : box.dims[dim_].hi; }
  // The first receipt that starts after `start`.
  std::vector<Received>::const_iterator first_after(int64_t start) const {
    return std::upper_bound(boxes_.begin(), boxes_.end(), start,
                            [&](int64_t s, const Received& r) { return s < lo(r.box); });
  }

  int dim_;  // -1 for a scalar
  int64_t longest_ = 0;
  std::vector<Received> boxes_;  // by where they start along dim_
};

// Replays a plan op by op, tracking what each device has received per unit task of each tensor.
// Task slices of one tensor are disjoint and every op's slice lies in its task's slice, so boxes
// of different tasks never overlap and each (device, tensor, task) list stays pairwise disjoint:
// volumes then decide coverage. A device may receive a piece beyond its destination tile (a relay
// outside the destination mesh, or a receiver given a whole shard): it keeps the part inside its
// tile and may forward the rest; only the devices that need a task's slice must end with it.
class Checker {
 public:
  explicit Checker(const Plan& plan) : plan_(plan), tasks_(decompose(plan.batch)) {
    int64_t base = 0;
    for (size_t t = 0; t < tasks_.size(); ++t) {
      task_base_.push_back(base);
      base += static_cast<int64_t>(tasks_[t].size());
      const TensorResharding& tensor = plan.batch.tensors[t];
      src_.push_back(tiles_by_device(tensor.tensor, tensor.src));
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

  // "op 3 (send of task 2)"; for an op of several pieces "op 3 (send, piece 1 of 4: task 2)".
  std::string op_label(const Op& op, int piece) const {
    const int n = static_cast<int>(op.pieces.size());
    if (piece < 0 || piece >= n)
      return fmt::format("op {} ({} of {} pieces)", op.id, to_string(op.kind), n);
    const Piece& p = op.pieces[piece];
    const bool known_tensor =
        p.tensor >= 0 && p.tensor < static_cast<int>(plan_.batch.tensors.size());
    const std::string what =
        known_tensor ? task_label(p.tensor, p.task) : fmt::format("tensor {}", p.tensor);
    if (n == 1) return fmt::format("op {} ({} of {})", op.id, to_string(op.kind), what);
    return fmt::format("op {} ({}, piece {} of {}: {})", op.id, to_string(op.kind), piece, n, what);
  }

  // A problem of the whole op, or of its piece `piece`.
  [[noreturn]] void fail(const Op& op, const std::string& what, int piece = -1) const {
    throw InvalidArgument(
        fmt::format("{}: {}", op_label(op, op.pieces.size() == 1 ? 0 : piece), what));
  }

  Receipts& received(DeviceId d, int tensor, int task) {
    const Box& slice = tasks_[tensor][task].slice;
    return received_
        .try_emplace(static_cast<int64_t>(d) * total_tasks_ + task_base_[tensor] + task,
                     slice.rank() == 0 ? -1 : longest_dimension(slice))
        .first->second;
  }

  // Its source tile, else a box it received (pieces received by separate ops are not joined: an
  // executor sends from one buffer): the rule of find_holding (meshcast/plan/holdings.h), which the
  // dependencies and the executors' placement apply. Here only whether matters, not which receipt,
  // so Receipts answers by its index instead of find_holding's scan from the latest receipt.
  bool holds(DeviceId d, int tensor, int task, const Box& box) {
    const Box* tile = find_tile(src_[tensor], d);
    return (tile && tile->contains(box)) || received(d, tensor, task).any_contains(box);
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

  void check_piece(const Op& op, int index) const {
    const Piece& p = op.pieces[index];
    if (p.tensor < 0 || p.tensor >= static_cast<int>(tasks_.size()))
      fail(op,
           fmt::format("tensor {} does not exist: the batch has {} tensors", p.tensor,
                       tasks_.size()),
           index);
    const auto& tasks = tasks_[p.tensor];
    if (p.task < 0 || p.task >= static_cast<int>(tasks.size()))
      fail(op,
           fmt::format(
               "task {} does not exist: the {} has {} unit tasks", p.task,
               tasks_.size() == 1 ? std::string("problem") : tensor_label(plan_.batch, p.tensor),
               tasks.size()),
           index);
    const UnitTask& task = tasks[p.task];
    if (p.slice.rank() != task.slice.rank() || p.slice.empty() || !task.slice.contains(p.slice))
      fail(op,
           fmt::format("slice {} is not a non-empty part of the task's slice {}",
                       to_string(p.slice), to_string(task.slice)),
           index);
    const int64_t bytes = p.slice.volume() * dtype_size(plan_.batch.tensors[p.tensor].tensor.dtype);
    if (p.bytes != bytes)
      fail(op, fmt::format("bytes {} do not match the slice's {}", p.bytes, bytes), index);
    const int n = static_cast<int>(op.receivers.size());
    if (!holder_fits(op, p))
      fail(op,
           op.kind == OpKind::allgather
               ? fmt::format("holder {} is not -1 (split) or a receiver index 0..{}", p.holder,
                             n - 1)
               : fmt::format("holder {} on a {}: only allgather pieces have a holder", p.holder,
                             to_string(op.kind)),
           index);
  }

  void check_op(int index, const Op& op) {
    if (op.id != index)
      throw InvalidArgument(fmt::format(
          "op at position {} has id {}: expected ids 0..n-1 in plan order", index, op.id));
    if (op.pieces.empty()) fail(op, "has no pieces: expected at least one");
    int64_t bytes = 0;
    for (int i = 0; i < static_cast<int>(op.pieces.size()); ++i) {
      check_piece(op, i);
      bytes += op.pieces[i].bytes;
    }
    if (op.bytes != bytes)
      fail(op, fmt::format("bytes {} do not match the {} {}", op.bytes,
                           op.pieces.size() == 1 ? "slice's" : "pieces'", bytes));
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
    }
    check_shape(op);

    // What each receiver gets from each piece, checked against what it held before the op.
    struct Get {
      int piece;
      DeviceId device;
      Box box;
    };
    std::vector<Get> gets;
    for (int p = 0; p < static_cast<int>(op.pieces.size()); ++p) {
      const Piece& piece = op.pieces[p];
      if (op.kind == OpKind::allgather) {
        const int n = static_cast<int>(op.receivers.size());
        for (int i = 0; i < n; ++i) {
          const Box own = allgather_part(piece, n, i);
          if (!own.empty() && !holds(op.receivers[i], piece.tensor, piece.task, own))
            fail(op,
                 fmt::format("device {} does not hold its part {} before the allgather",
                             op.receivers[i], to_string(own)),
                 p);
          for (int j = 0; j < n; ++j) {
            const Box part = allgather_part(piece, n, j);
            if (j != i && !part.empty()) gets.push_back({p, op.receivers[i], part});
          }
        }
      } else {
        if (!holds(*op.sender, piece.tensor, piece.task, piece.slice))
          fail(op,
               fmt::format("sender {} does not hold {} at that point", *op.sender,
                           to_string(piece.slice)),
               p);
        for (DeviceId r : op.receivers) gets.push_back({p, r, piece.slice});
      }
    }
    // Checked one after the other, so that two pieces of the op delivering one element are
    // caught too.
    for (const Get& get : gets) {
      const Piece& piece = op.pieces[get.piece];
      Receipts& receipts = received(get.device, piece.tensor, piece.task);
      if (const Received* r = receipts.first_overlap(get.box))
        fail(op,
             fmt::format("device {} receives {} a second time (op {} delivered it)", get.device,
                         to_string(intersect(r->box, get.box)), r->op),
             get.piece);
      receipts.add(get.box, op.id, receipts_++);
    }
  }

  // Each destination tile is the union of the slices of the tasks its device receives.
  void check_complete() {
    for (int tensor = 0; tensor < static_cast<int>(tasks_.size()); ++tensor)
      for (int t = 0; t < static_cast<int>(tasks_[tensor].size()); ++t) {
        const UnitTask& task = tasks_[tensor][t];
        for (DeviceId d : task.receivers) {
          const int64_t got = received(d, tensor, t).volume_within(task.slice);
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
  std::unordered_map<int64_t, Receipts> received_;
  int64_t receipts_ = 0;  // so far
};

}  // namespace

void validate_plan(const Plan& plan) {
  plan.batch.validate();
  Checker(plan).run();
}

}  // namespace meshcast
