// Seconds (a double, as users give timeouts and delays) as a steady-clock duration: the one
// conversion every timeout, delay and emulated time goes through. A plain cast overflows the
// clock's int64 nanoseconds above about 292 years (a timeout of 1e10 s became negative and fired
// at once).
#pragma once

#include <algorithm>
#include <chrono>

namespace meshcast {

// The longest time meshcast waits or sleeps for: about 31.7 years, so that the steady clock's
// now() plus it still fits its int64 nanoseconds. A timeout above it is the same as "forever";
// a delay that must really elapse is refused above it by whoever takes it.
inline constexpr double kLongestSeconds = 1e9;

// `seconds` as a steady-clock duration, clamped to 0..kLongestSeconds (NaN gives 0: callers
// refuse NaN and negative values with their own messages first).
inline std::chrono::steady_clock::duration seconds_to_duration(double seconds) {
  const double clamped = seconds > 0 ? std::min(seconds, kLongestSeconds) : 0.0;
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(clamped));
}

}  // namespace meshcast
