// Strided copies of a box between row-major buffers laid out over other boxes (pack/unpack).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "meshcast/layout/box.h"

namespace meshcast {

// The loops that copy `region` from a buffer over `from_box` to a buffer over `to_box`, worked
// out once: dimensions that are whole in both buffers merge into one contiguous run, so a
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

// `region` must lie inside both boxes (InvalidArgument otherwise).
StridedCopy plan_strided_copy(const Box& region, const Box& from_box, const Box& to_box,
                              int elem_size);
void run_strided_copy(const StridedCopy& copy, const std::byte* from, std::byte* to);

// Whether `region` is one contiguous byte range of a row-major buffer over `box`, so it can be
// sent or received in place without packing.
bool is_contiguous_in(const Box& region, const Box& box);
// Byte offset of `region`'s first element in a row-major buffer over `box`.
int64_t offset_in(const Box& region, const Box& box, int elem_size);

}  // namespace meshcast
