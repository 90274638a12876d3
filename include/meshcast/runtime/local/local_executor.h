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

// An op is released when every op it waits for is complete (the plan's rule of docs/concepts.md,
// and the staging-memory reuse of placement: execution_dependencies), and its copies (each
// receiver pulls the slice from where the sender holds it) then run on any free worker, so a
// device's ops with different ports overlap. Throws InvalidArgument on options out of range.
std::unique_ptr<Executor> make_local_executor(const LocalOptions& options = {});

}  // namespace meshcast
