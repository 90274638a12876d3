#include "meshcast/runtime/buffer_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshcast/error.h"
#include "meshcast/runtime/buffers.h"

namespace meshcast {

std::vector<DeviceId> mesh_devices(const Batch& batch) {
  std::vector<DeviceId> devices;
  for (const auto& t : batch.tensors)
    for (const Mesh* mesh : {&t.src.mesh, &t.dst.mesh})
      devices.insert(devices.end(), mesh->devices().begin(), mesh->devices().end());
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

std::vector<DeviceId> mesh_devices(const Resharding& problem) {
  return mesh_devices(Batch::of_one(problem));
}

namespace {

// Elements from a strided tile's first element to its last, inclusive (0 for an empty tile).
int64_t strided_extent(const Box& tile, const std::vector<int64_t>& strides) {
  if (tile.empty()) return 0;
  int64_t extent = 1;
  for (int d = 0; d < tile.rank(); ++d) extent += (tile.dims[d].size() - 1) * strides[d];
  return extent;
}

// Whether no two elements of the tile share memory: ordered by stride, each dimension of more
// than one index steps past everything the dimensions inside it span.
bool strides_disjoint(const Box& tile, const std::vector<int64_t>& strides) {
  std::array<int, kMaxRank> dims{};  // not a vector: a bind allocates nothing
  int count = 0;
  for (int d = 0; d < tile.rank(); ++d)
    if (tile.dims[d].size() > 1) dims[count++] = d;
  // Insertion sort by stride (at most kMaxRank dims).
  for (int i = 1; i < count; ++i)
    for (int j = i; j > 0 && strides[dims[j]] < strides[dims[j - 1]]; --j)
      std::swap(dims[j], dims[j - 1]);
  int64_t spanned = 1;  // elements spanned by the dimensions so far
  for (int i = 0; i < count; ++i) {
    const int d = dims[i];
    if (strides[d] < spanned) return false;
    spanned = strides[d] * (tile.dims[d].size() - 1) + spanned;
  }
  return true;
}

bool row_major(const Box& tile, const std::vector<int64_t>& strides) {
  int64_t stride = 1;
  for (int d = tile.rank() - 1; d >= 0; --d) {
    if (tile.dims[d].size() > 1 && strides[d] != stride) return false;
    stride *= tile.dims[d].size();
  }
  return true;
}

}  // namespace

BufferTable::BufferTable(const Batch& batch, std::vector<DeviceId> devices_here)
    : devices_here_(std::move(devices_here)), position_(batch.cluster.devices(), -1) {
  for (const auto& t : batch.tensors) {
    tensor_names_.push_back(t.name);
    elem_size_.push_back(dtype_size(t.tensor.dtype));
  }
  const size_t slots = devices_here_.size() * tensor_names_.size();
  tiles_.reserve(slots);
  src_.assign(slots, nullptr);
  dst_.assign(slots, nullptr);
  bound_.assign(slots, 0);
  for (auto* layout : {&src_layout_, &dst_layout_, &previous_src_layout_, &previous_dst_layout_})
    layout->assign(slots, -1);
  for (size_t i = 0; i < devices_here_.size(); ++i)
    position_[devices_here_[i]] = static_cast<int>(i);
  for (DeviceId d : devices_here_)
    for (int t = 0; t < static_cast<int>(tensor_names_.size()); ++t)
      tiles_.push_back(tiles_of(batch, t, d));
}

bool BufferTable::bind(std::span<const DeviceBuffers> buffers) {
  const int tensors = static_cast<int>(tensor_names_.size());
  const auto label = [&](int t) { return fmt::format("tensors[{}] '{}'", t, tensor_names_[t]); };
  // Checks everything first, so that a bad call leaves the previous binding untouched.
  std::fill(bound_.begin(), bound_.end(), 0);
  for (const DeviceBuffers& b : buffers) {
    const DeviceId d = b.device;
    if (d < 0 || d >= static_cast<DeviceId>(position_.size()) || position_[d] < 0)
      throw InvalidArgument(
          fmt::format("buffers given for device {}, which is not one of this "
                      "process's devices [{}]",
                      d, fmt::join(devices_here_, ",")));
    if (b.tensor < 0 || b.tensor >= tensors)
      throw InvalidArgument(
          fmt::format("device {}: buffers given for tensor {}, but the batch has tensors 0..{}", d,
                      b.tensor, tensors - 1));
    const size_t s = slot(d, b.tensor);
    if (bound_[s])
      throw InvalidArgument(fmt::format("device {}, {}: buffers given twice", d, label(b.tensor)));
    const int elem = elem_size_[b.tensor];
    for (const bool is_src : {true, false}) {
      const Box& tile = is_src ? tiles_[s].src : tiles_[s].dst;
      const auto& strides = is_src ? b.src_strides : b.dst_strides;
      const int64_t given = static_cast<int64_t>(is_src ? b.src.size() : b.dst.size());
      const std::string_view side = is_src ? "source" : "destination";
      const auto where = [&] { return fmt::format("device {}, {}: {}", d, label(b.tensor), side); };
      if (strides.empty()) {
        if (given != tile.volume() * elem)
          throw InvalidArgument(fmt::format("{} buffer has {} bytes, but its {} tile needs {}",
                                            where(), given, side, tile.volume() * elem));
        continue;
      }
      if (static_cast<int>(strides.size()) != tile.rank() ||
          std::any_of(strides.begin(), strides.end(), [](int64_t v) { return v < 0; }))
        throw InvalidArgument(
            fmt::format("{} strides [{}]: expected {} non-negative strides, one "
                        "per dimension of the tensor",
                        where(), fmt::join(strides, ","), tile.rank()));
      if (!is_src && !strides_disjoint(tile, strides))
        throw InvalidArgument(
            fmt::format("{} strides [{}] over a tile of {} make elements share memory: expected "
                        "each element its own bytes",
                        where(), fmt::join(strides, ","), shape_to_string(tile.extents(), 'x')));
      if (given != strided_extent(tile, strides) * elem)
        throw InvalidArgument(fmt::format(
            "{} buffer has {} bytes, but its {} tile of {} with strides [{}] spans {} from its "
            "first element to its last",
            where(), given, side, shape_to_string(tile.extents(), 'x'), fmt::join(strides, ","),
            strided_extent(tile, strides) * elem));
    }
    bound_[s] = 1;
  }
  for (DeviceId d : devices_here_)
    for (int t = 0; t < tensors; ++t)
      if (const size_t s = slot(d, t);
          !bound_[s] && (!tiles_[s].src.empty() || !tiles_[s].dst.empty()))
        throw InvalidArgument(
            fmt::format("no buffers given for device {}, {}, whose tiles need {} source and {} "
                        "destination bytes",
                        d, label(t), tiles_[s].src.volume() * elem_size_[t],
                        tiles_[s].dst.volume() * elem_size_[t]));
  std::fill(src_.begin(), src_.end(), nullptr);
  std::fill(dst_.begin(), dst_.end(), nullptr);
  // Copies into memory kept from earlier binds: with the same strides as the last, no allocation.
  previous_src_layout_ = src_layout_;
  previous_dst_layout_ = dst_layout_;
  previous_strides_ = strides_;
  std::fill(src_layout_.begin(), src_layout_.end(), -1);
  std::fill(dst_layout_.begin(), dst_layout_.end(), -1);
  strides_.clear();
  // A tile bound row-major, given strides or not, keeps -1.
  const auto layout_of = [&](const Box& tile, const std::vector<int64_t>& strides) {
    if (strides.empty() || row_major(tile, strides)) return -1;
    strides_.emplace_back();
    std::copy(strides.begin(), strides.end(), strides_.back().begin());
    return static_cast<int>(strides_.size()) - 1;
  };
  for (const DeviceBuffers& b : buffers) {
    const size_t s = slot(b.device, b.tensor);
    src_[s] = b.src.data();
    dst_[s] = b.dst.data();
    src_layout_[s] = layout_of(tiles_[s].src, b.src_strides);
    dst_layout_[s] = layout_of(tiles_[s].dst, b.dst_strides);
  }
  previous_strides_.reserve(strides_.capacity());
  const auto same = [](int a, int b, const auto& strides_a, const auto& strides_b) {
    return a < 0 || b < 0 ? a == b : strides_a[a] == strides_b[b];
  };
  for (size_t s = 0; s < src_layout_.size(); ++s)
    if (!same(src_layout_[s], previous_src_layout_[s], strides_, previous_strides_) ||
        !same(dst_layout_[s], previous_dst_layout_[s], strides_, previous_strides_))
      return true;
  return false;
}

BufferView BufferTable::view(const Place& place) const {
  const int elem = elem_size_[place.tensor];
  if (place.kind == BufferKind::staging) return row_major_view(place.box, elem);
  const size_t s = slot(place.device, place.tensor);
  const int layout = place.kind == BufferKind::src ? src_layout_[s] : dst_layout_[s];
  if (layout < 0) return row_major_view(place.box, elem);
  BufferView view{place.box, strides_[layout]};
  for (auto& stride : view.strides) stride *= elem;
  return view;
}

}  // namespace meshcast
