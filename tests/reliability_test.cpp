// Hostile input (issue 15): values that do not fit are refused with their numbers instead of
// wrapping, and verification cannot miss an element that was never written.
#include <gtest/gtest.h>

#include <string>

#include "meshcast/error.h"
#include "meshcast/layout/sharding_spec.h"
#include "meshcast/pipeline/schedule.h"
#include "meshcast/plan/json.h"
#include "meshcast/planner/planner.h"
#include "meshcast/runtime/buffers.h"

namespace meshcast {
namespace {

// Expects `call` to throw E whose message contains every string of `parts`.
template <typename E, typename Call>
void expect_error(Call call, std::initializer_list<std::string_view> parts) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << *parts.begin();
  } catch (const E& e) {
    for (auto part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message: " << e.what() << "\nlacks: " << part;
  }
}

TEST(OverflowTest, ShapesWhoseElementOrByteCountDoesNotFitAreRefused) {
  expect_error<InvalidArgument>([] { parse_shape("99999999999,99999999999,9999999"); },
                                {"99999999999,99999999999,9999999", "elements"});
  expect_error<InvalidArgument>([] { parse_shape("4294967296,4294967296"); },
                                {"4294967296,4294967296"});
  // The elements fit int64, the bytes of float32 do not.
  const TensorSpec huge{{int64_t{1} << 62}, DType::float32};
  expect_error<InvalidArgument>([&] { huge.validate(); }, {"4611686018427387904", "bytes"});
  EXPECT_EQ((TensorSpec{{int64_t{1} << 60}, DType::float32}).bytes(), int64_t{1} << 62);
}

TEST(OverflowTest, MeshesShareTheClusterBoundOnDevices) {
  expect_error<InvalidArgument>([] { parse_mesh_shape("100000x100000"); },
                                {"10000000000", std::to_string(kMaxDevices)});
  expect_error<InvalidArgument>([] { parse_mesh_shape("4294967296x4294967296x4294967296"); },
                                {"more than 2^63"});
  EXPECT_EQ(parse_mesh_shape("1024x4096"), (std::vector<int64_t>{1024, 4096}));
}

TEST(OverflowTest, DeviceIdsAreNotNarrowed) {
  expect_error<InvalidArgument>([] { parse_device_list("4294967296,1"); },
                                {"4294967296", std::to_string(kMaxDevices - 1)});
  EXPECT_EQ(parse_device_list("4194303,0"), (std::vector<DeviceId>{4194303, 0}));
  // --dst-host-offset 1073741824 on hosts of 4 devices: ids past 2^32, not devices 0 and 1.
  expect_error<InvalidArgument>([] { Mesh::placed({2}, 1073741824, 4); }, {"1073741824"});
  EXPECT_EQ(Mesh::placed({2}, 3, 4).devices(), (std::vector<DeviceId>{12, 13}));
}

Resharding small_problem() {
  Resharding p;
  p.tensor = {{8}, DType::int8};
  p.src = Layout{Mesh({2}, {0, 1}), ShardingSpec::parse("S0")};
  p.dst = Layout{Mesh({2}, {2, 3}), ShardingSpec::parse("R")};
  p.cluster = {.hosts = 2, .devices_per_host = 2};
  return p;
}

TEST(OverflowTest, PlanAndClusterDocumentsDoNotNarrowIntegers) {
  const auto good = plan_to_json(
      make_plan(small_problem(), {.strategy = Strategy::send_recv, .balance = Balance::none}));
  auto doc = good;
  doc["ops"][0]["sender"] = int64_t{4294967296};
  expect_error<ParseError>([&] { plan_from_json(doc); }, {"'sender'", "4294967296"});
  doc = good;
  doc["ops"][0]["receivers"][0] = uint64_t{18446744073709551615u};
  expect_error<ParseError>([&] { plan_from_json(doc); },
                           {"'receivers'[0]", "18446744073709551615"});
  doc = good;
  doc["ops"][0]["id"] = int64_t{4294967296};
  expect_error<ParseError>([&] { plan_from_json(doc); }, {"'id'", "4294967296"});
  EXPECT_NO_THROW(plan_from_json(good));
  expect_error<ParseError>(
      [] {
        cluster_from_json({{"hosts", int64_t{4294967297}}});
      },
      {"'hosts'", "4294967297"});
}

TEST(OverflowTest, ScheduleSizesAreCheckedBeforeAnythingIsSizedByThem) {
  // Used to allocate gigabytes in schedule --check before validating.
  expect_error<InvalidArgument>(
      [] {
        pipeline::schedule_from_json(
            nlohmann::json::parse(R"({"order":[["F0","B0"]],"chunks":2147483647})"));
      },
      {"2147483647 chunks"});
  expect_error<ParseError>(
      [] {
        pipeline::schedule_from_json(
            nlohmann::json::parse(R"({"order":[["F0","B0"]],"microbatches":4294967297})"));
      },
      {"\"microbatches\"", "4294967297"});
  expect_error<ParseError>([] { pipeline::schedule_from_text("F2147483647 B0\n"); },
                           {"F2147483647"});
  expect_error<InvalidArgument>(
      [] { pipeline::check_schedule_size(2147483647, 2147483647, 2147483647); },
      {"more than 2^63"});
}

// Found by fuzz_sharding_spec: a PartitionSpec over numbered axes naming axis 32 (mesh rank not
// known yet) was accepted, and its text form "S32R..." read back as axes 3 and 2.
TEST(FuzzRegressionTest, MeshAxesBeyondNineAreRefusedInEveryVocabulary) {
  for (const char* spec : {"(32, )", "P(10,None)"})
    expect_error<InvalidArgument>([&] { parse_sharding_spec(spec); },
                                  {"bad mesh axis", "expected 0..9"});
  expect_error<InvalidArgument>([] { ShardingSpec(std::vector<ShardingSpec::DimAxes>{{10}}); },
                                {"bad mesh axis 10"});
  const ShardingSpec last_axis(std::vector<ShardingSpec::DimAxes>{{9}, {}});
  EXPECT_EQ(ShardingSpec::parse(last_axis.to_string()), last_axis);
}

// Found by the schedule harnesses: a document declaring fewer chunks than its steps use was
// accepted, and its text form (which infers the sizes) read back another schedule.
TEST(FuzzRegressionTest, ASchedulesDeclaredChunksMustCoverItsSteps) {
  expect_error<InvalidArgument>(
      [] {
        pipeline::schedule_from_json(
            nlohmann::json::parse(R"({"order":[["F0","1F0","1B0","B0"]],"chunks":1})"));
      },
      {"schedule \"chunks\" is 1, but its steps use 2"});
}

TEST(VerifyTest, AnElementNeverWrittenIsAlwaysCaught) {
  // int8 over 4096 elements: with one poison byte about 16 would have matched the pattern.
  for (auto dtype : {DType::int8, DType::uint8, DType::float16, DType::float64}) {
    Resharding p = small_problem();
    p.tensor = {{64, 64}, dtype};
    p.src.spec = ShardingSpec::parse("S0R");
    p.dst.spec = ShardingSpec::parse("RR");
    auto buffers = allocate_tile_buffers(p, {0, 1, 2, 3});
    prepare_tiles(p, buffers);  // sources hold the pattern, destinations the poison
    EXPECT_EQ(count_destination_errors(p, buffers), 2 * 64 * 64) << to_string(dtype);
  }
}

}  // namespace
}  // namespace meshcast
