// A batch file (docs/json.md#batch-file): read and validated; an accepted batch writes and reads
// back equal.
#include "fuzz.h"
#include "meshcast/plan/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const Batch batch = batch_from_json(parse_json(fuzz::as_text(data, size)));
    fuzz::require(batch_from_json(parse_json(batch_to_json(batch).dump())) == batch, "batch");
  });
}
