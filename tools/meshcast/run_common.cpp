#include "run_common.h"

#include <fmt/format.h>

#include "meshcast/error.h"
#include "meshcast/runtime/local/local_executor.h"
#ifdef MESHCAST_CLI_WITH_MPI
#include "meshcast/runtime/mpi/mpi_executor.h"
#endif

namespace meshcast::cli {

std::unique_ptr<Executor> make_executor(std::string_view backend, int threads, bool mpi_bcast) {
  if (backend == "local") return make_local_executor({.threads = threads});
  if (backend == "mpi") {
#ifdef MESHCAST_CLI_WITH_MPI
    return make_mpi_executor(
        {.broadcast = mpi_bcast ? MpiBroadcast::mpi_bcast : MpiBroadcast::chain});
#else
    (void)mpi_bcast;
    throw InvalidArgument(
        "--backend mpi: this meshcast was built without MPI (Open MPI was not found when it was "
        "configured); use --backend local");
#endif
  }
  throw InvalidArgument(fmt::format("bad --backend '{}': expected local or mpi", backend));
}

}  // namespace meshcast::cli
