// parse_dtype: an accepted name is the canonical name of its dtype.
#include "fuzz.h"
#include "meshcast/layout/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const auto text = fuzz::as_text(data, size);
    const DType dtype = parse_dtype(text);
    fuzz::require(to_string(dtype) == text, "dtype name");
    fuzz::require(parse_dtype(to_string(dtype)) == dtype, "dtype");
  });
}
