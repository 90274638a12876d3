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

// One op moves one box of one tensor of the batch. send: sender -> receivers[0]. broadcast: sender
// -> receivers, chained in this order. allgather: no sender; each receiver holds
// allgather_part(slice, n, i) and all end with the whole slice. copy: sender == receivers[0].
struct Op {
  int id = 0;
  OpKind kind = OpKind::send;
  int tensor = 0;  // index into the batch's tensors
  int task = 0;    // index into that tensor's unit tasks, decompose(batch)[tensor]
  Box slice = {};
  int64_t bytes = 0;
  std::optional<DeviceId> sender = {};
  std::vector<DeviceId> receivers = {};
  int64_t chunk_bytes = 0;  // pipelining chunk of a broadcast; 0 = whole message

  bool operator==(const Op&) const = default;
};

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

}  // namespace meshcast
