#include "meshcast/runtime/strided_copy.h"

#include <fmt/format.h>

#include <cstring>

#include "meshcast/error.h"

namespace meshcast {
namespace {

std::array<int64_t, kMaxRank> row_major_strides(const Box& box, int elem_size) {
  std::array<int64_t, kMaxRank> strides{};
  int64_t stride = elem_size;
  for (int d = box.rank() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= box.dims[d].size();
  }
  return strides;
}

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

StridedCopy plan_strided_copy(const Box& region, const Box& from_box, const Box& to_box,
                              int elem_size) {
  if (!from_box.contains(region) || !to_box.contains(region))
    throw InvalidArgument(fmt::format("cannot copy {} from a buffer over {} to one over {}",
                                      to_string(region), to_string(from_box), to_string(to_box)));
  StridedCopy c;
  if (region.empty()) return c;
  const auto from_strides = row_major_strides(from_box, elem_size);
  const auto to_strides = row_major_strides(to_box, elem_size);
  const int rank = region.rank();
  for (int d = 0; d < rank; ++d) {
    c.from_offset += (region.dims[d].lo - from_box.dims[d].lo) * from_strides[d];
    c.to_offset += (region.dims[d].lo - to_box.dims[d].lo) * to_strides[d];
  }
  // Merge inner dimensions while the region spans them whole in both buffers.
  int inner = rank - 1;
  int64_t run = region.dims[inner].size() * elem_size;
  while (inner > 0 && region.dims[inner].size() == from_box.dims[inner].size() &&
         region.dims[inner].size() == to_box.dims[inner].size()) {
    --inner;
    run *= region.dims[inner].size();
  }
  c.run_bytes = run;
  // Outer dimensions the region spans one index of need no loop.
  for (int d = 0; d < inner; ++d) {
    if (region.dims[d].size() == 1) continue;
    c.counts[c.loops] = region.dims[d].size();
    c.from_strides[c.loops] = from_strides[d];
    c.to_strides[c.loops] = to_strides[d];
    ++c.loops;
  }
  return c;
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

bool is_contiguous_in(const Box& region, const Box& box) {
  // Contiguous when, below the outermost dimension the region spans more than one index of,
  // it covers every dimension whole.
  int d = 0;
  while (d < region.rank() && region.dims[d].size() == 1) ++d;
  for (++d; d < region.rank(); ++d)
    if (region.dims[d].size() != box.dims[d].size()) return false;
  return true;
}

int64_t offset_in(const Box& region, const Box& box, int elem_size) {
  const auto strides = row_major_strides(box, elem_size);
  int64_t offset = 0;
  for (int d = 0; d < region.rank(); ++d)
    offset += (region.dims[d].lo - box.dims[d].lo) * strides[d];
  return offset;
}

}  // namespace meshcast
