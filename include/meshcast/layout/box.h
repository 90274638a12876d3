// Box: a half-open hyper-rectangle of global tensor indices, the unit of every slice and tile.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "meshcast/layout/inline_vector.h"

namespace meshcast {

// Half-open index range [lo, hi) along one dimension.
struct Interval {
  int64_t lo = 0;
  int64_t hi = 0;

  int64_t size() const { return hi > lo ? hi - lo : 0; }
  bool empty() const { return hi <= lo; }
  bool operator==(const Interval&) const = default;
};

Interval intersect(Interval a, Interval b);

// Tensors have at most this many dimensions.
inline constexpr int kMaxRank = 8;

struct Box {
  InlineVector<Interval, kMaxRank> dims;

  int rank() const { return static_cast<int>(dims.size()); }
  int64_t volume() const;
  bool empty() const;
  std::vector<int64_t> extents() const;
  bool contains(const Box& inner) const;

  bool operator==(const Box&) const = default;
  auto operator<=>(const Box& other) const;
};

// The whole tensor of this shape.
Box full_box(const std::vector<int64_t>& shape);
// The dimension along which `box` is longest (the first on ties): where slices are cut in parts.
int longest_dimension(const Box& box);
// Empty result (volume 0) when the boxes do not overlap; ranks must match.
Box intersect(const Box& a, const Box& b);
// "[0,512)x[0,1024)"
std::string to_string(const Box& box);
std::ostream& operator<<(std::ostream& out, const Box& box);

inline auto Box::operator<=>(const Box& other) const {
  const auto n = std::min(dims.size(), other.dims.size());
  for (size_t i = 0; i < n; ++i) {
    if (auto c = dims[i].lo <=> other.dims[i].lo; c != 0) return c;
    if (auto c = dims[i].hi <=> other.dims[i].hi; c != 0) return c;
  }
  return dims.size() <=> other.dims.size();
}

}  // namespace meshcast
