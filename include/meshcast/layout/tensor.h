// TensorSpec: the global shape and element type of the tensor being resharded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/layout/box.h"

namespace meshcast {

// float8_e4m3fn and float8_e5m2: the 1-byte floats of FP8 checkpoints (moved as bytes; nothing
// in meshcast does arithmetic on them).
enum class DType {
  int8,
  uint8,
  int32,
  int64,
  float16,
  bfloat16,
  float32,
  float64,
  float8_e4m3fn,
  float8_e5m2
};

// Bytes of one element.
int dtype_size(DType dtype);
std::string_view to_string(DType dtype);
// Throws InvalidArgument naming the text and the accepted names.
DType parse_dtype(std::string_view text);

struct TensorSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::float32;

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t elements() const;
  int64_t bytes() const;
  // Throws InvalidArgument unless every dimension is positive and the rank is 1..kMaxRank.
  void validate() const;

  bool operator==(const TensorSpec&) const = default;
};

// Parses "1024,1024,512" (also accepts 'x' separators). Throws InvalidArgument on bad or
// non-positive sizes.
std::vector<int64_t> parse_shape(std::string_view text);
std::string shape_to_string(const std::vector<int64_t>& shape, char separator = ',');

}  // namespace meshcast
