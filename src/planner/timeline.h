// Internal to the planner: the analytic cost model balance=order builds its greedy schedules on
// (each device's sending, each device's receiving and each host NIC direction are serial
// resources; the execution rule serialises only sending, and keeping receipts apart is a heuristic
// of the search). Plans are judged by the simulator's time (estimate()), not by this model.
#pragma once

#include <cstdint>
#include <vector>

#include "meshcast/dense_index.h"
#include "meshcast/plan/plan.h"
#include "meshcast/sim/simulator.h"

namespace meshcast::detail {

// How long an op takes and which serial resources (device ports, NIC directions) it holds
// meanwhile: its devices' send and receive ports, plus the NICs its hops cross. Durations are
// the simulator's for the op alone (OpTimer). Resources are numbered densely over the devices
// given and their NICs, so tables follow the problem, not the cluster.
class CostModel {
 public:
  // `devices`: every device the ops to be costed name (any order, repeats allowed). With
  // `receipts_over_nics_at_once`, a device's receipts from other hosts do not hold its receive
  // port (only their NICs): its link takes in several NICs' worth at once.
  CostModel(const Batch& batch, const std::vector<DeviceId>& devices,
            bool receipts_over_nics_at_once = false);
  struct Cost {
    double duration = 0;
    std::vector<int> resources;
  };
  Cost cost_of(const Op& op) const;
  int resources() const { return 2 * devices_.size() + nic_directions_.size(); }
  // Devices are numbered densely too: 0 .. devices() - 1.
  int devices() const { return devices_.size(); }
  int device_index(DeviceId d) const { return devices_.index_of(d); }
  // The resource of device `d`'s send (or receive) port, and of the NIC direction it sends (or
  // receives) through.
  int port(DeviceId d, bool in) const { return 2 * device_index(d) + (in ? 1 : 0); }
  int nic(DeviceId d, bool in) const { return 2 * devices_.size() + nic_direction_[port(d, in)]; }

 private:
  const Batch* batch_;
  bool receipts_over_nics_at_once_;
  OpTimer timer_;
  DenseIndex devices_;
  DenseIndex nic_directions_;  // nic_key(d, in) of the devices' NICs
  // Per port (as port() numbers them): the index of its NIC direction in nic_directions_, looked
  // up once here rather than for every op costed (a NIC's key costs three divisions).
  std::vector<int> nic_direction_;
};

struct Slot {
  double start = 0;
  double finish = 0;
};

// Places ops into the earliest window, at or after a release time, in which all their resources
// are idle (earlier gaps included).
class Schedule {
 public:
  explicit Schedule(const CostModel& model);
  const CostModel& model() const { return model_; }
  // `cost` is model().cost_of(the op), computed once by the caller.
  Slot probe(const CostModel::Cost& cost, double release) const;
  Slot insert(const CostModel::Cost& cost, double release);
  // Undoes insert(cost, ...) that returned `slot`.
  void remove(const CostModel::Cost& cost, Slot slot);
  double earliest_start(const std::vector<int>& resources, double duration, double release) const;
  // When `resource` is idle for good: the end of its last busy slot.
  double idle_from(int resource) const {
    return busy_[resource].empty() ? 0 : busy_[resource].back().finish;
  }
  void occupy(const std::vector<int>& resources, Slot slot);

 private:
  const CostModel& model_;
  std::vector<std::vector<Slot>> busy_;  // per resource, sorted, disjoint
};

}  // namespace meshcast::detail
