// The text form of `schedule --check FILE`.
#include "fuzz_schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or(
      [&] { fuzz::check_schedule(pipeline::schedule_from_text(fuzz::as_text(data, size))); });
}
