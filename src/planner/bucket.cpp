#include "bucket.h"

#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "jobs.h"
#include "meshcast/layout/layout.h"

namespace meshcast::detail {
namespace {

// The source tile of each device of each tensor's source mesh, computed on first use.
class SourceTiles {
 public:
  explicit SourceTiles(const Batch& batch) : batch_(batch), tiles_(batch.tensors.size()) {}

  bool holds(DeviceId device, const Piece& piece) {
    auto& tiles = tiles_[piece.tensor];
    if (!tiles) {
      const TensorResharding& t = batch_.tensors[piece.tensor];
      tiles.emplace();
      const auto boxes = device_tiles(t.tensor, t.src);
      for (int64_t i = 0; i < t.src.mesh.size(); ++i)
        tiles->emplace(t.src.mesh.device_at(i), boxes[i]);
    }
    const auto it = tiles->find(device);
    return it != tiles->end() && it->second.contains(piece.slice);
  }

 private:
  const Batch& batch_;
  std::vector<std::optional<std::unordered_map<DeviceId, Box>>> tiles_;
};

}  // namespace

std::vector<Op> bucket_ops(const Batch& batch, std::vector<Op> ops, int64_t bucket_bytes,
                           int64_t chunk_bytes) {
  if (bucket_bytes <= 0) return ops;
  SourceTiles sources(batch);
  using Key = std::tuple<OpKind, DeviceId, std::vector<DeviceId>>;
  std::map<Key, size_t> open;  // the bucket that still takes pieces, per sender and chain
  std::vector<Op> out;
  out.reserve(ops.size());
  for (Op& op : ops) {
    bool fusable =
        (op.kind == OpKind::send || op.kind == OpKind::broadcast) && op.bytes < bucket_bytes;
    for (const Piece& piece : op.pieces) fusable = fusable && sources.holds(*op.sender, piece);
    if (!fusable) {
      out.push_back(std::move(op));
      continue;
    }
    Key key{op.kind, *op.sender, op.receivers};
    const auto it = open.find(key);
    if (it != open.end() && out[it->second].bytes + op.bytes <= bucket_bytes) {
      Op& bucket = out[it->second];
      bucket.pieces.insert(bucket.pieces.end(), op.pieces.begin(), op.pieces.end());
      bucket.bytes += op.bytes;
      continue;
    }
    open[std::move(key)] = out.size();
    out.push_back(std::move(op));
  }
  for (Op& op : out)
    if (op.kind == OpKind::broadcast && op.pieces.size() > 1)
      op.chunk_bytes = chain_chunk_bytes(op, batch.cluster, chunk_bytes, 1);
  return out;
}

}  // namespace meshcast::detail
