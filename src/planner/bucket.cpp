#include "bucket.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
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
  const auto holds_all = [&](DeviceId sender, const Op& op) {
    return std::all_of(op.pieces.begin(), op.pieces.end(),
                       [&](const Piece& piece) { return sources.holds(sender, piece); });
  };
  // The buckets that still take pieces, per kind, sender host and set of receivers (a bucket keeps
  // the sender and chain order of its first op): any of them whose sender holds a piece may carry
  // it. Only senders on one host share buckets, so that the balance modes' spreading of a host's
  // sending over other hosts (and split parts from different hosts) stays.
  using Key = std::tuple<OpKind, int, std::vector<DeviceId>>;
  std::map<Key, std::vector<size_t>> open;
  // The stream that still takes pieces, per sender and chain: a broadcast of at least a bucket
  // joins only the open stream of its own sender and chain, so that its route stays the one the
  // balance mode chose. A chain pays a latency per device it passes, so a stream through k devices
  // grows to k buckets: its latencies stay as small a part of its time as a bucket's on one hop.
  std::map<std::pair<DeviceId, std::vector<DeviceId>>, size_t> streams;
  std::vector<Op> out;
  out.reserve(ops.size());
  for (Op& op : ops) {
    if (op.kind == OpKind::broadcast && op.bytes >= bucket_bytes && holds_all(*op.sender, op)) {
      const auto most = bucket_bytes * static_cast<int64_t>(op.receivers.size());
      const auto [it, added] = streams.try_emplace({*op.sender, op.receivers}, out.size());
      if (!added && out[it->second].bytes + op.bytes <= most) {
        Op& stream = out[it->second];
        stream.pieces.insert(stream.pieces.end(), op.pieces.begin(), op.pieces.end());
        stream.bytes += op.bytes;
        continue;
      }
      it->second = out.size();
      out.push_back(std::move(op));
      continue;
    }
    if ((op.kind != OpKind::send && op.kind != OpKind::broadcast) || op.bytes >= bucket_bytes) {
      out.push_back(std::move(op));
      continue;
    }
    Key key{op.kind, batch.cluster.host_of(*op.sender), op.receivers};
    std::sort(std::get<2>(key).begin(), std::get<2>(key).end());
    std::vector<size_t>& buckets = open[std::move(key)];
    // A bucket too full for a piece is closed, as one that is sent (so the search stays short).
    std::erase_if(buckets, [&](size_t b) { return out[b].bytes + op.bytes > bucket_bytes; });
    const auto it = std::find_if(buckets.begin(), buckets.end(),
                                 [&](size_t b) { return holds_all(*out[b].sender, op); });
    if (it != buckets.end()) {
      Op& bucket = out[*it];
      bucket.pieces.insert(bucket.pieces.end(), op.pieces.begin(), op.pieces.end());
      bucket.bytes += op.bytes;
      continue;
    }
    if (holds_all(*op.sender, op)) buckets.push_back(out.size());
    out.push_back(std::move(op));
  }
  for (Op& op : out)
    if (op.kind == OpKind::broadcast && op.pieces.size() > 1)
      op.chunk_bytes = chain_chunk_bytes(op, batch.cluster, chunk_bytes, 1);
  return out;
}

namespace {

// The receivers of `op` in chain order, cut where the host changes (a chain keeps each host's
// devices together).
std::vector<std::vector<DeviceId>> host_runs(const Op& op, const Cluster& cluster) {
  std::vector<std::vector<DeviceId>> runs;
  for (DeviceId r : op.receivers) {
    if (runs.empty() || cluster.host_of(runs.back().back()) != cluster.host_of(r))
      runs.emplace_back();
    runs.back().push_back(r);
  }
  return runs;
}

// The op moving `pieces` from `sender` along `receivers`, its chunk chosen as a bucket's.
Op chain_of(const std::vector<Piece>& pieces, DeviceId sender, std::vector<DeviceId> receivers,
            const Cluster& cluster, int64_t chunk_bytes) {
  Op op = make_op(receivers.size() == 1 ? OpKind::send : OpKind::broadcast, pieces, sender,
                  std::move(receivers));
  if (op.kind == OpKind::broadcast) op.chunk_bytes = chain_chunk_bytes(op, cluster, chunk_bytes, 1);
  return op;
}

}  // namespace

std::vector<Op> host_chains(const Batch& batch, std::vector<Op> ops, int64_t chunk_bytes) {
  const Cluster& c = batch.cluster;
  // Devices that send what they received (relays of other shapes, stages): a broadcast that
  // reaches one of them keeps its chain, so that it still has the bytes before it sends them.
  SourceTiles sources(batch);
  std::set<DeviceId> forwarders;
  for (const Op& op : ops)
    if (op.sender && std::any_of(op.pieces.begin(), op.pieces.end(), [&](const Piece& piece) {
          return !sources.holds(*op.sender, piece);
        }))
      forwarders.insert(*op.sender);
  std::map<DeviceId, double> entered;  // time each device relays host chains, about
  std::vector<Op> out;
  std::vector<Op> inside;  // the chains inside hosts, after all others
  out.reserve(ops.size());
  for (Op& op : ops) {
    const int home = op.sender ? c.host_of(*op.sender) : -1;
    std::vector<std::vector<DeviceId>> runs;
    if (op.kind == OpKind::broadcast) runs = host_runs(op, c);
    const auto others = std::count_if(runs.begin(), runs.end(),
                                      [&](const auto& run) { return c.host_of(run[0]) != home; });
    const bool shared = std::any_of(runs.begin(), runs.end(), [&](const auto& run) {
      return c.host_of(run[0]) != home && run.size() > 1;
    });
    const double on_a_nic = static_cast<double>(op.bytes) / c.single_nic_bandwidth_of(home);
    if (others < 2 || !shared || c.latency * static_cast<double>(op.receivers.size()) < on_a_nic ||
        std::any_of(op.receivers.begin(), op.receivers.end(),
                    [&](DeviceId r) { return forwarders.contains(r); })) {
      out.push_back(std::move(op));
      continue;
    }
    std::vector<DeviceId> entries;
    for (auto& run : runs) {
      if (c.host_of(run[0]) == home) continue;
      const auto entry = std::min_element(
          run.begin(), run.end(), [&](DeviceId a, DeviceId b) { return entered[a] < entered[b]; });
      std::iter_swap(run.begin(), entry);
      entered[run[0]] += c.latency * static_cast<double>(others) + on_a_nic;
      entries.push_back(run[0]);
    }
    out.push_back(chain_of(op.pieces, *op.sender, std::move(entries), c, chunk_bytes));
    for (auto& run : runs) {
      const bool at_home = c.host_of(run[0]) == home;
      const DeviceId from = at_home ? *op.sender : run[0];
      if (!at_home) run.erase(run.begin());
      if (!run.empty()) inside.push_back(chain_of(op.pieces, from, std::move(run), c, chunk_bytes));
    }
  }
  std::move(inside.begin(), inside.end(), std::back_inserter(out));
  return out;
}

}  // namespace meshcast::detail
