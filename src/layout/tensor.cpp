#include "meshcast/layout/tensor.h"

#include <fmt/format.h>

#include <array>
#include <charconv>

#include "meshcast/checked.h"
#include "meshcast/error.h"

namespace meshcast {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int size;
};

constexpr std::array<DTypeInfo, 10> kDTypes{{{DType::int8, "int8", 1},
                                             {DType::uint8, "uint8", 1},
                                             {DType::int32, "int32", 4},
                                             {DType::int64, "int64", 8},
                                             {DType::float16, "float16", 2},
                                             {DType::bfloat16, "bfloat16", 2},
                                             {DType::float32, "float32", 4},
                                             {DType::float64, "float64", 8},
                                             {DType::float8_e4m3fn, "float8_e4m3fn", 1},
                                             {DType::float8_e5m2, "float8_e5m2", 1}}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  throw InvalidArgument(fmt::format("unknown dtype value {}", static_cast<int>(dtype)));
}

}  // namespace

int dtype_size(DType dtype) {
  return info(dtype).size;
}
std::string_view to_string(DType dtype) {
  return info(dtype).name;
}

DType parse_dtype(std::string_view text) {
  for (const auto& entry : kDTypes)
    if (entry.name == text) return entry.dtype;
  throw InvalidArgument(fmt::format(
      "bad dtype '{}': expected one of int8, uint8, int32, int64, float16, bfloat16, float32, "
      "float64, float8_e4m3fn, float8_e5m2",
      text));
}

int64_t TensorSpec::elements() const {
  const auto n = checked_product(shape);
  if (!n)
    throw InvalidArgument(
        fmt::format("tensor {} has more than {} elements", shape_to_string(shape, 'x'), INT64_MAX));
  return *n;
}

int64_t TensorSpec::bytes() const {
  const auto n = checked_multiply(elements(), dtype_size(dtype));
  if (!n)
    throw InvalidArgument(fmt::format("tensor {} of {} has {} elements, more than {} bytes",
                                      shape_to_string(shape, 'x'), to_string(dtype), elements(),
                                      INT64_MAX));
  return *n;
}

void TensorSpec::validate() const {
  if (shape.empty() || rank() > kMaxRank)
    throw InvalidArgument(
        fmt::format("bad tensor rank {}: expected 1 to {} dimensions", rank(), kMaxRank));
  for (int i = 0; i < rank(); ++i)
    if (shape[i] <= 0)
      throw InvalidArgument(fmt::format("bad tensor shape {}: dimension {} is {}, expected > 0",
                                        shape_to_string(shape), i, shape[i]));
  bytes();  // throws when the element or byte count does not fit int64
}

std::vector<int64_t> parse_shape(std::string_view text) {
  std::vector<int64_t> shape;
  size_t pos = 0;
  while (true) {
    const size_t end = text.find_first_of(",x", pos);
    const auto item = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      throw InvalidArgument(fmt::format(
          "bad shape '{}': '{}' is not an integer (expected e.g. 1024,1024,512)", text, item));
    if (value <= 0)
      throw InvalidArgument(fmt::format("bad shape '{}': size {} must be positive", text, value));
    shape.push_back(value);
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  if (static_cast<int>(shape.size()) > kMaxRank)
    throw InvalidArgument(
        fmt::format("bad shape '{}': {} dimensions, at most {}", text, shape.size(), kMaxRank));
  if (!checked_product(shape))
    throw InvalidArgument(
        fmt::format("bad shape '{}': more than {} elements in all", text, INT64_MAX));
  return shape;
}

std::string shape_to_string(const std::vector<int64_t>& shape, char separator) {
  return fmt::format("{}", fmt::join(shape, std::string(1, separator)));
}

}  // namespace meshcast
