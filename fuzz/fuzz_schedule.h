// The checks both schedule harnesses make on an accepted schedule.
#pragma once

#include "fuzz.h"
#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/schedule.h"
#include "meshcast/plan/json.h"

namespace meshcast::fuzz {

// Text and JSON forms read back equal (the text form carries no kind and infers the sizes);
// small schedules are also validated (lowered and played), as `schedule --check` does.
inline void check_schedule(const pipeline::Schedule& s) {
  using namespace pipeline;
  const Schedule from_json = schedule_from_json(parse_json(schedule_to_json(s).dump()));
  require(from_json == s, "schedule json");
  const Schedule from_text = schedule_from_text(schedule_to_text(s));
  require(from_text.order == s.order, "schedule text");
  if (int64_t{s.stages} * s.microbatches * s.chunks <= 4096) validate(s);
}

}  // namespace meshcast::fuzz
