// Pipeline model configurations (stages on meshes, compute costs, the activations each edge
// carries) and their cross-stage transfer times from our resharding planner and network simulator.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "meshcast/layout/cluster.h"
#include "meshcast/layout/mesh.h"
#include "meshcast/layout/sharding_spec.h"
#include "meshcast/layout/tensor.h"
#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/simulator.h"
#include "meshcast/plan/plan.h"

namespace meshcast::pipeline {

// One tensor an edge carries per microbatch: its sharding on the sending stage's mesh and the one
// the receiving stage needs. The gradient goes back with the same shapes, resharded the other way.
struct EdgeTensor {
  TensorSpec tensor;
  ShardingSpec src_spec;
  ShardingSpec dst_spec;
};

struct ModelEdge {
  Edge edge;
  std::vector<EdgeTensor> tensors;  // sent one after the other
  std::optional<double> time_s;     // a fixed time per direction instead of planned tensors
};

struct ModelStage {
  Mesh mesh;
  double forward_s = 0;
  double backward_s = 0;
  double activation_bytes = 0;  // kept per microbatch from forward to backward; 0: not given
};

struct PipelineModel {
  std::string name;
  Cluster cluster;
  int microbatches = 1;
  double samples_per_microbatch = 1;
  std::vector<ModelStage> stages;
  std::vector<ModelEdge> edges;  // includes every (i, i+1)
};

// Reads a model document (docs/json.md): "cluster", "microbatches", "samples_per_microbatch",
// "device_tflops", "stages": [{"mesh", "devices" | "first_host", "forward_s" | "forward_tflop",
// "backward_s" | "backward_tflop", "activation_bytes"}], "edges": [{"from", "to", "time_s" |
// "tensors": [{"shape", "dtype", "src_spec", "dst_spec"}]}]. A backward defaults to twice its
// forward. Throws ParseError or InvalidArgument naming the key and the expected value.
PipelineModel model_from_json(const nlohmann::json& j);

// The resharding one direction of `tensor` on `edge` makes: from the sender's layout to the
// receiver's, or back (`gradient`).
Resharding edge_resharding(const PipelineModel& model, const ModelEdge& edge,
                           const EdgeTensor& tensor, bool gradient);

// How transfers are made: a planner strategy, or free (zero time, the paper's signal send/recv).
struct TransferMethod {
  std::optional<Strategy> strategy;  // nullopt: free
};
std::string to_string(const TransferMethod& method);

// Seconds one direction of `edge` takes alone: for each tensor, make_plan with the method's
// strategy (default balance) on the model's cluster, played by the network simulator; the tensors
// one after the other. `gradient` reshards from the receiver's layout back to the sender's.
double edge_time(const PipelineModel& model, const ModelEdge& edge, const TransferMethod& method,
                 bool gradient);

// The costs the pipeline simulator plays for this model and method.
PipelineCosts model_costs(const PipelineModel& model, const TransferMethod& method);

}  // namespace meshcast::pipeline
