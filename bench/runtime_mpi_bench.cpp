// One sender to every other rank, the same bytes four ways: our chunked chain broadcast (mpi
// executor), MPI_Bcast on MPI_COMM_WORLD, MPI_Send to every receiver in turn, and one MPI_Send
// to a single receiver (the time a perfectly pipelined chain approaches when every hop has a
// link of its own). Medians over repeats, printed by rank 0.
// Run: mpirun -np 4 runtime_mpi_bench [bytes...]
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "meshcast/planner/planner.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/measure.h"
#include "meshcast/runtime/mpi/mpi_executor.h"

namespace meshcast {
namespace {

constexpr int kRepeats = 15;

using Clock = std::chrono::steady_clock;

// Median over repeats of the slowest rank's time of `step`, each repeat after a barrier.
template <typename Step>
double timed(Step step) {
  std::vector<double> times;
  for (int i = 0; i < kRepeats + 1; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    step();
    double t = std::chrono::duration<double>(Clock::now() - start).count(), slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i > 0) times.push_back(slowest);  // the first is a warmup
  }
  return median(times);
}

// A 1-D int8 tensor of `bytes` on rank 0, replicated on every other rank, one host per rank.
Resharding one_to_all(int64_t bytes, int ranks) {
  Resharding p;
  p.tensor = {{bytes}, DType::int8};
  p.cluster.hosts = ranks;
  p.cluster.devices_per_host = 1;
  std::vector<DeviceId> receivers;
  for (int r = 1; r < ranks; ++r) receivers.push_back(r);
  p.src = Layout{Mesh({1}, {0}), ShardingSpec::parse("R")};
  p.dst = Layout{Mesh({ranks - 1}, receivers), ShardingSpec::parse("R")};
  return p;
}

void run(const std::vector<int64_t>& sizes) {
  auto executor = make_mpi_executor();
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (rank == 0)
    fmt::print(
        "{} ranks, median of {} repeats; GB/s = bytes / time; send each: MPI_Send to every "
        "receiver in turn; send one: to one receiver; vs best: the better of MPI_Bcast and send "
        "each / chain; vs one: send one / chain\n{:>10} {:>9} {:>11} {:>11} {:>11} {:>11} {:>10} "
        "{:>7} {:>7}\n",
        ranks, kRepeats, "bytes", "chunk", "chain s", "MPI_Bcast s", "send each s", "send one s",
        "chain GB/s", "vs best", "vs one");
  for (const int64_t bytes : sizes) {
    std::vector<std::byte> buffer(bytes);
    const double bcast = timed([&] {
      for (int64_t at = 0; at < bytes; at += 1 << 30)
        MPI_Bcast(buffer.data() + at, static_cast<int>(std::min<int64_t>(1 << 30, bytes - at)),
                  MPI_BYTE, 0, MPI_COMM_WORLD);
    });
    // Plain point-to-point from rank 0 to receivers 1..last, one after the other.
    const auto send_to = [&](int last) {
      return timed([&] {
        for (int r = 1; r <= last; ++r) {
          if (rank == 0)
            MPI_Send(buffer.data(), static_cast<int>(bytes), MPI_BYTE, r, 0, MPI_COMM_WORLD);
          if (rank == r)
            MPI_Recv(buffer.data(), static_cast<int>(bytes), MPI_BYTE, 0, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        }
      });
    };
    const double send_one = send_to(1);
    const double send_each = send_to(ranks - 1);
    std::vector<int64_t> chunks;
    for (const int64_t chunk : {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20})
      if (chunk < bytes) chunks.push_back(chunk);
    chunks.push_back(bytes);  // one whole message: no pipelining
    for (const int64_t chunk : chunks) {
      const Resharding p = one_to_all(bytes, ranks);
      const Plan plan =
          make_plan(p, {.strategy = Strategy::broadcast, .chunk_bytes = chunk, .search_effort = 0});
      const auto compiled = executor->compile(plan);
      auto tiles = allocate_tile_buffers(p, compiled->devices_here());
      prepare_tiles(p, tiles);
      const auto views = buffer_views(tiles);
      const double chain = timed([&] { compiled->run(views); });
      const int64_t errors = executor->sum_over_processes(count_destination_errors(p, tiles));
      if (rank == 0)
        fmt::print(
            "{:>10} {:>9} {:>11.6f} {:>11.6f} {:>11.6f} {:>11.6f} {:>10.3f} {:>6.0f}% "
            "{:>6.0f}%{}\n",
            bytes, chunk, chain, bcast, send_each, send_one, bytes / chain / 1e9,
            100 * std::min(bcast, send_each) / chain, 100 * send_one / chain,
            errors ? " WRONG BYTES" : "");
    }
  }
}

}  // namespace
}  // namespace meshcast

int main(int argc, char** argv) {
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {int64_t{1} << 20, int64_t{16} << 20, int64_t{64} << 20};
  meshcast::run(sizes);
  return 0;
}
