// Integer arithmetic that reports overflow instead of wrapping, for the element, byte and device
// counts formed from user input (shapes, meshes, clusters, plan files).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace meshcast {

// a * b, or nullopt when the product does not fit int64.
inline std::optional<int64_t> checked_multiply(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// The product of `values` (1 when empty), or nullopt when it does not fit int64.
inline std::optional<int64_t> checked_product(std::span<const int64_t> values) {
  int64_t product = 1;
  for (int64_t v : values) {
    const auto next = checked_multiply(product, v);
    if (!next) return std::nullopt;
    product = *next;
  }
  return product;
}

}  // namespace meshcast
