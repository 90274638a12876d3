// Lowering of a pipeline schedule to explicit sends and receives between stages, and the
// validator (step counts, dependency order, deadlock check of the lowered program).
#pragma once

#include <string>
#include <vector>

#include "meshcast/pipeline/schedule.h"

namespace meshcast::pipeline {

// A dependency between virtual stages (from < to): the forward of `to` needs the activation of
// `from`, and the backward of `from` needs the gradient `to` sends back. The chain 0->1->2->...
// links consecutive stages; skip connections (U-Net) add edges between non-adjacent ones.
struct Edge {
  int from = 0;
  int to = 0;

  bool operator==(const Edge&) const = default;
};

// The chain of `virtual_stages` stages: (0,1), (1,2), ...
std::vector<Edge> chain_edges(int virtual_stages);

enum class Payload { activation, gradient };

// One transfer of the lowered program: the activation or gradient of one microbatch over one edge.
struct Message {
  int edge = 0;
  int microbatch = 0;
  Payload payload = Payload::activation;
  int from_stage = 0;  // physical stages (meshes) that send and receive it
  int to_stage = 0;
};

enum class ActionKind { compute, send, recv };

// One action of a stage's lowered program. Sends follow the compute step that produced their data;
// receives precede the compute step that needs it; a run of consecutive sends and receives forms
// one group that a runtime posts at once (as Megatron-LM batches send_forward_recv_backward).
struct Action {
  ActionKind kind = ActionKind::compute;
  int step = 0;      // index in the stage's order of the compute step this action belongs to
  int message = -1;  // index into LoweredSchedule::messages for sends and receives
};

struct LoweredSchedule {
  std::vector<Edge> edges;
  std::vector<Message> messages;
  std::vector<std::vector<Action>> programs;  // per stage
};

// Throws InvalidArgument on an edge outside the virtual stages, not going forward, or repeated.
void check_edges(const Schedule& schedule, const std::vector<Edge>& edges);
// Throws InvalidArgument, naming the stage and step, unless every stage runs the forward and the
// backward of each of its microbatch-chunks exactly once, each forward before its backward, and
// dependencies between chunks of one stage in order.
void check_steps(const Schedule& schedule, const std::vector<Edge>& edges);
// The explicit program of each stage. Transfers between chunks of the same stage are local and
// not lowered. Checks edges and steps first.
LoweredSchedule lower(const Schedule& schedule, const std::vector<Edge>& edges);
// "stage 0: F0 send(a0->1) recv(g0<-1) B0 ..."
std::string lowered_to_text(const Schedule& schedule, const LoweredSchedule& lowered);

// check_steps, then a deadlock check of the lowered program: each stage runs its actions in order,
// a send is posted when reached (receivers buffer it), a receive waits until its send is posted.
// The schedule deadlocks when stages wait on each other in a cycle. Throws InvalidArgument naming,
// for every stuck stage, the step it waits at and the transfer it waits for.
void validate(const Schedule& schedule, const std::vector<Edge>& edges);
inline void validate(const Schedule& schedule) {
  validate(schedule, chain_edges(schedule.virtual_stages()));
}

}  // namespace meshcast::pipeline
