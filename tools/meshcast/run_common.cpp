#include "run_common.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshcast/error.h"
#include "meshcast/plan/json.h"
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

Plan plan_on_leader(Executor& executor, const std::function<Plan()>& make) {
  std::string text;
  if (executor.is_leader()) {
    try {
      text = plan_to_json(make()).dump();
    } catch (const Error& e) {
      text = fmt::format("!{}", e.what());
    }
  }
  text = executor.share_from_leader(std::move(text));
  if (text.starts_with('!')) throw InvalidArgument(text.substr(1));
  return plan_from_json(nlohmann::json::parse(text));
}

std::optional<std::string> fit_cluster(Resharding& problem, int devices) {
  Cluster& c = problem.cluster;
  if (c.devices() > devices || devices % c.devices_per_host != 0)
    return fmt::format("needs {} devices ({} hosts x {}); {} ranks cannot play it", c.devices(),
                       c.hosts, c.devices_per_host, devices);
  c.hosts = devices / c.devices_per_host;
  // Idle hosts get the cluster-wide NIC figures.
  if (!c.host_nic_bandwidth.empty()) c.host_nic_bandwidth.resize(c.hosts, c.nic_bandwidth);
  if (!c.host_nics.empty()) c.host_nics.resize(c.hosts, c.nics_per_host);
  return std::nullopt;
}

void shrink_tensor(Resharding& problem, int64_t bytes) {
  TensorSpec& t = problem.tensor;
  if (bytes <= 0 || t.bytes() <= bytes) return;
  const int64_t row_bytes = t.bytes() / t.shape[0];
  t.shape[0] = std::max<int64_t>(1, bytes / row_bytes);
}

}  // namespace meshcast::cli
