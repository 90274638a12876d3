// Flow-level network simulator: plays a Plan on a Cluster and reports when each op ran and how
// busy each link was (model in docs/simulator.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast {
namespace sim {
class Network;
}

struct OpTiming {
  int id = 0;  // Op::id
  double start_s = 0;
  double end_s = 0;
};

// One direction of a device link or of a host NIC.
struct LinkStats {
  std::string name;      // "dev3.out", "dev3.in", "host1.nic0.out", "host1.nic0.in"
  int host = -1;         // the host of a NIC link; -1 for a device link
  double bandwidth = 0;  // bytes per second
  double busy_s = 0;     // time with at least one flow moving data over it
  int64_t bytes = 0;     // bytes it carried
};

// The rate a link carries from `time_s` on, until its next sample (recorded on request, for
// traces).
struct LinkRateSample {
  int link = 0;  // index into SimResult::links
  double time_s = 0;
  double bytes_per_s = 0;
};

struct SimOptions {
  bool record_link_rates = false;
};

struct SimResult {
  double time_s = 0;                       // when the last op ends
  std::vector<OpTiming> ops;               // in plan order
  std::vector<LinkStats> links;            // every link of the cluster: devices first, then NICs
  std::vector<LinkRateSample> link_rates;  // only with SimOptions::record_link_rates

  int64_t flows = 0;   // flows that crossed at least one link
  int64_t events = 0;  // simulation steps (times at which the set of flows changed)
};

// Plays `plan` on plan.batch.cluster, or on `cluster` (whose devices must include every device
// the plan names). Execution semantics of docs/concepts.md: an op starts when every op it depends
// on has ended (op_dependencies in meshcast/plan/dependencies.h: full-duplex devices). Throws
// InvalidArgument naming the op when an op is malformed or names a device outside the cluster.
SimResult simulate(const Plan& plan);
SimResult simulate(const Plan& plan, const Cluster& cluster, const SimOptions& options = {});

// The finish time of `ops` played on batch.cluster exactly as simulate() plays a plan of them
// (same model, same time), without the per-op and per-link reports, and how many elementary steps
// the simulation took (ops and flows set up, flows re-rated, events): the planner searches against
// this time and counts these steps against its work budget.
struct SimTime {
  double time_s = 0;
  int64_t steps = 0;
};
SimTime simulate_time(const Batch& batch, const std::vector<Op>& ops);

// How long one op of `batch` takes when nothing else runs, in the simulator's model of that op (its
// latency and pipeline fill, then its bytes at the rate of its most loaded link): the planner's
// greedy times ops with it, so planner and simulator share one op model. The batch must outlive it.
class OpTimer {
 public:
  explicit OpTimer(const Batch& batch);
  ~OpTimer();
  double time_of(const Op& op) const;

 private:
  const Batch* batch_;
  std::unique_ptr<sim::Network> net_;
};

// A chained broadcast's pipeline (docs/simulator.md#ops-as-flows): `bytes` cut into chunks of
// `chunk` (at most `bytes`; 0 = one message), each one message, forwarded through hops of the given
// capacities (bytes/s, in chain order) with `latency` per message. Before its flow moves, the op
// pays `delay_s`: a latency per hop, and the first chunk's time on every hop but the slowest (the
// fill). Its flow then moves at most at `max_rate`: each hop keeps a window of chunks in flight
// (chain_window: the hop's bandwidth x round trip, within its bounds), so after the first chunk
// it moves a window per round trip (chain_window_limit; infinite for one chunk).
// The simulator plays chains by it and the planner chooses chunks by it.
struct ChainPipeline {
  double delay_s = 0;
  double max_rate = 0;
};
ChainPipeline chain_pipeline(int64_t bytes, int64_t chunk,
                             const std::vector<double>& hop_capacities, double latency);
// The fastest `bytes` in chunks of `chunk` pass hops of the given capacities (bytes/s) with
// `latency` each way, each hop keeping its window (chain_window) in flight: the slowest hop's
// chain_window_rate.
double chain_window_limit(int64_t bytes, int64_t chunk, const std::vector<double>& hop_capacities,
                          double latency);

// The `top` links that carried bytes, ordered by the time their bytes need at full bandwidth
// (the bottlenecks first; ties by name). Pointers into `sim.links`.
std::vector<const LinkStats*> busiest_links(const SimResult& sim, int top);

}  // namespace meshcast
