// The executor of a backend named at run time, shared by the CLI and the Python package (which
// backends exist is decided when meshcast is built).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "meshcast/runtime/executor.h"

namespace meshcast {

struct ExecutorOptions {
  int threads = 0;                // local: worker threads, 0 = one per hardware thread
  bool mpi_bcast = false;         // mpi: broadcasts by MPI_Bcast instead of the chunked chain
  int64_t max_staging_bytes = 0;  // both: staging memory a compiled plan may hold; 0 = no limit
  // mpi: seconds compiling or one wait() may block (a peer that died or hangs) before it throws
  // Timeout; 0 = forever. The local backend has no peers to wait for.
  double timeout_s = 0;
};

// "local" or "mpi". Throws InvalidArgument on another name, on "mpi" when meshcast was built
// without MPI, or on options out of range.
std::unique_ptr<Executor> make_executor(std::string_view backend,
                                        const ExecutorOptions& options = {});

}  // namespace meshcast
