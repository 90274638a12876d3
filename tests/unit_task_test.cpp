#include "meshcast/tasks/unit_task.h"

#include <gtest/gtest.h>

#include "meshcast/error.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

Resharding make(std::vector<int64_t> shape, std::vector<int64_t> src_mesh, const char* src_spec,
                int dst_first_host, std::vector<int64_t> dst_mesh, const char* dst_spec,
                int per_host, int hosts) {
  Resharding p;
  p.tensor = {std::move(shape), DType::int32};
  p.src = Layout{Mesh::placed(std::move(src_mesh), 0, per_host), ShardingSpec::parse(src_spec)};
  p.dst = Layout{Mesh::placed(std::move(dst_mesh), dst_first_host, per_host),
                 ShardingSpec::parse(dst_spec)};
  p.cluster = Cluster{.hosts = hosts, .devices_per_host = per_host};
  return p;
}

TEST(DecomposeTest, PaperCaseCounts) {
  // Hand-counted from the paper's table: distinct tiles per side and their overlaps.
  const std::vector<size_t> expected = {2, 2, 4, 64, 4, 4, 4, 4};
  for (const auto& c : paper_cases()) {
    const auto tasks = decompose(c.problem);
    EXPECT_EQ(tasks.size(), expected[c.number - 1]) << "case " << c.number;
    int64_t bytes = 0;
    for (const auto& t : tasks) bytes += t.bytes;
    EXPECT_EQ(bytes, c.problem.tensor.bytes()) << "case " << c.number;
  }
}

TEST(DecomposeTest, Case7EverySliceGoesToEveryDestinationDevice) {
  const auto c = paper_cases()[6];
  const auto tasks = decompose(c.problem);
  ASSERT_EQ(tasks.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tasks[i].slice, (Box{{{256 * i, 256 * (i + 1)}, {0, 1024}, {0, 512}}}));
    EXPECT_EQ(tasks[i].senders, (std::vector<DeviceId>{i}));
    EXPECT_EQ(tasks[i].receivers, (std::vector<DeviceId>{4, 5, 6, 7, 8, 9, 10, 11}));
    EXPECT_EQ(tasks[i].bytes, 1024 * 256 * 512 * 4);
  }
}

TEST(DecomposeTest, Case6UnevenOverlaps) {
  const auto c = paper_cases()[5];
  const auto tasks = decompose(c.problem);
  ASSERT_EQ(tasks.size(), 4u);
  EXPECT_EQ(tasks[0].slice.dims[0], (Interval{0, 1024}));
  EXPECT_EQ(tasks[1].slice.dims[0], (Interval{1024, 1536}));
  EXPECT_EQ(tasks[2].slice.dims[0], (Interval{1536, 2048}));
  EXPECT_EQ(tasks[3].slice.dims[0], (Interval{2048, 3072}));
  EXPECT_EQ(tasks[1].senders, (std::vector<DeviceId>{0, 1, 2, 3}));
  EXPECT_EQ(tasks[1].receivers, (std::vector<DeviceId>{12, 13, 14, 15}));
  EXPECT_EQ(tasks[2].senders, (std::vector<DeviceId>{4, 5, 6, 7}));
}

TEST(DecomposeTest, EmptyPartsProduceNoTasks) {
  // 3 rows over 4 devices: torch.chunk gives parts of 1,1,1 and one empty part.
  const auto p = make({3, 2}, {4}, "S0R", 1, {2}, "RS0", 4, 2);
  const auto tasks = decompose(p);
  ASSERT_EQ(tasks.size(), 6u);  // 3 non-empty rows x 2 column halves
  for (const auto& t : tasks) {
    EXPECT_FALSE(t.slice.empty());
    EXPECT_EQ(t.senders.size(), 1u);
    EXPECT_NE(t.senders[0], 3);  // device 3 holds nothing
  }
}

TEST(DecomposeTest, SharedDevicesAppearAsBothSenderAndReceiver) {
  const auto p = make({4, 4}, {2, 2}, "S0S1", 0, {2, 2}, "S1S0", 2, 2);
  const auto tasks = decompose(p);
  ASSERT_EQ(tasks.size(), 4u);
  // Device at (0,0) holds [0,2)x[0,2) in both layouts; it is its own sender.
  EXPECT_EQ(tasks[0].senders, (std::vector<DeviceId>{0}));
  EXPECT_EQ(tasks[0].receivers, (std::vector<DeviceId>{0}));
  EXPECT_EQ(tasks[1].senders, (std::vector<DeviceId>{1}));
  EXPECT_EQ(tasks[1].receivers, (std::vector<DeviceId>{2}));
}

TEST(DecomposeTest, RejectsBadProblems) {
  auto p = make({4, 4}, {2, 2}, "S0S1", 2, {2, 2}, "S1S0", 2, 4);
  p.dst.spec = ShardingSpec::parse("S0S1R");
  EXPECT_THROW(decompose(p), InvalidArgument);
  p = make({4, 4}, {2, 2}, "S0S1", 2, {2, 2}, "S1S0", 2, 3);  // dst needs hosts 2 and 3
  try {
    decompose(p);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("destination: mesh 2x2 uses device 6"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace meshcast
