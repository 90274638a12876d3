// Counts the process's operator new calls while enabled, to show that a compiled plan runs
// without allocating. Include from exactly one file of a test binary (it replaces operator new).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace meshcast::testing {
inline std::atomic<bool> counting_allocations = false;
inline std::atomic<int64_t> allocations = 0;
}  // namespace meshcast::testing

// The replacements pair malloc with free, which GCC's inliner cannot see through at -O3.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace meshcast::testing {
inline void* counted_malloc(std::size_t size) noexcept {
  if (counting_allocations.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace meshcast::testing

// Every form that the default array and nothrow forms do not already route through these (the
// standard library's temporary buffers use the nothrow form, and its memory comes back to
// operator delete): all of them must pair with free.
void* operator new(std::size_t size) {
  if (void* p = meshcast::testing::counted_malloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return meshcast::testing::counted_malloc(size);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop
