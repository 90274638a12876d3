// Internal to the plan layer: the strategies turn unit tasks into jobs whose senders the balance
// modes then choose.
#pragma once

#include <cstdint>
#include <functional>
#include <tuple>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast::detail {

// One slice that one sender (chosen among `candidates`) delivers to `receivers` by a send (one
// receiver) or a chained broadcast.
struct Transfer {
  Box slice;
  int64_t bytes = 0;
  std::vector<DeviceId> receivers;   // ascending device ids
  std::vector<DeviceId> candidates;  // devices holding the slice, in mesh order
  bool splittable = false;           // may be cut into parts sent by different hosts
};

// The work of one unit task that is scheduled as a whole: transfers whose senders are chosen,
// then fixed ops (copies, an allgather) that follow them.
struct Job {
  int tensor = 0;
  int task = 0;  // within the tensor
  std::vector<Transfer> transfers = {};
  std::vector<Op> then = {};
  int64_t bytes() const;
};

// The jobs of `strategy` for each task of each tensor, in tensor order, then task order. `tasks`
// are decompose(batch).
std::vector<Job> make_jobs(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks,
                           Strategy strategy);

// The op that moves `slice` (the whole transfer or one part of it) from `sender`: a send for one
// receiver, else a broadcast chained host by host (the sender's host first, each host's devices
// consecutive) with `chunk_bytes` (0 = chosen from the cost model). Another host's devices start
// at the one with the smallest `entry_key` (first on ties), else at the lowest id. The other host
// with the largest `last_key` (the highest id on ties) comes last, else the one of highest id.
Op transfer_op(const Transfer& transfer, const Box& slice, const Job& job, DeviceId sender,
               const Batch& batch, int64_t chunk_bytes,
               const std::function<std::tuple<double, int, double>(DeviceId)>& entry_key = {},
               const std::function<double(int)>& last_key = {});

// The pipelining chunk of broadcast `op`: `chunk_bytes` when > 0 (at most the message), else the
// cost model's best for its chain, in whole elements of `element_size` bytes.
int64_t chain_chunk_bytes(const Op& op, const Cluster& cluster, int64_t chunk_bytes,
                          int element_size);

// Parts a split of `transfer` is cut into: one per host holding it, fewer when its longest
// dimension is too short to give every part an element. 1 means it cannot be split.
int split_parts(const Transfer& transfer, int holder_hosts);

// Distinct hosts of `devices`, in first-seen order.
std::vector<int> hosts_of(const std::vector<DeviceId>& devices, const Cluster& cluster);

}  // namespace meshcast::detail
