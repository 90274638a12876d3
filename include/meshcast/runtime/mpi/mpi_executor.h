// The Open MPI executor: one rank per device of the plan's cluster, rank r plays device r.
#pragma once

#include <memory>

#include "meshcast/runtime/executor.h"

namespace meshcast {

enum class MpiBroadcast {
  chain,      // our chunked chain over point-to-point, receivers in plan order (the default)
  mpi_bcast,  // MPI_Bcast on a communicator of the op's devices, created once and cached
};

struct MpiOptions {
  MpiBroadcast broadcast = MpiBroadcast::chain;
  // compile() refuses, on every rank, a plan for which a rank's staging memory (boxes it relays
  // or keeps beside its destination tile, and the buffer it packs messages in) is larger; 0: no
  // limit.
  int64_t max_staging_bytes = 0;
  // Seconds compiling or one run may last before it throws Timeout on this rank; 0: forever (the
  // CLI bounds its phases with a Watchdog instead, which ends the process).
  double timeout_s = 0;
};

// Open MPI as a transport of the one executor (transport.h). Initializes MPI on first use (thread
// level serialized or better, finalized at exit) and duplicates MPI_COMM_WORLD. Each rank starts an
// op when the ops it waits for (execution_dependencies) that the rank takes part in are finished
// there, and progresses every started op at once with nonblocking requests (docs/executors.md), so
// a device sends while it receives and any plan place_plan accepts runs without deadlock. Tags are
// (plan slot, op index), checked against MPI_TAG_UB; allgathers run on cached communicators of
// their devices. compile() is collective over the ranks of the plan's ops and throws
// InvalidArgument on every rank when the number of ranks differs from the cluster's devices.
std::unique_ptr<Executor> make_mpi_executor(const MpiOptions& options = {});

}  // namespace meshcast
