#include "meshcast/layout/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "meshcast/dense_index.h"
#include "meshcast/error.h"

namespace meshcast {
namespace {

using Axes = ShardingSpec::DimAxes;

TEST(ShardingSpecTest, ParsesConcatenatedAndCommaForms) {
  EXPECT_EQ(ShardingSpec::parse("S0RR").dims(), (std::vector<Axes>{{0}, {}, {}}));
  EXPECT_EQ(ShardingSpec::parse("RS01").dims(), (std::vector<Axes>{{}, {0, 1}}));
  EXPECT_EQ(ShardingSpec::parse("S0,R,R"), ShardingSpec::parse("S0RR"));
  EXPECT_EQ(ShardingSpec::parse("rs10r").dims(), (std::vector<Axes>{{}, {1, 0}, {}}));
  EXPECT_EQ(ShardingSpec::parse("RRR").dims(), (std::vector<Axes>{{}, {}, {}}));
}

TEST(ShardingSpecTest, RoundTrips) {
  for (const char* text : {"S0RR", "RS01", "RRS0", "S1RR", "RS01R", "S10", "R", "S2S0S1", "RRRR"})
    EXPECT_EQ(ShardingSpec::parse(ShardingSpec::parse(text).to_string()).to_string(), text);
  EXPECT_EQ(ShardingSpec::parse("S0,R,S1").to_string(), "S0RS1");
}

TEST(ShardingSpecTest, RejectsMalformedWithPosition) {
  for (const char* bad : {"", "S", "SR", "X0", "S0,", "S0RQ", "S0 R", "S-1"}) {
    try {
      ShardingSpec::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ShardingSpecTest, RejectsAxisUsedTwice) {
  try {
    ShardingSpec::parse("S0S0");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("mesh axis 0 is used twice"), std::string::npos);
  }
  EXPECT_THROW(ShardingSpec::parse("S01S1"), InvalidArgument);
}

TEST(ShardingSpecTest, ValidateChecksRankAndAxisRange) {
  const auto spec = ShardingSpec::parse("S0RS1");
  EXPECT_NO_THROW(spec.validate(3, 2));
  try {
    spec.validate(2, 2);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("3 entries, but the tensor has 2"), std::string::npos);
  }
  try {
    spec.validate(3, 1);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("uses mesh axis 1, but the mesh has 1 axes"),
              std::string::npos);
  }
}

TEST(TensorTest, ParsesShapesAndDtypes) {
  EXPECT_EQ(parse_shape("1024,1024,512"), (std::vector<int64_t>{1024, 1024, 512}));
  EXPECT_EQ(parse_shape("4x3"), (std::vector<int64_t>{4, 3}));
  EXPECT_THROW(parse_shape("4,0"), InvalidArgument);
  EXPECT_THROW(parse_shape("4,-2"), InvalidArgument);
  EXPECT_THROW(parse_shape("4,,2"), InvalidArgument);
  EXPECT_THROW(parse_shape("abc"), InvalidArgument);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bfloat16);
  EXPECT_EQ(dtype_size(DType::bfloat16), 2);
  EXPECT_EQ(dtype_size(DType::int64), 8);
  EXPECT_EQ(dtype_size(DType::uint8), 1);
  EXPECT_THROW(parse_dtype("float128"), InvalidArgument);
  EXPECT_EQ((TensorSpec{{1024, 1024, 512}, DType::int32}.bytes()), 2147483648LL);
  EXPECT_THROW((TensorSpec{{3, 0}, DType::int32}.validate()), InvalidArgument);
}

TEST(MeshTest, DefaultPlacementPutsLastAxisInsideHosts) {
  const auto m = Mesh::placed({2, 4}, 1, 4);
  EXPECT_EQ(m.devices(), (std::vector<DeviceId>{4, 5, 6, 7, 8, 9, 10, 11}));
  const auto small = Mesh::placed({3, 2}, 0, 4);
  EXPECT_EQ(small.devices(), (std::vector<DeviceId>{0, 1, 4, 5, 8, 9}));
  const auto one = Mesh::placed({4}, 2, 4);
  EXPECT_EQ(one.devices(), (std::vector<DeviceId>{8, 9, 10, 11}));
  EXPECT_EQ(Mesh::placed({2, 2, 4}, 0, 4).host_span(), 4);
  EXPECT_EQ(m.coords_of(6), (std::vector<int64_t>{1, 2}));
}

TEST(MeshTest, RejectsBadDeviceListsAndShapes) {
  EXPECT_THROW(Mesh({2, 2}, {0, 1, 2}), InvalidArgument);
  EXPECT_THROW(Mesh({2, 2}, {0, 1, 2, 2}), InvalidArgument);
  EXPECT_THROW(Mesh({2, 0}, {}), InvalidArgument);
  EXPECT_THROW(Mesh({2}, {0, -1}), InvalidArgument);
  EXPECT_THROW(Mesh::placed({2, 8}, 0, 4), InvalidArgument);
  // Found by fuzz_batch_json: a placed mesh's leading axes were counted before they were checked,
  // so a negative one reserved a negative device count (std::length_error, not InvalidArgument).
  const std::vector<std::pair<std::vector<int64_t>, std::string>> bad_shapes = {
      {{-8, 2}, "axis 0 is -8"}, {{2, 0, 2}, "axis 1 is 0"}, {{}, "at least one axis"}};
  for (const auto& [shape, message] : bad_shapes) {
    try {
      Mesh::placed(shape, 0, 4);
      FAIL() << mesh_shape_to_string(shape);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_mesh_shape("2x0"), InvalidArgument);
  EXPECT_THROW(parse_device_list("0,1,x"), InvalidArgument);
  try {
    Mesh::placed({2, 4}, 1, 4).check_fits(Cluster{.hosts = 2, .devices_per_host = 4});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("uses device 8"), std::string::npos) << e.what();
  }
}

TEST(ChunkTest, FollowsTorchChunk) {
  // torch.chunk(arange(10), 4) -> sizes 3,3,3,1; torch.chunk(arange(5), 4) -> 2,2,1 and one empty.
  EXPECT_EQ(chunk_part(10, 4, 0), (Interval{0, 3}));
  EXPECT_EQ(chunk_part(10, 4, 3), (Interval{9, 10}));
  EXPECT_EQ(chunk_part(5, 4, 2), (Interval{4, 5}));
  EXPECT_TRUE(chunk_part(5, 4, 3).empty());
  EXPECT_TRUE(chunk_part(2, 4, 3).empty());
  EXPECT_EQ(chunk_part(8, 1, 0), (Interval{0, 8}));
}

TEST(BoxTest, IntersectionIsExhaustivelyCorrectOnSmallBoxes) {
  // Every pair of 1-D intervals inside [0,5), and their 2-D products, against a point count.
  std::vector<Interval> all;
  for (int lo = 0; lo <= 5; ++lo)
    for (int hi = lo; hi <= 5; ++hi) all.push_back({lo, hi});
  for (const auto& a0 : all)
    for (const auto& b0 : all)
      for (const auto& a1 : {Interval{0, 2}, Interval{1, 4}})
        for (const auto& b1 : {Interval{0, 1}, Interval{2, 5}}) {
          const Box a{{a0, a1}}, b{{b0, b1}};
          int64_t points = 0;
          for (int x = 0; x < 5; ++x)
            for (int y = 0; y < 5; ++y) {
              const bool in_a = x >= a0.lo && x < a0.hi && y >= a1.lo && y < a1.hi;
              const bool in_b = x >= b0.lo && x < b0.hi && y >= b1.lo && y < b1.hi;
              points += in_a && in_b;
            }
          const Box both = intersect(a, b);
          ASSERT_EQ(both.volume(), points) << to_string(a) << " & " << to_string(b);
          if (points > 0) {
            EXPECT_TRUE(a.contains(both));
            EXPECT_TRUE(b.contains(both));
          }
        }
}

TEST(TilesTest, EvenSplitS0RR) {
  const TensorSpec t{{8, 4, 2}, DType::int32};
  const Layout l{Mesh::placed({2, 4}, 0, 4), ShardingSpec::parse("S0RR")};
  const auto tiles = device_tiles(t, l);
  EXPECT_EQ(tiles[0], (Box{{{0, 4}, {0, 4}, {0, 2}}}));
  EXPECT_EQ(tiles[3], (Box{{{0, 4}, {0, 4}, {0, 2}}}));
  EXPECT_EQ(tiles[4], (Box{{{4, 8}, {0, 4}, {0, 2}}}));
  const auto distinct = distinct_tiles(t, l);
  ASSERT_EQ(distinct.size(), 2u);
  EXPECT_EQ(distinct[0].replicas, (std::vector<DeviceId>{0, 1, 2, 3}));
  EXPECT_EQ(distinct[1].replicas, (std::vector<DeviceId>{4, 5, 6, 7}));
}

TEST(TilesTest, UnevenAndEmptyParts) {
  const TensorSpec t{{5}, DType::int8};
  const Layout l{Mesh::placed({4}, 0, 4), ShardingSpec::parse("S0")};
  const auto tiles = device_tiles(t, l);
  EXPECT_EQ(tiles[0], (Box{{{0, 2}}}));
  EXPECT_EQ(tiles[1], (Box{{{2, 4}}}));
  EXPECT_EQ(tiles[2], (Box{{{4, 5}}}));
  EXPECT_TRUE(tiles[3].empty());
}

TEST(TilesTest, MultiAxisS01AndS10) {
  const TensorSpec t{{8, 2}, DType::int32};
  const Layout s01{Mesh::placed({2, 4}, 0, 4), ShardingSpec::parse("S01R")};
  const Layout s10{Mesh::placed({2, 4}, 0, 4), ShardingSpec::parse("S10R")};
  // S01: part = c0*4 + c1; S10: part = c1*2 + c0.
  const auto a = device_tiles(t, s01);
  const auto b = device_tiles(t, s10);
  for (int i = 0; i < 8; ++i) {
    const int c0 = i / 4, c1 = i % 4;
    EXPECT_EQ(a[i].dims[0], (Interval{c0 * 4 + c1, c0 * 4 + c1 + 1}));
    EXPECT_EQ(b[i].dims[0], (Interval{c1 * 2 + c0, c1 * 2 + c0 + 1}));
  }
  EXPECT_EQ(distinct_tiles(t, s10).size(), 8u);
}

TEST(TilesTest, ReplicatedOverUnusedAxes) {
  const TensorSpec t{{6, 6}, DType::int32};
  const Layout l{Mesh::placed({2, 3}, 0, 3), ShardingSpec::parse("RS1")};
  const auto distinct = distinct_tiles(t, l);
  ASSERT_EQ(distinct.size(), 3u);
  EXPECT_EQ(distinct[1].box, (Box{{{0, 6}, {2, 4}}}));
  EXPECT_EQ(distinct[1].replicas, (std::vector<DeviceId>{1, 4}));
}

// DenseIndex marks ids in a table of their range when the range is small against their count,
// else sorts them: either way the ids in ascending order, each once, and index_of their position
// (found by subtraction where they have no gaps). Ids next to them that were not given are not
// contained.
TEST(DenseIndexTest, DenseAndSparseIdsGiveAscendingDistinctIds) {
  std::mt19937 rng(25);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::vector<int64_t>> cases{
      {},
      {7},
      {5, 3, 5, 3, 4},                   // dense: range 3 for 5 ids
      {-2, 9, -2, 9, 0, 0, 9, -2},       // dense, negative ids
      {1000000, 3, 1000000},             // sparse: sorted
      {kMax, kMin, 0, kMax},             // a range beyond int64_t's
      {kMax - 1, kMax, kMax, kMax - 1},  // dense at the top of the range
      {12, 10, 11, 13, 10},              // without gaps
      {12, 10, 13, 10}                   // with one
  };
  std::vector<std::vector<int64_t>> all = cases;
  for (int n : {10, 1000}) {
    for (int64_t range : {int64_t{3}, int64_t{5} * n, int64_t{100} * n}) {
      std::vector<int64_t> ids(n);
      for (auto& id : ids) id = -range / 2 + static_cast<int64_t>(rng() % range);
      all.push_back(ids);
    }
  }
  for (const auto& ids : all) {
    std::vector<int64_t> expected = ids;
    std::sort(expected.begin(), expected.end());
    expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
    const DenseIndex index(ids);
    ASSERT_EQ(index.ids(), expected);
    for (int i = 0; i < index.size(); ++i) {
      EXPECT_EQ(index.index_of(expected[i]), i);
      EXPECT_TRUE(index.contains(expected[i]));
      if (expected[i] == kMin || expected[i] == kMax) continue;
      for (int64_t next : {expected[i] - 1, expected[i] + 1}) {
        EXPECT_EQ(index.contains(next), std::binary_search(expected.begin(), expected.end(), next))
            << next;
      }
    }
  }
}

}  // namespace
}  // namespace meshcast
