#include "meshcast/layout/sharding_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "meshcast/error.h"
#include "meshcast/layout/box.h"

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

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits at the commas outside parentheses; "" gives no items.
std::vector<std::string_view> split_top_level(std::string_view text, std::string_view whole) {
  std::vector<std::string_view> items;
  if (trim(text).empty()) return items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '(') ++depth;
    if (i < text.size() && text[i] == ')') --depth;
    if (depth < 0)
      throw InvalidArgument(fmt::format("bad sharding spec '{}': unbalanced ')'", whole));
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      items.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (depth != 0)
    throw InvalidArgument(fmt::format("bad sharding spec '{}': unbalanced '('", whole));
  // Python allows one trailing comma: "(dp,)" or "P(None, tp,)".
  if (items.size() > 1 && items.back().empty()) items.pop_back();
  return items;
}

// The text between `open` and the matching last character `close`, when `text` is
// "<prefix><open>...<close>" for one of `prefixes`; otherwise nullopt-like empty flag.
bool strip_call(std::string_view& text, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view prefix : prefixes) {
    if (text.size() >= prefix.size() + 2 && text.substr(0, prefix.size()) == prefix &&
        text[prefix.size()] == '(' && text.back() == ')') {
      text = text.substr(prefix.size() + 1, text.size() - prefix.size() - 2);
      return true;
    }
  }
  return false;
}

bool parse_int(std::string_view s, int& value) {
  s = trim(s);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

// DTensor placements, one per mesh axis, in mesh order.
ShardingSpec parse_placements(std::string_view text, const SpecContext& context) {
  std::string_view body = trim(text);
  if (body.size() >= 2 && body.front() == '[' && body.back() == ']')
    body = body.substr(1, body.size() - 2);
  const auto items = split_top_level(body, text);
  const auto fail = [&](std::string_view item, std::string_view why) {
    throw InvalidArgument(fmt::format(
        "bad DTensor placements '{}': '{}' {} (expected one Shard(dim) or Replicate() per mesh "
        "axis, e.g. Shard(0),Replicate())",
        text, item, why));
  };
  if (items.empty()) fail("", "is empty");
  if (context.mesh_rank > 0 && static_cast<int>(items.size()) != context.mesh_rank)
    throw InvalidArgument(fmt::format(
        "bad DTensor placements '{}': {} placements, but the mesh has {} axes (one per axis)", text,
        items.size(), context.mesh_rank));
  std::vector<std::pair<int, int>> shards;  // (tensor dim, mesh axis)
  int rank = context.tensor_rank;
  for (size_t axis = 0; axis < items.size(); ++axis) {
    std::string_view item = items[axis];
    std::string_view args = item;
    if (strip_call(args, {"Replicate"})) {
      if (!trim(args).empty()) fail(item, "takes no argument");
      continue;
    }
    if (strip_call(args, {"Partial"}))
      fail(item, "is a pending reduction, not a layout meshcast can move");
    if (!strip_call(args, {"Shard"})) fail(item, "is not a placement");
    args = trim(args);
    if (args.substr(0, 3) == "dim") {
      args = trim(args.substr(3));
      if (args.empty() || args.front() != '=') fail(item, "needs dim=<int>");
      args.remove_prefix(1);
    }
    int dim = 0;
    if (!parse_int(args, dim)) fail(item, "needs an integer tensor dim");
    if (dim < 0) {
      if (context.tensor_rank == 0)
        fail(item, "counts from the end, but the tensor rank is unknown");
      dim += context.tensor_rank;
      if (dim < 0) fail(item, fmt::format("is outside a tensor of {} dims", context.tensor_rank));
    }
    if (context.tensor_rank > 0 && dim >= context.tensor_rank)
      fail(item, fmt::format("is outside a tensor of {} dims", context.tensor_rank));
    // Without the rank, the dim still sizes the spec: no tensor has more than kMaxRank dims.
    if (dim >= kMaxRank)
      fail(item, fmt::format("is outside any tensor (at most {} dims)", kMaxRank));
    rank = std::max(rank, dim + 1);
    shards.emplace_back(dim, static_cast<int>(axis));
  }
  std::vector<ShardingSpec::DimAxes> dims(std::max(rank, 1));
  for (const auto& [dim, axis] : shards) dims[dim].push_back(axis);
  // Sized before dims moves: the order in which arguments are evaluated is unspecified.
  std::vector<bool> nested(dims.size(), true);
  return ShardingSpec(std::move(dims), std::move(nested));
}

// JAX PartitionSpec entries over named mesh axes.
ShardingSpec parse_partition_spec(std::string_view text, std::string_view body,
                                  const SpecContext& context) {
  const auto axis_named = [&](std::string_view name, std::string_view entry) {
    name = trim(name);
    if (name.size() >= 2 && (name.front() == '\'' || name.front() == '"') &&
        name.back() == name.front())
      name = name.substr(1, name.size() - 2);
    const auto& names = context.axis_names;
    if (names.empty()) {
      int axis = 0;
      if (parse_int(name, axis) && axis >= 0 &&
          (context.mesh_rank == 0 || axis < context.mesh_rank))
        return axis;
      throw InvalidArgument(fmt::format(
          "bad PartitionSpec '{}': entry '{}' names mesh axis '{}', but the mesh axes have no "
          "names (give the axis names, or number the axes 0..{})",
          text, entry, name, std::max(context.mesh_rank, 1) - 1));
    }
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end())
      throw InvalidArgument(fmt::format(
          "bad PartitionSpec '{}': entry '{}' names mesh axis '{}' (expected one of {})", text,
          entry, name, fmt::join(names, ", ")));
    return static_cast<int>(it - names.begin());
  };
  std::vector<ShardingSpec::DimAxes> dims;
  for (std::string_view entry : split_top_level(body, text)) {
    ShardingSpec::DimAxes axes;
    std::string_view group = entry;
    if (entry == "None" || entry.empty()) {
      if (entry.empty())
        throw InvalidArgument(
            fmt::format("bad PartitionSpec '{}': empty entry (expected None, an axis name or a "
                        "tuple of axis names)",
                        text));
    } else if (strip_call(group, {""})) {
      for (std::string_view name : split_top_level(group, text))
        axes.push_back(axis_named(name, entry));
    } else {
      axes.push_back(axis_named(entry, entry));
    }
    dims.push_back(std::move(axes));
  }
  if (context.tensor_rank > 0 && static_cast<int>(dims.size()) > context.tensor_rank)
    throw InvalidArgument(
        fmt::format("bad PartitionSpec '{}': {} entries, but the tensor has {} dimensions", text,
                    dims.size(), context.tensor_rank));
  dims.resize(std::max<size_t>({dims.size(), static_cast<size_t>(context.tensor_rank), 1}));
  check_axes_unique(dims, text);
  return ShardingSpec(std::move(dims));
}

}  // namespace

ShardingSpec::ShardingSpec(std::vector<DimAxes> dims, std::vector<bool> nested)
    : dims_(std::move(dims)), nested_(std::move(nested)) {
  for (const auto& axes : dims_)
    for (int a : axes)
      // The spec's text form writes each axis as one digit ("S01" is axes 0 and 1).
      if (a < 0 || a > 9)
        throw InvalidArgument(fmt::format(
            "bad mesh axis {} in sharding spec: expected 0..9 (a mesh axis beyond 9 can only "
            "replicate)",
            a));
  if (nested_.empty()) nested_.assign(dims_.size(), false);
  if (nested_.size() != dims_.size())
    throw InvalidArgument(
        fmt::format("sharding spec has {} dims but {} nested flags", dims_.size(), nested_.size()));
  for (size_t d = 0; d < dims_.size(); ++d)
    if (dims_[d].size() < 2) nested_[d] = false;
  check_axes_unique(dims_, to_string());
}

ShardingSpec ShardingSpec::parse(std::string_view text) {
  std::vector<DimAxes> dims;
  std::vector<bool> nested;
  size_t i = 0;
  const auto fail = [&](std::string_view why) {
    throw InvalidArgument(fmt::format(
        "bad sharding spec '{}' at position {}: {} (expected entries R or S<axes>, e.g. S0RR, "
        "RS01, S0,R,R, or nested S0/1)",
        text, i, why));
  };
  const auto digit_at = [&](size_t k) {
    return k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]));
  };
  if (text.empty()) fail("empty");
  while (i < text.size()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
    if (c == 'R') {
      dims.emplace_back();
      nested.push_back(false);
      ++i;
    } else if (c == 'S') {
      ++i;
      DimAxes axes;
      while (digit_at(i)) axes.push_back(text[i++] - '0');
      if (axes.empty()) fail("'S' must be followed by mesh axis digits");
      const bool is_nested = i < text.size() && text[i] == '/';
      if (is_nested && axes.size() != 1) fail("a nested dim separates every axis with '/'");
      while (i < text.size() && text[i] == '/') {
        ++i;
        if (!digit_at(i) || digit_at(i + 1)) fail("'/' must be followed by one mesh axis digit");
        axes.push_back(text[i++] - '0');
      }
      dims.push_back(std::move(axes));
      nested.push_back(is_nested);
    } else {
      fail(fmt::format("unexpected '{}'", text[i]));
    }
    if (i < text.size() && text[i] == ',') {
      ++i;
      if (i == text.size()) fail("trailing ','");
    }
  }
  check_axes_unique(dims, text);
  return ShardingSpec(std::move(dims), std::move(nested));
}

std::string ShardingSpec::to_string() const {
  std::string s;
  for (size_t d = 0; d < dims_.size(); ++d) {
    const auto& axes = dims_[d];
    if (axes.empty()) {
      s += 'R';
      continue;
    }
    s += 'S';
    for (size_t k = 0; k < axes.size(); ++k) {
      if (k > 0 && nested_[d]) s += '/';
      s += std::to_string(axes[k]);
    }
  }
  return s;
}

std::string ShardingSpec::quoted() const {
  if (source_.empty()) return fmt::format("'{}'", to_string());
  return fmt::format("'{}' (read as {})", source_, to_string());
}

void ShardingSpec::validate(int tensor_rank, int mesh_rank) const {
  if (rank() != tensor_rank)
    throw InvalidArgument(fmt::format(
        "sharding spec {} has {} entries, but the tensor has {} dimensions{}", quoted(), rank(),
        tensor_rank,
        source_.empty() ? ""
                        : " (DTensor placements and PartitionSpecs do not say the tensor's rank: "
                          "parse them with SpecContext::tensor_rank)"));
  for (const auto& axes : dims_)
    for (int a : axes)
      if (a >= mesh_rank)
        throw InvalidArgument(
            fmt::format("sharding spec {} uses mesh axis {}, but the mesh has {} axes (0..{})",
                        quoted(), a, mesh_rank, mesh_rank - 1));
}

ShardingSpec parse_sharding_spec(std::string_view text, const SpecContext& context) {
  const auto& names = context.axis_names;
  if (!names.empty() && context.mesh_rank > 0 &&
      static_cast<int>(names.size()) != context.mesh_rank)
    throw InvalidArgument(fmt::format("{} mesh axis names ({}) for a mesh of {} axes", names.size(),
                                      fmt::join(names, ","), context.mesh_rank));
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty() ||
        std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i)
      throw InvalidArgument(fmt::format(
          "bad mesh axis names '{}': expected distinct non-empty names, one per mesh axis",
          fmt::join(names, ",")));
  std::string_view body = trim(text);
  ShardingSpec spec;
  if (strip_call(body, {"P", "PartitionSpec", ""}))
    spec = parse_partition_spec(text, body, context);
  else if (body.find('(') != std::string_view::npos)
    spec = parse_placements(text, context);
  else
    return ShardingSpec::parse(body);
  spec.source_ = std::string(trim(text));
  return spec;
}

}  // namespace meshcast
