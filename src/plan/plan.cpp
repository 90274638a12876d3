#include "meshcast/plan/plan.h"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "meshcast/error.h"
#include "meshcast/layout/layout.h"

namespace meshcast {
namespace {

template <typename Enum, size_t N>
using Names = std::array<std::pair<Enum, std::string_view>, N>;

constexpr Names<OpKind, 4> kOpKinds{{{OpKind::send, "send"},
                                     {OpKind::broadcast, "broadcast"},
                                     {OpKind::allgather, "allgather"},
                                     {OpKind::copy, "copy"}}};
constexpr Names<Strategy, 3> kStrategies{{{Strategy::send_recv, "send_recv"},
                                          {Strategy::allgather, "allgather"},
                                          {Strategy::broadcast, "broadcast"}}};
constexpr Names<Balance, 3> kBalances{
    {{Balance::none, "none"}, {Balance::size, "size"}, {Balance::order, "order"}}};

template <typename Enum, size_t N>
std::string_view name_of(const Names<Enum, N>& names, Enum value) {
  for (const auto& [v, name] : names)
    if (v == value) return name;
  throw InvalidArgument(fmt::format("unknown enum value {}", static_cast<int>(value)));
}

template <typename Enum, size_t N>
Enum parse_name(const Names<Enum, N>& names, std::string_view text, std::string_view what) {
  std::string accepted;
  for (const auto& [v, name] : names) {
    if (name == text) return v;
    accepted += accepted.empty() ? "" : ", ";
    accepted += name;
  }
  throw InvalidArgument(fmt::format("bad {} '{}': expected one of {}", what, text, accepted));
}

}  // namespace

std::string_view to_string(OpKind kind) {
  return name_of(kOpKinds, kind);
}
std::string_view to_string(Strategy strategy) {
  return name_of(kStrategies, strategy);
}
std::string_view to_string(Balance balance) {
  return name_of(kBalances, balance);
}
OpKind parse_op_kind(std::string_view text) {
  return parse_name(kOpKinds, text, "op kind");
}
Strategy parse_strategy(std::string_view text) {
  return parse_name(kStrategies, text, "strategy");
}
Balance parse_balance(std::string_view text) {
  return parse_name(kBalances, text, "balance");
}

Piece make_piece(const Batch& batch, int tensor, int task, const Box& slice) {
  return {tensor, task, slice, slice.volume() * dtype_size(batch.tensors[tensor].tensor.dtype)};
}

Op make_op(OpKind kind, std::vector<Piece> pieces, std::optional<DeviceId> sender,
           std::vector<DeviceId> receivers) {
  int64_t bytes = 0;
  for (const Piece& p : pieces) bytes += p.bytes;
  return {.kind = kind,
          .pieces = std::move(pieces),
          .bytes = bytes,
          .sender = sender,
          .receivers = std::move(receivers)};
}

std::vector<DeviceId> participants(const Op& op) {
  std::vector<DeviceId> devices;
  devices.reserve(op.receivers.size() + 1);
  if (op.sender) devices.push_back(*op.sender);
  if (op.kind == OpKind::copy) return devices;
  devices.insert(devices.end(), op.receivers.begin(), op.receivers.end());
  return devices;
}

Box allgather_part(const Box& slice, int parts, int index) {
  const int longest = longest_dimension(slice);
  Box part = slice;
  const Interval local = chunk_part(slice.dims[longest].size(), parts, index);
  part.dims[longest] = {slice.dims[longest].lo + local.lo, slice.dims[longest].lo + local.hi};
  return part;
}

Box allgather_part(const Piece& piece, int parts, int index) {
  if (piece.holder < 0) return allgather_part(piece.slice, parts, index);
  if (index == piece.holder) return piece.slice;
  Box none = piece.slice;
  for (Interval& d : none.dims) d.hi = d.lo;
  return none;
}

bool holder_fits(const Op& op, const Piece& piece) {
  if (piece.holder == -1) return true;
  return op.kind == OpKind::allgather && piece.holder >= 0 &&
         piece.holder < static_cast<int>(op.receivers.size());
}

int64_t allgather_part_bytes(const Op& op, const Batch& batch, int index) {
  const int n = static_cast<int>(op.receivers.size());
  int64_t bytes = 0;
  for (const Piece& p : op.pieces)
    bytes +=
        allgather_part(p, n, index).volume() * dtype_size(batch.tensors[p.tensor].tensor.dtype);
  return bytes;
}

}  // namespace meshcast
