#include "meshcast/tasks/unit_task.h"

#include <fmt/format.h>

#include "meshcast/error.h"
#include "unit_task_internal.h"

namespace meshcast {
namespace {

// A non-empty overlap of source part `src` and destination part `dst` along one dimension.
struct PartOverlap {
  int64_t src;
  int64_t dst;
  Interval range;
};

// Merges the source and destination partitions of dimension `dim`: O(src_parts + dst_parts).
// Both layouts number their parts in order along the dim, flat or nested.
std::vector<PartOverlap> overlaps_along(int64_t length, const Layout& src, const Layout& dst,
                                        int dim) {
  const int64_t src_parts = src.parts_of(dim);
  const int64_t dst_parts = dst.parts_of(dim);
  std::vector<PartOverlap> out;
  int64_t s = 0;
  int64_t d = 0;
  while (s < src_parts && d < dst_parts) {
    const Interval a = src.part_range(dim, length, s);
    const Interval b = dst.part_range(dim, length, d);
    if (a.empty()) {
      ++s;
      continue;
    }
    if (b.empty()) {
      ++d;
      continue;
    }
    const Interval both = intersect(a, b);
    if (!both.empty()) out.push_back({s, d, both});
    if (a.hi <= b.hi) ++s;
    if (b.hi <= a.hi) ++d;
  }
  return out;
}

}  // namespace

void validate_tensor_layouts(const TensorSpec& tensor, const Layout& src, const Layout& dst,
                             const Cluster& cluster) {
  tensor.validate();
  for (const auto* side : {&src, &dst}) {
    const char* name = side == &src ? "source" : "destination";
    if (side->mesh.size() == 0) throw InvalidArgument(fmt::format("{} mesh is empty", name));
    try {
      side->validate(tensor);
      side->mesh.check_fits(cluster);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}: {}", name, e.what()));
    }
  }
}

void Resharding::validate() const {
  cluster.validate();
  validate_tensor_layouts(tensor, src, dst, cluster);
}

std::vector<UnitTask> decompose_valid(const TensorSpec& tensor, const Layout& src,
                                      const Layout& dst) {
  const int rank = tensor.rank();
  const auto src_tiles = distinct_tiles(tensor, src);
  const auto dst_tiles = distinct_tiles(tensor, dst);

  std::vector<std::vector<PartOverlap>> per_dim(rank);
  std::vector<int64_t> src_radix(rank), dst_radix(rank);
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    src_radix[d] = src.parts_of(d);
    dst_radix[d] = dst.parts_of(d);
    per_dim[d] = overlaps_along(tensor.shape[d], src, dst, d);
    count *= static_cast<int64_t>(per_dim[d].size());
  }

  std::vector<UnitTask> tasks;
  tasks.reserve(count);
  const int elem = dtype_size(tensor.dtype);
  // Odometer over the per-dimension overlaps, last dimension fastest: every combination is a
  // non-empty slice, so the loop does work only for tasks it emits.
  std::vector<size_t> pick(rank, 0);
  for (int64_t n = 0; n < count; ++n) {
    UnitTask task;
    task.slice.dims.resize(rank);
    int64_t src_tile = 0;
    int64_t dst_tile = 0;
    for (int d = 0; d < rank; ++d) {
      const PartOverlap& o = per_dim[d][pick[d]];
      task.slice.dims[d] = o.range;
      src_tile = src_tile * src_radix[d] + o.src;
      dst_tile = dst_tile * dst_radix[d] + o.dst;
    }
    task.bytes = task.slice.volume() * elem;
    task.senders = src_tiles[src_tile].replicas;
    task.receivers = dst_tiles[dst_tile].replicas;
    tasks.push_back(std::move(task));
    for (int d = rank - 1; d >= 0; --d) {
      if (++pick[d] < per_dim[d].size()) break;
      pick[d] = 0;
    }
  }
  return tasks;
}

std::vector<UnitTask> decompose(const Resharding& problem) {
  problem.validate();
  return decompose_valid(problem.tensor, problem.src, problem.dst);
}

}  // namespace meshcast
