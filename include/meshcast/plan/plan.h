// Plan: the ordered ops of a batch of reshardings, the value that the simulator and every executor
// play.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "meshcast/layout/box.h"
#include "meshcast/tasks/batch.h"

namespace meshcast {

enum class OpKind { send, broadcast, allgather, copy };
enum class Strategy { send_recv, allgather, broadcast };
enum class Balance { none, size, order };

std::string_view to_string(OpKind kind);
std::string_view to_string(Strategy strategy);
std::string_view to_string(Balance balance);
// Each throws InvalidArgument naming the text and the accepted names.
OpKind parse_op_kind(std::string_view text);
Strategy parse_strategy(std::string_view text);
Balance parse_balance(std::string_view text);

// One box of one tensor of the batch that an op moves.
struct Piece {
  int tensor = 0;  // index into the batch's tensors
  int task = 0;    // index into that tensor's unit tasks, decompose(batch)[tensor]
  Box slice = {};
  int64_t bytes = 0;  // slice volume x the tensor's dtype size
  // Allgather ops only. -1: the piece is split, receiver i holds allgather_part(slice, n, i)
  // before the op. k >= 0: receivers[k] holds the whole piece before the op and every other
  // receiver gets it (a gather of parts that devices already hold, as in Shard -> Replicate).
  int holder = -1;

  bool operator==(const Piece&) const = default;
};

// The piece of `slice` of tensor `tensor` within its unit task `task` (bytes from the dtype).
Piece make_piece(const Batch& batch, int tensor, int task, const Box& slice);

// One op moves one message: its pieces, packed in the listed order (several pieces make a
// bucket; most ops have one). send: sender -> receivers[0]. broadcast: sender -> receivers,
// chained in this order. allgather: no sender; for each piece, each receiver i holds
// allgather_part(piece, n, i) (its part, or the whole piece if it is the piece's holder) and all
// end with the whole piece. copy: sender == receivers[0].
struct Op {
  int id = 0;
  OpKind kind = OpKind::send;
  std::vector<Piece> pieces = {};  // at least one
  int64_t bytes = 0;               // the message: the sum of the pieces' bytes
  std::optional<DeviceId> sender = {};
  std::vector<DeviceId> receivers = {};
  int64_t chunk_bytes = 0;  // pipelining chunk of a broadcast; 0 = whole message

  bool operator==(const Op&) const = default;
};

// The op moving `pieces` (bytes summed) with the given kind, sender and receivers.
Op make_op(OpKind kind, std::vector<Piece> pieces, std::optional<DeviceId> sender,
           std::vector<DeviceId> receivers);

// Devices that take part in an op: the sender (if any) first, then the receivers (a copy's
// device once).
std::vector<DeviceId> participants(const Op& op);

struct Plan {
  Batch batch;  // a single tensor is a batch of one
  Strategy strategy = Strategy::broadcast;
  Balance balance = Balance::order;
  std::vector<Op> ops;  // in execution order (docs/concepts.md)
  double lower_bound_s = 0;
  int64_t network_bytes = 0;  // bytes that cross a host NIC

  bool operator==(const Plan&) const = default;
};

// Part i of n of an allgather box: torch.chunk along its longest dimension (first on ties).
// The strategy, the validator, the simulator and the executors all use this one split.
Box allgather_part(const Box& slice, int parts, int index);
// Part i of n of one piece of an allgather op: what receiver i holds of it before the op, that is
// allgather_part(piece.slice, n, i), or with a holder the whole piece for receiver `holder` and
// an empty box for the others. Every per-piece split goes through this one function.
Box allgather_part(const Piece& piece, int parts, int index);
// Whether the piece's holder fits its op: -1, or for an allgather a receiver index. The validator,
// the simulator and the executors' placement all check it with this one rule.
bool holder_fits(const Op& op, const Piece& piece);
// Bytes of member `index`'s parts of an allgather op, over all its pieces (what that member
// contributes to the message).
int64_t allgather_part_bytes(const Op& op, const Batch& batch, int index);

}  // namespace meshcast
