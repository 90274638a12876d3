#include "meshcast/pipeline/model.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/json_input.h"
#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"

namespace meshcast::pipeline {
namespace {

using nlohmann::json;

double number(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number())
    throw ParseError(fmt::format("{}: \"{}\" {}: expected a number", where, key,
                                 j.contains(key) ? json_excerpt(j[key]) : "is missing"));
  const double v = j[key].get<double>();
  if (!std::isfinite(v) || v < 0)
    throw InvalidArgument(fmt::format("{}: bad \"{}\" {}: expected a number >= 0", where, key, v));
  return v;
}

std::string text(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_string())
    throw ParseError(fmt::format("{}: \"{}\" {}: expected a string", where, key,
                                 j.contains(key) ? json_excerpt(j[key]) : "is missing"));
  return j[key].get<std::string>();
}

double positive(const json& j, const char* key, const std::string& where) {
  const double v = number(j, key, where);
  if (v <= 0)
    throw InvalidArgument(fmt::format("{}: bad \"{}\" {}: expected a number > 0", where, key, v));
  return v;
}

int integer(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw ParseError(fmt::format("{}: \"{}\" {}: expected an integer", where, key,
                                 j.contains(key) ? json_excerpt(j[key]) : "is missing"));
  return j[key].get<int>();
}

// forward_s, or forward_tflop on the stage's devices at `device_tflops` each.
double compute_time(const json& j, const char* seconds_key, const char* tflop_key,
                    const std::optional<double>& device_tflops, int64_t devices,
                    const std::string& where) {
  if (j.contains(seconds_key)) return number(j, seconds_key, where);
  if (!j.contains(tflop_key)) return -1;
  if (!device_tflops)
    throw ParseError(
        fmt::format("{}: \"{}\" needs a top-level \"device_tflops\"", where, tflop_key));
  return number(j, tflop_key, where) / (static_cast<double>(devices) * *device_tflops);
}

ModelStage stage_from_json(const json& j, int index, const Cluster& cluster,
                           const std::optional<double>& device_tflops) {
  const std::string where = fmt::format("stage {}", index);
  check_keys(j, where, {"mesh"},
             {"devices", "first_host", "forward_s", "forward_tflop", "backward_s", "backward_tflop",
              "activation_bytes"});
  ModelStage st;
  const auto shape = parse_mesh_shape(text(j, "mesh", where));
  if (j.contains("devices")) {
    if (!j["devices"].is_array())
      throw ParseError(fmt::format("{}: \"devices\" {}: expected an array of device ids", where,
                                   json_excerpt(j["devices"])));
    std::vector<DeviceId> devices;
    for (const auto& d : j["devices"]) {
      if (!d.is_number_integer())
        throw ParseError(fmt::format("{}: device {}: expected an integer", where, json_excerpt(d)));
      devices.push_back(d.get<int>());
    }
    st.mesh = Mesh(shape, devices);
  } else {
    st.mesh = Mesh::placed(shape, integer(j, "first_host", where), cluster.devices_per_host);
  }
  st.mesh.check_fits(cluster);
  st.forward_s =
      compute_time(j, "forward_s", "forward_tflop", device_tflops, st.mesh.size(), where);
  if (st.forward_s < 0)
    throw ParseError(fmt::format("{}: expected \"forward_s\" or \"forward_tflop\"", where));
  st.backward_s =
      compute_time(j, "backward_s", "backward_tflop", device_tflops, st.mesh.size(), where);
  if (st.backward_s < 0) st.backward_s = 2 * st.forward_s;
  if (j.contains("activation_bytes")) st.activation_bytes = number(j, "activation_bytes", where);
  return st;
}

ModelEdge edge_from_json(const json& j, int index) {
  const std::string where = fmt::format("edge {}", index);
  check_keys(j, where, {"from", "to"}, {"time_s", "tensors"});
  ModelEdge e;
  e.edge = {integer(j, "from", where), integer(j, "to", where)};
  if (j.contains("time_s")) e.time_s = number(j, "time_s", where);
  if (j.contains("tensors")) {
    if (!j["tensors"].is_array())
      throw ParseError(fmt::format("{}: \"tensors\": expected an array", where));
    for (const auto& t : j["tensors"]) {
      check_keys(t, fmt::format("{} tensor", where), {"shape", "src_spec", "dst_spec"}, {"dtype"});
      if (!t["shape"].is_array())
        throw ParseError(
            fmt::format("{}: tensor {}: expected {{\"shape\": [..], \"dtype\", "
                        "\"src_spec\", \"dst_spec\"}}",
                        where, json_excerpt(t)));
      EdgeTensor et;
      for (const auto& d : t["shape"]) {
        if (!d.is_number_integer())
          throw ParseError(
              fmt::format("{}: shape entry {}: expected an integer", where, json_excerpt(d)));
        et.tensor.shape.push_back(d.get<int64_t>());
      }
      et.tensor.dtype = parse_dtype(t.contains("dtype") ? text(t, "dtype", where) : "float32");
      et.tensor.validate();
      et.src_spec = ShardingSpec::parse(text(t, "src_spec", where));
      et.dst_spec = ShardingSpec::parse(text(t, "dst_spec", where));
      e.tensors.push_back(std::move(et));
    }
  }
  if (e.time_s.has_value() == !e.tensors.empty())
    throw ParseError(fmt::format("{}: expected either \"time_s\" or \"tensors\"", where));
  return e;
}

}  // namespace

PipelineModel model_from_json(const json& j) {
  check_keys(j, "model", {"cluster", "microbatches", "stages", "edges"},
             {"name", "samples_per_microbatch", "device_tflops"});
  PipelineModel m;
  if (j.contains("name")) m.name = text(j, "name", "model");
  if (!j.contains("cluster")) throw ParseError("model: \"cluster\" is missing");
  m.cluster = cluster_from_json(j["cluster"]);
  m.cluster.validate();
  m.microbatches = integer(j, "microbatches", "model");
  if (m.microbatches < 1)
    throw InvalidArgument(
        fmt::format("model: bad \"microbatches\" {}: expected >= 1", m.microbatches));
  if (j.contains("samples_per_microbatch"))
    m.samples_per_microbatch = positive(j, "samples_per_microbatch", "model");
  std::optional<double> device_tflops;
  if (j.contains("device_tflops")) device_tflops = positive(j, "device_tflops", "model");
  if (!j.contains("stages") || !j["stages"].is_array() || j["stages"].empty())
    throw ParseError("model: expected \"stages\": a non-empty array");
  for (const auto& st : j["stages"])
    m.stages.push_back(
        stage_from_json(st, static_cast<int>(m.stages.size()), m.cluster, device_tflops));
  if (!j.contains("edges") || !j["edges"].is_array())
    throw ParseError("model: expected \"edges\": an array");
  for (const auto& e : j["edges"])
    m.edges.push_back(edge_from_json(e, static_cast<int>(m.edges.size())));

  // The edges must be valid for the schedule (check_edges) and include the chain.
  Schedule shape{.stages = static_cast<int>(m.stages.size()), .microbatches = 1};
  std::vector<Edge> edges;
  std::set<std::pair<int, int>> present;
  for (const auto& e : m.edges) {
    edges.push_back(e.edge);
    present.insert({e.edge.from, e.edge.to});
  }
  check_edges(shape, edges);
  for (const auto& e : chain_edges(shape.stages))
    if (!present.contains({e.from, e.to}))
      throw InvalidArgument(
          fmt::format("model: edges lack {}->{}: every consecutive pair of stages needs an edge",
                      e.from, e.to));
  for (const auto& e : m.edges)
    for (const auto& t : e.tensors)
      for (bool gradient : {false, true}) edge_resharding(m, e, t, gradient);
  return m;
}

Resharding edge_resharding(const PipelineModel& model, const ModelEdge& edge, const EdgeTensor& t,
                           bool gradient) {
  Layout from{model.stages[edge.edge.from].mesh, t.src_spec};
  Layout to{model.stages[edge.edge.to].mesh, t.dst_spec};
  if (gradient) std::swap(from, to);
  Resharding r{t.tensor, std::move(from), std::move(to), model.cluster};
  r.validate();
  return r;
}

std::string to_string(const TransferMethod& method) {
  return method.strategy ? std::string(to_string(*method.strategy)) : "free";
}

double edge_time(const PipelineModel& model, const ModelEdge& edge, const TransferMethod& method,
                 bool gradient) {
  if (!method.strategy) return 0;
  if (edge.time_s) return *edge.time_s;
  double total = 0;
  for (const auto& t : edge.tensors) {
    const Plan plan = make_plan(edge_resharding(model, edge, t, gradient),
                                PlanOptions{.strategy = *method.strategy});
    total += simulate(plan).time_s;
  }
  return total;
}

PipelineCosts model_costs(const PipelineModel& model, const TransferMethod& method) {
  PipelineCosts costs;
  for (const auto& st : model.stages)
    costs.stages.push_back({st.forward_s, st.backward_s, st.activation_bytes});
  for (const auto& e : model.edges)
    costs.edges.push_back(
        {e.edge, edge_time(model, e, method, false), edge_time(model, e, method, true)});
  return costs;
}

}  // namespace meshcast::pipeline
