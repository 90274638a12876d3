#include "engine.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

namespace meshcast::pipeline {
namespace {

struct MessageState {
  bool done = false;
  double remaining = 0;  // seconds of work left at full rate
  double rate = 0;       // share of the full rate while active
  double last = 0;       // time `remaining` was last brought up to date
  int version = 0;       // bumps when the predicted end changes
  double start = 0;
  double posted = 0;  // when the sender posted it: its data exists from then on
};

struct Event {
  double time;
  uint64_t seq;  // ties break by creation order, so runs are deterministic
  int stage;     // >= 0: compute done on this stage; -1: a transfer may finish
  int message;
  int version;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

class Engine {
 public:
  explicit Engine(const EngineInput& in)
      : in_(in),
        s_(in.schedule),
        low_(in.lowered),
        msgs_(low_.messages.size()),
        pc_(s_.stages, 0),
        group_posted_(s_.stages, false),
        group_since_(s_.stages, 0.0),
        waiting_(s_.stages, false),
        out_active_(s_.stages),
        in_active_(s_.stages) {
    out_.busy_s.assign(s_.stages, 0.0);
    out_.transfer_wait_s.assign(s_.stages, 0.0);
    out_.dependency_wait_s.assign(s_.stages, 0.0);
    if (in.record) out_.timeline.resize(s_.stages);
  }

  EngineOutput run() {
    for (int d = 0; d < s_.stages; ++d) advance(d);
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      if (e.stage < 0 && msgs_[e.message].version != e.version) continue;
      now_ = e.time;
      if (e.stage >= 0) {
        ++pc_[e.stage];
        advance(e.stage);
      } else {
        finish(e.message);
      }
    }
    out_.makespan_s = now_;
    for (int d = 0; d < s_.stages; ++d) {
      const auto& program = low_.programs[d];
      if (pc_[d] >= program.size()) continue;
      size_t k = pc_[d];
      while (k < program.size() && program[k].kind == ActionKind::send) ++k;
      while (k < program.size() && program[k].kind == ActionKind::recv &&
             msgs_[program[k].message].done)
        ++k;
      out_.stuck.push_back(k < program.size() && program[k].kind == ActionKind::recv
                               ? describe_wait(s_, low_, d, program[k])
                               : fmt::format("stage {} stopped at action {}", d, pc_[d]));
    }
    return std::move(out_);
  }

 private:
  // Runs stage d's program from pc_[d] until it must wait for a compute step or a transfer.
  void advance(int d) {
    const auto& program = low_.programs[d];
    while (pc_[d] < program.size()) {
      const Action& a = program[pc_[d]];
      if (a.kind == ActionKind::compute) {
        const Step& step = s_.order[d][a.step];
        const int vs = s_.virtual_stage(d, step.chunk);
        const bool fwd = step.pass == Pass::forward;
        const double t = fwd ? in_.forward_s[vs] : in_.backward_s[vs];
        out_.busy_s[d] += t;
        if (in_.record)
          out_.timeline[d].push_back(Span{fwd ? SpanKind::forward : SpanKind::backward,
                                          step.microbatch, step.chunk, now_, now_ + t});
        push({now_ + t, seq_++, d, -1, 0});
        return;
      }
      size_t end = pc_[d];
      while (end < program.size() && program[end].kind != ActionKind::compute) ++end;
      if (!group_posted_[d]) {
        group_posted_[d] = true;
        group_since_[d] = now_;
        for (size_t k = pc_[d]; k < end; ++k) post(program[k]);
      }
      for (size_t k = pc_[d]; k < end; ++k) {
        const Action& c = program[k];
        const bool blocks = in_.senders_block || c.kind == ActionKind::recv;
        if (blocks && !msgs_[c.message].done) {
          waiting_[d] = true;
          return;
        }
      }
      group_posted_[d] = false;
      if (now_ > group_since_[d]) {
        // Until the last awaited message was posted the stream waited for its data to be
        // produced (a dependency: bubble); after that, for the transfer itself.
        double produced = group_since_[d];
        for (size_t k = pc_[d]; k < end; ++k)
          if (program[k].kind == ActionKind::recv)
            produced = std::max(produced, msgs_[program[k].message].posted);
        produced = std::min(produced, now_);
        out_.dependency_wait_s[d] += produced - group_since_[d];
        out_.transfer_wait_s[d] += now_ - produced;
        if (in_.record)
          out_.timeline[d].push_back(Span{SpanKind::comm, -1, 0, group_since_[d], now_});
      }
      pc_[d] = end;
    }
  }

  void post(const Action& a) {
    if (a.kind != ActionKind::send) return;
    msgs_[a.message].posted = now_;
    const auto& msg = low_.messages[a.message];
    auto& queue = pairs_[pair_key(msg.from_stage, msg.to_stage)];
    queue.push_back(a.message);
    if (queue.size() == 1) start(a.message);
  }

  int64_t pair_key(int from, int to) const { return static_cast<int64_t>(from) * s_.stages + to; }

  void start(int id) {
    auto& m = msgs_[id];
    const auto& msg = low_.messages[id];
    m.start = now_;
    m.last = now_;
    m.remaining = in_.message_s[id];
    out_active_[msg.from_stage].push_back(id);
    in_active_[msg.to_stage].push_back(id);
    rerate(msg.from_stage, msg.to_stage);
  }

  void finish(int id) {
    auto& m = msgs_[id];
    m.done = true;
    const auto& msg = low_.messages[id];
    if (in_.record)
      out_.transfers.push_back(TransferSpan{id, msg.from_stage, msg.to_stage, msg.payload,
                                            msg.microbatch, m.start, now_});
    std::erase(out_active_[msg.from_stage], id);
    std::erase(in_active_[msg.to_stage], id);
    rerate(msg.from_stage, msg.to_stage);
    auto& queue = pairs_[pair_key(msg.from_stage, msg.to_stage)];
    queue.pop_front();
    if (!queue.empty()) start(queue.front());
    wake(msg.to_stage);
    wake(msg.from_stage);
  }

  void wake(int d) {
    if (!waiting_[d]) return;
    waiting_[d] = false;
    advance(d);
  }

  // The flows on `from`'s out-port and `to`'s in-port changed: bring them up to date at their old
  // rates and predict their ends at the new ones.
  void rerate(int from, int to) {
    for (const auto* list : {&out_active_[from], &in_active_[to]})
      for (int id : *list) {
        auto& m = msgs_[id];
        const auto& msg = low_.messages[id];
        m.remaining = std::max(0.0, m.remaining - (now_ - m.last) * m.rate);
        m.last = now_;
        m.rate = 1.0 / static_cast<double>(std::max(out_active_[msg.from_stage].size(),
                                                    in_active_[msg.to_stage].size()));
        push({now_ + m.remaining / m.rate, seq_++, -1, id, ++m.version});
      }
  }

  void push(const Event& e) { events_.push(e); }

  const EngineInput& in_;
  const Schedule& s_;
  const LoweredSchedule& low_;
  std::vector<MessageState> msgs_;
  std::vector<size_t> pc_;
  std::vector<bool> group_posted_;
  std::vector<double> group_since_;
  std::vector<bool> waiting_;
  std::vector<std::vector<int>> out_active_;
  std::vector<std::vector<int>> in_active_;
  std::unordered_map<int64_t, std::deque<int>> pairs_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t seq_ = 0;
  double now_ = 0;
  EngineOutput out_;
};

}  // namespace

EngineOutput run_engine(const EngineInput& input) {
  return Engine(input).run();
}

}  // namespace meshcast::pipeline
