#include "meshcast/tasks/batch.h"

#include <gtest/gtest.h>

#include "corpus.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

// The message of the InvalidArgument (or ParseError) that `f` throws; fails when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

Batch two_tensor_batch() {
  Batch batch = Batch::of_one(paper_cases()[0].problem, "first");
  TensorResharding second = batch.tensors[0];
  second.name = "second";
  second.tensor.dtype = DType::bfloat16;
  batch.tensors.push_back(second);
  return batch;
}

TEST(BatchTest, OfOneIsTheResharding) {
  const Resharding problem = paper_cases()[6].problem;
  const Batch batch = Batch::of_one(problem);
  ASSERT_EQ(batch.tensors.size(), 1u);
  EXPECT_EQ(batch.tensors[0].name, "tensor");
  EXPECT_EQ(batch.resharding(0), problem);
  const auto tasks = decompose(batch);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0], decompose(problem));
}

TEST(BatchTest, DecomposesEachTensorAlone) {
  std::mt19937 rng(11);
  for (int round = 0; round < 50; ++round) {
    const Batch batch = testing::random_batch(rng, 1 + static_cast<int>(rng() % 6));
    const auto tasks = decompose(batch);
    ASSERT_EQ(tasks.size(), batch.tensors.size());
    for (size_t i = 0; i < tasks.size(); ++i)
      EXPECT_EQ(tasks[i], decompose(batch.resharding(i))) << tensor_label(batch, i);
  }
}

TEST(BatchTest, RejectsDuplicateAndEmptyNamesNamingTheTensor) {
  Batch batch = two_tensor_batch();
  batch.tensors[1].name = "first";
  const std::string duplicate = error_of([&] { batch.validate(); });
  EXPECT_NE(duplicate.find("tensors[1] 'first'"), std::string::npos) << duplicate;
  EXPECT_NE(duplicate.find("duplicate name"), std::string::npos) << duplicate;
  EXPECT_NE(duplicate.find("tensors[0]"), std::string::npos) << duplicate;

  batch.tensors[1].name = "";
  const std::string empty = error_of([&] { batch.validate(); });
  EXPECT_NE(empty.find("tensors[1]: empty name"), std::string::npos) << empty;

  batch.tensors.clear();
  EXPECT_NE(error_of([&] { batch.validate(); }).find("no tensors"), std::string::npos);
}

TEST(BatchTest, RejectsAMeshOutsideTheClusterNamingTheTensor) {
  Batch batch = two_tensor_batch();
  batch.tensors[1].dst.mesh = Mesh({2}, {0, batch.cluster.devices()});
  const std::string message = error_of([&] { decompose(batch); });
  EXPECT_NE(message.find("tensors[1] 'second': destination:"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(batch.cluster.devices())), std::string::npos) << message;

  batch = two_tensor_batch();
  batch.tensors[0].src.spec = ShardingSpec::parse("S0");  // rank 1 spec on a rank 3 tensor
  const std::string spec = error_of([&] { batch.validate(); });
  EXPECT_NE(spec.find("tensors[0] 'first': source:"), std::string::npos) << spec;
}

TEST(BatchJsonTest, RoundTrips) {
  std::mt19937 rng(5);
  for (int round = 0; round < 20; ++round) {
    const Batch batch = testing::random_batch(rng, 1 + static_cast<int>(rng() % 8));
    const auto j = batch_to_json(batch);
    EXPECT_EQ(batch_from_json(nlohmann::json::parse(j.dump())), batch);
  }
}

TEST(BatchJsonTest, PlacesMeshesWithoutDevicesByDefault) {
  const auto j = nlohmann::json::parse(R"({
    "cluster": {"hosts": 3, "devices_per_host": 4},
    "tensors": [{"name": "w", "shape": [8, 4], "dtype": "bfloat16",
                 "src": {"mesh": [1, 4], "spec": "S1R"},
                 "dst": {"mesh": [2, 2], "spec": "RS0"}},
                {"name": "b", "shape": [8], "dtype": "float32",
                 "src": {"mesh": [2], "devices": [5, 6], "spec": "S0"},
                 "dst": {"mesh": [2], "spec": "R"}}]})");
  const Batch batch = batch_from_json(j);
  EXPECT_EQ(batch.tensors[0].src.mesh, Mesh::placed({1, 4}, 0, 4));
  EXPECT_EQ(batch.tensors[0].dst.mesh, Mesh::placed({2, 2}, 1, 4));
  EXPECT_EQ(batch.tensors[1].src.mesh.devices(), (std::vector<DeviceId>{5, 6}));
  EXPECT_EQ(batch.tensors[1].dst.mesh, Mesh::placed({2}, 2, 4));
  EXPECT_EQ(batch.tensors[1].tensor.dtype, DType::float32);
}

TEST(BatchJsonTest, SpecsInEveryVocabulary) {
  const auto j = nlohmann::json::parse(R"json({
    "cluster": {"hosts": 4, "devices_per_host": 4},
    "tensors": [{"name": "w", "shape": [8, 4], "dtype": "float32",
                 "src": {"mesh": [2, 2], "spec": "Shard(0),Shard(0)"},
                 "dst": {
  "mesh" : [ 2, 2 ], "axes" : [ "dp", "tp" ], "spec" : "P(None, tp)"
}
},
                {"name": "b", "shape": [8], "dtype": "float32",
                 "src": {"mesh": [2, 2], "spec": "P((0, 1))"},
                 "dst": {"mesh": [2, 2], "spec": "[Replicate(), Replicate()]"}}]
})json");
  const Batch batch = batch_from_json(j);
  EXPECT_EQ(batch.tensors[0].src.spec.to_string(), "S0/1R");
  EXPECT_EQ(batch.tensors[0].dst.spec.to_string(), "RS1");
  EXPECT_EQ(batch.tensors[1].src.spec.to_string(), "S01");
  EXPECT_EQ(batch.tensors[1].dst.spec.to_string(), "R");
  auto bad = j;
  bad["tensors"][0]["dst"]["spec"] = "P(None, pp)";
  const std::string message = error_of([&] { batch_from_json(bad); });
  EXPECT_NE(message.find("tensors[0] 'w': dst: bad PartitionSpec"), std::string::npos) << message;
  EXPECT_NE(message.find("(expected one of dp, tp)"), std::string::npos) << message;
}

// q and k (rows 0..3 and 4..5 of the fused buffer on each of 2 devices) and a bias bound into a
// stacked buffer of two slots, as a serving engine holds them.
nlohmann::json fused_batch_json() {
  return nlohmann::json::parse(R"({
    "cluster": {"hosts": 2, "devices_per_host": 2},
    "tensors": [{"name": "q", "shape": [8, 4], "dtype": "float32",
                 "src": {"mesh": [2], "spec": "RR"}, "dst": {"mesh": [2], "spec": "S0R"},
                 "dst_buffer": {"name": "qkv", "offset": [0, 0]}},
                {"name": "k", "shape": [4, 4], "dtype": "float32",
                 "src": {"mesh": [2], "spec": "RR"}, "dst": {"mesh": [2], "spec": "S0R"},
                 "dst_buffer": {"name": "qkv", "offset": [4, 0]}},
                {"name": "b", "shape": [4], "dtype": "float32",
                 "src": {"mesh": [2], "spec": "S0"}, "dst": {"mesh": [2], "spec": "R"},
                 "src_buffer": {"name": "biases", "offset": [1, 0]}}]})");
}

TEST(BatchJsonTest, BindingsRoundTripAndNameTheirRegion) {
  const Batch batch = batch_from_json(fused_batch_json());
  ASSERT_TRUE(batch.tensors[1].dst_buffer);
  EXPECT_EQ(*batch.tensors[1].dst_buffer, (BufferBinding{"qkv", {4, 0}}));
  EXPECT_FALSE(batch.tensors[1].src_buffer);
  EXPECT_EQ(batch.tensors[2].src_buffer->offset, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(batch_from_json(nlohmann::json::parse(batch_to_json(batch).dump())), batch);
  // k's tile [2,4)x[0,4) sits at rows 6..7 of the buffer; a 1-D tile in a 2-D buffer takes one
  // row of its leading dimension.
  EXPECT_EQ(bound_region(*batch.tensors[1].dst_buffer, Box{{{2, 4}, {0, 4}}}),
            (Box{{{4, 6}, {0, 4}}}));
  EXPECT_EQ(bound_region(*batch.tensors[2].src_buffer, Box{{{2, 4}}}), (Box{{{1, 2}, {0, 2}}}));
}

// Members of a buffer are compared device by device only where some of their tiles' regions may
// meet (Batch::validate): an overlap of one size of uneven tiles, on one device, is still found.
TEST(BatchJsonTest, AnOverlapOfUnevenTilesOnOneDeviceIsFound) {
  auto j = fused_batch_json();
  j["tensors"][0]["shape"] = {5, 4};    // q's tiles: rows [0,3) on device 2, [3,5) on device 3
  EXPECT_NO_THROW(batch_from_json(j));  // k at row 4 of the buffer
  j["tensors"][1]["dst_buffer"]["offset"] = {2, 0};  // meets q's 3 rows, not its 2
  const std::string message = error_of([&] { batch_from_json(j); });
  EXPECT_NE(message.find("tensors[1] 'k': dst_buffer 'qkv': on device 2 its region [2,4)x[0,4) "
                         "overlaps [0,3)x[0,4) of tensors[0] 'q'"),
            std::string::npos)
      << message;
}

TEST(BatchJsonTest, BadBindingsAreRefusedNamingTheTensorAndTheBuffer) {
  const auto good = fused_batch_json();
  const auto message_for = [&](auto change) {
    auto j = good;
    change(j);
    return error_of([&] { batch_from_json(j); });
  };
  const auto expect_in = [](const std::string& message, const std::string& text) {
    EXPECT_NE(message.find(text), std::string::npos) << message;
  };
  // k's rows 0..1 on device 1 would land on q's rows 2..3 of that device.
  expect_in(message_for([](auto& j) {
              j["tensors"][1]["dst_buffer"]["offset"] = {2, 0};
            }),
            "tensors[1] 'k': dst_buffer 'qkv': on device 2 its region [2,4)x[0,4) overlaps "
            "[0,4)x[0,4) of tensors[0] 'q'");
  expect_in(message_for([](auto& j) { j["tensors"][1]["dtype"] = "bfloat16"; }),
            "tensors[1] 'k': dst_buffer 'qkv': bfloat16 with a 2-entry offset, but tensors[0] 'q' "
            "binds it as float32 with a 2-entry offset: expected one dtype and rank per buffer");
  expect_in(message_for([](auto& j) { j["tensors"][0]["dst_buffer"]["offset"] = {0}; }),
            "tensors[0] 'q': dst_buffer: offset [0] has 1 entries: expected 2 to 8");
  expect_in(message_for([](auto& j) {
              j["tensors"][0]["dst_buffer"]["offset"] = {0, -1};
            }),
            "tensors[0] 'q': dst_buffer: offset [0,-1]: expected non-negative indices");
  expect_in(message_for([](auto& j) { j["tensors"][0]["dst_buffer"]["name"] = ""; }),
            "tensors[0] 'q': dst_buffer: empty buffer name");
  expect_in(message_for([](auto& j) {
              j["tensors"][0]["dst_buffer"]["offest"] = {0, 0};
            }),
            "tensors[0] 'q': dst_buffer");
  // The sides name their own buffers: a source buffer 'qkv' is another buffer.
  EXPECT_NO_THROW(batch_from_json([&] {
    auto j = good;
    j["tensors"][0]["src_buffer"] = {{"name", "qkv"}, {"offset", {0, 0}}};
    return j;
  }()));
}

TEST(BatchJsonTest, NamesTheTensorAndTheField) {
  const auto good = batch_to_json(two_tensor_batch());
  auto j = good;
  j["tensors"][1]["dst"].erase("spec");
  std::string message = error_of([&] { batch_from_json(j); });
  EXPECT_NE(message.find("tensors[1] 'second': dst: missing key 'spec'"), std::string::npos)
      << message;

  j = good;
  j["tensors"][1].erase("dtype");
  message = error_of([&] { batch_from_json(j); });
  EXPECT_NE(message.find("tensors[1] 'second': missing key 'dtype'"), std::string::npos) << message;

  j = good;
  j["tensors"][1].erase("name");
  message = error_of([&] { batch_from_json(j); });
  EXPECT_NE(message.find("tensors[1]: missing key 'name'"), std::string::npos) << message;

  j = good;
  j["tensors"][0]["dtype"] = "float128";
  message = error_of([&] { batch_from_json(j); });
  EXPECT_NE(message.find("tensors[0] 'first'"), std::string::npos) << message;
  EXPECT_NE(message.find("float128"), std::string::npos) << message;

  j = good;
  j["tensors"][1]["name"] = "first";
  message = error_of([&] { batch_from_json(j); });
  EXPECT_NE(message.find("tensors[1] 'first': duplicate name"), std::string::npos) << message;

  j = good;
  j.erase("tensors");
  message = error_of([&] { batch_from_json(j); });
  EXPECT_NE(message.find("missing key 'tensors'"), std::string::npos) << message;
}

}  // namespace
}  // namespace meshcast
