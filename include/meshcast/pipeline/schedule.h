// Pipeline schedules: per-stage orders of forward/backward steps, their generators and the text,
// JSON and CSV forms.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshcast::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, eager_1f1b, interleaved_1f1b, custom };

// "gpipe", "1f1b", "eager-1f1b", "interleaved-1f1b", "custom".
std::string_view to_string(ScheduleKind kind);
// Throws InvalidArgument naming the text and the accepted names.
ScheduleKind parse_schedule_kind(std::string_view text);
// The kinds a generator makes (all but custom), in the order reports list them.
std::vector<ScheduleKind> generated_kinds();

enum class Pass { forward, backward };

// One compute step of a stage: a pass of one microbatch through one of the stage's model chunks.
struct Step {
  Pass pass = Pass::forward;
  int microbatch = 0;
  int chunk = 0;

  bool operator==(const Step&) const = default;
};

// A pipeline of `stages` meshes, each holding `chunks` model chunks (interleaving). Model chunk c
// of stage d is virtual stage c * stages + d: a microbatch's forward runs through virtual stages
// 0, 1, ..., stages * chunks - 1 and its backward in reverse.
struct Schedule {
  ScheduleKind kind = ScheduleKind::custom;
  int stages = 0;
  int microbatches = 0;
  int chunks = 1;
  std::vector<std::vector<Step>> order = {};  // per stage, in execution order

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  int stage_of(int virtual_stage) const { return virtual_stage % stages; }
  int chunk_of(int virtual_stage) const { return virtual_stage / stages; }

  bool operator==(const Schedule&) const = default;
};

// The most microbatch-chunks (stages x microbatches x chunks) a schedule may have: one million,
// above real pipelines (64 x 1024 x 4 is 262,144). Checking and simulating a schedule take time
// and memory in proportion to it (its steps, and a message per step and edge), and its text form
// is as long: 1000 x 1000 takes 4 s of CPU and prints 10 MB; ten million (the bound before) took
// minutes and gigabytes.
inline constexpr int64_t kMaxScheduleCells = 1'000'000;
// Throws InvalidArgument naming the sizes unless each is >= 1 and their product is at most
// kMaxScheduleCells.
void check_schedule_size(int stages, int microbatches, int chunks);

// Generators. Stage i of n runs, before its first backward: all m forwards (gpipe), min(n-i, m)
// (1f1b), min(2(n-i)-1, m) (eager-1f1b); then alternates backward and forward. interleaved-1f1b is
// Megatron-LM's schedule with `chunks` chunks per stage; it needs m to be a multiple of n, and with
// one chunk it equals eager-1f1b. Throws InvalidArgument on non-positive sizes.
Schedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks = 1);

// "F3" for the forward of microbatch 3; with `with_chunk` the chunk leads: "1B2".
std::string to_string(const Step& step, bool with_chunk = false);
// Accepts "F3", "b3", "1B2". Throws ParseError naming the text.
Step parse_step(std::string_view text);

// One line per stage: "stage 0: F0 F1 B0 B1" (chunk prefixes when chunks > 1).
std::string schedule_to_text(const Schedule& schedule);
// Parses the rows of the text form (the "stage i:" prefix is optional; blank lines are skipped).
// The sizes are inferred: microbatches and chunks from the largest indices. Throws ParseError.
Schedule schedule_from_text(std::string_view text);
// "stage,step0,step1,...": a header, then one row per stage.
std::string schedule_to_csv(const Schedule& schedule);
// {"kind", "stages", "microbatches", "chunks", "order": [["F0", ...], ...]}
nlohmann::json schedule_to_json(const Schedule& schedule);
// Throws ParseError naming the bad key or step.
Schedule schedule_from_json(const nlohmann::json& j);

// Per stage, the most microbatch-chunks whose forward ran and whose backward has not yet: the
// activations the stage holds at its peak. Assumes every step appears once (see validate()).
std::vector<int> peak_in_flight(const Schedule& schedule);
// Per stage, the most activation bytes held at once: each forward keeps its virtual stage's
// `activation_bytes` (one value per virtual stage) until its backward. Throws InvalidArgument on
// a wrong count.
std::vector<double> peak_activation_bytes(const Schedule& schedule,
                                          const std::vector<double>& activation_bytes);

}  // namespace meshcast::pipeline
