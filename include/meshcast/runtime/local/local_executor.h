// The in-process executor: every device's buffers live in this process and a pool of worker
// threads moves the bytes with strided copies.
#pragma once

#include <cstdint>
#include <memory>

#include "meshcast/runtime/executor.h"

namespace meshcast {

struct LocalOptions {
  int threads = 0;                // workers; 0: one per hardware thread
  int64_t split_bytes = 1 << 20;  // copies above this are cut into pieces the workers share
  // compile() refuses a plan whose staging memory (boxes relayed or kept beside a destination
  // tile, all devices together) is larger; 0: no limit.
  int64_t max_staging_bytes = 0;
};

// Devices take part in their ops in plan order (docs/concepts.md): an op becomes ready when every
// participant's previous op is complete, and its copies (each receiver pulls the slice from
// where the sender holds it) then run on any free worker. Throws InvalidArgument on options
// out of range.
std::unique_ptr<Executor> make_local_executor(const LocalOptions& options = {});

}  // namespace meshcast
