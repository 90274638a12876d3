// ShardingSpec: per tensor dimension, R (replicated) or S over mesh axes; parser and printer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshcast {

class ShardingSpec {
 public:
  // Mesh axes a dimension is split over, major first; empty means replicated (R).
  using DimAxes = std::vector<int>;

  ShardingSpec() = default;
  explicit ShardingSpec(std::vector<DimAxes> dims);

  // Accepts "S0RR", "RS01", "S0,R,R" (case-insensitive S/R). Throws InvalidArgument naming the
  // text and the offending position on malformed input or an axis used twice.
  static ShardingSpec parse(std::string_view text);

  const std::vector<DimAxes>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  const DimAxes& axes_of(int dim) const { return dims_[dim]; }
  // Canonical concatenated form, e.g. "S01RR"; parse(to_string()) == *this.
  std::string to_string() const;
  // Throws InvalidArgument when the rank differs from the tensor's or an axis is >= mesh_rank.
  void validate(int tensor_rank, int mesh_rank) const;

  bool operator==(const ShardingSpec&) const = default;

 private:
  std::vector<DimAxes> dims_;
};

}  // namespace meshcast
