// Property tests of the decomposition over the random corpus, against a brute-force oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "corpus.h"
#include "meshcast/tasks/unit_task.h"

namespace meshcast {
namespace {

// The definition of docs/concepts.md, literally: every pair of distinct tiles.
std::vector<UnitTask> brute_force(const Resharding& p) {
  std::vector<UnitTask> tasks;
  for (const auto& s : distinct_tiles(p.tensor, p.src))
    for (const auto& d : distinct_tiles(p.tensor, p.dst)) {
      if (s.box.empty() || d.box.empty()) continue;
      const Box slice = intersect(s.box, d.box);
      if (slice.empty()) continue;
      tasks.push_back({slice, slice.volume() * dtype_size(p.tensor.dtype), s.replicas, d.replicas});
    }
  std::sort(tasks.begin(), tasks.end(),
            [](const UnitTask& a, const UnitTask& b) { return a.slice < b.slice; });
  return tasks;
}

// Row-major offset of `point` inside `box`.
int64_t offset_in(const Box& box, const std::vector<int64_t>& point) {
  int64_t off = 0;
  for (int d = 0; d < box.rank(); ++d) off = off * box.dims[d].size() + (point[d] - box.dims[d].lo);
  return off;
}

// Calls f(point) for every point of a non-empty box.
template <typename F>
void for_each_point(const Box& box, F f) {
  std::vector<int64_t> p(box.rank());
  for (int d = 0; d < box.rank(); ++d) p[d] = box.dims[d].lo;
  while (true) {
    f(p);
    int d = box.rank() - 1;
    for (; d >= 0; --d) {
      if (++p[d] < box.dims[d].hi) break;
      p[d] = box.dims[d].lo;
    }
    if (d < 0) return;
  }
}

TEST(DecomposePropertyTest, TilesEveryDestinationExactlyAndMatchesOracle) {
  int cases = 0;
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    for (const auto& p : testing::property_corpus(seed, 300)) {
      SCOPED_TRACE(testing::describe(p));
      ++cases;
      const auto tasks = decompose(p);
      ASSERT_EQ(tasks, brute_force(p));

      std::map<DeviceId, Box> src_tile, dst_tile;
      for (int64_t i = 0; i < p.src.mesh.size(); ++i)
        src_tile[p.src.mesh.device_at(i)] = tile_at(p.tensor, p.src, i);
      for (int64_t i = 0; i < p.dst.mesh.size(); ++i)
        dst_tile[p.dst.mesh.device_at(i)] = tile_at(p.tensor, p.dst, i);

      std::map<DeviceId, std::vector<int>> hits;  // per destination device, per element
      int64_t delivered = 0;
      for (const auto& t : tasks) {
        ASSERT_FALSE(t.slice.empty());
        ASSERT_EQ(t.bytes, t.slice.volume() * dtype_size(p.tensor.dtype));
        for (auto s : t.senders) ASSERT_TRUE(src_tile.at(s).contains(t.slice));
        for (auto r : t.receivers) {
          const Box& box = dst_tile.at(r);
          ASSERT_TRUE(box.contains(t.slice));
          auto& h = hits[r];
          h.resize(box.volume());
          for_each_point(t.slice, [&](const auto& pt) { ++h[offset_in(box, pt)]; });
          delivered += t.bytes;
        }
      }
      int64_t needed = 0;
      for (const auto& [device, box] : dst_tile) {
        needed += box.volume() * dtype_size(p.tensor.dtype);
        if (box.empty()) continue;
        const auto& h = hits[device];
        ASSERT_EQ(static_cast<int64_t>(h.size()), box.volume()) << "device " << device;
        for (size_t i = 0; i < h.size(); ++i)
          ASSERT_EQ(h[i], 1) << "device " << device << " element " << i;
      }
      ASSERT_EQ(delivered, needed);
    }
  }
  EXPECT_GE(cases, 1000);
}

}  // namespace
}  // namespace meshcast
