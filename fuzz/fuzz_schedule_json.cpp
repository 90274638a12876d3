// The JSON form of `schedule --check FILE` (the schedule itself, or nested under "schedule").
#include "fuzz_schedule.h"
#include "meshcast/plan/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const auto j = parse_json(fuzz::as_text(data, size));
    fuzz::check_schedule(
        pipeline::schedule_from_json(j.is_object() && j.contains("schedule") ? j["schedule"] : j));
  });
}
