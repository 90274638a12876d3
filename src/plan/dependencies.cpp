#include "meshcast/plan/dependencies.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "meshcast/layout/layout.h"
#include "meshcast/plan/holdings.h"

namespace meshcast {
namespace {

struct Receipt {
  Box box;
  int op;
};

// Where a device's receipts of one unit task of one tensor are kept.
struct TaskKey {
  DeviceId device;
  int tensor;
  int task;
  bool operator==(const TaskKey&) const = default;
};

struct TaskKeyHash {
  size_t operator()(const TaskKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.device) * 0x9E3779B97F4A7C15ULL;
    h ^= (static_cast<uint64_t>(static_cast<uint32_t>(k.tensor)) << 32 |
          static_cast<uint32_t>(k.task)) +
         0x7F4A7C15ULL + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

uint64_t task_id(const Piece& piece) {
  return static_cast<uint64_t>(static_cast<uint32_t>(piece.tensor)) << 32 |
         static_cast<uint32_t>(piece.task);
}

// Replays the ops in plan order, indexing what each device received per (tensor, task) and the
// last op each device sends in, so that each op's dependencies cost a few lookups. Only the
// receipts of a device that contributes the same task in some op are kept: the others are never
// looked up, and a whole model's chains deliver each task to hundreds of devices that only
// receive it.
class Tracker {
 public:
  Tracker(const Batch& batch, std::span<const Op> ops)
      : batch_(batch), sources_(batch.tensors.size()) {
    for (const Op& op : ops) {
      const int n = static_cast<int>(op.receivers.size());
      for (const Piece& piece : op.pieces) {
        if (!known(piece)) continue;
        if (op.kind == OpKind::allgather) {
          for (int i = 0; i < n; ++i) contributors_[task_id(piece)].push_back(op.receivers[i]);
        } else if (op.sender) {
          contributors_[task_id(piece)].push_back(*op.sender);
        }
      }
    }
    for (auto& [task, devices] : contributors_) {
      std::sort(devices.begin(), devices.end());
      devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    }
  }

  std::vector<int> dependencies_of(const Op& op, int k) {
    std::vector<int> deps;
    // Only sending is serialised: a device's receives are passive and may overlap.
    const auto send_from = [&](DeviceId d) {
      auto [it, fresh] = last_send_.try_emplace(d, k);
      if (!fresh) {
        deps.push_back(it->second);
        it->second = k;
      }
    };
    for_each_sending_device(op, send_from);
    const int n = static_cast<int>(op.receivers.size());
    // What the op's devices contribute, held before it starts.
    for (const Piece& piece : op.pieces) {
      if (op.kind == OpKind::allgather) {
        for (int i = 0; i < n; ++i)
          if (const Box part = allgather_part(piece, n, i); !part.empty())
            add_holding(op.receivers[i], piece, part, deps);
      } else if (op.sender) {
        add_holding(*op.sender, piece, piece.slice, deps);
      }
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    record_receipts(op, k);
    return deps;
  }

 private:
  // The receipt through which `d` holds `box` of the piece's task, if that is how it holds it.
  void add_holding(DeviceId d, const Piece& piece, const Box& box, std::vector<int>& deps) {
    if (!known(piece)) return;
    const auto it = received_.find({d, piece.tensor, piece.task});
    if (it == received_.end()) return;  // no receipts: it can only hold it in its source tile
    const auto holding = find_holding(
        source_tile(d, piece.tensor), it->second,
        [](const Receipt& r) -> const Box& { return r.box; }, box);
    if (holding && *holding != kHeldInSourceTile) deps.push_back(it->second[*holding].op);
  }

  // What each receiver gets of each piece, as the validator counts receipts.
  void record_receipts(const Op& op, int k) {
    const int n = static_cast<int>(op.receivers.size());
    for (const Piece& piece : op.pieces) {
      if (!known(piece)) continue;
      const auto contributors = contributors_.find(task_id(piece));
      if (contributors == contributors_.end()) continue;
      const std::vector<DeviceId>& looked_up = contributors->second;
      for (int i = 0; i < n; ++i) {
        if (!std::binary_search(looked_up.begin(), looked_up.end(), op.receivers[i])) continue;
        auto& receipts = received_[{op.receivers[i], piece.tensor, piece.task}];
        if (op.kind != OpKind::allgather) {
          receipts.push_back({piece.slice, k});
          continue;
        }
        for (int j = 0; j < n; ++j)
          if (const Box part = allgather_part(piece, n, j); j != i && !part.empty())
            receipts.push_back({part, k});
      }
    }
  }

  bool known(const Piece& piece) const {
    return piece.tensor >= 0 && piece.tensor < static_cast<int>(batch_.tensors.size());
  }

  // The source tile of `d` for tensor `tensor`, null outside the source mesh; the mesh's device
  // positions are indexed on first use, so tensors no receipt touches cost nothing.
  const Box* source_tile(DeviceId d, int tensor) {
    Source& source = sources_[tensor];
    const TensorResharding& t = batch_.tensors[tensor];
    if (!source.indexed) {
      source.indexed = true;
      for (int64_t i = 0; i < t.src.mesh.size(); ++i)
        source.position.emplace(t.src.mesh.device_at(i), i);
    }
    const auto pos = source.position.find(d);
    if (pos == source.position.end()) return nullptr;
    auto [tile, fresh] = source.tiles.try_emplace(d);
    if (fresh) tile->second = tile_at(t.tensor, t.src, pos->second);
    return &tile->second;
  }

  struct Source {
    bool indexed = false;
    std::unordered_map<DeviceId, int64_t> position;  // mesh position of each device
    std::unordered_map<DeviceId, Box> tiles;         // tiles looked up so far
  };

  const Batch& batch_;
  std::vector<Source> sources_;                  // per tensor
  std::unordered_map<DeviceId, int> last_send_;  // device -> the last op it sends in
  // (tensor, task) -> the devices contributing it to some op (sorted, distinct)
  std::unordered_map<uint64_t, std::vector<DeviceId>> contributors_;
  std::unordered_map<TaskKey, std::vector<Receipt>, TaskKeyHash> received_;
};

}  // namespace

std::vector<std::vector<int>> op_dependencies(const Batch& batch, std::span<const Op> ops) {
  Tracker tracker(batch, ops);
  std::vector<std::vector<int>> deps;
  deps.reserve(ops.size());
  for (int k = 0; k < static_cast<int>(ops.size()); ++k)
    deps.push_back(tracker.dependencies_of(ops[k], k));
  return deps;
}

}  // namespace meshcast
