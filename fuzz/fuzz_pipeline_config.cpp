// A model file of `pipeline --config` (there is no writer to round-trip through): read and
// checked, or refused with meshcast's error.
#include "fuzz.h"
#include "meshcast/pipeline/model.h"
#include "meshcast/plan/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] { pipeline::model_from_json(parse_json(fuzz::as_text(data, size))); });
}
