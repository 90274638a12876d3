// Dense indices for the ids a problem touches (devices, hosts, links), so that per-id tables are
// sized by the problem and not by the cluster: a batch on two hosts of an 8,192-host cluster
// needs tables of two hosts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace meshcast {

class DenseIndex {
 public:
  DenseIndex() = default;
  // Any order, repeats allowed.
  explicit DenseIndex(std::vector<int64_t> ids) : ids_(std::move(ids)) {
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
  }

  int size() const { return static_cast<int>(ids_.size()); }
  bool contains(int64_t id) const { return std::binary_search(ids_.begin(), ids_.end(), id); }
  // The index of `id`, which must be one of the ids given.
  int index_of(int64_t id) const {
    return static_cast<int>(std::lower_bound(ids_.begin(), ids_.end(), id) - ids_.begin());
  }
  int64_t id_at(int index) const { return ids_[index]; }
  // The ids in ascending order.
  const std::vector<int64_t>& ids() const { return ids_; }

 private:
  std::vector<int64_t> ids_;
};

}  // namespace meshcast
