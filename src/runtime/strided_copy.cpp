#include "meshcast/runtime/strided_copy.h"

#include <fmt/format.h>

#include <cstring>

#include "meshcast/error.h"

namespace meshcast {
namespace {

// Copies `count` runs of a fixed size; a known size lets the compiler inline the memcpy, which
// matters for the many short runs of a slice cut across the last dimension.
template <int64_t kRun>
void copy_runs(const std::byte* from, std::byte* to, int64_t count, int64_t from_stride,
               int64_t to_stride) {
  for (int64_t i = 0; i < count; ++i) std::memcpy(to + i * to_stride, from + i * from_stride, kRun);
}

void copy_line(const std::byte* from, std::byte* to, int64_t count, int64_t from_stride,
               int64_t to_stride, int64_t run) {
  switch (run) {
    case 4:
      return copy_runs<4>(from, to, count, from_stride, to_stride);
    case 8:
      return copy_runs<8>(from, to, count, from_stride, to_stride);
    case 16:
      return copy_runs<16>(from, to, count, from_stride, to_stride);
    default:
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(to + i * to_stride, from + i * from_stride, run);
  }
}

}  // namespace

int64_t StridedCopy::bytes() const {
  int64_t b = run_bytes;
  for (int d = 0; d < loops; ++d) b *= counts[d];
  return b;
}

BufferView row_major_view(const Box& box, int elem_size) {
  BufferView view{box, {}};
  int64_t stride = elem_size;
  for (int d = box.rank() - 1; d >= 0; --d) {
    view.strides[d] = stride;
    stride *= box.dims[d].size();
  }
  return view;
}

StridedCopy plan_strided_copy(const Box& region, const BufferView& from, const BufferView& to,
                              int elem_size) {
  if (!from.box.contains(region) || !to.box.contains(region))
    throw InvalidArgument(fmt::format("cannot copy {} from a buffer over {} to one over {}",
                                      to_string(region), to_string(from.box), to_string(to.box)));
  StridedCopy c;
  if (region.empty()) return c;
  c.from_offset = offset_in(region, from);
  c.to_offset = offset_in(region, to);
  // Dimensions the region spans one index of need no loop. From the innermost of the others,
  // each dimension whose stride in both buffers is the run so far continues it contiguously.
  std::array<int, kMaxRank> dims{};
  int count = 0;
  for (int d = 0; d < region.rank(); ++d)
    if (region.dims[d].size() > 1) dims[count++] = d;
  int64_t run = elem_size;
  for (; count > 0; --count) {
    const int d = dims[count - 1];
    if (from.strides[d] != run || to.strides[d] != run) break;
    run *= region.dims[d].size();
  }
  c.run_bytes = run;
  for (int i = 0; i < count; ++i) {
    const int d = dims[i];
    c.counts[c.loops] = region.dims[d].size();
    c.from_strides[c.loops] = from.strides[d];
    c.to_strides[c.loops] = to.strides[d];
    ++c.loops;
  }
  return c;
}

StridedCopy plan_strided_copy(const Box& region, const Box& from_box, const Box& to_box,
                              int elem_size) {
  return plan_strided_copy(region, row_major_view(from_box, elem_size),
                           row_major_view(to_box, elem_size), elem_size);
}

void run_strided_copy(const StridedCopy& c, const std::byte* from, std::byte* to) {
  if (c.run_bytes == 0) return;
  from += c.from_offset;
  to += c.to_offset;
  if (c.loops == 0) {
    std::memcpy(to, from, c.run_bytes);
    return;
  }
  // Odometer over the outer loops but the last, which copy_line runs.
  const int last = c.loops - 1;
  std::array<int64_t, kMaxRank> index{};
  while (true) {
    copy_line(from, to, c.counts[last], c.from_strides[last], c.to_strides[last], c.run_bytes);
    int d = last - 1;
    for (; d >= 0; --d) {
      from += c.from_strides[d];
      to += c.to_strides[d];
      if (++index[d] < c.counts[d]) break;
      from -= c.from_strides[d] * c.counts[d];
      to -= c.to_strides[d] * c.counts[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

bool is_contiguous_in(const Box& region, const BufferView& view, int elem_size) {
  // Against a packed copy of the region: one run when the view holds it contiguously.
  return plan_strided_copy(region, view, row_major_view(region, elem_size), elem_size).loops == 0;
}

bool is_contiguous_in(const Box& region, const Box& box) {
  // The element size does not change which regions are contiguous.
  return is_contiguous_in(region, row_major_view(box, 1), 1);
}

int64_t offset_in(const Box& region, const BufferView& view) {
  int64_t offset = 0;
  for (int d = 0; d < region.rank(); ++d)
    offset += (region.dims[d].lo - view.box.dims[d].lo) * view.strides[d];
  return offset;
}

int64_t offset_in(const Box& region, const Box& box, int elem_size) {
  return offset_in(region, row_major_view(box, elem_size));
}

}  // namespace meshcast
