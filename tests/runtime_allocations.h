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
void* operator new(std::size_t size) {
  if (meshcast::testing::counting_allocations.load(std::memory_order_relaxed))
    meshcast::testing::allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop
