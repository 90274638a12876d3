#include "bucket.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "jobs.h"
#include "source_tiles.h"

namespace meshcast::detail {
namespace {

// Hashes of the keys buckets and streams are found by: the receivers of a chain, and what else
// tells such chains apart.
uint64_t hash_chain(uint64_t seed, const std::vector<DeviceId>& receivers) {
  uint64_t h = seed * 0x9E3779B97F4A7C15ULL;
  for (DeviceId r : receivers) h = (h ^ static_cast<uint64_t>(r)) * 0x100000001B3ULL;
  return h;
}

// Pieces of a kind whose senders are on `host`, bound for `receivers` (sorted).
struct BucketKey {
  OpKind kind;
  int host;
  std::vector<DeviceId> receivers;
  bool operator==(const BucketKey&) const = default;
};
struct BucketKeyHash {
  size_t operator()(const BucketKey& k) const {
    return hash_chain(static_cast<uint64_t>(k.kind) << 32 | static_cast<uint32_t>(k.host),
                      k.receivers);
  }
};

// Broadcasts from `sender` along `receivers` (in chain order).
struct StreamKey {
  DeviceId sender;
  std::vector<DeviceId> receivers;
  bool operator==(const StreamKey&) const = default;
};
struct StreamKeyHash {
  size_t operator()(const StreamKey& k) const {
    return hash_chain(static_cast<uint64_t>(k.sender), k.receivers);
  }
};

}  // namespace

std::vector<Op> bucket_ops(const Batch& batch, std::vector<Op> ops, int64_t bucket_bytes,
                           int64_t chunk_bytes) {
  if (bucket_bytes <= 0) return ops;
  SourceTiles sources(batch);
  const auto holds_all = [&](DeviceId sender, const Op& op) {
    return std::all_of(op.pieces.begin(), op.pieces.end(), [&](const Piece& piece) {
      return sources.holds(sender, piece.tensor, piece.slice);
    });
  };
  // The buckets that still take pieces, per kind, sender host and set of receivers (a bucket keeps
  // the sender and chain order of its first op): any of them whose sender holds a piece may carry
  // it. Only senders on one host share buckets, so that the balance modes' spreading of a host's
  // sending over other hosts (and split parts from different hosts) stays.
  std::unordered_map<BucketKey, std::vector<size_t>, BucketKeyHash> open;
  // The stream that still takes pieces, per sender and chain: a broadcast of at least a bucket
  // joins only the open stream of its own sender and chain, so that its route stays the one the
  // balance mode chose. A chain pays a latency per device it passes, so a stream through k devices
  // grows to k buckets: its latencies stay as small a part of its time as a bucket's on one hop.
  std::unordered_map<StreamKey, size_t, StreamKeyHash> streams;
  // The ops kept are written over `ops` in place (each op read gives at most one), so that a plan
  // of a quarter of a million ops is not copied into memory touched for the first time.
  size_t kept = 0;
  const auto keep = [&](Op& op) {
    if (&ops[kept] != &op) ops[kept] = std::move(op);
    ++kept;
  };
  for (Op& op : ops) {
    if (op.kind == OpKind::broadcast && op.bytes >= bucket_bytes && holds_all(*op.sender, op)) {
      const auto most = bucket_bytes * static_cast<int64_t>(op.receivers.size());
      const auto [it, added] = streams.try_emplace({*op.sender, op.receivers}, kept);
      if (!added && ops[it->second].bytes + op.bytes <= most) {
        Op& stream = ops[it->second];
        stream.pieces.insert(stream.pieces.end(), op.pieces.begin(), op.pieces.end());
        stream.bytes += op.bytes;
        continue;
      }
      it->second = kept;
      keep(op);
      continue;
    }
    if ((op.kind != OpKind::send && op.kind != OpKind::broadcast) || op.bytes >= bucket_bytes) {
      keep(op);
      continue;
    }
    BucketKey key{op.kind, batch.cluster.host_of(*op.sender), op.receivers};
    std::sort(key.receivers.begin(), key.receivers.end());
    std::vector<size_t>& buckets = open[std::move(key)];
    // A bucket too full for a piece is closed, as one that is sent (so the search stays short).
    std::erase_if(buckets, [&](size_t b) { return ops[b].bytes + op.bytes > bucket_bytes; });
    // A piece its sender was handed (a stage or relay sends it on) keeps its sender: in another
    // holder's bucket the hand-over would be for nothing and that holder's NIC would carry it.
    const bool handed = !holds_all(*op.sender, op);
    const auto it = handed ? buckets.end()
                           : std::find_if(buckets.begin(), buckets.end(),
                                          [&](size_t b) { return holds_all(*ops[b].sender, op); });
    if (it != buckets.end()) {
      Op& bucket = ops[*it];
      bucket.pieces.insert(bucket.pieces.end(), op.pieces.begin(), op.pieces.end());
      bucket.bytes += op.bytes;
      continue;
    }
    if (!handed) buckets.push_back(kept);
    keep(op);
  }
  ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(kept), ops.end());
  for (Op& op : ops)
    if (op.kind == OpKind::broadcast && op.pieces.size() > 1)
      op.chunk_bytes = chain_chunk_bytes(op, batch.cluster, chunk_bytes, 1);
  return ops;
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

// How a broadcast that host_chains cuts crosses hosts: the other hosts it enters, and its bytes'
// time on one NIC of its sender's host.
struct Crossing {
  std::ptrdiff_t others = 0;
  double on_a_nic = 0;
};

// Its crossing, where `op` is a broadcast that host_chains cuts (its forwarders aside): its chain
// passes several devices of some other host, at least two other hosts, and its latencies outweigh
// its bytes on one NIC. `runs` are host_runs(op).
std::optional<Crossing> cut_crossing(const Op& op, const std::vector<std::vector<DeviceId>>& runs,
                                     const Cluster& c) {
  if (op.kind != OpKind::broadcast) return std::nullopt;
  const int home = c.host_of(*op.sender);
  const Crossing x{std::count_if(runs.begin(), runs.end(),
                                 [&](const auto& run) { return c.host_of(run[0]) != home; }),
                   static_cast<double>(op.bytes) / c.single_nic_bandwidth_of(home)};
  const bool shared = std::any_of(runs.begin(), runs.end(), [&](const auto& run) {
    return c.host_of(run[0]) != home && run.size() > 1;
  });
  if (x.others < 2 || !shared || c.latency * static_cast<double>(op.receivers.size()) < x.on_a_nic)
    return std::nullopt;
  return x;
}

}  // namespace

std::optional<std::vector<Op>> host_chains(const Batch& batch, const std::vector<Op>& ops,
                                           int64_t chunk_bytes) {
  const Cluster& c = batch.cluster;
  // Most plans cut nothing (sends, chains of one device per host, large slices): they are not
  // copied.
  if (std::none_of(ops.begin(), ops.end(), [&](const Op& op) {
        return op.kind == OpKind::broadcast && cut_crossing(op, host_runs(op, c), c);
      }))
    return std::nullopt;
  // Devices that send what they received (relays of other shapes, stages): a broadcast that
  // reaches one of them keeps its chain, so that it still has the bytes before it sends them.
  SourceTiles sources(batch);
  std::set<DeviceId> forwarders;
  for (const Op& op : ops)
    if (op.sender && std::any_of(op.pieces.begin(), op.pieces.end(), [&](const Piece& piece) {
          return !sources.holds(*op.sender, piece.tensor, piece.slice);
        }))
      forwarders.insert(*op.sender);
  std::map<DeviceId, double> entered;  // time each device relays host chains, about
  std::vector<Op> out;
  std::vector<Op> inside;  // the chains inside hosts, after all others
  out.reserve(ops.size());
  bool cut = false;
  for (const Op& op : ops) {
    std::vector<std::vector<DeviceId>> runs;
    if (op.kind == OpKind::broadcast) runs = host_runs(op, c);
    const std::optional<Crossing> crossing = cut_crossing(op, runs, c);
    if (!crossing || std::any_of(op.receivers.begin(), op.receivers.end(),
                                 [&](DeviceId r) { return forwarders.contains(r); })) {
      out.push_back(op);
      continue;
    }
    cut = true;
    const int home = c.host_of(*op.sender);
    std::vector<DeviceId> entries;
    for (auto& run : runs) {
      if (c.host_of(run[0]) == home) continue;
      const auto entry = std::min_element(
          run.begin(), run.end(), [&](DeviceId a, DeviceId b) { return entered[a] < entered[b]; });
      std::iter_swap(run.begin(), entry);
      entered[run[0]] += c.latency * static_cast<double>(crossing->others) + crossing->on_a_nic;
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
  if (!cut) return std::nullopt;
  std::move(inside.begin(), inside.end(), std::back_inserter(out));
  return out;
}

}  // namespace meshcast::detail
