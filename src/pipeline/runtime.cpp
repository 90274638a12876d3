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
#include <thread>

#include "meshcast/error.h"
#include "meshcast/plan/planner.h"
#include "meshcast/runtime/buffer_table.h"
#include "meshcast/runtime/buffers.h"

namespace meshcast::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

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

// dy in, dx out (rows x h); the weight gradients accumulate into `g`.
void block_backward(const Weights& w, int64_t rows, int64_t h, const Stash& s,
                    const std::vector<float>& dy, Gradients& g, std::vector<float>& dx) {
  accumulate_outer(s.hidden.data(), dy.data(), rows, h, g.w2);
  std::vector<float> da(rows * h);
  matmul(dy.data(), w.w2, rows, h, true, da.data());
  for (int64_t i = 0; i < rows * h; ++i) da[i] *= 1.0f - s.hidden[i] * s.hidden[i];
  accumulate_outer(s.x.data(), da.data(), rows, h, g.w1);
  dx.resize(rows * h);
  matmul(da.data(), w.w1, rows, h, true, dx.data());
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

// ---- Transfers: compiled plans with their tile buffers, pooled per (edge, tensor, direction). --

struct Slot {
  std::unique_ptr<CompiledPlan> plan;
  std::vector<TileBuffers> buffers;
  std::vector<DeviceBuffers> views;
  std::vector<int> index_of;  // per device of the cluster: its entry in `buffers`, -1: none

  TileBuffers& of(DeviceId device) { return buffers[index_of[device]]; }
};

class SlotPool {
 public:
  SlotPool(Executor& executor, Resharding problem, Plan plan)
      : executor_(executor), problem_(std::move(problem)), plan_(std::move(plan)) {}

  Slot* acquire() {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      Slot* s = free_.back();
      free_.pop_back();
      return s;
    }
    auto slot = std::make_unique<Slot>();
    slot->plan = executor_.compile(plan_);
    slot->buffers = allocate_tile_buffers(problem_, slot->plan->devices_here());
    slot->views = buffer_views(slot->buffers);
    slot->index_of.assign(problem_.cluster.devices(), -1);
    for (size_t i = 0; i < slot->buffers.size(); ++i)
      slot->index_of[slot->buffers[i].device] = static_cast<int>(i);
    all_.push_back(std::move(slot));
    return all_.back().get();
  }
  void release(Slot* slot) {
    std::lock_guard lock(mutex_);
    free_.push_back(slot);
  }
  const Resharding& problem() const { return problem_; }

 private:
  Executor& executor_;
  Resharding problem_;
  Plan plan_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Slot>> all_;
  std::vector<Slot*> free_;
};

// One message of the lowered schedule in flight: a slot per tensor of its edge.
struct MessageState {
  std::vector<Slot*> slots;
  bool arrived = false;
  Clock::time_point posted, arrival;
  std::jthread waiter;
};

struct StageRecord {
  std::vector<Span> timeline;
  int held = 0;
  int peak_held = 0;
};

class Run {
 public:
  Run(const PipelineModel& model, const Schedule& schedule, Executor& executor,
      const RuntimeOptions& options)
      : model_(model),
        schedule_(schedule),
        executor_(executor),
        options_(options),
        lowered_(checked_lower()) {
    const int edges = static_cast<int>(model.edges.size());
    for (int e = 0; e < edges; ++e)
      for (const auto& t : model.edges[e].tensors)
        for (bool gradient : {false, true}) {
          Resharding r = edge_resharding(model, model.edges[e], t, gradient);
          Plan plan = make_plan(r, PlanOptions{.strategy = options.strategy});
          pools_[key(e, &t - model.edges[e].tensors.data(), gradient)] =
              std::make_unique<SlotPool>(executor, std::move(r), std::move(plan));
        }
    for (size_t id = 0; id < lowered_.messages.size(); ++id) {
      const Message& msg = lowered_.messages[id];
      message_id_[{msg.edge, msg.microbatch, msg.payload == Payload::gradient}] =
          static_cast<int>(id);
    }
    if (options.compute == ComputeMode::real) prepare_real();
  }

  RuntimeResult play() {
    for (int i = 0; i < options_.warmup_iterations; ++i) iterate();
    const double makespan = iterate();
    RuntimeResult out;
    out.predicted_peak_in_flight = peak_in_flight(schedule_);
    PipelineResult& r = out.measured;
    r.makespan_s = makespan;
    double idle_total = 0;
    for (int d = 0; d < schedule_.stages; ++d) {
      StageReport st;
      for (const Span& s : records_[d].timeline)
        (s.kind == SpanKind::comm ? st.comm_wait_s : st.busy_s) += s.end - s.start;
      st.idle_s = std::max(0.0, makespan - st.busy_s);
      st.peak_in_flight = records_[d].peak_held;
      double held = 0;
      for (const auto& step : schedule_.order[d]) {
        const double bytes = model_.stages[schedule_.virtual_stage(d, step.chunk)].activation_bytes;
        held += step.pass == Pass::forward ? bytes : -bytes;
        st.peak_activation_bytes = std::max(st.peak_activation_bytes, held);
      }
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
    if (options_.compute == ComputeMode::real) out.gradient_error = gradient_error();
    return out;
  }

 private:
  static int64_t key(int edge, int64_t tensor, bool gradient) {
    return (int64_t{edge} * 1024 + tensor) * 2 + (gradient ? 1 : 0);
  }

  std::vector<Edge> model_edges() const {
    std::vector<Edge> edges;
    for (const auto& e : model_.edges) edges.push_back(e.edge);
    return edges;
  }

  // Checks everything before anything is compiled or started, then lowers.
  LoweredSchedule checked_lower() const {
    if (executor_.backend() != "local")
      throw InvalidArgument(
          fmt::format("the pipeline runtime plays every stage in this process: backend '{}' is not "
                      "supported, expected local",
                      executor_.backend()));
    if (schedule_.virtual_stages() != static_cast<int>(model_.stages.size()))
      throw InvalidArgument(
          fmt::format("the schedule has {} virtual stages, the model {} stages: expected equal",
                      schedule_.virtual_stages(), model_.stages.size()));
    if (schedule_.chunks != 1)
      throw InvalidArgument(
          fmt::format("the pipeline runtime plays one chunk per stage, the schedule has {} chunks",
                      schedule_.chunks));
    validate(schedule_, model_edges());
    for (const auto& e : model_.edges)
      if (e.tensors.empty())
        throw InvalidArgument(
            fmt::format("edge {}->{} gives a fixed time and no tensors: running needs the "
                        "tensors it carries",
                        e.edge.from, e.edge.to));
    if (!(options_.transfer_delay_s >= 0) || !std::isfinite(options_.transfer_delay_s))
      throw InvalidArgument(fmt::format("bad transfer delay {} s: expected a finite time >= 0",
                                        options_.transfer_delay_s));
    if (options_.emulated_network && options_.emulated_network->edges.size() != model_.edges.size())
      throw InvalidArgument(
          fmt::format("the emulated network gives {} edges, the model has {}: expected equal",
                      options_.emulated_network->edges.size(), model_.edges.size()));
    if (options_.warmup_iterations < 0)
      throw InvalidArgument(
          fmt::format("bad warm-up iteration count {}: expected >= 0", options_.warmup_iterations));
    return lower(schedule_, model_edges());
  }

  // ---- real compute: one tile per device and stage, checked once ----

  void prepare_real() {
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

  void reset_gradients() {
    gradients_.assign(model_.stages.size(), {});
    for (size_t vs = 0; vs < model_.stages.size(); ++vs)
      for (DeviceId d : model_.stages[vs].mesh.devices())
        gradients_[vs][d] = {std::vector<double>(h_ * h_), std::vector<double>(h_ * h_)};
  }

  // ---- one iteration ----

  double iterate() {
    const int stages = schedule_.stages;
    messages_ = std::vector<MessageState>(lowered_.messages.size());
    records_ = std::vector<StageRecord>(stages);
    transfers_.clear();
    stash_.assign(model_.stages.size(), {});
    if (options_.compute == ComputeMode::real) reset_gradients();
    failure_ = nullptr;
    aborted_ = false;
    start_ = Clock::now();
    {
      std::vector<std::jthread> threads;
      for (int d = 0; d < stages; ++d) threads.emplace_back([this, d] { play_stage(d); });
    }
    double makespan = 0;
    for (const auto& rec : records_)
      for (const auto& s : rec.timeline) makespan = std::max(makespan, s.end);
    messages_.clear();  // joins the waiters
    if (failure_) std::rethrow_exception(failure_);
    return makespan;
  }

  void play_stage(int d) {
    try {
      for (const Action& a : lowered_.programs[d]) {
        if (aborted_) return;
        switch (a.kind) {
          case ActionKind::recv:
            await(d, a.message);
            break;
          case ActionKind::compute:
            compute(d, schedule_.order[d][a.step]);
            break;
          case ActionKind::send:
            post(a.message);
            if (!options_.overlap) await(d, a.message);
            break;
        }
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!failure_) failure_ = std::current_exception();
      aborted_ = true;
      arrived_.notify_all();
    }
  }

  double now() const { return seconds_between(start_, Clock::now()); }

  // Blocks stage d until message `id` has fully arrived; the wait is the stage's comm time.
  void await(int d, int id) {
    const double from = now();
    {
      std::unique_lock lock(mutex_);
      arrived_.wait(lock, [&] { return messages_[id].arrived || aborted_; });
    }
    const double to = now();
    if (to > from) records_[d].timeline.push_back({SpanKind::comm, -1, 0, from, to});
  }

  // Starts every tensor's plan of message `id` (their source tiles are filled) and a waiter that
  // marks the message arrived once all are done and the injected delay has passed.
  void post(int id) {
    MessageState& m = messages_[id];
    m.posted = Clock::now();
    for (Slot* s : m.slots) s->plan->start(s->views);
    double floor_s = options_.transfer_delay_s;
    if (options_.emulated_network) {
      const Message& info = lowered_.messages[id];
      const EdgeCost& cost = options_.emulated_network->edges[info.edge];
      floor_s = std::max(floor_s,
                         info.payload == Payload::activation ? cost.activation_s : cost.gradient_s);
    }
    m.waiter = std::jthread([this, id, floor_s] {
      MessageState& msg = messages_[id];
      std::this_thread::sleep_until(msg.posted + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(floor_s)));
      for (Slot* s : msg.slots) s->plan->wait();
      std::lock_guard lock(mutex_);
      msg.arrival = Clock::now();
      msg.arrived = true;
      const Message& info = lowered_.messages[id];
      transfers_.push_back({id, info.from_stage, info.to_stage, info.payload, info.microbatch,
                            seconds_between(start_, msg.posted),
                            seconds_between(start_, msg.arrival)});
      arrived_.notify_all();
    });
  }

  int message(int edge, int microbatch, Payload payload) const {
    return message_id_.at({edge, microbatch, payload == Payload::gradient});
  }

  // Slots for the messages a step sends: acquired here, so the step writes into their sources.
  void acquire_outgoing(int vs, const Step& step) {
    const bool forward = step.pass == Pass::forward;
    for (int e = 0; e < static_cast<int>(model_.edges.size()); ++e) {
      const Edge& edge = model_.edges[e].edge;
      if ((forward ? edge.from : edge.to) != vs) continue;
      MessageState& m =
          messages_[message(e, step.microbatch, forward ? Payload::activation : Payload::gradient)];
      for (size_t t = 0; t < model_.edges[e].tensors.size(); ++t)
        m.slots.push_back(pools_.at(key(e, static_cast<int64_t>(t), !forward))->acquire());
    }
  }

  // The slots of the messages a step received, handed back once the step has read them.
  void release_incoming(int vs, const Step& step) {
    const bool forward = step.pass == Pass::forward;
    for (int e = 0; e < static_cast<int>(model_.edges.size()); ++e) {
      const Edge& edge = model_.edges[e].edge;
      if ((forward ? edge.to : edge.from) != vs) continue;
      MessageState& m =
          messages_[message(e, step.microbatch, forward ? Payload::activation : Payload::gradient)];
      for (size_t t = 0; t < m.slots.size(); ++t)
        pools_.at(key(e, static_cast<int64_t>(t), !forward))->release(m.slots[t]);
    }
  }

  void compute(int d, const Step& step) {
    const int vs = schedule_.virtual_stage(d, step.chunk);
    const bool forward = step.pass == Pass::forward;
    const double from = now();
    acquire_outgoing(vs, step);
    if (options_.compute == ComputeMode::timed) {
      const auto& st = model_.stages[vs];
      std::this_thread::sleep_until(
          start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                       from + (forward ? st.forward_s : st.backward_s))));
    } else if (forward) {
      real_forward(vs, step.microbatch);
    } else {
      real_backward(vs, step.microbatch);
    }
    release_incoming(vs, step);
    StageRecord& rec = records_[d];
    rec.held += forward ? 1 : -1;
    rec.peak_held = std::max(rec.peak_held, rec.held);
    rec.timeline.push_back({forward ? SpanKind::forward : SpanKind::backward, step.microbatch,
                            step.chunk, from, now()});
  }

  // Sums, per device, the tiles of the stage's incoming messages of this pass (activations of its
  // in-edges, or gradients of its out-edges) into `sum`; false when there are none.
  bool gather_incoming(int vs, int microbatch, Payload payload, DeviceId d,
                       std::vector<float>& sum) {
    bool any = false;
    sum.assign(tile_[vs][d]->volume(), 0);
    for (int e = 0; e < static_cast<int>(model_.edges.size()); ++e) {
      const Edge& edge = model_.edges[e].edge;
      if ((payload == Payload::activation ? edge.to : edge.from) != vs) continue;
      for (Slot* s : messages_[message(e, microbatch, payload)].slots) {
        const auto& dst = s->of(d).dst;
        add_into(sum, reinterpret_cast<const float*>(dst.data()), static_cast<int64_t>(sum.size()));
        any = true;
      }
    }
    return any;
  }

  // Writes `data` (the device's tile) into the source tile of every outgoing message's tensor.
  void scatter_outgoing(int vs, int microbatch, Payload payload, DeviceId d,
                        const std::vector<float>& data) {
    for (int e = 0; e < static_cast<int>(model_.edges.size()); ++e) {
      const Edge& edge = model_.edges[e].edge;
      if ((payload == Payload::activation ? edge.from : edge.to) != vs) continue;
      for (Slot* s : messages_[message(e, microbatch, payload)].slots) {
        auto& src = s->of(d).src;
        std::memcpy(src.data(), data.data(), data.size() * sizeof(float));
      }
    }
  }

  void real_forward(int vs, int microbatch) {
    auto& per_device = stash_[vs][microbatch];
    for (DeviceId d : model_.stages[vs].mesh.devices()) {
      Stash& s = per_device[d];
      if (!gather_incoming(vs, microbatch, Payload::activation, d, s.x))
        fill_input(*tile_[vs][d], microbatch, s.x);
      block_forward(weights_[vs], rows(vs, d), h_, s);
      scatter_outgoing(vs, microbatch, Payload::activation, d, s.y);
    }
  }

  void real_backward(int vs, int microbatch) {
    auto& per_device = stash_[vs][microbatch];
    std::vector<float> dy, dx;
    for (DeviceId d : model_.stages[vs].mesh.devices()) {
      Stash& s = per_device[d];
      if (!gather_incoming(vs, microbatch, Payload::gradient, d, dy)) dy = s.y;
      block_backward(weights_[vs], rows(vs, d), h_, s, dy, gradients_[vs][d], dx);
      scatter_outgoing(vs, microbatch, Payload::gradient, d, dx);
    }
    stash_[vs].erase(microbatch);
  }

  // The same model run whole in this process, microbatch by microbatch, compared with the sum of
  // the devices' gradients (each distinct tile once: replicas computed the same rows).
  double gradient_error() const {
    const int stages = static_cast<int>(model_.stages.size());
    const Box whole = full_box(model_.edges.front().tensors.front().tensor.shape);
    const int64_t rows_all = whole.volume() / h_;
    std::vector<Gradients> reference(stages);
    for (auto& g : reference) g = {std::vector<double>(h_ * h_), std::vector<double>(h_ * h_)};
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
        std::vector<float> dy(whole.volume(), 0);
        bool any = false;
        for (const auto& e : model_.edges)
          if (e.edge.from == vs)
            for (size_t t = 0; t < e.tensors.size(); ++t) {
              add_into(dy, dx[e.edge.to].data(), whole.volume());
              any = true;
            }
        if (!any) dy = stash[vs].y;
        block_backward(weights_[vs], rows_all, h_, stash[vs], dy, reference[vs], dx[vs]);
      }
    }
    double worst = 0;
    for (int vs = 0; vs < stages; ++vs) {
      Gradients total{std::vector<double>(h_ * h_), std::vector<double>(h_ * h_)};
      std::vector<Box> counted;
      for (DeviceId d : model_.stages[vs].mesh.devices()) {
        const Box& box = *tile_[vs][d];
        if (std::find(counted.begin(), counted.end(), box) != counted.end()) continue;
        counted.push_back(box);
        const Gradients& g = gradients_[vs].at(d);
        for (int64_t i = 0; i < h_ * h_; ++i) {
          total.w1[i] += g.w1[i];
          total.w2[i] += g.w2[i];
        }
      }
      for (auto [got, want] :
           {std::pair{&total.w1, &reference[vs].w1}, {&total.w2, &reference[vs].w2}}) {
        double diff = 0, norm = 0;
        for (int64_t i = 0; i < h_ * h_; ++i) {
          diff = std::max(diff, std::abs((*got)[i] - (*want)[i]));
          norm = std::max(norm, std::abs((*want)[i]));
        }
        worst = std::max(worst, norm > 0 ? diff / norm : diff);
      }
    }
    return worst;
  }

  const PipelineModel& model_;
  const Schedule& schedule_;
  Executor& executor_;
  RuntimeOptions options_;
  LoweredSchedule lowered_;
  std::map<int64_t, std::unique_ptr<SlotPool>> pools_;
  std::map<std::tuple<int, int, bool>, int> message_id_;

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
  std::mutex mutex_;
  std::condition_variable arrived_;
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

RuntimeResult run_pipeline(const PipelineModel& model, const Schedule& schedule, Executor& executor,
                           const RuntimeOptions& options) {
  return Run(model, schedule, executor, options).play();
}

PipelineModel scale_tensors(PipelineModel model, double factor) {
  if (!(factor > 0 && factor <= 1))
    throw InvalidArgument(fmt::format("bad scale {}: expected 0 < scale <= 1", factor));
  for (auto& e : model.edges)
    for (auto& t : e.tensors)
      for (auto& dim : t.tensor.shape)
        dim = std::max<int64_t>(1, std::llround(static_cast<double>(dim) * factor));
  return model;
}

}  // namespace meshcast::pipeline
