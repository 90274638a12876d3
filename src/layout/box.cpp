#include "meshcast/layout/box.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "meshcast/error.h"

namespace meshcast {

Interval intersect(Interval a, Interval b) {
  return {std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
}

int64_t Box::volume() const {
  int64_t v = 1;
  for (const auto& d : dims) v *= d.size();
  return v;
}

bool Box::empty() const {
  return std::any_of(dims.begin(), dims.end(), [](const Interval& d) { return d.empty(); });
}

std::vector<int64_t> Box::extents() const {
  std::vector<int64_t> e;
  e.reserve(dims.size());
  for (const auto& d : dims) e.push_back(d.size());
  return e;
}

bool Box::contains(const Box& inner) const {
  if (inner.rank() != rank()) return false;
  if (inner.empty()) return true;
  for (int i = 0; i < rank(); ++i)
    if (inner.dims[i].lo < dims[i].lo || inner.dims[i].hi > dims[i].hi) return false;
  return true;
}

Box full_box(const std::vector<int64_t>& shape) {
  Box box;
  box.dims.reserve(shape.size());
  for (auto n : shape) box.dims.push_back({0, n});
  return box;
}

int longest_dimension(const Box& box) {
  int longest = 0;
  for (int d = 1; d < box.rank(); ++d)
    if (box.dims[d].size() > box.dims[longest].size()) longest = d;
  return longest;
}

Box intersect(const Box& a, const Box& b) {
  if (a.rank() != b.rank())
    throw InvalidArgument(
        fmt::format("cannot intersect boxes of rank {} and {}", a.rank(), b.rank()));
  Box out;
  out.dims.reserve(a.dims.size());
  for (int i = 0; i < a.rank(); ++i) out.dims.push_back(intersect(a.dims[i], b.dims[i]));
  return out;
}

std::string to_string(const Box& box) {
  std::string s;
  for (int i = 0; i < box.rank(); ++i) {
    if (i) s += 'x';
    s += fmt::format("[{},{})", box.dims[i].lo, box.dims[i].hi);
  }
  return s;
}

std::ostream& operator<<(std::ostream& out, const Box& box) {
  return out << to_string(box);
}

}  // namespace meshcast
