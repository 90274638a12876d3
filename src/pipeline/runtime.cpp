#include "meshcast/pipeline/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "meshcast/duration.h"
#include "meshcast/error.h"
#include "meshcast/planner/planner.h"
#include "meshcast/runtime/buffer_table.h"
#include "meshcast/runtime/buffers.h"
#include "meshcast/runtime/measure.h"

namespace meshcast::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

// An emulated transfer with less work left than this is done (the clock's rounding).
constexpr double kFlowDoneS = 1e-6;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ---- The block of real compute: y = tanh(x W1) W2 over `rows` rows of width h. ----

// A value in [-1, 1] that depends on every input, so that a misplaced element changes results.
float pattern_value(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z % 2001) / 1000.0 - 1.0);
}

struct Weights {
  std::vector<float> w1, w2;  // h x h, row-major
};

Weights make_weights(int virtual_stage, int64_t h) {
  Weights w{std::vector<float>(h * h), std::vector<float>(h * h)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(h));
  for (int64_t i = 0; i < h * h; ++i) {
    w.w1[i] = scale * pattern_value(2 * virtual_stage + 1, i);
    w.w2[i] = scale * pattern_value(2 * virtual_stage + 2, i);
  }
  return w;
}

// out[r][j] = sum_k a[r][k] b[k][j] (b is h x h), or with `transpose_b` sum_k a[r][k] b[j][k].
void matmul(const float* a, const std::vector<float>& b, int64_t rows, int64_t h, bool transpose_b,
            float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < h; ++j) {
      float sum = 0;
      for (int64_t k = 0; k < h; ++k)
        sum += a[r * h + k] * (transpose_b ? b[j * h + k] : b[k * h + j]);
      out[r * h + j] = sum;
    }
}

// grad[k][j] += sum_r a[r][k] d[r][j], accumulated in double.
void accumulate_outer(const float* a, const float* d, int64_t rows, int64_t h,
                      std::vector<double>& grad) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < h; ++k) {
      const double ak = a[r * h + k];
      for (int64_t j = 0; j < h; ++j) grad[k * h + j] += ak * d[r * h + j];
    }
}

// What one device keeps from a forward until its backward.
struct Stash {
  std::vector<float> x, hidden, y;
};

struct Gradients {
  std::vector<double> w1, w2;
};

void block_forward(const Weights& w, int64_t rows, int64_t h, Stash& s) {
  s.hidden.resize(rows * h);
  s.y.resize(rows * h);
  matmul(s.x.data(), w.w1, rows, h, false, s.hidden.data());
  for (float& v : s.hidden) v = std::tanh(v);
  matmul(s.hidden.data(), w.w2, rows, h, false, s.y.data());
}

// The weight gradients of rows whose input, hidden state, output gradient and pre-activation
// gradient are given.
void accumulate_gradients(const float* x, const float* hidden, const float* dy, const float* da,
                          int64_t rows, int64_t h, Gradients& g) {
  accumulate_outer(hidden, dy, rows, h, g.w2);
  accumulate_outer(x, da, rows, h, g.w1);
}

// dy in; da (the gradient before tanh) and dx out, rows x h.
void block_backward(const Weights& w, int64_t rows, int64_t h, const Stash& s,
                    const std::vector<float>& dy, std::vector<float>& da, std::vector<float>& dx) {
  da.resize(rows * h);
  matmul(dy.data(), w.w2, rows, h, true, da.data());
  for (int64_t i = 0; i < rows * h; ++i) da[i] *= 1.0f - s.hidden[i] * s.hidden[i];
  dx.resize(rows * h);
  matmul(da.data(), w.w1, rows, h, true, dx.data());
}

// The rows of `box` (whose last dimension is whole) out of a row-major tensor of `shape`.
std::vector<float> slice_rows(const std::vector<float>& full, const std::vector<int64_t>& shape,
                              const Box& box) {
  const int rank = static_cast<int>(shape.size());
  const int64_t h = shape.back();
  std::vector<float> out;
  out.reserve(box.volume());
  if (box.volume() == 0) return out;
  std::vector<int64_t> index(rank - 1);
  for (int d = 0; d + 1 < rank; ++d) index[d] = box.dims[d].lo;
  while (true) {
    int64_t row = 0;
    for (int d = 0; d + 1 < rank; ++d) row = row * shape[d] + index[d];
    out.insert(out.end(), full.begin() + row * h, full.begin() + (row + 1) * h);
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++index[d] < box.dims[d].hi) break;
      index[d] = box.dims[d].lo;
    }
    if (d < 0) return out;
  }
}

// The input of the first stage: element (row, j) of microbatch mb, from its global index.
void fill_input(const Box& box, int microbatch, std::vector<float>& x) {
  x.assign(box.volume(), 0);
  const int rank = box.rank();
  std::vector<int64_t> index(rank);
  for (int d = 0; d < rank; ++d) index[d] = box.dims[d].lo;
  int64_t at = 0;
  // A row-major walk of the box; each element's value comes from its global coordinates.
  while (at < static_cast<int64_t>(x.size())) {
    uint64_t global = 0;
    for (int d = 0; d < rank; ++d) global = global * 1000003ull + static_cast<uint64_t>(index[d]);
    x[at++] = pattern_value(1000 + microbatch, global);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < box.dims[d].hi) break;
      index[d] = box.dims[d].lo;
    }
  }
}

void add_into(std::vector<float>& sum, const float* part, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sum[i] += part[i];
}

// ---- Transfers ----

// The transfers from one stage to another (physical stages, i.e. meshes): their messages go one at
// a time in the order the sender posts them, as the simulator's channel per stage pair. With one
// chunk per stage a channel is one direction of one edge; with interleaving the edges between
// chunks of the same two stages share it (activations of some, gradients of others). Each
// (edge, direction) it carries has one compiled plan per tensor on the channel's own executor,
// and every message its own tile buffers.
struct Route {
  int edge = 0;
  Payload payload = Payload::activation;
  std::vector<std::unique_ptr<CompiledPlan>> plans = {};  // per tensor
  std::vector<Resharding> problems = {};                  // per tensor
};

// When the two stages are in different processes, the sender learns that a message arrived from
// an acknowledgment: a plan (send_recv) moving one byte from each device of the receiving stage,
// played there once its part of the message is done, to every device of the sending stage. A
// sending process's own part of a plan ends when its bytes are handed to the network (under MPI,
// once its buffers may be reused), which may be long before they arrive.
struct Acknowledgment {
  Resharding problem;
  std::unique_ptr<CompiledPlan> plan;
  std::vector<TileBuffers> buffers;  // per device here
  std::vector<DeviceBuffers> views;
};

struct Channel {
  int from_stage = 0;
  int to_stage = 0;
  std::unique_ptr<Executor> executor;
  std::vector<Route> routes = {};
  std::vector<int> order = {};  // message ids in posting order
  bool sends_here = false;      // this process holds devices of the sending stage
  bool here = false;            // this process holds devices of either stage
  std::optional<Acknowledgment> acknowledgment = {};  // when the stages are not all here
};

// One byte per device of the receiving stage's mesh (sharded over all its axes), replicated on
// every device of the sending stage's.
Resharding acknowledgment_problem(const PipelineModel& model, int from_stage, int to_stage) {
  const Mesh& receivers = model.stages[to_stage].mesh;
  ShardingSpec::DimAxes all_axes;
  for (int axis = 0; axis < receivers.rank(); ++axis) all_axes.push_back(axis);
  Resharding r{
      TensorSpec{{static_cast<int64_t>(receivers.devices().size())}, DType::uint8},
      Layout{receivers, ShardingSpec(std::vector<ShardingSpec::DimAxes>{all_axes})},
      Layout{model.stages[from_stage].mesh, ShardingSpec(std::vector<ShardingSpec::DimAxes>(1))},
      model.cluster};
  r.validate();
  return r;
}

struct MessageState {
  const Route* route = nullptr;                   // its edge and direction, with their plans
  std::vector<std::vector<TileBuffers>> buffers;  // per tensor, per device here
  std::vector<std::vector<DeviceBuffers>> views;
  bool posted = false;
  bool arrived = false;
  Clock::time_point posted_at;
};

struct StageRecord {
  std::vector<Span> timeline;
  int peak_held = 0;  // the most microbatch-chunks whose forward stash the stage held at once
};

// A transfer moving on the emulated network: its full-rate seconds of work still to do.
struct EmulatedFlow {
  int from_stage = 0;
  int to_stage = 0;
  double remaining_s = 0;
};

TileBuffers& buffers_of(std::vector<TileBuffers>& list, DeviceId device) {
  for (auto& b : list)
    if (b.device == device) return b;
  throw InvalidArgument(fmt::format("device {} has no buffers in this message", device));
}

class Run {
 public:
  Run(const PipelineModel& model, const Schedule& schedule, const ExecutorFactory& make_executor,
      const RuntimeOptions& options)
      : model_(model),
        schedule_(schedule),
        options_(options),
        lowered_(checked_lower()),
        watchdog_(options.timeout_s) {
    here_.assign(model.cluster.devices(), false);
    watchdog_.enter("compiling the channels' plans");
    collective_ = make_executor();
    make_channels(make_executor);
    find_lone_stages();
    watchdog_.leave();
    check_timed_network();
    for (int d = 0; d < schedule.stages; ++d)
      for (DeviceId dev : model.stages[d].mesh.devices())
        if (here_[dev]) stage_here_.push_back(d);
    std::sort(stage_here_.begin(), stage_here_.end());
    stage_here_.erase(std::unique(stage_here_.begin(), stage_here_.end()), stage_here_.end());
    if (options.compute == ComputeMode::real) prepare_real();
  }

  RuntimeResult play() {
    Executor& collective = *collective_;
    const int total = options_.warmup_iterations + options_.iterations;
    for (int i = 0; i < options_.warmup_iterations; ++i) {
      watchdog_.enter(fmt::format("pipeline iteration {} of {}", i + 1, total));
      iterate();
    }
    // The measured iterations; the one of median makespan is reported (every process picks the
    // same: the makespans are combined over the processes first).
    struct Iteration {
      double makespan = 0;
      std::vector<StageRecord> records;
      std::vector<TransferSpan> transfers;
    };
    std::vector<Iteration> iterations;
    for (int i = 0; i < options_.iterations; ++i) {
      watchdog_.enter(
          fmt::format("pipeline iteration {} of {}", options_.warmup_iterations + i + 1, total));
      const double makespan = collective.max_over_processes(iterate());
      iterations.push_back({makespan, std::move(records_), std::move(transfers_)});
    }
    std::stable_sort(iterations.begin(), iterations.end(),
                     [](const auto& a, const auto& b) { return a.makespan < b.makespan; });
    Iteration& median = iterations[iterations.size() / 2];
    const double makespan = median.makespan;
    records_ = std::move(median.records);
    transfers_ = std::move(median.transfers);
    RuntimeResult out;
    out.predicted_peak_in_flight = peak_in_flight(schedule_);
    PipelineResult& r = out.measured;
    r.makespan_s = makespan;
    std::vector<double> activation_bytes;
    for (const auto& st : model_.stages) activation_bytes.push_back(st.activation_bytes);
    const auto peak_bytes = peak_activation_bytes(schedule_, activation_bytes);
    double idle_total = 0;
    for (int d = 0; d < schedule_.stages; ++d) {
      // Each stage's figures from the process that plays it (the others give 0).
      const bool mine = std::find(stage_here_.begin(), stage_here_.end(), d) != stage_here_.end() &&
                        leads_stage(d);
      StageReport st;
      // A measured run sees only that the stream was blocked, not whether the data was late or
      // in flight: the whole blocked time is reported as transfer wait (docs/json.md).
      for (const Span& s : records_[d].timeline)
        (s.kind == SpanKind::comm ? st.transfer_wait_s : st.busy_s) += s.end - s.start;
      st.busy_s = collective.max_over_processes(mine ? st.busy_s : 0);
      st.transfer_wait_s = collective.max_over_processes(mine ? st.transfer_wait_s : 0);
      st.peak_in_flight =
          static_cast<int>(collective.max_over_processes(mine ? records_[d].peak_held : 0));
      st.idle_s = std::max(0.0, makespan - st.busy_s);
      st.peak_activation_bytes = peak_bytes[d];
      idle_total += st.idle_s;
      r.stages.push_back(st);
      r.timeline.push_back(std::move(records_[d].timeline));
    }
    r.transfers = std::move(transfers_);
    std::sort(r.transfers.begin(), r.transfers.end(),
              [](const auto& a, const auto& b) { return a.start < b.start; });
    if (makespan > 0) {
      r.bubble_fraction = idle_total / (schedule_.stages * makespan);
      r.microbatches_per_s = schedule_.microbatches / makespan;
    }
    if (options_.compute == ComputeMode::real) {
      watchdog_.enter("the gradient check");
      out.gradient_error = collective.max_over_processes(gradient_error());
    }
    watchdog_.leave();
    return out;
  }

 private:
  std::vector<Edge> model_edges() const {
    std::vector<Edge> edges;
    for (const auto& e : model_.edges) edges.push_back(e.edge);
    return edges;
  }

  // Checks everything before anything is compiled or started, then lowers.
  LoweredSchedule checked_lower() const {
    if (schedule_.virtual_stages() != static_cast<int>(model_.stages.size()))
      throw InvalidArgument(
          fmt::format("the schedule has {} virtual stages, the model {} stages: expected equal",
                      schedule_.virtual_stages(), model_.stages.size()));
    // Chunk c of stage d is virtual stage c * stages + d: one mesh holds all of a stage's chunks.
    for (int vs = schedule_.stages; vs < schedule_.virtual_stages(); ++vs) {
      const Mesh& own = model_.stages[vs].mesh;
      const Mesh& first = model_.stages[schedule_.stage_of(vs)].mesh;
      if (!(own == first))
        throw InvalidArgument(fmt::format(
            "model stage {} is chunk {} of stage {}, whose chunk 0 (model stage {}) is on "
            "devices [{}]: expected the same mesh, got devices [{}]",
            vs, schedule_.chunk_of(vs), schedule_.stage_of(vs), schedule_.stage_of(vs),
            fmt::join(first.devices(), ","), fmt::join(own.devices(), ",")));
    }
    validate(schedule_, model_edges());
    for (const auto& e : model_.edges)
      if (schedule_.stage_of(e.edge.from) == schedule_.stage_of(e.edge.to))
        throw InvalidArgument(fmt::format(
            "edge {}->{} joins two chunks of stage {}: the runtime plays transfers between "
            "stages only",
            e.edge.from, e.edge.to, schedule_.stage_of(e.edge.from)));
    for (const auto& e : model_.edges)
      if (e.tensors.empty())
        throw InvalidArgument(
            fmt::format("edge {}->{} gives a fixed time and no tensors: running needs the "
                        "tensors it carries",
                        e.edge.from, e.edge.to));
    // A delay really elapses: one longer than the clock can wait is refused, not shortened.
    if (!(options_.transfer_delay_s >= 0 && options_.transfer_delay_s <= kLongestSeconds))
      throw InvalidArgument(fmt::format("bad transfer delay {} s: expected a time in 0..{:g} s",
                                        options_.transfer_delay_s, kLongestSeconds));
    if (options_.emulated_network && options_.emulated_network->edges.size() != model_.edges.size())
      throw InvalidArgument(
          fmt::format("the emulated network gives {} edges, the model has {}: expected equal",
                      options_.emulated_network->edges.size(), model_.edges.size()));
    check_iteration_counts(options_.warmup_iterations, options_.iterations);
    return lower(schedule_, model_edges());
  }

  // Every process makes every channel's executor and plans in the same order (MPI: collective):
  // channels in the order of their first (edge, direction), routes in edge order.
  void make_channels(const ExecutorFactory& make_executor) {
    messages_.resize(lowered_.messages.size());
    for (int e = 0; e < static_cast<int>(model_.edges.size()); ++e)
      for (Payload payload : {Payload::activation, Payload::gradient}) {
        const Edge& edge = model_.edges[e].edge;
        const bool forward = payload == Payload::activation;
        const int from = schedule_.stage_of(forward ? edge.from : edge.to);
        const int to = schedule_.stage_of(forward ? edge.to : edge.from);
        auto c = std::find_if(channels_.begin(), channels_.end(), [&](const Channel& ch) {
          return ch.from_stage == from && ch.to_stage == to;
        });
        if (c == channels_.end()) {
          channels_.push_back({.from_stage = from, .to_stage = to, .executor = make_executor()});
          c = channels_.end() - 1;
        }
        Route route{.edge = e, .payload = payload};
        for (const auto& t : model_.edges[e].tensors) {
          route.problems.push_back(edge_resharding(model_, model_.edges[e], t, !forward));
          route.plans.push_back(c->executor->compile(
              make_plan(route.problems.back(), PlanOptions{.strategy = options_.strategy})));
          for (DeviceId d : route.plans.back()->devices_here()) here_[d] = true;
        }
        c->routes.push_back(std::move(route));
      }
    for (auto& c : channels_) {
      bool all_here = true;
      for (DeviceId d : model_.stages[c.from_stage].mesh.devices()) {
        c.sends_here = c.sends_here || here_[d];
        all_here = all_here && here_[d];
      }
      c.here = c.sends_here;
      for (DeviceId d : model_.stages[c.to_stage].mesh.devices()) {
        c.here = c.here || here_[d];
        all_here = all_here && here_[d];
      }
      // Every process decides alike: under MPI with more than one rank none holds both stages.
      if (!all_here) {
        Acknowledgment& ack = c.acknowledgment.emplace(
            Acknowledgment{acknowledgment_problem(model_, c.from_stage, c.to_stage), {}, {}, {}});
        ack.plan = c.executor->compile(
            make_plan(ack.problem, PlanOptions{.strategy = Strategy::send_recv}));
        ack.buffers = allocate_tile_buffers(ack.problem, ack.plan->devices_here());
        ack.views = buffer_views(ack.buffers);
      }
      // Posting order: the sender's program order.
      for (const Action& a : lowered_.programs[c.from_stage])
        if (a.kind == ActionKind::send && lowered_.messages[a.message].to_stage == c.to_stage)
          c.order.push_back(a.message);
      for (int id : c.order) {
        MessageState& m = messages_[id];
        const Message& info = lowered_.messages[id];
        m.route = &*std::find_if(c.routes.begin(), c.routes.end(), [&](const Route& r) {
          return r.edge == info.edge && r.payload == info.payload;
        });
        if (!c.here) continue;
        for (size_t t = 0; t < m.route->plans.size(); ++t) {
          m.buffers.push_back(
              allocate_tile_buffers(m.route->problems[t], m.route->plans[t]->devices_here()));
          m.views.push_back(buffer_views(m.buffers.back()));
        }
      }
    }
  }

  // A stage no channel touches (the stage of a one-stage pipeline) has no plan that tells which of
  // its devices this process plays: a plan over its own mesh, compiled and never run, does. Every
  // process decides alike which stages need one.
  void find_lone_stages() {
    for (int d = 0; d < schedule_.stages; ++d) {
      if (std::any_of(channels_.begin(), channels_.end(),
                      [&](const Channel& c) { return c.from_stage == d || c.to_stage == d; }))
        continue;
      const auto plan = collective_->compile(make_plan(
          acknowledgment_problem(model_, d, d), PlanOptions{.strategy = Strategy::send_recv}));
      for (DeviceId device : plan->devices_here()) here_[device] = true;
    }
  }

  // An injected delay and the emulated network time each transfer from its start on the sender
  // and share ports between the transfers they see: they need every stage in this process (a
  // receiving MPI rank cannot tell when its sender started). Every process decides alike.
  void check_timed_network() const {
    if (options_.transfer_delay_s == 0 && !options_.emulated_network) return;
    for (const auto& st : model_.stages)
      for (DeviceId d : st.mesh.devices())
        if (!here_[d])
          throw InvalidArgument(fmt::format(
              "{} times transfers in one process, but device {} is played by another process: "
              "it needs every stage in this process (the local backend)",
              options_.emulated_network ? "the emulated network" : "an injected transfer delay",
              d));
  }

  // The process that reports a stage: the one holding its first device.
  bool leads_stage(int d) const { return here_[model_.stages[d].mesh.devices().front()]; }

  // ---- real compute: one tile per device and stage, checked once ----

  void prepare_real() {
    if (model_.edges.empty())
      throw InvalidArgument(
          "--compute real sizes each stage's block by the tensors its edges carry, and the model "
          "has no edges (one stage): expected --compute timed");
    const TensorSpec& first = model_.edges.front().tensors.front().tensor;
    h_ = first.shape.back();
    const int stages = static_cast<int>(model_.stages.size());
    tile_.assign(stages, std::vector<std::optional<Box>>(model_.cluster.devices()));
    auto require_tile = [&](int vs, DeviceId device, const Box& box, const ModelEdge& e) {
      auto& tile = tile_[vs][device];
      if (!tile) {
        tile = box;
      } else if (!(*tile == box)) {
        throw InvalidArgument(fmt::format(
            "--compute real needs every tensor entering or leaving stage {} to have one tile "
            "per device: device {} holds {} of edge {}->{} but {} of another",
            vs, device, to_string(box), e.edge.from, e.edge.to, to_string(*tile)));
      }
    };
    for (const auto& e : model_.edges)
      for (const auto& t : e.tensors) {
        if (t.tensor != first)
          throw InvalidArgument(fmt::format(
              "--compute real needs every edge tensor to have one shape and dtype: edge {}->{} "
              "has [{}] {}, edge {}->{} [{}] {}",
              e.edge.from, e.edge.to, fmt::join(t.tensor.shape, ","), to_string(t.tensor.dtype),
              model_.edges.front().edge.from, model_.edges.front().edge.to,
              fmt::join(first.shape, ","), to_string(first.dtype)));
        if (t.tensor.dtype != DType::float32)
          throw InvalidArgument(
              fmt::format("--compute real computes in float32: edge {}->{} carries {}", e.edge.from,
                          e.edge.to, to_string(t.tensor.dtype)));
        const Resharding r = edge_resharding(model_, e, t, false);
        for (DeviceId d : model_.stages[e.edge.from].mesh.devices())
          require_tile(e.edge.from, d, tiles_of(r, d).src, e);
        for (DeviceId d : model_.stages[e.edge.to].mesh.devices())
          require_tile(e.edge.to, d, tiles_of(r, d).dst, e);
      }
    for (int vs = 0; vs < stages; ++vs) {
      weights_.push_back(make_weights(vs, h_));
      for (DeviceId d : model_.stages[vs].mesh.devices()) {
        const Box& box = *tile_[vs][d];
        if (box.volume() > 0 && box.dims[box.rank() - 1].size() != h_)
          throw InvalidArgument(fmt::format(
              "--compute real shards rows only: stage {} device {} holds {}, which splits the "
              "last dimension ({})",
              vs, d, to_string(box), h_));
      }
    }
  }

  int64_t rows(int vs, DeviceId d) const { return tile_[vs][d]->volume() / h_; }

  std::vector<DeviceId> devices_here(int vs) const {
    std::vector<DeviceId> out;
    for (DeviceId d : model_.stages[vs].mesh.devices())
      if (here_[d]) out.push_back(d);
    return out;
  }

  void reset_gradients() {
    gradients_.assign(model_.stages.size(), {});
    for (size_t vs = 0; vs < model_.stages.size(); ++vs)
      for (DeviceId d : devices_here(static_cast<int>(vs)))
        gradients_[vs][d] = {std::vector<double>(h_ * h_), std::vector<double>(h_ * h_)};
  }

  // ---- one iteration ----

  double iterate() {
    for (auto& m : messages_) m.posted = m.arrived = false;
    records_ = std::vector<StageRecord>(schedule_.stages);
    transfers_.clear();
    stash_.assign(model_.stages.size(), {});
    if (options_.compute == ComputeMode::real) reset_gradients();
    failure_ = nullptr;
    aborted_ = false;
    flows_.clear();
    collective_->barrier();
    start_ = Clock::now();
    flows_at_ = start_;
    {
      std::vector<std::jthread> threads;
      for (auto& c : channels_)
        if (c.here) threads.emplace_back([this, &c] { guarded([&] { play_channel(c); }); });
      for (int d : stage_here_)
        threads.emplace_back([this, d] { guarded([&] { play_stage(d); }); });
    }
    if (failure_) std::rethrow_exception(failure_);
    double makespan = 0;
    for (const auto& rec : records_)
      for (const auto& s : rec.timeline) makespan = std::max(makespan, s.end);
    return makespan;
  }

  template <class F>
  void guarded(F&& body) {
    try {
      body();
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!failure_) failure_ = std::current_exception();
      aborted_ = true;
      changed_.notify_all();
    }
  }

  // Plays the channel's messages one at a time: waits until this process's sending stage has
  // posted one (a receiving process starts its part at once, ready for the data), moves it, and
  // marks it arrived once every tensor is done and the emulated time has passed.
  // A message starts, as in the simulator, when it is posted and the channel's previous message
  // has arrived; the times of the injected delay and the emulated network count from then (not
  // from the posting: a message queued behind others would otherwise be shortened).
  void play_channel(Channel& c) {
    Clock::time_point free_at = start_;  // the previous message's arrival
    for (int id : c.order) {
      MessageState& m = messages_[id];
      if (c.sends_here) {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return m.posted || aborted_; });
        if (aborted_) return;
      }
      const Clock::time_point began = c.sends_here ? std::max(m.posted_at, free_at) : Clock::now();
      if (options_.emulated_network) begin_flow(id, began);
      for (size_t t = 0; t < m.route->plans.size(); ++t) {
        m.route->plans[t]->start(m.views[t]);
        m.route->plans[t]->wait();
      }
      if (c.acknowledgment) {
        c.acknowledgment->plan->start(c.acknowledgment->views);
        c.acknowledgment->plan->wait();
      }
      std::this_thread::sleep_until(began + seconds_to_duration(options_.transfer_delay_s));
      std::unique_lock lock(mutex_);
      if (options_.emulated_network) finish_flow(id, lock);
      free_at = Clock::now();
      m.arrived = true;
      const Message& info = lowered_.messages[id];
      transfers_.push_back({id, info.from_stage, info.to_stage, info.payload, info.microbatch,
                            seconds_between(start_, began), seconds_between(start_, free_at)});
      changed_.notify_all();
    }
  }

  // ---- The emulated network: the simulator's ports on in-process copies ----
  // Each transfer has its edge's full-rate time (emulated_network); concurrent transfers that
  // leave one stage or enter one stage share its port, each at 1 / max(transfers on its sender's
  // out-port, transfers on its receiver's in-port) of the full rate.

  double flow_rate(const EmulatedFlow& f) const {
    size_t out = 0, in = 0;
    for (const auto& [id, g] : flows_) {
      out += g.from_stage == f.from_stage;
      in += g.to_stage == f.to_stage;
    }
    return 1.0 / static_cast<double>(std::max<size_t>(1, std::max(out, in)));
  }

  // Brings every active flow's remaining work up to `t` at the rates they had.
  void advance_flows(Clock::time_point t) {
    const double elapsed = std::max(0.0, seconds_between(flows_at_, t));
    std::vector<double> rates;
    for (const auto& [id, f] : flows_) rates.push_back(flow_rate(f));
    size_t i = 0;
    for (auto& [id, f] : flows_)
      f.remaining_s = std::max(0.0, f.remaining_s - elapsed * rates[i++]);
    flows_at_ = std::max(flows_at_, t);
  }

  void begin_flow(int id, Clock::time_point began) {
    const Message& info = lowered_.messages[id];
    const EdgeCost& cost = options_.emulated_network->edges[info.edge];
    const double full = info.payload == Payload::activation ? cost.activation_s : cost.gradient_s;
    std::lock_guard lock(mutex_);
    const Clock::time_point t = Clock::now();
    advance_flows(t);
    // Work done between `began` and now (the channel thread's wake-up) counts at full rate.
    flows_[id] = {info.from_stage, info.to_stage,
                  std::max(0.0, full - std::max(0.0, seconds_between(began, t)))};
    changed_.notify_all();  // the others' rates changed
  }

  // Blocks until message `id`'s flow has no work left, then takes it off its ports.
  void finish_flow(int id, std::unique_lock<std::mutex>& lock) {
    while (!aborted_) {
      advance_flows(Clock::now());
      const EmulatedFlow& f = flows_.at(id);
      if (f.remaining_s <= kFlowDoneS) break;
      changed_.wait_until(lock, Clock::now() + seconds_to_duration(f.remaining_s / flow_rate(f)));
    }
    advance_flows(Clock::now());
    flows_.erase(id);
  }

  // Without overlap a stage posts all the sends that follow a compute step, then waits until they
  // are done (the simulator's group of sends), before its next receive or compute step.
  void play_stage(int d) {
    std::vector<int> sent;
    for (const Action& a : lowered_.programs[d]) {
      if (aborted_) return;
      if (a.kind != ActionKind::send && !sent.empty()) {
        await(d, sent);
        sent.clear();
      }
      switch (a.kind) {
        case ActionKind::recv:
          await(d, {a.message});
          break;
        case ActionKind::compute:
          compute(d, schedule_.order[d][a.step]);
          break;
        case ActionKind::send: {
          std::lock_guard lock(mutex_);
          messages_[a.message].posted = true;
          messages_[a.message].posted_at = Clock::now();
          changed_.notify_all();
        }
          if (!options_.overlap) sent.push_back(a.message);
          break;
      }
    }
    if (!sent.empty()) await(d, sent);
  }

  double now() const { return seconds_between(start_, Clock::now()); }

  // Blocks stage d until the messages are done here; the wait is the stage's comm time.
  void await(int d, const std::vector<int>& ids) {
    const double from = now();
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] {
        return aborted_ ||
               std::all_of(ids.begin(), ids.end(), [&](int id) { return messages_[id].arrived; });
      });
    }
    const double to = now();
    if (to > from) records_[d].timeline.push_back({SpanKind::comm, -1, 0, from, to});
  }

  int message(int edge, int microbatch, Payload payload) const {
    const int m = schedule_.microbatches;
    return (edge * m + microbatch) * 2 + (payload == Payload::gradient ? 1 : 0);
  }

  void compute(int d, const Step& step) {
    const int vs = schedule_.virtual_stage(d, step.chunk);
    const bool forward = step.pass == Pass::forward;
    const double from = now();
    if (options_.compute == ComputeMode::timed) {
      const auto& st = model_.stages[vs];
      std::this_thread::sleep_until(
          start_ + seconds_to_duration(from + (forward ? st.forward_s : st.backward_s)));
      // The stash holds no data, but is kept and freed as real compute does.
      if (forward)
        stash_[vs][step.microbatch];
      else
        stash_[vs].erase(step.microbatch);
    } else if (forward) {
      real_forward(vs, step.microbatch);
    } else {
      real_backward(vs, step.microbatch);
    }
    StageRecord& rec = records_[d];
    // What the stage holds now: the stashes of its chunks (this thread alone touches them).
    size_t held = 0;
    for (int chunk = 0; chunk < schedule_.chunks; ++chunk)
      held += stash_[schedule_.virtual_stage(d, chunk)].size();
    rec.peak_held = std::max(rec.peak_held, static_cast<int>(held));
    rec.timeline.push_back({forward ? SpanKind::forward : SpanKind::backward, step.microbatch,
                            step.chunk, from, now()});
  }

  // Sums, for device d, the tiles of the stage's incoming messages of this pass (activations of
  // its in-edges, or gradients of its out-edges) into `sum`; false when there are none.
  bool gather_incoming(int vs, int microbatch, Payload payload, DeviceId d,
                       std::vector<float>& sum) {
    bool any = false;
    sum.assign(tile_[vs][d]->volume(), 0);
    for (int e = 0; e < static_cast<int>(model_.edges.size()); ++e) {
      const Edge& edge = model_.edges[e].edge;
      if ((payload == Payload::activation ? edge.to : edge.from) != vs) continue;
      for (auto& list : messages_[message(e, microbatch, payload)].buffers) {
        const auto& dst = buffers_of(list, d).dst;
        add_into(sum, reinterpret_cast<const float*>(dst.data()), static_cast<int64_t>(sum.size()));
        any = true;
      }
    }
    return any;
  }

  // Writes `data` (device d's tile) into the source tile of every outgoing message's tensor.
  void scatter_outgoing(int vs, int microbatch, Payload payload, DeviceId d,
                        const std::vector<float>& data) {
    for (int e = 0; e < static_cast<int>(model_.edges.size()); ++e) {
      const Edge& edge = model_.edges[e].edge;
      if ((payload == Payload::activation ? edge.from : edge.to) != vs) continue;
      for (auto& list : messages_[message(e, microbatch, payload)].buffers)
        std::memcpy(buffers_of(list, d).src.data(), data.data(), data.size() * sizeof(float));
    }
  }

  void real_forward(int vs, int microbatch) {
    auto& per_device = stash_[vs][microbatch];
    for (DeviceId d : devices_here(vs)) {
      Stash& s = per_device[d];
      if (!gather_incoming(vs, microbatch, Payload::activation, d, s.x))
        fill_input(*tile_[vs][d], microbatch, s.x);
      block_forward(weights_[vs], rows(vs, d), h_, s);
      scatter_outgoing(vs, microbatch, Payload::activation, d, s.y);
    }
  }

  void real_backward(int vs, int microbatch) {
    auto& per_device = stash_[vs][microbatch];
    std::vector<float> dy, da, dx;
    for (DeviceId d : devices_here(vs)) {
      Stash& s = per_device[d];
      if (!gather_incoming(vs, microbatch, Payload::gradient, d, dy)) dy = s.y;
      block_backward(weights_[vs], rows(vs, d), h_, s, dy, da, dx);
      accumulate_gradients(s.x.data(), s.hidden.data(), dy.data(), da.data(), rows(vs, d), h_,
                           gradients_[vs][d]);
      scatter_outgoing(vs, microbatch, Payload::gradient, d, dx);
    }
    stash_[vs].erase(microbatch);
  }

  // The same model run whole in this process, microbatch by microbatch. Each device here must
  // have the whole model's weight gradient restricted to the rows of its tile (summed over the
  // devices of distinct tiles they make the stage's gradient).
  double gradient_error() const {
    const int stages = static_cast<int>(model_.stages.size());
    const auto& shape = model_.edges.front().tensors.front().tensor.shape;
    const Box whole = full_box(shape);
    const int64_t rows_all = whole.volume() / h_;
    std::vector<std::map<DeviceId, Gradients>> reference(stages);
    for (int vs = 0; vs < stages; ++vs)
      for (DeviceId d : devices_here(vs))
        reference[vs][d] = {std::vector<double>(h_ * h_), std::vector<double>(h_ * h_)};
    for (int mb = 0; mb < schedule_.microbatches; ++mb) {
      std::vector<Stash> stash(stages);
      for (int vs = 0; vs < stages; ++vs) {
        Stash& s = stash[vs];
        s.x.assign(whole.volume(), 0);
        bool any = false;
        for (const auto& e : model_.edges)
          if (e.edge.to == vs)
            for (size_t t = 0; t < e.tensors.size(); ++t) {
              add_into(s.x, stash[e.edge.from].y.data(), whole.volume());
              any = true;
            }
        if (!any) fill_input(whole, mb, s.x);
        block_forward(weights_[vs], rows_all, h_, s);
      }
      std::vector<std::vector<float>> dx(stages);
      for (int vs = stages - 1; vs >= 0; --vs) {
        std::vector<float> dy(whole.volume(), 0), da;
        bool any = false;
        for (const auto& e : model_.edges)
          if (e.edge.from == vs)
            for (size_t t = 0; t < e.tensors.size(); ++t) {
              add_into(dy, dx[e.edge.to].data(), whole.volume());
              any = true;
            }
        if (!any) dy = stash[vs].y;
        block_backward(weights_[vs], rows_all, h_, stash[vs], dy, da, dx[vs]);
        for (auto& [d, g] : reference[vs]) {
          const Box& box = *tile_[vs][d];
          accumulate_gradients(slice_rows(stash[vs].x, shape, box).data(),
                               slice_rows(stash[vs].hidden, shape, box).data(),
                               slice_rows(dy, shape, box).data(), slice_rows(da, shape, box).data(),
                               box.volume() / h_, h_, g);
        }
      }
    }
    double worst = 0;
    for (int vs = 0; vs < stages; ++vs)
      for (const auto& [d, want] : reference[vs]) {
        const Gradients& got = gradients_[vs].at(d);
        for (auto [a, b] : {std::pair{&got.w1, &want.w1}, {&got.w2, &want.w2}}) {
          double diff = 0, norm = 0;
          for (int64_t i = 0; i < h_ * h_; ++i) {
            diff = std::max(diff, std::abs((*a)[i] - (*b)[i]));
            norm = std::max(norm, std::abs((*b)[i]));
          }
          worst = std::max(worst, norm > 0 ? diff / norm : diff);
        }
      }
    return worst;
  }

  const PipelineModel& model_;
  const Schedule& schedule_;
  RuntimeOptions options_;
  LoweredSchedule lowered_;
  Watchdog watchdog_;  // before the channels: bounds their (collective) compilation
  // Barriers and combined figures; a one-stage pipeline has no channel to ask.
  std::unique_ptr<Executor> collective_;
  std::vector<Channel> channels_;
  std::vector<char> here_;  // per device of the cluster: its buffers are in this process
  std::vector<int> stage_here_;

  // real compute
  int64_t h_ = 0;
  std::vector<std::vector<std::optional<Box>>> tile_;  // per virtual stage, per device
  std::vector<Weights> weights_;
  std::vector<std::map<DeviceId, Gradients>> gradients_;         // per virtual stage
  std::vector<std::map<int, std::map<DeviceId, Stash>>> stash_;  // per virtual stage, microbatch

  // one iteration
  std::vector<MessageState> messages_;
  std::vector<StageRecord> records_;
  std::vector<TransferSpan> transfers_;
  std::map<int, EmulatedFlow> flows_;  // emulated network: the transfers moving, by message
  Clock::time_point flows_at_;         // when their remaining work was last brought up to date
  std::mutex mutex_;
  std::condition_variable changed_;
  std::exception_ptr failure_;
  std::atomic<bool> aborted_ = false;
  Clock::time_point start_;
};

}  // namespace

ComputeMode parse_compute_mode(std::string_view text) {
  if (text == "timed") return ComputeMode::timed;
  if (text == "real") return ComputeMode::real;
  throw InvalidArgument(fmt::format("bad compute mode '{}': expected timed or real", text));
}

std::string_view to_string(ComputeMode mode) {
  return mode == ComputeMode::timed ? "timed" : "real";
}

RuntimeResult run_pipeline(const PipelineModel& model, const Schedule& schedule,
                           const ExecutorFactory& make_executor, const RuntimeOptions& options) {
  return Run(model, schedule, make_executor, options).play();
}

double pipeline_buffer_bytes(const PipelineModel& model, int microbatches, ComputeMode compute,
                             const std::vector<DeviceId>& devices) {
  // Doubles: the sums of a huge model may pass int64, and they are only compared with memory.
  double per_microbatch = 0;
  for (const auto& e : model.edges)
    for (const auto& t : e.tensors)
      for (bool gradient : {false, true}) {
        const Batch batch = Batch::of_one(edge_resharding(model, e, t, gradient));
        const double element = static_cast<double>(dtype_size(t.tensor.dtype));
        for (DeviceId d : devices) {
          const DeviceTiles tiles = tiles_of(batch, 0, d);
          per_microbatch +=
              (static_cast<double>(tiles.src.volume()) + static_cast<double>(tiles.dst.volume())) *
              element;
        }
      }
  double bytes = per_microbatch * microbatches;
  const auto first = std::find_if(model.edges.begin(), model.edges.end(),
                                  [](const ModelEdge& e) { return !e.tensors.empty(); });
  if (compute == ComputeMode::real && first != model.edges.end()) {
    // Two h x h float32 weights per virtual stage, and per device of a stage here two h x h
    // double gradients, twice (the pipeline's and the whole model's for the check).
    const double h = static_cast<double>(first->tensors.front().tensor.shape.back());
    bytes += static_cast<double>(model.stages.size()) * 2 * h * h * sizeof(float);
    for (const auto& st : model.stages)
      for (DeviceId d : st.mesh.devices())
        if (std::find(devices.begin(), devices.end(), d) != devices.end())
          bytes += 2 * 2 * h * h * sizeof(double);
  }
  return bytes;
}

PipelineModel shrink_tensors(PipelineModel model, double factor) {
  if (!(factor > 0 && factor <= 1))
    throw InvalidArgument(fmt::format("bad size factor {}: expected 0 < factor <= 1", factor));
  for (auto& e : model.edges)
    for (auto& t : e.tensors)
      for (auto& dim : t.tensor.shape)
        dim = std::max<int64_t>(1, std::llround(static_cast<double>(dim) * factor));
  return model;
}

}  // namespace meshcast::pipeline
