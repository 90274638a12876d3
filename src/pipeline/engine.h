// The event engine shared by the deadlock check and the pipeline simulator (private to the layer).
#pragma once

#include <string>
#include <vector>

#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/simulator.h"

namespace meshcast::pipeline {

struct EngineInput {
  const Schedule& schedule;
  const LoweredSchedule& lowered;
  std::vector<double> forward_s;   // per virtual stage
  std::vector<double> backward_s;  // per virtual stage
  std::vector<double> message_s;   // per message, alone on its ports
  // A transfer starts when its sender posts it (receivers have buffers for it). true: the sender's
  // stream waits until the transfer is done; false: sends never block their sender.
  bool senders_block = false;
  bool record = true;  // keep spans and transfers
};

struct EngineOutput {
  double makespan_s = 0;
  std::vector<double> busy_s;             // per stage
  std::vector<double> transfer_wait_s;    // per stage
  std::vector<double> dependency_wait_s;  // per stage
  std::vector<std::vector<Span>> timeline;
  std::vector<TransferSpan> transfers;
  std::vector<std::string> stuck;  // one description per stuck stage; empty when all finished
};

EngineOutput run_engine(const EngineInput& input);

// "stage 1 at step 2 (F1) waits for the activation of microbatch 1 from stage 0"
// `action` is a receive.
std::string describe_wait(const Schedule& schedule, const LoweredSchedule& lowered, int stage,
                          const Action& receive);

}  // namespace meshcast::pipeline
