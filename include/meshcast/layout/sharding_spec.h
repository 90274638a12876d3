// ShardingSpec: per tensor dimension, R (replicated) or S over mesh axes; parsers for the three
// spec vocabularies (Alpa strings, DTensor placements, JAX PartitionSpecs) and the printer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshcast {

struct SpecContext;

class ShardingSpec {
 public:
  // Mesh axes a dimension is split over, major first; empty means replicated (R).
  using DimAxes = std::vector<int>;

  ShardingSpec() = default;
  // `nested` (one flag per dim, or empty for all flat) marks dims split axis by axis, as DTensor
  // does; a dim with fewer than two axes is never nested (both splits are the same).
  explicit ShardingSpec(std::vector<DimAxes> dims, std::vector<bool> nested = {});

  // Accepts "S0RR", "RS01", "S0,R,R" (case-insensitive S/R) and nested dims "S0/1". Throws
  // InvalidArgument naming the text and the offending position on malformed input or an axis
  // used twice.
  static ShardingSpec parse(std::string_view text);

  const std::vector<DimAxes>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  const DimAxes& axes_of(int dim) const { return dims_[dim]; }
  // Whether dimension `dim` is split axis by axis (each axis splits every part of the one
  // before) instead of once into the product of its axes.
  bool nested(int dim) const { return nested_[dim]; }
  // Canonical concatenated form, e.g. "S01RR" or "S0/1R"; parse(to_string()) == *this.
  std::string to_string() const;
  // What the user wrote when the spec was read from DTensor placements or a PartitionSpec
  // (parse_sharding_spec), so that errors quote it rather than the converted form; empty
  // otherwise. Not part of the value: operator== compares dims and nesting only.
  const std::string& source() const { return source_; }
  // Throws InvalidArgument when the rank differs from the tensor's or an axis is >= mesh_rank; the
  // message quotes source() when there is one.
  void validate(int tensor_rank, int mesh_rank) const;

  bool operator==(const ShardingSpec& other) const {
    return dims_ == other.dims_ && nested_ == other.nested_;
  }

 private:
  friend ShardingSpec parse_sharding_spec(std::string_view text, const SpecContext& context);
  // "'S0R'", or "'Shard(0),Replicate()' (read as S0R)" when read from another vocabulary.
  std::string quoted() const;

  std::vector<DimAxes> dims_;
  std::vector<bool> nested_;
  std::string source_;
};

// What reading a spec may need besides its text: DTensor placements do not say the tensor's rank,
// JAX PartitionSpecs name mesh axes and may leave trailing dimensions out.
struct SpecContext {
  int tensor_rank = 0;                  // 0: unknown, the spec's own entries decide
  int mesh_rank = 0;                    // 0: unknown, not checked here
  std::vector<std::string> axis_names;  // mesh axis names; empty: axes are named 0, 1, ...
};

// A spec in any of the three vocabularies:
// - Alpa: "S0R", "S0,R", "S0/1R" (ShardingSpec::parse);
// - DTensor placements, one per mesh axis: "Shard(0),Replicate()", "[Shard(dim=0), Replicate()]";
//   several axes sharding one dim split it nested, in mesh-axis order;
// - JAX PartitionSpec over named mesh axes: "P(None,tp)", "PartitionSpec(('dp','tp'), None)",
//   "(dp, None)"; a tuple entry splits the dim flat over its axes, major first; missing trailing
//   entries are None.
// Throws InvalidArgument naming the text, the bad entry and what was expected.
ShardingSpec parse_sharding_spec(std::string_view text, const SpecContext& context = {});

}  // namespace meshcast
