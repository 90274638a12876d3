// Plans that the runtime tests play on every backend: the property corpus under every strategy,
// and hand-written plans for relays, staging buffers, chunked chains and allgathers.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "corpus.h"
#include "meshcast/planner/planner.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/strided_copy.h"
#include "meshcast/suites/model.h"
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

// Runs `plan` twice in the memory its batch's bindings describe (allocate_device_memory: tiles
// bound into shared per-device buffers), each time checking every destination element and every
// byte of every buffer outside the tiles' regions (check_memory). Returns the wrong elements plus
// the changed bytes, summed over every process; `outside_bytes` (if given) gets the bytes outside
// the regions that were checked, so that a test can tell there were some.
inline int64_t play_bound_and_count_errors(Executor& executor, const Plan& plan,
                                           int64_t* outside_bytes = nullptr) {
  const auto compiled = executor.compile(plan);
  DeviceMemory memory = allocate_device_memory(plan.batch, compiled->devices_here());
  int64_t errors = 0, outside = 0;
  for (int run = 0; run < 2; ++run) {
    prepare_memory(plan.batch, memory);
    compiled->run(memory.views);
    const MemoryCheck c = check_memory(plan.batch, memory);
    errors += c.errors + c.outside_errors;
    outside = c.outside_bytes;
  }
  if (outside_bytes) *outside_bytes = executor.sum_over_processes(outside);
  return executor.sum_over_processes(errors);
}

// `batch` (model_batch of `config`) with every fused part moved to slot 1 of a 2-slot buffer
// and one element apart from the part before it along the dim the parts stack on, so that slot 0
// and the elements between parts must stay untouched.
inline Batch slotted(Batch batch, const ModelConfig& config) {
  std::map<std::string, int> fused_dim;  // per parameter name
  for (const ModelParameter& p : model_parameters(config))
    if (!p.fused.empty()) fused_dim[p.name] = p.fused_dim;
  std::map<std::string, int64_t> parts;  // per buffer: parts bound so far
  for (auto& t : batch.tensors)
    if (t.dst_buffer) {
      auto& offset = t.dst_buffer->offset;
      offset[fused_dim.at(t.name)] += parts[t.dst_buffer->name]++;
      offset.insert(offset.begin(), 1);
    }
  batch.validate();
  return batch;
}

// Small llama, moe and gpt weight syncs on exactly `devices` devices (one per host; at least 2):
//  - llama as model_batch fuses it for serving (q, k, v in attn.qkv_proj, gate and up in
//    mlp.gate_up_proj), tp = devices/2 -> tp = the rest (uneven head splits leave gaps);
//  - the same slotted (slotted above);
//  - llama from a pp=2 trainer (3 devices and more);
//  - a DeepSeek-V3-like moe (MLA, a dense layer, an MoE layer with routed and shared experts and
//    a router bias) slotted, its serving buffers those of vLLM (fused_qkv_a_proj, gate_up_proj,
//    w13, w2, docs/models.md), expert parallelism on both sides with different degrees where
//    the ranks allow (8 devices: ep 4 -> ep 2 with etp 2);
//  - gpt with its column-parallel weights of each layer (qkv, up) bound on the trainer's side
//    into one buffer, slot 0 and slot 1 (a source read through a binding).
inline std::vector<Batch> fused_model_batches_on(int devices) {
  std::vector<Batch> out;
  if (devices < 2) return out;
  const ModelConfig llama{.arch = ModelArch::llama,
                          .hidden = 16,
                          .layers = 2,
                          .heads = 4,
                          .kv_heads = 2,
                          .ffn = 24,
                          .vocab = 40,
                          .dtype = DType::float32};
  const Cluster cluster{.devices_per_host = 1};
  const int64_t train = devices / 2;
  out.push_back(model_batch(llama, {.tp = train}, {.tp = devices - train}, cluster));
  out.push_back(slotted(out.back(), llama));
  if (devices >= 3)
    out.push_back(model_batch(llama, {.tp = 1, .pp = 2}, {.tp = devices - 2}, cluster));
  const ModelConfig moe{.arch = ModelArch::moe,
                        .hidden = 16,
                        .layers = 2,
                        .heads = 4,
                        .ffn = 24,
                        .vocab = 40,
                        .dtype = DType::bfloat16,
                        .q_lora_rank = 8,
                        .kv_lora_rank = 6,
                        .qk_nope_dim = 4,
                        .qk_rope_dim = 2,
                        .v_head_dim = 4,
                        .dense_layers = 1,
                        .experts = 12,
                        .shared_experts = 1,
                        .moe_ffn = 6,
                        .router_bias = true};
  // Each side's largest expert parallelism; the server's halved where it equals the trainer's.
  const int64_t train_ep = std::gcd(train, moe.experts);
  int64_t serve_ep = std::gcd(devices - train, moe.experts);
  if (serve_ep == train_ep && serve_ep % 2 == 0) serve_ep /= 2;
  out.push_back(slotted(
      model_batch(moe, {.tp = train, .ep = train_ep},
                  {.tp = devices - train, .ep = serve_ep, .etp = (devices - train) / serve_ep},
                  cluster),
      moe));
  ModelConfig gpt{.arch = ModelArch::gpt,
                  .hidden = 16,
                  .layers = 2,
                  .heads = 4,
                  .ffn = 24,
                  .vocab = 40,
                  .positions = 8,
                  .dtype = DType::float16};
  Batch g = model_batch(gpt, {.tp = train}, {.tp = devices - train}, cluster);
  for (auto& t : g.tensors)
    for (const auto& [suffix, slot] : {std::pair{".attn.qkv.weight", 0}, {".mlp.up.weight", 1}})
      if (t.name.ends_with(suffix))
        t.src_buffer =
            BufferBinding{t.name.substr(0, t.name.find('.', 7)) + ".column", {slot, 0, 0}};
  g.validate();
  out.push_back(std::move(g));
  return out;
}

// A tile as a strided view into a larger buffer: the tile's dimensions laid out in a random
// order (a transposed view), each padded by 0..2 elements, the tile at a random place inside;
// the rest of the buffer holds a sentinel that no run may change.
struct StridedTile {
  Box tile;
  int elem = 1;
  std::vector<std::byte> memory;
  int64_t first = 0;             // elements from the buffer's start to the tile's first element
  std::vector<int64_t> strides;  // elements; empty for an empty tile

  static std::byte sentinel(size_t i) { return static_cast<std::byte>((i * 61 + 7) & 0xff); }

  StridedTile(const Box& box, int elem_size, std::mt19937& rng) : tile(box), elem(elem_size) {
    if (tile.empty()) return;
    const int rank = tile.rank();
    std::vector<int> order(rank);  // outermost in memory first
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    strides.resize(rank);
    int64_t stride = 1;
    for (int k = rank - 1; k >= 0; --k) {
      const int d = order[k];
      const int64_t pad = static_cast<int64_t>(rng() % 3);
      first += static_cast<int64_t>(rng() % (pad + 1)) * stride;
      strides[d] = stride;
      stride *= tile.dims[d].size() + pad;
    }
    memory.resize(stride * elem);
    for (size_t i = 0; i < memory.size(); ++i) memory[i] = sentinel(i);
  }
  BufferView view() const {
    BufferView v{tile, {}};
    for (size_t d = 0; d < strides.size(); ++d) v.strides[d] = strides[d] * elem;
    return v;
  }
  std::span<std::byte> span() {
    if (tile.empty()) return {};
    int64_t extent = 1;
    for (int d = 0; d < tile.rank(); ++d) extent += (tile.dims[d].size() - 1) * strides[d];
    return {memory.data() + first * elem, static_cast<size_t>(extent * elem)};
  }
  // The pattern (a source) or the poison (a destination), written through the view.
  void fill(const std::vector<int64_t>& shape, bool pattern) {
    if (tile.empty()) return;
    std::vector<std::byte> packed(tile.volume() * elem);
    (pattern ? fill_pattern : fill_poison)(tile, shape, elem, packed);
    run_strided_copy(plan_strided_copy(tile, row_major_view(tile, elem), view(), elem),
                     packed.data(), memory.data() + first * elem);
  }
  // Elements of the tile that differ from the pattern, plus bytes outside it that differ from
  // the sentinel.
  int64_t errors(const std::vector<int64_t>& shape) const {
    if (tile.empty()) return 0;
    std::vector<std::byte> packed(tile.volume() * elem);
    run_strided_copy(plan_strided_copy(tile, view(), row_major_view(tile, elem), elem),
                     memory.data() + first * elem, packed.data());
    int64_t errors = count_pattern_errors(tile, shape, elem, packed);
    std::vector<std::byte> inside(memory.size(), std::byte{0});
    const std::vector<std::byte> ones(packed.size(), std::byte{1});
    run_strided_copy(plan_strided_copy(tile, row_major_view(tile, elem), view(), elem), ones.data(),
                     inside.data() + first * elem);
    for (size_t i = 0; i < memory.size(); ++i)
      errors += inside[i] == std::byte{0} && memory[i] != sentinel(i);
    return errors;
  }
};

// Runs `plan` compiled once: first on contiguous tiles (play_and_count_errors' buffers), then
// twice on tiles that are random strided views (StridedTile, new strides each time, so that
// each run binds other strides than the one before). Returns the wrong destination elements
// plus the changed bytes outside the views (of sources and destinations), summed over every
// process.
inline int64_t play_strided_and_count_errors(Executor& executor, const Plan& plan, unsigned seed) {
  const auto compiled = executor.compile(plan);
  const Batch& batch = plan.batch;
  int64_t errors = 0;
  auto contiguous = allocate_tile_buffers(batch, compiled->devices_here());
  prepare_tiles(batch, contiguous);
  compiled->run(buffer_views(contiguous));
  errors += count_destination_errors(batch, contiguous);
  std::mt19937 rng(seed);
  for (int run = 0; run < 2; ++run) {
    std::vector<std::pair<StridedTile, StridedTile>> tiles;  // per view: source, destination
    std::vector<DeviceBuffers> views;
    for (DeviceId d : compiled->devices_here())
      for (int t = 0; t < static_cast<int>(batch.tensors.size()); ++t) {
        const DeviceTiles boxes = tiles_of(batch, t, d);
        if (boxes.src.empty() && boxes.dst.empty()) continue;
        const int elem = dtype_size(batch.tensors[t].tensor.dtype);
        tiles.emplace_back(StridedTile(boxes.src, elem, rng), StridedTile(boxes.dst, elem, rng));
        views.push_back({.device = d, .tensor = t});
      }
    for (size_t v = 0; v < views.size(); ++v) {
      const auto& shape = batch.tensors[views[v].tensor].tensor.shape;
      auto& [src, dst] = tiles[v];
      src.fill(shape, true);
      dst.fill(shape, false);
      views[v].src = src.span();
      views[v].src_strides = src.strides;
      views[v].dst = dst.span();
      views[v].dst_strides = dst.strides;
    }
    compiled->run(views);
    for (size_t v = 0; v < views.size(); ++v) {
      const auto& shape = batch.tensors[views[v].tensor].tensor.shape;
      // A source's tile still holds the pattern and its surroundings the sentinel.
      errors += tiles[v].first.errors(shape) + tiles[v].second.errors(shape);
    }
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
    // A latency of 0.1 us makes the default bucket 12 KB, under the slices (about 48 KB): under a
    // bucket, a slice may go from any holder as a message of about a latency, not host by host.
    p.cluster.latency = 1e-7;
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
