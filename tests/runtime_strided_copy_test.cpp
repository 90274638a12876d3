// Strided copies and the fill/check pattern, exhaustively on small random boxes.
#include "meshcast/runtime/strided_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <random>

#include "meshcast/error.h"
#include "meshcast/runtime/buffers.h"

namespace meshcast {
namespace {

// A random box inside `outer`.
Box random_inside(std::mt19937& rng, const Box& outer) {
  Box b = outer;
  for (auto& d : b.dims) {
    const int64_t lo = d.lo + static_cast<int64_t>(rng() % d.size());
    const int64_t hi = lo + 1 + static_cast<int64_t>(rng() % (d.hi - lo));
    d = {lo, hi};
  }
  return b;
}

int64_t element_offset(const std::vector<int64_t>& index, const Box& box) {
  int64_t offset = 0;
  for (int d = 0; d < box.rank(); ++d)
    offset = offset * box.dims[d].size() + index[d] - box.dims[d].lo;
  return offset;
}

TEST(StridedCopyTest, MatchesElementByElementCopyOnRandomBoxes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    const int elem = std::array{1, 2, 4, 8}[rng() % 4];
    std::vector<int64_t> shape(rank);
    for (auto& s : shape) s = 1 + static_cast<int64_t>(rng() % 6);
    const Box whole = full_box(shape);
    const Box from_box = random_inside(rng, whole);
    const Box to_box = random_inside(rng, whole);
    const Box overlap = intersect(from_box, to_box);
    if (overlap.empty()) continue;
    const Box region = random_inside(rng, overlap);
    std::vector<std::byte> from(from_box.volume() * elem), to(to_box.volume() * elem);
    fill_pattern(from_box, shape, elem, from);
    const auto copy = plan_strided_copy(region, from_box, to_box, elem);
    ASSERT_EQ(copy.bytes(), region.volume() * elem);
    run_strided_copy(copy, from.data(), to.data());
    // Inside the region: the pattern; outside it: untouched zeros.
    std::vector<std::byte> expected(to.size());
    std::vector<int64_t> index(rank);
    for (int64_t i = 0; i < to_box.volume(); ++i) {
      int64_t rest = i;
      bool inside = true;
      for (int d = rank - 1; d >= 0; --d) {
        index[d] = to_box.dims[d].lo + rest % to_box.dims[d].size();
        rest /= to_box.dims[d].size();
        inside = inside && index[d] >= region.dims[d].lo && index[d] < region.dims[d].hi;
      }
      if (inside)
        std::memcpy(&expected[i * elem], &from[element_offset(index, from_box) * elem], elem);
    }
    ASSERT_EQ(expected, to) << "region " << region << " from " << from_box << " to " << to_box;
  }
}

// Transposed and padded views (the dimensions in a random order in memory, each with spare
// elements): the copy writes exactly the region's elements where the strides put them, and the
// region is contiguous exactly when its elements in row-major order are one byte range in that
// order (what a message sent in place holds).
TEST(StridedCopyTest, StridedViewsMatchElementByElementCopy) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 2000; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    const int elem = std::array{1, 2, 4, 8}[rng() % 4];
    std::vector<int64_t> shape(rank);
    for (auto& s : shape) s = 1 + static_cast<int64_t>(rng() % 5);
    const Box box = full_box(shape);
    const Box region = random_inside(rng, box);
    std::vector<int> order(rank);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    BufferView view{box, {}};
    int64_t stride = elem;
    for (int k = rank - 1; k >= 0; --k) {
      view.strides[order[k]] = stride;
      stride *= shape[order[k]] + static_cast<int64_t>(rng() % 2);
    }
    std::vector<std::byte> packed(region.volume() * elem), to(stride, std::byte{0});
    fill_pattern(region, shape, elem, packed);
    const auto copy = plan_strided_copy(region, row_major_view(region, elem), view, elem);
    run_strided_copy(copy, packed.data(), to.data());
    std::vector<std::byte> expected(to.size(), std::byte{0});
    int64_t lowest = INT64_MAX, first = 0;
    bool in_order = true;  // element i at the first one's position + i * elem
    std::vector<int64_t> index(rank);
    for (int64_t i = 0; i < region.volume(); ++i) {
      int64_t rest = i, at = 0;
      for (int d = rank - 1; d >= 0; --d) {
        index[d] = region.dims[d].lo + rest % region.dims[d].size();
        rest /= region.dims[d].size();
        at += index[d] * view.strides[d];
      }
      std::memcpy(&expected[at], &packed[i * elem], elem);
      lowest = std::min(lowest, at);
      if (i == 0) first = at;
      in_order = in_order && at == first + i * elem;
    }
    ASSERT_EQ(expected, to) << "region " << region << " of " << box;
    EXPECT_EQ(is_contiguous_in(region, view, elem), in_order)
        << "region " << region << " of " << box;
    EXPECT_EQ(offset_in(region, view), lowest);
  }
}

TEST(StridedCopyTest, ContiguityAndOffsetsMatchTheElementLayout) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    std::vector<int64_t> shape(rank);
    for (auto& s : shape) s = 1 + static_cast<int64_t>(rng() % 5);
    const Box box = full_box(shape);
    const Box region = random_inside(rng, box);
    // Contiguous iff the region's elements are volume() consecutive offsets.
    std::vector<int64_t> index(rank);
    int64_t lowest = INT64_MAX, highest = -1;
    for (int64_t i = 0; i < region.volume(); ++i) {
      int64_t rest = i;
      for (int d = rank - 1; d >= 0; --d) {
        index[d] = region.dims[d].lo + rest % region.dims[d].size();
        rest /= region.dims[d].size();
      }
      lowest = std::min(lowest, element_offset(index, box));
      highest = std::max(highest, element_offset(index, box));
    }
    EXPECT_EQ(is_contiguous_in(region, box), highest - lowest + 1 == region.volume())
        << region << " in " << box;
    EXPECT_EQ(offset_in(region, box, 4), lowest * 4);
    // A contiguous region is one run; a copy into a buffer over the region itself too.
    if (is_contiguous_in(region, box)) {
      EXPECT_EQ(plan_strided_copy(region, box, region, 4).loops, 0);
    }
  }
}

TEST(StridedCopyTest, RejectsARegionOutsideABuffer) {
  const Box a{{{0, 4}, {0, 4}}}, b{{{2, 6}, {0, 4}}};
  EXPECT_THROW(plan_strided_copy(a, a, b, 4), InvalidArgument);
}

TEST(PatternTest, CatchesOneWrongByteAndAMisplacedElement) {
  const std::vector<int64_t> shape{5, 7};
  const Box tile{{{1, 4}, {2, 7}}};
  for (int elem : {1, 2, 4, 8}) {
    std::vector<std::byte> buffer(tile.volume() * elem);
    fill_pattern(tile, shape, elem, buffer);
    EXPECT_EQ(count_pattern_errors(tile, shape, elem, buffer), 0);
    buffer[3 * elem] ^= std::byte{1};
    EXPECT_EQ(count_pattern_errors(tile, shape, elem, buffer), 1) << elem;
    // The same bytes read as a box shifted by one column are wrong almost everywhere.
    const Box shifted{{{1, 4}, {1, 6}}};
    EXPECT_GT(count_pattern_errors(shifted, shape, elem, buffer), tile.volume() / 2);
  }
}

}  // namespace
}  // namespace meshcast
