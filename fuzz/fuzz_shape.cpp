// parse_shape: accepted shapes print and parse back to the same sizes, and fit TensorSpec.
#include "fuzz.h"
#include "meshcast/layout/tensor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const auto shape = parse_shape(fuzz::as_text(data, size));
    fuzz::require(parse_shape(shape_to_string(shape)) == shape, "shape , form");
    fuzz::require(parse_shape(shape_to_string(shape, 'x')) == shape, "shape x form");
    TensorSpec{shape, DType::int8}.validate();
  });
}
