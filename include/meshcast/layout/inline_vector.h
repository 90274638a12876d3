// InlineVector: a vector of at most N elements stored in place, for per-dimension data of a Box.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <stdexcept>

namespace meshcast {

// Boxes are created by the million in decomposition, planning and simulation; keeping their
// dimensions inline makes them trivially copyable and allocation-free.
template <typename T, size_t N>
class InlineVector {
 public:
  InlineVector() = default;
  InlineVector(std::initializer_list<T> items) {
    check_capacity(items.size());
    std::copy(items.begin(), items.end(), data_.begin());
    size_ = items.size();
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  static constexpr size_t capacity() { return N; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_.data(); }
  T* end() { return data_.data() + size_; }
  const T* begin() const { return data_.data(); }
  const T* end() const { return data_.data() + size_; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void push_back(const T& item) {
    check_capacity(size_ + 1);
    data_[size_++] = item;
  }
  void resize(size_t n) {
    check_capacity(n);
    for (size_t i = size_; i < n; ++i) data_[i] = T{};
    size_ = n;
  }
  void reserve(size_t n) const { check_capacity(n); }
  void clear() { size_ = 0; }

  friend bool operator==(const InlineVector& a, const InlineVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  static void check_capacity(size_t n) {
    if (n > N) throw std::length_error("InlineVector capacity exceeded");
  }

  std::array<T, N> data_{};
  size_t size_ = 0;
};

}  // namespace meshcast
