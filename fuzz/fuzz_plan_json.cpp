// A plan document as `plan --check` and `run --plan` load it: parsed, read, validated; an
// accepted plan writes and reads back equal.
#include "fuzz.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const Plan plan = plan_from_json(parse_json(fuzz::as_text(data, size)));
    validate_plan(plan);
    fuzz::require(plan_from_json(parse_json(plan_to_json(plan).dump())) == plan, "plan");
  });
}
