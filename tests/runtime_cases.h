// Plans that the runtime tests play on every backend: the property corpus under every strategy,
// and hand-written plans for relays, staging buffers, chunked chains and allgathers.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "corpus.h"
#include "meshcast/planner/planner.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/tasks/batch.h"

namespace meshcast::testing {

struct NamedPlan {
  std::string name;
  Plan plan;
};

// Every strategy x balance, and split for broadcast + order. search_effort = 0: the greedy plan,
// quick to make for every case on every MPI rank.
inline std::vector<PlanOptions> every_strategy() {
  std::vector<PlanOptions> all;
  for (Strategy s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast})
    for (Balance b : {Balance::none, Balance::size, Balance::order})
      all.push_back(
          {.strategy = s, .balance = b, .split = false, .chunk_bytes = 0, .search_effort = 0});
  all.push_back({.strategy = Strategy::broadcast,
                 .balance = Balance::order,
                 .split = true,
                 .chunk_bytes = 64,  // many chunks even on small tensors
                 .search_effort = 0});
  return all;
}

inline std::string describe(const PlanOptions& o) {
  return fmt::format("{}/{}{}{}", to_string(o.strategy), to_string(*o.balance),
                     o.split ? "/split" : "",
                     o.chunk_bytes ? fmt::format("/chunk {}", o.chunk_bytes) : "");
}

// Corpus cases whose devices per host divide `devices` and that need no more than `devices`,
// grown to exactly `devices` with idle hosts (so that `devices` MPI ranks can play them).
inline std::vector<Resharding> corpus_on(int devices, unsigned seed, int count, int max_cases) {
  std::vector<Resharding> out;
  for (Resharding& p : property_corpus(seed, count)) {
    const int g = p.cluster.devices_per_host;
    if (p.cluster.devices() > devices || devices % g != 0) continue;
    p.cluster.hosts = devices / g;
    out.push_back(std::move(p));
    if (static_cast<int>(out.size()) == max_cases) break;
  }
  return out;
}

// Random batches (tests/corpus.h) whose devices per host divide `devices` and that need no more
// than `devices`, grown to exactly `devices` with idle hosts.
inline std::vector<Batch> batches_on(int devices, unsigned seed, int count, int max_batches) {
  std::mt19937 rng(seed);
  std::vector<Batch> out;
  for (int i = 0; i < count && static_cast<int>(out.size()) < max_batches; ++i) {
    Batch batch = random_batch(rng, 1 + static_cast<int>(rng() % 6));
    const int g = batch.cluster.devices_per_host;
    if (batch.cluster.devices() > devices || devices % g != 0) continue;
    batch.cluster.hosts = devices / g;
    out.push_back(std::move(batch));
  }
  return out;
}

// Weight-sync-like batches of many tiny tensors (tests/corpus.h) on exactly `devices` devices
// (2 per host when that divides them), each planned with buckets of `bucket_bytes` with each of
// `options`.
inline std::vector<Plan> bucket_plans_on(
    int devices, unsigned seed, int batches, int64_t bucket_bytes,
    const std::vector<PlanOptions>& options = every_strategy()) {
  std::mt19937 rng(seed);
  const int per_host = devices % 2 == 0 ? 2 : 1;
  std::vector<Plan> plans;
  for (int i = 0; i < batches; ++i) {
    const Batch batch =
        tiny_tensor_batch(rng, 30 + static_cast<int>(rng() % 50), devices / per_host, per_host);
    for (PlanOptions o : options) {
      o.bucket_bytes = bucket_bytes;
      plans.push_back(make_plan(batch, o));
    }
  }
  return plans;
}

// Random same-mesh batches (tests/corpus.h) on exactly `devices` devices (2 or 4 per host when
// that divides them), each planned with every strategy.
inline std::vector<Plan> same_mesh_plans_on(int devices, unsigned seed, int batches) {
  std::mt19937 rng(seed);
  const int per_host = devices % 4 == 0 ? 4 : devices % 2 == 0 ? 2 : 1;
  std::vector<Plan> plans;
  for (int i = 0; i < batches; ++i) {
    const Batch batch =
        same_mesh_batch(rng, 1 + static_cast<int>(rng() % 4), devices / per_host, per_host);
    for (const PlanOptions& o : every_strategy()) plans.push_back(make_plan(batch, o));
  }
  return plans;
}

// Allgather pieces that a device already held whole (gathers of same-mesh redistributions).
inline int held_pieces_in(const std::vector<Plan>& plans) {
  int held = 0;
  for (const Plan& plan : plans)
    for (const Op& op : plan.ops)
      for (const Piece& p : op.pieces) held += p.holder >= 0;
  return held;
}

// Sends and broadcasts of several pieces (allgathers of several pieces are gathers).
inline int buckets_in(const std::vector<Plan>& plans) {
  int buckets = 0;
  for (const Plan& plan : plans)
    for (const Op& op : plan.ops) buckets += op.pieces.size() > 1 && op.kind != OpKind::allgather;
  return buckets;
}

// Runs `plan` twice with fresh poison in the destination tiles and returns the elements that
// are wrong, summed over every process of the executor.
inline int64_t play_and_count_errors(Executor& executor, const Plan& plan) {
  const auto compiled = executor.compile(plan);
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  const auto views = buffer_views(buffers);
  int64_t errors = 0;
  for (int run = 0; run < 2; ++run) {
    prepare_tiles(plan.batch, buffers);
    compiled->run(views);
    errors += count_destination_errors(plan.batch, buffers);
  }
  return executor.sum_over_processes(errors);
}

// A `shape` float64 tensor moved from `src` to `dst` on `hosts` hosts of `per_host` devices.
inline Resharding float64_problem(std::vector<int64_t> shape, int hosts, int per_host, Layout src,
                                  Layout dst) {
  Resharding p;
  p.tensor = {std::move(shape), DType::float64};
  p.cluster.hosts = hosts;
  p.cluster.devices_per_host = per_host;
  p.src = std::move(src);
  p.dst = std::move(dst);
  p.validate();
  return p;
}

// 4 devices (2 hosts x 2): device 0 holds the whole `rows`x9 float64 tensor, the destination
// mesh is devices [2, 3] with `dst_spec`.
inline Resharding small_problem(const std::string& dst_spec, std::vector<DeviceId> dst = {2, 3},
                                int64_t rows = 4) {
  return float64_problem({rows, 9}, 2, 2, Layout{Mesh({1}, {0}), ShardingSpec::parse("RR")},
                         Layout{Mesh({2}, std::move(dst)), ShardingSpec::parse(dst_spec)});
}

inline Op hand_op(int id, OpKind kind, Box slice, std::optional<DeviceId> sender,
                  std::vector<DeviceId> receivers, int64_t chunk_bytes = 0) {
  const int64_t bytes = slice.volume() * 8;
  return Op{.id = id,
            .kind = kind,
            .pieces = {{0, 0, slice, bytes}},
            .bytes = bytes,
            .sender = sender,
            .receivers = std::move(receivers),
            .chunk_bytes = chunk_bytes};
}

inline Plan plan_of(Resharding problem, std::vector<Op> ops) {
  Plan plan;
  plan.batch = Batch::of_one(problem);
  plan.ops = std::move(ops);
  return plan;
}

// Device 1, outside both meshes, relays the `rows`x9 float64 tensor of small_problem("RR") row by
// row from device 0 to devices 2 and 3: each row's staging buffer is free once forwarded, so the
// relay needs one row's bytes (72) of staging memory, not the tensor's (288 for 4 rows).
inline Plan row_by_row_relay_plan(int rows = 4) {
  std::vector<Op> ops;
  for (int row = 0; row < rows; ++row) {
    const Box box{{{row, row + 1}, {0, 9}}};
    ops.push_back(hand_op(2 * row, OpKind::send, box, 0, {1}));
    ops.push_back(hand_op(2 * row + 1, OpKind::broadcast, box, 1, {2, 3}));
  }
  return plan_of(small_problem("RR", {2, 3}, rows), std::move(ops));
}
inline constexpr int64_t kRowBytes = 9 * 8;

// Two devices swap halves of a 4x9 float64 tensor: device 0 holds rows [0, 2) and device 1 rows
// [2, 4), the destination has them the other way round, on a cluster of `devices` devices,
// `per_host` to a host (1: the two are on different hosts; 2: on one host). Its only two ops are
// one send each way: they use different ports of each device, so both start at once
// (docs/concepts.md, execution).
inline Plan exchange_plan(int devices, int per_host) {
  const Resharding p = float64_problem({4, 9}, devices / per_host, per_host,
                                       Layout{Mesh({2}, {0, 1}), ShardingSpec::parse("S0R")},
                                       Layout{Mesh({2}, {1, 0}), ShardingSpec::parse("S0R")});
  return plan_of(p, {hand_op(0, OpKind::send, Box{{{0, 2}, {0, 9}}}, 0, {1}),
                     hand_op(1, OpKind::send, Box{{{2, 4}, {0, 9}}}, 1, {0})});
}

// A relay busy sending: devices 1 and 2 hold rows [0, 2) and [2, 4) of a 4x9 float64 tensor that
// devices 0 and 2 need whole, one device per host and `devices` hosts (the others idle). Device 2
// sends its rows to device 0 (op 0), then relays device 1's rows to device 0 (op 1, a broadcast
// 1 -> 2 -> 0) and copies its own (op 2). Device 2 sends in all three, so op 1 starts on it only
// once op 0 has released it (docs/concepts.md, execution).
inline Plan relay_busy_sending_plan(int devices) {
  const Resharding p =
      float64_problem({4, 9}, devices, 1, Layout{Mesh({2}, {1, 2}), ShardingSpec::parse("S0R")},
                      Layout{Mesh({2}, {0, 2}), ShardingSpec::parse("RR")});
  const Box first{{{0, 2}, {0, 9}}}, second{{{2, 4}, {0, 9}}};
  return plan_of(
      p, {hand_op(0, OpKind::send, second, 2, {0}), hand_op(1, OpKind::broadcast, first, 1, {2, 0}),
          hand_op(2, OpKind::copy, second, 2, {2})});
}

// Two senders into one device's packing memory: devices 0 and 1 hold columns [0, 4) and [4, 8)
// of a 4x8 float64 tensor that device 2 needs whole, one device per host and `devices` hosts (the
// others idle). Each column block is contiguous where it is sent from but not where device 2
// keeps it, so device 2 receives both into scratch memory and unpacks them; it receives
// passively, from both at once (docs/concepts.md, execution).
inline Plan two_senders_into_scratch_plan(int devices) {
  const Resharding p =
      float64_problem({4, 8}, devices, 1, Layout{Mesh({2}, {0, 1}), ShardingSpec::parse("RS0")},
                      Layout{Mesh({1}, {2}), ShardingSpec::parse("RR")});
  return plan_of(p, {hand_op(0, OpKind::send, Box{{{0, 4}, {0, 4}}}, 0, {2}),
                     hand_op(1, OpKind::send, Box{{{0, 4}, {4, 8}}}, 1, {2})});
}

// All-to-all layouts: Shard(0) -> Shard(1) on the same mesh of all `devices` devices, every
// device sending to and receiving from every other, on one host, on hosts of 2 and on hosts of
// 1 device, each planned with every strategy.
inline std::vector<Plan> all_to_all_plans_on(int devices) {
  std::vector<DeviceId> all(devices);
  for (int d = 0; d < devices; ++d) all[d] = d;
  std::vector<Plan> plans;
  for (int per_host : {devices, 2, 1}) {
    if (devices % per_host != 0 || (per_host == 2 && devices == 2)) continue;
    Resharding p;
    p.tensor = {{3 * devices + 1, 5 * devices}, DType::float32};  // uneven rows
    p.cluster.hosts = devices / per_host;
    p.cluster.devices_per_host = per_host;
    p.src = Layout{Mesh({devices}, all), ShardingSpec::parse("S0R")};
    p.dst = Layout{Mesh({devices}, all), ShardingSpec::parse("RS0")};
    p.validate();
    for (const PlanOptions& o : every_strategy()) plans.push_back(make_plan(p, o));
  }
  return plans;
}

// Plans in which the planner forwards a slice host by host: on `devices` devices, 1 and 2 to a
// host (3 hosts at least), `(n,g) S1S0R -> (n,1) RRS1` of a 1000x7x12 float32 tensor: every host
// of the destination needs what the others hold, and chains through all of them would share
// relays, so the slices go round the hosts as sends, each from the device that received it last
// (docs/concepts.md#plan; random suite seed 7 r20, shrunk).
inline std::vector<Plan> forwarding_plans_on(int devices) {
  std::vector<Plan> plans;
  for (int per_host : {1, 2}) {
    const int hosts = devices / per_host;
    if (devices % per_host != 0 || hosts < 3) continue;
    Resharding p;
    p.tensor = {{1000, 7, 12}, DType::float32};
    p.cluster.hosts = hosts;
    p.cluster.devices_per_host = per_host;
    p.src = Layout{Mesh::placed({hosts, per_host}, 0, per_host), ShardingSpec::parse("S1S0R")};
    p.dst = Layout{Mesh::placed({hosts, 1}, 0, per_host), ShardingSpec::parse("RRS1")};
    p.validate();
    plans.push_back(make_plan(p));
  }
  return plans;
}

// Sends and broadcasts whose sender holds the piece through an earlier receipt (it is not one of
// its unit task's senders).
inline int forwarded_ops_in(const std::vector<Plan>& plans) {
  int forwarded = 0;
  for (const Plan& plan : plans) {
    const auto tasks = decompose(plan.batch);
    for (const Op& op : plan.ops) {
      if (op.kind != OpKind::send && op.kind != OpKind::broadcast) continue;
      const auto& senders = tasks[op.pieces[0].tensor][op.pieces[0].task].senders;
      forwarded += std::find(senders.begin(), senders.end(), *op.sender) == senders.end();
    }
  }
  return forwarded;
}

// Plans no strategy makes but a valid plan may: relays outside the destination mesh that keep
// what they forward in staging buffers, receivers whose tile holds only part of a box, strided
// allgather parts and tiny chunks.
inline std::vector<NamedPlan> hand_written_plans() {
  const Box all{{{0, 4}, {0, 9}}};
  const Box cols_left{{{0, 4}, {0, 5}}};  // RS0 tile of the first destination device
  const Box cols_right{{{0, 4}, {5, 9}}};
  std::vector<NamedPlan> plans;
  plans.push_back(
      {"chain through a relay outside the mesh, 8-byte chunks",
       plan_of(small_problem("RS0"), {hand_op(0, OpKind::broadcast, all, 0, {1, 2, 3}, 8)})});
  plans.push_back({"relay forwards what it staged",
                   plan_of(small_problem("RS0"), {hand_op(0, OpKind::send, cols_right, 0, {1}),
                                                  hand_op(1, OpKind::send, cols_left, 0, {2}),
                                                  hand_op(2, OpKind::send, cols_right, 1, {3})})});
  plans.push_back(
      {"allgather of strided parts into replicated tiles",
       plan_of(small_problem("RR"), {hand_op(0, OpKind::send, allgather_part(all, 2, 0), 0, {2}),
                                     hand_op(1, OpKind::send, allgather_part(all, 2, 1), 0, {3}),
                                     hand_op(2, OpKind::allgather, all, std::nullopt, {2, 3})})});
  // Device 3 is outside the destination mesh [2, 1]; 2 forwards what the allgather staged.
  plans.push_back({"allgather into staging, then forwarded",
                   plan_of(small_problem("RS0", {2, 1}),
                           {hand_op(0, OpKind::send, cols_left, 0, {2}),
                            hand_op(1, OpKind::send, cols_right, 0, {3}),
                            hand_op(2, OpKind::allgather, all, std::nullopt, {2, 3}),
                            hand_op(3, OpKind::send, cols_right, 2, {1})})});
  plans.push_back(
      {"copy on a device in both meshes",
       plan_of(small_problem("RS0", {0, 3}), {hand_op(0, OpKind::copy, cols_left, 0, {0}),
                                              hand_op(1, OpKind::send, cols_right, 0, {3})})});
  // 288 chunks: more than a hop keeps posted at once in the MPI backend.
  plans.push_back(
      {"chain of 1-byte chunks",
       plan_of(small_problem("RR"), {hand_op(0, OpKind::broadcast, all, 0, {2, 1, 3}, 1)})});
  return plans;
}

}  // namespace meshcast::testing
