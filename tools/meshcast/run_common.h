// The executor of a --backend, shared by the run and bench verbs (the suites library plays plans
// on any executor; which backends exist is decided when the command is built).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "meshcast/runtime/executor.h"

namespace meshcast::cli {

// "local" (threads: 0 = one per core) or "mpi" (mpi_bcast: MPI_Bcast instead of the chain).
// Throws InvalidArgument on another name, or on "mpi" when MPI was not found at configure time.
std::unique_ptr<Executor> make_executor(std::string_view backend, int threads, bool mpi_bcast);

}  // namespace meshcast::cli
