#include "meshcast/pipeline/lower.h"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "engine.h"
#include "meshcast/error.h"

namespace meshcast::pipeline {
namespace {

std::string step_name(const Schedule& s, const Step& step) {
  return to_string(step, s.chunks > 1);
}

// Position of each (pass, chunk, microbatch) in one stage's order; -1 when absent.
struct StepPositions {
  int microbatches;
  std::vector<int> forward;
  std::vector<int> backward;

  StepPositions(int chunks, int microbatches)
      : microbatches(microbatches),
        forward(static_cast<size_t>(chunks) * microbatches, -1),
        backward(forward.size(), -1) {}
  int& at(Pass pass, int chunk, int microbatch) {
    auto& v = pass == Pass::forward ? forward : backward;
    return v[static_cast<size_t>(chunk) * microbatches + microbatch];
  }
};

StepPositions positions_of(const Schedule& s, int stage) {
  StepPositions pos(s.chunks, s.microbatches);
  const auto& row = s.order[stage];
  for (int k = 0; k < static_cast<int>(row.size()); ++k) {
    const Step& step = row[k];
    if (step.microbatch >= s.microbatches || step.chunk >= s.chunks)
      throw InvalidArgument(fmt::format(
          "stage {} step {}: {} is outside the schedule's {} microbatches and {} chunks", stage, k,
          step_name(s, step), s.microbatches, s.chunks));
    int& at = pos.at(step.pass, step.chunk, step.microbatch);
    if (at >= 0)
      throw InvalidArgument(fmt::format("stage {} step {}: {} appears twice (first at step {})",
                                        stage, k, step_name(s, step), at));
    at = k;
  }
  return pos;
}

const char* payload_name(Payload p) {
  return p == Payload::activation ? "activation" : "gradient";
}

}  // namespace

std::vector<Edge> chain_edges(int virtual_stages) {
  std::vector<Edge> edges;
  for (int s = 0; s + 1 < virtual_stages; ++s) edges.push_back({s, s + 1});
  return edges;
}

void check_edges(const Schedule& s, const std::vector<Edge>& edges) {
  std::set<std::pair<int, int>> seen;
  for (const auto& e : edges) {
    if (e.from < 0 || e.to >= s.virtual_stages() || e.from >= e.to)
      throw InvalidArgument(
          fmt::format("bad edge {}->{}: expected 0 <= from < to < {} (the virtual stages)", e.from,
                      e.to, s.virtual_stages()));
    if (!seen.insert({e.from, e.to}).second)
      throw InvalidArgument(fmt::format("edge {}->{} is given twice", e.from, e.to));
  }
}

void check_steps(const Schedule& s, const std::vector<Edge>& edges) {
  check_schedule_size(s.stages, s.microbatches, s.chunks);
  if (static_cast<int>(s.order.size()) != s.stages)
    throw InvalidArgument(fmt::format("schedule has {} rows for {} stages: expected one per stage",
                                      s.order.size(), s.stages));
  check_edges(s, edges);
  for (int d = 0; d < s.stages; ++d) {
    StepPositions pos = positions_of(s, d);
    for (int c = 0; c < s.chunks; ++c)
      for (int mb = 0; mb < s.microbatches; ++mb) {
        for (Pass pass : {Pass::forward, Pass::backward})
          if (pos.at(pass, c, mb) < 0)
            throw InvalidArgument(
                fmt::format("stage {} lacks {}: expected every microbatch's "
                            "forward and backward once",
                            d, step_name(s, {pass, mb, c})));
        const int f = pos.at(Pass::forward, c, mb);
        const int b = pos.at(Pass::backward, c, mb);
        if (b < f)
          throw InvalidArgument(fmt::format(
              "stage {} step {}: {} comes before its forward {} (step {})", d, b,
              step_name(s, {Pass::backward, mb, c}), step_name(s, {Pass::forward, mb, c}), f));
      }
    // Dependencies between two chunks of this stage are not lowered to transfers: check order.
    for (const auto& e : edges) {
      if (s.stage_of(e.from) != d || s.stage_of(e.to) != d) continue;
      const int cf = s.chunk_of(e.from), ct = s.chunk_of(e.to);
      for (int mb = 0; mb < s.microbatches; ++mb) {
        // Step (pass, needer) of microbatch mb must come after step (pass, needed).
        const auto require_after = [&](Pass pass, int needer, int needed) {
          const int needs = pos.at(pass, needer, mb), has = pos.at(pass, needed, mb);
          if (needs < has)
            throw InvalidArgument(fmt::format(
                "stage {} step {}: {} comes before {} (step {}) that it needs", d, needs,
                step_name(s, {pass, mb, needer}), step_name(s, {pass, mb, needed}), has));
        };
        require_after(Pass::forward, ct, cf);   // activations flow from chunk cf to ct
        require_after(Pass::backward, cf, ct);  // gradients flow back from ct to cf
      }
    }
  }
}

LoweredSchedule lower(const Schedule& s, const std::vector<Edge>& edges) {
  check_steps(s, edges);
  const int V = s.virtual_stages();
  const int m = s.microbatches;
  LoweredSchedule out;
  out.edges = edges;
  out.messages.resize(edges.size() * m * 2);
  std::vector<std::vector<int>> in_edges(V), out_edges(V);
  for (int e = 0; e < static_cast<int>(edges.size()); ++e) {
    out_edges[edges[e].from].push_back(e);
    in_edges[edges[e].to].push_back(e);
    for (int mb = 0; mb < m; ++mb)
      for (Payload p : {Payload::activation, Payload::gradient}) {
        const int from = s.stage_of(p == Payload::activation ? edges[e].from : edges[e].to);
        const int to = s.stage_of(p == Payload::activation ? edges[e].to : edges[e].from);
        out.messages[(static_cast<size_t>(e) * m + mb) * 2 + static_cast<int>(p)] =
            Message{e, mb, p, from, to};
      }
  }
  auto message_id = [m](int e, int mb, Payload p) {
    return static_cast<int>((static_cast<size_t>(e) * m + mb) * 2 + static_cast<int>(p));
  };

  out.programs.resize(s.stages);
  for (int d = 0; d < s.stages; ++d) {
    auto& program = out.programs[d];
    program.reserve(s.order[d].size() * 3);
    for (int k = 0; k < static_cast<int>(s.order[d].size()); ++k) {
      const Step& step = s.order[d][k];
      const int vs = s.virtual_stage(d, step.chunk);
      const bool fwd = step.pass == Pass::forward;
      const Payload payload = fwd ? Payload::activation : Payload::gradient;
      auto emit = [&](ActionKind kind, const std::vector<int>& list) {
        for (int e : list) {
          const auto& msg = out.messages[message_id(e, step.microbatch, payload)];
          if (msg.from_stage != msg.to_stage)
            program.push_back({kind, k, message_id(e, step.microbatch, payload)});
        }
      };
      emit(ActionKind::recv, fwd ? in_edges[vs] : out_edges[vs]);
      program.push_back({ActionKind::compute, k, -1});
      emit(ActionKind::send, fwd ? out_edges[vs] : in_edges[vs]);
    }
  }
  return out;
}

std::string lowered_to_text(const Schedule& s, const LoweredSchedule& lowered) {
  std::string out;
  for (int d = 0; d < s.stages; ++d) {
    out += fmt::format("stage {}:", d);
    for (const auto& a : lowered.programs[d]) {
      if (a.kind == ActionKind::compute) {
        out += fmt::format(" {}", step_name(s, s.order[d][a.step]));
        continue;
      }
      const auto& msg = lowered.messages[a.message];
      const char tag = msg.payload == Payload::activation ? 'a' : 'g';
      out += a.kind == ActionKind::send
                 ? fmt::format(" send({}{}->{})", tag, msg.microbatch, msg.to_stage)
                 : fmt::format(" recv({}{}<-{})", tag, msg.microbatch, msg.from_stage);
    }
    out += '\n';
  }
  return out;
}

void validate(const Schedule& s, const std::vector<Edge>& edges) {
  const LoweredSchedule lowered = lower(s, edges);
  EngineInput input{.schedule = s,
                    .lowered = lowered,
                    .forward_s = std::vector<double>(s.virtual_stages(), 0.0),
                    .backward_s = std::vector<double>(s.virtual_stages(), 0.0),
                    .message_s = std::vector<double>(lowered.messages.size(), 0.0),
                    .senders_block = false,
                    .record = false};
  const EngineOutput run = run_engine(input);
  if (!run.stuck.empty())
    throw InvalidArgument(fmt::format("deadlock: {}", fmt::join(run.stuck, "; ")));
}

std::string describe_wait(const Schedule& s, const LoweredSchedule& lowered, int stage,
                          const Action& receive) {
  const auto& msg = lowered.messages[receive.message];
  return fmt::format("stage {} at step {} ({}) waits for the {} of microbatch {} from stage {}",
                     stage, receive.step, step_name(s, s.order[stage][receive.step]),
                     payload_name(msg.payload), msg.microbatch, msg.from_stage);
}

}  // namespace meshcast::pipeline
