#include "meshcast/tasks/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "meshcast/error.h"
#include "unit_task_internal.h"

namespace meshcast {

std::string tensor_label(const Batch& batch, size_t index) {
  return fmt::format("tensors[{}] '{}'", index, batch.tensors[index].name);
}

Box bound_region(const BufferBinding& binding, const Box& tile) {
  Box region;
  const size_t lead = binding.offset.size() - tile.dims.size();
  for (size_t d = 0; d < binding.offset.size(); ++d) {
    const int64_t lo = binding.offset[d];
    region.dims.push_back({lo, lo + (d < lead ? 1 : tile.dims[static_cast<int>(d - lead)].size())});
  }
  return region;
}

namespace {

const std::optional<BufferBinding>& binding_of(const TensorResharding& t, bool src) {
  return src ? t.src_buffer : t.dst_buffer;
}

// The regions tensor `t` may take in its buffer on one device, a superset: its binding's offset
// spans the extents of a tile, wherever that tile lies, so one region per combination of its part
// sizes along each dimension (most layouts have one).
std::vector<Box> possible_regions(const TensorResharding& t, bool src) {
  const Layout& layout = src ? t.src : t.dst;
  std::vector<Box> tiles{Box{}};
  for (int d = 0; d < t.tensor.rank(); ++d) {
    std::vector<int64_t> sizes;
    for (int64_t part = 0; part < layout.parts_of(d); ++part)
      sizes.push_back(layout.part_range(d, t.tensor.shape[d], part).size());
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::vector<Box> longer;
    for (const Box& tile : tiles)
      for (int64_t size : sizes) {
        Box next = tile;
        next.dims.push_back({0, size});
        longer.push_back(std::move(next));
      }
    tiles = std::move(longer);
  }
  std::vector<Box> regions;
  for (const Box& tile : tiles) regions.push_back(bound_region(*binding_of(t, src), tile));
  return regions;
}

// Whether two of the tensors bound to one buffer may overlap on some device: only then are their
// regions compared device by device (a model's fused buffers, such as q, k and v side by side,
// never are: that comparison was a tenth of planning such a batch, for each validation).
bool regions_may_meet(const Batch& batch, const std::vector<size_t>& tensors, bool src) {
  std::vector<std::vector<Box>> regions;
  for (size_t i : tensors) regions.push_back(possible_regions(batch.tensors[i], src));
  for (size_t a = 0; a < regions.size(); ++a)
    for (size_t b = 0; b < a; ++b)
      for (const Box& x : regions[a])
        for (const Box& y : regions[b])
          if (x.rank() != y.rank() || !intersect(x, y).empty()) return true;  // (a rank error)
  return false;
}

// Each binding on its own, then every buffer (per side and name): one dtype and rank, and no two
// regions overlapping on a device.
void validate_bindings(const Batch& batch) {
  for (const bool src : {true, false}) {
    const std::string_view side = src ? "src_buffer" : "dst_buffer";
    std::map<std::string_view, std::vector<size_t>> members;
    for (size_t i = 0; i < batch.tensors.size(); ++i) {
      const TensorResharding& t = batch.tensors[i];
      const auto& binding = binding_of(t, src);
      if (!binding) continue;
      const auto fail = [&](std::string_view what) {
        throw InvalidArgument(fmt::format("{}: {}: {}", tensor_label(batch, i), side, what));
      };
      if (binding->name.empty()) fail("empty buffer name, expected the name of a buffer");
      if (static_cast<int>(binding->offset.size()) < t.tensor.rank() ||
          static_cast<int>(binding->offset.size()) > kMaxRank)
        fail(
            fmt::format("offset [{}] has {} entries: expected {} to {} (one per dimension of "
                        "the buffer, the tensor's {} dimensions last)",
                        fmt::join(binding->offset, ","), binding->offset.size(), t.tensor.rank(),
                        kMaxRank, t.tensor.rank()));
      for (int64_t v : binding->offset)
        if (v < 0)
          fail(fmt::format("offset [{}]: expected non-negative indices",
                           fmt::join(binding->offset, ",")));
      members[binding->name].push_back(i);
    }
    for (const auto& [name, tensors] : members) {
      const TensorResharding& first = batch.tensors[tensors.front()];
      const bool compare_regions = regions_may_meet(batch, tensors, src);
      std::map<DeviceId, std::vector<std::pair<Box, size_t>>> regions;
      for (size_t i : tensors) {
        const TensorResharding& t = batch.tensors[i];
        const auto fail = [&](std::string_view what) {
          throw InvalidArgument(
              fmt::format("{}: {} '{}': {}", tensor_label(batch, i), side, name, what));
        };
        if (t.tensor.dtype != first.tensor.dtype ||
            binding_of(t, src)->offset.size() != binding_of(first, src)->offset.size())
          fail(
              fmt::format("{} with a {}-entry offset, but {} binds it as {} with a {}-entry "
                          "offset: expected one dtype and rank per buffer",
                          to_string(t.tensor.dtype), binding_of(t, src)->offset.size(),
                          tensor_label(batch, tensors.front()), to_string(first.tensor.dtype),
                          binding_of(first, src)->offset.size()));
        if (!compare_regions) continue;
        const Layout& layout = src ? t.src : t.dst;
        for (int64_t k = 0; k < layout.mesh.size(); ++k) {
          const Box tile = tile_at(t.tensor, layout, k);
          if (tile.empty()) continue;
          const Box region = bound_region(*binding_of(t, src), tile);
          const DeviceId d = layout.mesh.device_at(k);
          for (const auto& [other, j] : regions[d])
            if (!intersect(region, other).empty())
              fail(fmt::format("on device {} its region {} overlaps {} of {}", d, to_string(region),
                               to_string(other), tensor_label(batch, j)));
          regions[d].emplace_back(region, i);
        }
      }
    }
  }
}

}  // namespace

void Batch::validate() const {
  try {
    cluster.validate();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("cluster: {}", e.what()));
  }
  if (tensors.empty()) throw InvalidArgument("batch has no tensors: expected at least one");
  std::unordered_map<std::string_view, size_t> first_of_name;
  first_of_name.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorResharding& t = tensors[i];
    if (t.name.empty())
      throw InvalidArgument(fmt::format("tensors[{}]: empty name, expected a unique name", i));
    if (const auto [it, fresh] = first_of_name.emplace(t.name, i); !fresh)
      throw InvalidArgument(fmt::format("{}: duplicate name, also the name of tensors[{}]",
                                        tensor_label(*this, i), it->second));
    try {
      validate_tensor_layouts(t.tensor, t.src, t.dst, cluster);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}: {}", tensor_label(*this, i), e.what()));
    }
  }
  validate_bindings(*this);
}

int64_t Batch::bytes() const {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.tensor.bytes();
  return total;
}

Resharding Batch::resharding(size_t index) const {
  const TensorResharding& t = tensors.at(index);
  return Resharding{t.tensor, t.src, t.dst, cluster};
}

Batch Batch::of_one(const Resharding& problem, std::string name) {
  return Batch{problem.cluster,
               {TensorResharding{std::move(name), problem.tensor, problem.src, problem.dst}}};
}

std::vector<std::vector<UnitTask>> decompose(const Batch& batch) {
  batch.validate();
  std::vector<std::vector<UnitTask>> tasks;
  tasks.reserve(batch.tensors.size());
  for (const auto& t : batch.tensors) tasks.push_back(decompose_valid(t.tensor, t.src, t.dst));
  return tasks;
}

}  // namespace meshcast
