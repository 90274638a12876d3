// parse_device_list: accepted ids are in 0..kMaxDevices-1 and print and parse back.
#include <fmt/format.h>

#include "fuzz.h"
#include "meshcast/layout/mesh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const auto ids = parse_device_list(fuzz::as_text(data, size));
    for (DeviceId d : ids) fuzz::require(d >= 0 && d < kMaxDevices, "device id range");
    fuzz::require(parse_device_list(fmt::format("{}", fmt::join(ids, ","))) == ids, "device list");
  });
}
