// What the run and bench verbs share to play plans on real executors: the executor of a
// --backend, one plan for every rank, and fitting a problem to the MPI ranks started.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "meshcast/runtime/executor.h"

namespace meshcast::cli {

// "local" (threads: 0 = one per core) or "mpi" (mpi_bcast: MPI_Bcast instead of the chain).
// Throws InvalidArgument on another name, or on "mpi" when MPI was not found at configure time.
std::unique_ptr<Executor> make_executor(std::string_view backend, int threads, bool mpi_bcast);

// The plan `make` returns on the leader, on every process: all ranks must play the same ops, even
// ranks built differently (another compiler or libm may round the cost model differently). An
// error the leader meets is thrown on every process.
Plan plan_on_leader(Executor& executor, const std::function<Plan()>& make);

// Grows `problem`'s cluster with idle hosts to exactly `devices` devices. Returns why it cannot
// (more devices than that, or a count that is not a multiple of the devices per host).
std::optional<std::string> fit_cluster(Resharding& problem, int devices);

// Shrinks dim 0 of the tensor so that it has about `bytes` bytes (never below one row); no-op
// when it is already that small.
void shrink_tensor(Resharding& problem, int64_t bytes);

}  // namespace meshcast::cli
