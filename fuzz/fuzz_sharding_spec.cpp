// Every spec vocabulary: Alpa ("S0RR", "S0/1R"), DTensor placements ("Shard(0),Replicate()") and
// JAX PartitionSpecs ("P((dp,tp),None)") through parse_sharding_spec, with the tensor rank, mesh
// rank and axis names drawn from the input's first two bytes. An accepted spec prints in
// canonical form and parses back equal.
#include <string>
#include <vector>

#include "fuzz.h"
#include "meshcast/layout/sharding_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace meshcast;
  if (size < 2) return 0;
  SpecContext context;
  context.tensor_rank = data[0] % 9;
  context.mesh_rank = data[1] % 5;
  if (data[0] & 0x80) {
    const std::vector<std::string> names = {"dp", "tp", "pp", "ep"};
    context.axis_names.assign(names.begin(), names.begin() + context.mesh_rank);
  }
  return fuzz::refuse_or([&] {
    const ShardingSpec spec = parse_sharding_spec(fuzz::as_text(data + 2, size - 2), context);
    fuzz::require(ShardingSpec::parse(spec.to_string()) == spec, "canonical spec");
    fuzz::require(parse_sharding_spec(spec.to_string()) == spec, "canonical spec, any form");
  });
}
