#include "meshcast/runtime/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <unordered_map>

#include "meshcast/error.h"
#include "meshcast/plan/dependencies.h"
#include "meshcast/plan/holdings.h"

namespace meshcast {
namespace {

std::vector<DeviceTiles> all_device_tiles(const TensorResharding& t, const Cluster& cluster) {
  Box empty = full_box(t.tensor.shape);
  for (auto& d : empty.dims) d = {0, 0};
  std::vector<DeviceTiles> tiles(cluster.devices(), DeviceTiles{empty, empty});
  for (int64_t i = 0; i < t.src.mesh.size(); ++i)
    tiles[t.src.mesh.device_at(i)].src = tile_at(t.tensor, t.src, i);
  for (int64_t i = 0; i < t.dst.mesh.size(); ++i)
    tiles[t.dst.mesh.device_at(i)].dst = tile_at(t.tensor, t.dst, i);
  return tiles;
}

void check_op_shape(const Op& op, const Batch& batch, int index) {
  const auto fail = [&](std::string_view what) {
    throw InvalidArgument(
        fmt::format("plan op {} (id {}, {}): {}", index, op.id, to_string(op.kind), what));
  };
  if (op.pieces.empty()) fail("has no pieces");
  for (const Piece& piece : op.pieces) {
    if (piece.tensor < 0 || piece.tensor >= static_cast<int>(batch.tensors.size()))
      fail(fmt::format("tensor {} does not exist: the batch has {} tensors", piece.tensor,
                       batch.tensors.size()));
    const TensorSpec& tensor = batch.tensors[piece.tensor].tensor;
    if (!full_box(tensor.shape).contains(piece.slice) || piece.slice.empty())
      fail(fmt::format("slice {} is empty or outside the tensor {}", to_string(piece.slice),
                       shape_to_string(tensor.shape, 'x')));
    const auto n = static_cast<int>(op.receivers.size());
    if (!holder_fits(op, piece))
      fail(fmt::format("piece holder {}: expected -1, or a receiver index 0..{} of an allgather",
                       piece.holder, n - 1));
  }
  const Cluster& cluster = batch.cluster;
  if (op.receivers.empty()) fail("has no receivers");
  if (op.kind == OpKind::allgather) {
    if (op.sender) fail(fmt::format("an allgather has no sender, but it names {}", *op.sender));
  } else if (!op.sender) {
    fail("has no sender");
  }
  if ((op.kind == OpKind::send || op.kind == OpKind::copy) && op.receivers.size() != 1)
    fail(fmt::format("expected 1 receiver, got {}", op.receivers.size()));
  if (op.kind == OpKind::copy && *op.sender != op.receivers[0])
    fail(
        fmt::format("a copy needs sender == receiver, got {} and {}", *op.sender, op.receivers[0]));
  auto devices = participants(op);
  for (DeviceId d : devices)
    if (d < 0 || d >= cluster.devices())
      fail(fmt::format("device {} is outside the cluster's {} devices", d, cluster.devices()));
  std::sort(devices.begin(), devices.end());
  if (auto dup = std::adjacent_find(devices.begin(), devices.end()); dup != devices.end())
    fail(fmt::format("device {} appears twice", *dup));
}

// What each device holds of each tensor, in the order it received it, read by find_holding (the
// rule validate_plan applies).
class Holdings {
 public:
  explicit Holdings(const std::vector<std::vector<DeviceTiles>>& tiles)
      : tiles_(tiles), held_(tiles.size()) {}

  Place find(DeviceId d, int tensor, const Box& box, const Op& op) const {
    const Box& src = tiles_[tensor][d].src;
    static const std::vector<std::pair<Box, Place>> kNothingReceived;
    const auto it = held_[tensor].find(d);
    const auto& received = it == held_[tensor].end() ? kNothingReceived : it->second;
    const auto where = find_holding(
        &src, received, [](const std::pair<Box, Place>& r) -> const Box& { return r.first; }, box);
    if (where == kHeldInSourceTile) return {d, BufferKind::src, -1, src, tensor};
    if (where) return received[*where].second;
    throw InvalidArgument(fmt::format(
        "plan op id {} ({}): device {} must send {}, but it does not hold it at this point (its "
        "source tile is {})",
        op.id, to_string(op.kind), d, to_string(box), to_string(src)));
  }
  void add(const Box& box, const Place& place) {
    held_[place.tensor][place.device].emplace_back(box, place);
  }

 private:
  const std::vector<std::vector<DeviceTiles>>& tiles_;
  // Per tensor, per device that received any of it.
  std::vector<std::unordered_map<DeviceId, std::vector<std::pair<Box, Place>>>> held_;
};

// Gives each staging buffer of one device (in the order they are filled) the lowest offset where
// it overlaps no buffer still in use when it is filled, and returns the memory they need in all.
// Offsets are multiples of 64 bytes. `users[i]`: the ops that fill or read buffer i, in plan
// order; the op that fills a buffer is made to wait (`reuse_waits`) for every user of each buffer
// that last held a byte of its memory. Waiting for the last holder suffices: that holder's fill
// waited for the one before it, and its readers wait for its fill.
int64_t assign_staging_offsets(const Batch& batch, const std::vector<std::vector<int>>& users,
                               std::vector<StagedBox>& boxes,
                               std::vector<std::vector<int>>& reuse_waits) {
  constexpr int64_t kAlign = 64;
  struct Live {
    int64_t begin, end;
    int last_use;
  };
  std::vector<Live> live;  // sorted by begin
  // Memory ever used: begin -> (end, buffer that last held it); segments do not overlap.
  std::map<int64_t, std::pair<int64_t, int>> last_holder;
  int64_t peak = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const int now = users[i].front();
    std::erase_if(live, [&](const Live& l) { return l.last_use < now; });
    const int64_t bytes =
        boxes[i].box.volume() * dtype_size(batch.tensors[boxes[i].tensor].tensor.dtype);
    int64_t offset = 0;
    auto at = live.begin();
    for (; at != live.end() && at->begin < offset + bytes; ++at)
      offset = std::max(offset, (at->end + kAlign - 1) / kAlign * kAlign);
    boxes[i].offset = offset;
    live.insert(std::upper_bound(live.begin(), live.end(), offset,
                                 [](int64_t o, const Live& l) { return o < l.begin; }),
                {offset, offset + bytes, users[i].back()});
    peak = std::max(peak, offset + bytes);
    if (bytes == 0) continue;
    // The segments [offset, offset + bytes) overlaps: their holders' users go before `now`.
    const int64_t end = offset + bytes;
    auto seg = last_holder.upper_bound(offset);
    if (seg != last_holder.begin() && std::prev(seg)->second.first > offset) --seg;
    std::vector<std::pair<int64_t, std::pair<int64_t, int>>> kept;  // pieces outside the box
    while (seg != last_holder.end() && seg->first < end) {
      const auto [begin, held] = *seg;
      const auto& waited = users[held.second];
      reuse_waits[now].insert(reuse_waits[now].end(), waited.begin(), waited.end());
      if (begin < offset) kept.push_back({begin, {offset, held.second}});
      if (held.first > end) kept.push_back({end, held});
      seg = last_holder.erase(seg);
    }
    for (const auto& piece : kept) last_holder.insert(piece);
    last_holder[offset] = {end, static_cast<int>(i)};
  }
  return peak;
}

}  // namespace

Placement place_plan(const Plan& plan) {
  const Batch& batch = plan.batch;
  const int devices = batch.cluster.devices();
  Placement out;
  for (const auto& t : batch.tensors) out.tiles.push_back(all_device_tiles(t, batch.cluster));
  out.staging.resize(devices);
  out.ops_of.resize(devices);
  out.ops.reserve(plan.ops.size());
  Holdings holdings(out.tiles);
  // Per device, per staging buffer: the ops that fill or read it, in plan order.
  std::vector<std::vector<std::vector<int>>> users(devices);
  const auto use = [&](const Place& place, int k) {
    if (place.kind != BufferKind::staging) return;
    auto& ops = users[place.device][place.staging];
    if (ops.back() != k) ops.push_back(k);
  };
  for (int k = 0; k < static_cast<int>(plan.ops.size()); ++k) {
    const Op& op = plan.ops[k];
    check_op_shape(op, batch, k);
    for (DeviceId d : participants(op))
      if (out.ops_of[d].empty() || out.ops_of[d].back() != k) out.ops_of[d].push_back(k);
    // Every piece is found where its holder has it before the op: no piece of an op is
    // delivered before the op starts.
    OpPlacement placed;
    const int n = static_cast<int>(op.receivers.size());
    for (const Piece& piece : op.pieces) {
      const int t = piece.tensor;
      const auto& tiles = out.tiles[t];
      PiecePlacement at;
      if (op.kind == OpKind::allgather) {
        for (int i = 0; i < n; ++i) {
          const Box part = allgather_part(piece, n, i);
          const DeviceId r = op.receivers[i];
          at.part_sources.push_back(part.empty() ? Place{r, BufferKind::src, -1, tiles[r].src, t}
                                                 : holdings.find(r, t, part, op));
        }
      } else {
        at.source = holdings.find(*op.sender, t, piece.slice, op);
        use(*at.source, k);
      }
      for (const Place& held : at.part_sources) use(held, k);
      placed.pieces.push_back(std::move(at));
    }
    for (size_t p = 0; p < op.pieces.size(); ++p) {
      const Piece& piece = op.pieces[p];
      const int t = piece.tensor;
      PiecePlacement& at = placed.pieces[p];
      for (DeviceId r : op.receivers) {
        const Box& tile = out.tiles[t][r].dst;
        if (tile.contains(piece.slice)) {
          at.targets.push_back({r, BufferKind::dst, -1, tile, t});
          at.spills.push_back(std::nullopt);
        } else {
          out.staging[r].push_back({t, piece.slice});
          users[r].push_back({k});
          at.targets.push_back({r, BufferKind::staging, static_cast<int>(out.staging[r].size()) - 1,
                                piece.slice, t});
          const Box spill = intersect(piece.slice, tile);
          at.spills.push_back(spill.empty() ? std::nullopt : std::optional(spill));
        }
        holdings.add(piece.slice, at.targets.back());
      }
    }
    out.ops.push_back(std::move(placed));
  }
  out.staging_bytes.resize(devices);
  out.reuse_waits.resize(plan.ops.size());
  for (int d = 0; d < devices; ++d)
    out.staging_bytes[d] = assign_staging_offsets(batch, users[d], out.staging[d], out.reuse_waits);
  for (auto& waits : out.reuse_waits) {
    std::sort(waits.begin(), waits.end());
    waits.erase(std::unique(waits.begin(), waits.end()), waits.end());
  }
  return out;
}

std::vector<std::vector<int>> execution_dependencies(const Plan& plan, const Placement& placement) {
  auto deps = op_dependencies(plan.batch, plan.ops);
  for (size_t k = 0; k < deps.size(); ++k) {
    const auto& extra = placement.reuse_waits[k];
    if (extra.empty()) continue;
    std::vector<int> merged;
    std::set_union(deps[k].begin(), deps[k].end(), extra.begin(), extra.end(),
                   std::back_inserter(merged));
    deps[k] = std::move(merged);
  }
  return deps;
}

void check_staging_limit(int64_t needed, int64_t limit, std::string_view where) {
  if (limit > 0 && needed > limit)
    throw InvalidArgument(fmt::format(
        "the plan needs {} bytes of staging memory {}, more than the limit of {} bytes "
        "(--max-staging-bytes): raise the limit, or plan with smaller buckets or fewer relays",
        needed, where, limit));
}

}  // namespace meshcast
