// parse_mesh_shape: accepted shapes print and parse back; small ones place on hosts with every
// device id distinct and in range.
#include "fuzz.h"
#include "meshcast/layout/mesh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  return fuzz::refuse_or([&] {
    const auto shape = parse_mesh_shape(fuzz::as_text(data, size));
    fuzz::require(parse_mesh_shape(mesh_shape_to_string(shape)) == shape, "mesh shape");
    int64_t devices = 1;
    for (auto n : shape) devices *= n;  // parse_mesh_shape bounds it by kMaxDevices
    if (devices > 4096) return;         // keeps each run fast
    const Mesh mesh = Mesh::placed(shape, 1, shape.back());
    fuzz::require(mesh.size() == devices, "placed mesh size");
    fuzz::require(Mesh(shape, mesh.devices()) == mesh, "explicit mesh");
  });
}
