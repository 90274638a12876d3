#include "meshcast/runtime/executors.h"

#include <fmt/format.h>

#include "meshcast/error.h"
#include "meshcast/runtime/local/local_executor.h"
#include "meshcast/runtime/watchdog.h"
#ifdef MESHCAST_WITH_MPI
#include "meshcast/runtime/mpi/mpi_executor.h"
#endif

namespace meshcast {

std::unique_ptr<Executor> make_executor(std::string_view backend, const ExecutorOptions& options) {
  if (options.max_staging_bytes < 0)
    throw InvalidArgument(fmt::format("bad staging limit {} bytes: expected >= 0 (0: no limit)",
                                      options.max_staging_bytes));
  check_timeout(options.timeout_s);
  if (backend == "local")
    return make_local_executor(
        {.threads = options.threads, .max_staging_bytes = options.max_staging_bytes});
  if (backend == "mpi") {
#ifdef MESHCAST_WITH_MPI
    return make_mpi_executor(
        {.broadcast = options.mpi_bcast ? MpiBroadcast::mpi_bcast : MpiBroadcast::chain,
         .max_staging_bytes = options.max_staging_bytes,
         .timeout_s = options.timeout_s});
#else
    throw InvalidArgument(
        "backend mpi: this meshcast was built without MPI (Open MPI was not found when it was "
        "configured); use the local backend");
#endif
  }
  throw InvalidArgument(fmt::format("bad backend '{}': expected local or mpi", backend));
}

}  // namespace meshcast
