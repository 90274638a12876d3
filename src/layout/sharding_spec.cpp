#include "meshcast/layout/sharding_spec.h"

#include <fmt/format.h>

#include <cctype>
#include <set>

#include "meshcast/error.h"

namespace meshcast {
namespace {

void check_axes_unique(const std::vector<ShardingSpec::DimAxes>& dims, std::string_view text) {
  std::set<int> used;
  for (const auto& axes : dims)
    for (int a : axes)
      if (!used.insert(a).second)
        throw InvalidArgument(fmt::format(
            "bad sharding spec '{}': mesh axis {} is used twice (each axis shards one dim)", text,
            a));
}

}  // namespace

ShardingSpec::ShardingSpec(std::vector<DimAxes> dims) : dims_(std::move(dims)) {
  for (const auto& axes : dims_)
    for (int a : axes)
      if (a < 0)
        throw InvalidArgument(fmt::format("bad mesh axis {} in sharding spec: expected >= 0", a));
  check_axes_unique(dims_, to_string());
}

ShardingSpec ShardingSpec::parse(std::string_view text) {
  std::vector<DimAxes> dims;
  size_t i = 0;
  const auto fail = [&](std::string_view why) {
    throw InvalidArgument(fmt::format(
        "bad sharding spec '{}' at position {}: {} (expected entries R or S<axes>, e.g. S0RR, "
        "RS01, S0,R,R)",
        text, i, why));
  };
  if (text.empty()) fail("empty");
  while (i < text.size()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
    if (c == 'R') {
      dims.emplace_back();
      ++i;
    } else if (c == 'S') {
      ++i;
      DimAxes axes;
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
        axes.push_back(text[i++] - '0');
      if (axes.empty()) fail("'S' must be followed by mesh axis digits");
      dims.push_back(std::move(axes));
    } else {
      fail(fmt::format("unexpected '{}'", text[i]));
    }
    if (i < text.size() && text[i] == ',') {
      ++i;
      if (i == text.size()) fail("trailing ','");
    }
  }
  check_axes_unique(dims, text);
  return ShardingSpec(std::move(dims));
}

std::string ShardingSpec::to_string() const {
  std::string s;
  for (const auto& axes : dims_) {
    if (axes.empty()) {
      s += 'R';
      continue;
    }
    s += 'S';
    for (int a : axes) s += std::to_string(a);
  }
  return s;
}

void ShardingSpec::validate(int tensor_rank, int mesh_rank) const {
  if (rank() != tensor_rank)
    throw InvalidArgument(
        fmt::format("sharding spec '{}' has {} entries, but the tensor has {} dimensions",
                    to_string(), rank(), tensor_rank));
  for (const auto& axes : dims_)
    for (int a : axes)
      if (a >= mesh_rank)
        throw InvalidArgument(
            fmt::format("sharding spec '{}' uses mesh axis {}, but the mesh has {} axes (0..{})",
                        to_string(), a, mesh_rank, mesh_rank - 1));
}

}  // namespace meshcast
