// What every fuzz harness shares. meshcast's own errors (Error and its kinds) are the expected
// answer to bad input; anything else — another exception, a crash, a sanitizer report, a
// timeout or an allocation beyond libFuzzer's limit — is a finding, and so is accepted input
// that does not survive a round trip through its writer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "meshcast/error.h"
#include "meshcast/plan/json_input.h"

namespace meshcast::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `accept` on the input; a meshcast::Error means the input was refused as it should be.
template <typename Accept>
int refuse_or(Accept accept) {
  try {
    accept();
  } catch (const Error&) {
  }
  return 0;
}

// Aborts (libFuzzer keeps the input) when an accepted value does not round-trip.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "round trip failed: %s\n", what);
  std::abort();
}

}  // namespace meshcast::fuzz
