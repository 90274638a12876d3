// The property-test corpus: random reshardings from fixed seeds, shared by every layer's tests.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <ranges>
#include <set>
#include <string>
#include <vector>

#include "meshcast/plan/plan.h"
#include "meshcast/tasks/batch.h"
#include "meshcast/tasks/unit_task.h"

// Whether this build runs under AddressSanitizer or ThreadSanitizer (gcc defines the first two,
// clang answers __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MESHCAST_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MESHCAST_TEST_SANITIZED 1
#endif
#endif

namespace meshcast::testing {

// How many of `count` random cases the heaviest property tests run: all in the optimized build of
// `make test`; under the sanitizers, which run the same code paths about ten times slower to find
// memory errors, undefined behaviour and races, the first quarter (at least one), so that `make
// test-asan` fits CI's time. Cases are drawn in order, so those are the full run's first ones.
constexpr int sanitized_count(int count) {
#ifdef MESHCAST_TEST_SANITIZED
  return std::max(1, count / 4);
#else
  return count;
#endif
}

struct CorpusOptions {
  int max_mesh_rank = 3;
  int max_tensor_rank = 4;
  int64_t max_dim = 13;  // tensor dims are drawn from 1..max_dim (uneven on purpose)
  int max_axis = 4;      // mesh axes are drawn from 1..max_axis
};

// A random spec for a tensor of `tensor_rank` dims over a mesh of `mesh_rank` axes: each axis
// shards one random dim or none; a dim sharded by several axes takes them in random order and
// is split flat (Alpa, JAX) or nested (DTensor) at random.
inline ShardingSpec random_spec(std::mt19937& rng, int tensor_rank, int mesh_rank) {
  std::vector<ShardingSpec::DimAxes> dims(tensor_rank);
  std::vector<int> axes(mesh_rank);
  std::iota(axes.begin(), axes.end(), 0);
  std::shuffle(axes.begin(), axes.end(), rng);
  for (int a : axes) {
    const int dim = static_cast<int>(rng() % (tensor_rank + 1));
    if (dim < tensor_rank) dims[dim].push_back(a);
  }
  std::vector<bool> nested(tensor_rank);
  for (int d = 0; d < tensor_rank; ++d) nested[d] = dims[d].size() > 1 && rng() % 2 == 0;
  return ShardingSpec(std::move(dims), std::move(nested));
}

inline std::vector<int64_t> random_mesh_shape(std::mt19937& rng, const CorpusOptions& o) {
  std::vector<int64_t> shape(1 + rng() % o.max_mesh_rank);
  for (auto& s : shape) s = 1 + rng() % o.max_axis;
  return shape;
}

// One random resharding: disjoint hosts, shared hosts, shared devices or shuffled explicit lists.
inline Resharding random_resharding(std::mt19937& rng, const CorpusOptions& o = {}) {
  Resharding p;
  p.tensor.shape.resize(1 + rng() % o.max_tensor_rank);
  for (auto& d : p.tensor.shape) d = 1 + static_cast<int64_t>(rng() % o.max_dim);
  p.tensor.dtype = (rng() % 2) ? DType::int32 : DType::float64;
  const auto src_shape = random_mesh_shape(rng, o);
  const auto dst_shape = random_mesh_shape(rng, o);
  const int per_host = static_cast<int>(std::max(src_shape.back(), dst_shape.back()));
  Mesh src = Mesh::placed(src_shape, 0, per_host);
  const int src_hosts = static_cast<int>(src.host_span());
  const int placement = static_cast<int>(rng() % 4);
  int dst_first = src_hosts;                      // 0: disjoint hosts
  if (placement == 1) dst_first = 0;              // 1: same first host (shared devices)
  if (placement == 2) dst_first = src_hosts / 2;  // 2: partly overlapping hosts
  Mesh dst = Mesh::placed(dst_shape, dst_first, per_host);
  const int hosts = std::max(src_hosts, dst_first + static_cast<int>(dst.host_span()));
  if (placement == 3) {  // 3: explicit shuffled device lists over the whole cluster
    std::vector<DeviceId> all(hosts * per_host);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    src = Mesh(src_shape, {all.begin(), all.begin() + src.size()});
    std::shuffle(all.begin(), all.end(), rng);
    dst = Mesh(dst_shape, {all.begin(), all.begin() + dst.size()});
  }
  p.cluster.hosts = hosts;
  p.cluster.devices_per_host = per_host;
  p.src = Layout{src, random_spec(rng, p.tensor.rank(), src.rank())};
  p.dst = Layout{dst, random_spec(rng, p.tensor.rank(), dst.rank())};
  return p;
}

inline std::vector<Resharding> property_corpus(unsigned seed, int count,
                                               const CorpusOptions& o = {}) {
  std::mt19937 rng(seed);
  std::vector<Resharding> corpus;
  corpus.reserve(count);
  for (int i = 0; i < count; ++i) corpus.push_back(random_resharding(rng, o));
  return corpus;
}

// A random batch of `tensors` tensors on one random cluster: every dtype, tiny tensors with
// mostly empty tiles, meshes differing from tensor to tensor (placed from a random host, or
// explicit shuffled device lists), shared and disjoint devices.
inline Batch random_batch(std::mt19937& rng, int tensors, const CorpusOptions& o = {}) {
  constexpr DType dtypes[] = {DType::int8,    DType::uint8,    DType::int32,   DType::int64,
                              DType::float16, DType::bfloat16, DType::float32, DType::float64};
  Batch batch;
  batch.cluster.hosts = 1 + static_cast<int>(rng() % 4);
  batch.cluster.devices_per_host = 1 + static_cast<int>(rng() % o.max_axis);
  const int per_host = batch.cluster.devices_per_host;
  const int devices = batch.cluster.devices();
  auto random_mesh = [&]() {
    std::vector<int64_t> shape(1 + rng() % o.max_mesh_rank);
    for (auto& s : shape) s = 1 + static_cast<int64_t>(rng() % o.max_axis);
    shape.back() = std::min<int64_t>(shape.back(), per_host);
    int64_t size = 1;
    for (auto& s : shape) {  // shrink leading axes until the mesh fits the cluster
      while (size * s > devices && s > 1) --s;
      size *= s;
    }
    const Mesh placed_probe = Mesh::placed(shape, 0, per_host);
    const int span = static_cast<int>(placed_probe.host_span());
    if (rng() % 2 == 0 && span <= batch.cluster.hosts)
      return Mesh::placed(shape, static_cast<int>(rng() % (batch.cluster.hosts - span + 1)),
                          per_host);
    std::vector<DeviceId> all(devices);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    return Mesh(shape, {all.begin(), all.begin() + size});
  };
  for (int i = 0; i < tensors; ++i) {
    TensorResharding t;
    t.name = fmt::format("t{}", i);
    t.tensor.shape.resize(1 + rng() % o.max_tensor_rank);
    const bool tiny = rng() % 4 == 0;
    for (auto& d : t.tensor.shape) d = tiny ? 1 : 1 + static_cast<int64_t>(rng() % o.max_dim);
    t.tensor.dtype = dtypes[rng() % std::size(dtypes)];
    const Mesh src = random_mesh();
    const Mesh dst = random_mesh();
    t.src = Layout{src, random_spec(rng, t.tensor.rank(), src.rank())};
    t.dst = Layout{dst, random_spec(rng, t.tensor.rank(), dst.rank())};
    batch.tensors.push_back(std::move(t));
  }
  return batch;
}

// A weight-sync-like batch on `hosts` x `per_host` devices: `tensors` tensors, most of them tiny
// (norm weights and biases of 1..8 elements), the rest small matrices, random dtypes, all moved
// from one (hosts/2 x per_host) mesh to another on the remaining hosts (the same hosts when there
// is one) with random specs: many small pieces that share senders and receiver chains, which
// buckets fuse.
inline Batch tiny_tensor_batch(std::mt19937& rng, int tensors, int hosts, int per_host) {
  constexpr DType dtypes[] = {DType::int8,     DType::int32,   DType::float16,
                              DType::bfloat16, DType::float32, DType::float64};
  Batch batch;
  batch.cluster.hosts = hosts;
  batch.cluster.devices_per_host = per_host;
  const int src_hosts = std::max(1, hosts / 2);
  const Mesh src = Mesh::placed({src_hosts, per_host}, 0, per_host);
  const Mesh dst =
      Mesh::placed({std::max(1, hosts - src_hosts), per_host}, hosts > 1 ? src_hosts : 0, per_host);
  for (int i = 0; i < tensors; ++i) {
    TensorResharding t;
    const bool tiny = rng() % 5 != 0;
    t.name = fmt::format("layers.{}.{}", i, tiny ? "norm.weight" : "mlp.weight");
    if (tiny)
      t.tensor.shape = {1 + static_cast<int64_t>(rng() % 8)};
    else
      t.tensor.shape = {1 + static_cast<int64_t>(rng() % 24), 1 + static_cast<int64_t>(rng() % 24)};
    t.tensor.dtype = dtypes[rng() % std::size(dtypes)];
    t.src = Layout{src, random_spec(rng, t.tensor.rank(), src.rank())};
    t.dst = Layout{dst, random_spec(rng, t.tensor.rank(), dst.rank())};
    batch.tensors.push_back(std::move(t));
  }
  return batch;
}

// A batch of `tensors` same-mesh redistributions (what DTensor users do): every tensor's source
// and destination meshes are one device list of hosts x per_host devices, each its own shape
// (1-D, 2-D over the hosts, or the host's devices split in two), with random specs on both sides,
// or a destination on a random subset of those devices (a partial overlap). Tensor dims are drawn
// from 1..max_dim, uneven on purpose.
inline Batch same_mesh_batch(std::mt19937& rng, int tensors, int hosts, int per_host,
                             int64_t max_dim = 13) {
  Batch batch;
  batch.cluster.hosts = hosts;
  batch.cluster.devices_per_host = per_host;
  const int devices = hosts * per_host;
  std::vector<DeviceId> all(devices);
  std::iota(all.begin(), all.end(), 0);
  auto random_shape = [&]() -> std::vector<int64_t> {
    switch (rng() % 3) {
      case 0:
        return {devices};
      case 1:
        return {hosts, per_host};
      default:
        return per_host % 2 == 0 ? std::vector<int64_t>{hosts * 2, per_host / 2}
                                 : std::vector<int64_t>{devices};
    }
  };
  for (int i = 0; i < tensors; ++i) {
    TensorResharding t;
    t.name = fmt::format("t{}", i);
    t.tensor.shape.resize(1 + rng() % 3);
    for (auto& d : t.tensor.shape) d = 1 + static_cast<int64_t>(rng() % max_dim);
    t.tensor.dtype = rng() % 2 ? DType::int32 : DType::float64;
    const Mesh src(random_shape(), all);
    Mesh dst(random_shape(), all);
    if (rng() % 4 == 0) {  // partial overlap: the destination on some of the devices
      std::vector<DeviceId> some = all;
      std::shuffle(some.begin(), some.end(), rng);
      some.resize(1 + rng() % devices);
      dst = Mesh({static_cast<int64_t>(some.size())}, some);
    }
    t.src = Layout{src, random_spec(rng, t.tensor.rank(), src.rank())};
    t.dst = Layout{dst, random_spec(rng, t.tensor.rank(), dst.rank())};
    batch.tensors.push_back(std::move(t));
  }
  return batch;
}

// The hosts where some device holds or needs a slice of a task of `batch`: the lower bound counts
// those alone (docs/concepts.md#lower-bound), since the planner routes no byte through another.
inline std::set<int> tasks_hosts(const Batch& batch) {
  std::set<int> hosts;
  for (const UnitTask& t : std::views::join(decompose(batch))) {
    for (DeviceId d : t.senders) hosts.insert(batch.cluster.host_of(d));
    for (DeviceId d : t.receivers) hosts.insert(batch.cluster.host_of(d));
  }
  return hosts;
}

// The first op of `plan` that names a device on a host outside `hosts`, as "op <id> device <d>"
// (empty where none does).
inline std::string op_outside(const Plan& plan, const std::set<int>& hosts) {
  for (const Op& op : plan.ops)
    for (DeviceId d : participants(op))
      if (!hosts.contains(plan.batch.cluster.host_of(d)))
        return fmt::format("op {} device {}", op.id, d);
  return "";
}

inline std::string describe(const Resharding& p) {
  return fmt::format("shape {} src mesh {} {} devices {} dst mesh {} {} devices {} G={}",
                     fmt::join(p.tensor.shape, "x"), fmt::join(p.src.mesh.shape(), "x"),
                     p.src.spec.to_string(), fmt::join(p.src.mesh.devices(), ","),
                     fmt::join(p.dst.mesh.shape(), "x"), p.dst.spec.to_string(),
                     fmt::join(p.dst.mesh.devices(), ","), p.cluster.devices_per_host);
}

}  // namespace meshcast::testing
