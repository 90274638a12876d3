// Strided copies of a box between buffers laid out over other boxes (pack/unpack): row-major
// buffers, or strided views such as a tile bound inside a larger buffer (docs/executors.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "meshcast/layout/box.h"

namespace meshcast {

// A buffer holding the elements of `box`: element i of the box (global indices) sits
// sum((i[d] - box.lo[d]) * strides[d]) bytes from the buffer's start. Row-major over the box, or
// any strided view (a tile that is a region of a larger buffer, a transposed array).
struct BufferView {
  Box box;
  std::array<int64_t, kMaxRank> strides{};  // bytes
};
BufferView row_major_view(const Box& box, int elem_size);

// The loops that copy `region` from one buffer to another, worked out once: the innermost
// dimensions that continue each other contiguously in both buffers merge into one run, so a
// contiguous region is a single memcpy and a strided one a memcpy per innermost run.
struct StridedCopy {
  int64_t from_offset = 0;  // bytes from each buffer's start to the region's first element
  int64_t to_offset = 0;
  int64_t run_bytes = 0;  // contiguous bytes per innermost run (0: empty region)
  int loops = 0;          // outer dimensions iterated around the runs
  std::array<int64_t, kMaxRank> counts{};
  std::array<int64_t, kMaxRank> from_strides{};  // bytes
  std::array<int64_t, kMaxRank> to_strides{};

  int64_t bytes() const;
};

// `region` must lie inside both buffers' boxes (InvalidArgument otherwise).
StridedCopy plan_strided_copy(const Box& region, const BufferView& from, const BufferView& to,
                              int elem_size);
// Between row-major buffers over `from_box` and `to_box`.
StridedCopy plan_strided_copy(const Box& region, const Box& from_box, const Box& to_box,
                              int elem_size);
void run_strided_copy(const StridedCopy& copy, const std::byte* from, std::byte* to);

// Whether `region`'s elements, in row-major order, are one contiguous byte range of the buffer
// in that order (a transposed view's are not), so that it can be sent or received in place
// without packing. A row-major buffer over `box` is the view's special case.
bool is_contiguous_in(const Box& region, const BufferView& view, int elem_size);
bool is_contiguous_in(const Box& region, const Box& box);
// Byte offset of `region`'s first element in the buffer (row-major over `box`).
int64_t offset_in(const Box& region, const BufferView& view);
int64_t offset_in(const Box& region, const Box& box, int elem_size);

}  // namespace meshcast
