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
  // Any order, repeats allowed. Ids given with many repeats over a range at most a few times
  // their count (a simulator's links, one per usage of every op) are marked in a table of that
  // range rather than sorted: linear time, and the table is still sized by the ids given.
  explicit DenseIndex(std::vector<int64_t> ids) : ids_(std::move(ids)) {
    if (ids_.empty()) return;
    const auto [lo, hi] = std::minmax_element(ids_.begin(), ids_.end());
    const int64_t first = *lo;
    const uint64_t span = static_cast<uint64_t>(*hi) - static_cast<uint64_t>(first);
    if (span < kMostRangePerId * ids_.size()) {
      std::vector<bool> given(span + 1);
      for (int64_t id : ids_)
        given[static_cast<uint64_t>(id) - static_cast<uint64_t>(first)] = true;
      ids_.clear();
      for (uint64_t i = 0; i <= span; ++i)
        if (given[i]) ids_.push_back(static_cast<int64_t>(static_cast<uint64_t>(first) + i));
    } else {
      std::sort(ids_.begin(), ids_.end());
      ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    }
    // Ids without gaps (a mesh's devices, a range of hosts) are found by subtraction.
    contiguous_ =
        static_cast<uint64_t>(ids_.back()) - static_cast<uint64_t>(ids_.front()) == ids_.size() - 1;
  }

  int size() const { return static_cast<int>(ids_.size()); }
  bool contains(int64_t id) const {
    if (contiguous_) return id >= ids_.front() && id <= ids_.back();  // (never empty)
    return std::binary_search(ids_.begin(), ids_.end(), id);
  }
  // The index of `id`, which must be one of the ids given.
  int index_of(int64_t id) const {
    if (contiguous_) return static_cast<int>(id - ids_.front());
    return static_cast<int>(std::lower_bound(ids_.begin(), ids_.end(), id) - ids_.begin());
  }
  int64_t id_at(int index) const { return ids_[index]; }
  // The ids in ascending order.
  const std::vector<int64_t>& ids() const { return ids_; }

 private:
  static constexpr uint64_t kMostRangePerId = 4;
  std::vector<int64_t> ids_;
  bool contiguous_ = false;
};

}  // namespace meshcast
