// JSON forms of reshardings, unit tasks, clusters and plans (documented in docs/json.md).
#pragma once

#include <nlohmann/json.hpp>

#include "meshcast/plan/plan.h"
#include "meshcast/tasks/batch.h"

namespace meshcast {

// {"hosts", "devices_per_host", "nic_gbps", "dev_gbps", "latency_us", "nics_per_host"
//  [, "host_nics": [..]][, "host_nic_gbps": [..]]}; nic_gbps is per NIC.
nlohmann::json cluster_to_json(const Cluster& cluster);
// Missing keys keep the values of `defaults`. Throws ParseError naming the bad key.
Cluster cluster_from_json(const nlohmann::json& j, const Cluster& defaults = {});

// {"tensor": {"shape", "dtype", "bytes"}, "src": {"mesh", "devices", "spec"}, "dst": {...},
//  "cluster": {...}}: the keys are merged into the documents of the tasks and plan verbs.
nlohmann::json resharding_to_json(const Resharding& problem);
Resharding resharding_from_json(const nlohmann::json& j);

// A batch file: {"cluster": {...}, "tensors": [{"name", "shape", "dtype", "src": {"mesh",
// "devices", "spec"}, "dst": {...}}, ...]}. batch_from_json accepts a layout without "devices"
// (the source placed from host 0, the destination from the host after the source's last one) and
// throws ParseError naming the tensor (index and name) and the key; the result is validated.
nlohmann::json batch_to_json(const Batch& batch);
Batch batch_from_json(const nlohmann::json& j);

// {"slice": [[lo,hi],...], "bytes", "senders", "receivers"}
nlohmann::json task_to_json(const UnitTask& task);
nlohmann::json box_to_json(const Box& box);
Box box_from_json(const nlohmann::json& j);

// The whole plan document, with "meshcast_version": the batch's "cluster" and "tensors", and the
// ops, each naming its tensor by index.
nlohmann::json plan_to_json(const Plan& plan);
// Throws ParseError naming the bad key or value; the result's batch is validated. Also reads the
// single-tensor form ("tensor", "src", "dst", "cluster"; ops without "tensor") as a batch of one.
Plan plan_from_json(const nlohmann::json& j);

}  // namespace meshcast
