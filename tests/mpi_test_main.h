// The main of the GoogleTest binaries run under mpirun, one rank per device (mpi_test_main.cpp):
// it makes one MPI executor for the whole run before any test, and only rank 0 prints the report.
#pragma once

#include "meshcast/runtime/executor.h"

namespace meshcast::testing {

// Set by main before any test runs: the executor every rank shares, and the number of ranks.
extern Executor* mpi_world;
extern int mpi_ranks;

}  // namespace meshcast::testing
