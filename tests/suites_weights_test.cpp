// The weights suite: its models are valid batches; joint and per_tensor plans validate and move
// every element right on the local executor; the middleware baselines send what they claim.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "meshcast/error.h"
#include "meshcast/plan/lower_bound.h"
#include "meshcast/plan/planner.h"
#include "meshcast/plan/validate.h"
#include "meshcast/runtime/local/local_executor.h"
#include "meshcast/runtime/measure.h"
#include "meshcast/sim/simulator.h"
#include "meshcast/suites/model.h"
#include "meshcast/suites/weights.h"
#include "meshcast/tasks/paper_cases.h"

namespace meshcast {
namespace {

// A small llama (vocab uneven over tp) synced tp=2,pp=2 -> tp=4,replicas=2 on 4-device hosts.
WeightsCase small_case(DType dtype = DType::float32) {
  const ModelConfig config{
      .hidden = 16, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 24, .vocab = 30, .dtype = dtype};
  return {"small", "small llama",
          model_batch(config, {.tp = 2, .pp = 2}, {.tp = 4, .replicas = 2}, paper_cluster(1))};
}

TEST(WeightsTest, SuiteModelsAreValidBatchesWithUniqueLabels) {
  std::set<std::string> labels;
  for (const auto& c : weights_suite()) {
    SCOPED_TRACE(c.label);
    EXPECT_TRUE(labels.insert(c.label).second);
    c.batch.validate();
  }
  EXPECT_GE(labels.size(), 5u);
}

TEST(WeightsTest, JointAndPerTensorPlansMoveEveryElementOnTheLocalBackend) {
  auto executor = make_local_executor({.threads = 2});
  for (const DType dtype : {DType::float32, DType::bfloat16, DType::int8}) {
    const Batch batch = small_case(dtype).batch;
    SCOPED_TRACE(std::string(to_string(dtype)));
    const Plan joint = make_plan(batch);
    validate_plan(joint);
    const Measurement m = measure(*executor, joint, {.iters = 1, .warmup = 0, .verify = true});
    EXPECT_TRUE(m.verified) << m.errors << " of " << m.checked << " elements wrong";
    EXPECT_GT(m.checked, 0);
    for (size_t i = 0; i < batch.tensors.size(); ++i) {
      const Plan alone = make_plan(batch.resharding(i));
      validate_plan(alone);
      const Measurement mi = measure(*executor, alone, {.iters = 1, .warmup = 0, .verify = true});
      EXPECT_TRUE(mi.verified) << batch.tensors[i].name;
    }
  }
}

// Bytes each op's receivers get, per (tensor, receiver).
std::map<std::pair<int, DeviceId>, int64_t> received(const Plan& plan) {
  std::map<std::pair<int, DeviceId>, int64_t> out;
  for (const auto& op : plan.ops)
    for (DeviceId r : op.receivers) out[{op.pieces[0].tensor, r}] += op.bytes;
  return out;
}

TEST(WeightsTest, FullBroadcastSendsEverySourceShardWholeToEveryDestinationDevice) {
  const Batch batch = small_case().batch;
  const Plan plan = full_broadcast_plan(batch);
  const auto got = received(plan);
  for (int i = 0; i < static_cast<int>(batch.tensors.size()); ++i) {
    const auto& t = batch.tensors[i];
    SCOPED_TRACE(t.name);
    // Each destination device receives the whole tensor: every distinct source shard once.
    for (DeviceId d : t.dst.mesh.devices()) EXPECT_EQ(got.at({i, d}), t.tensor.bytes());
  }
  for (const auto& op : plan.ops) {
    const auto& t = batch.tensors[op.pieces[0].tensor];
    // The sender is a source device whose tile is exactly the op's slice.
    const auto& devices = t.src.mesh.devices();
    const auto at = std::find(devices.begin(), devices.end(), *op.sender);
    ASSERT_NE(at, devices.end());
    EXPECT_EQ(tile_at(t.tensor, t.src, at - devices.begin()), op.pieces[0].slice);
    EXPECT_EQ(op.receivers, t.dst.mesh.devices());
  }
  // The receivers keep only their slice of what arrives: more than a plan may deliver.
  EXPECT_THROW(validate_plan(plan), InvalidArgument);
  EXPECT_GT(simulate(plan).time_s, 0);
}

TEST(WeightsTest, GatherBroadcastGathersOnTheFirstSourceDeviceThenBroadcastsTheWholeTensor) {
  const Batch batch = small_case().batch;
  const Plan plan = gather_broadcast_plan(batch);
  std::map<int, int64_t> gathered;  // tensor -> bytes sent to the root
  std::map<int, int> broadcasts;
  for (const auto& op : plan.ops) {
    const auto& t = batch.tensors[op.pieces[0].tensor];
    const DeviceId root = t.src.mesh.device_at(0);
    if (op.receivers == std::vector<DeviceId>{root}) {
      EXPECT_EQ(broadcasts[op.pieces[0].tensor], 0) << "gather after the broadcast of " << t.name;
      gathered[op.pieces[0].tensor] += op.bytes;
    } else {
      ++broadcasts[op.pieces[0].tensor];
      EXPECT_EQ(*op.sender, root);
      EXPECT_EQ(op.pieces[0].slice, full_box(t.tensor.shape));
      EXPECT_EQ(op.receivers, t.dst.mesh.devices());
    }
  }
  for (int i = 0; i < static_cast<int>(batch.tensors.size()); ++i) {
    const auto& t = batch.tensors[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(broadcasts[i], 1);
    // Root holds its own tile; the other distinct shards come to it.
    const Box own = tile_at(t.tensor, t.src, 0);
    const int64_t own_bytes = own.volume() * dtype_size(t.tensor.dtype);
    const bool replicated = own == full_box(t.tensor.shape);
    EXPECT_EQ(gathered[i], replicated ? 0 : t.tensor.bytes() - own_bytes);
  }
}

TEST(WeightsTest, RowsShareTheBoundAndNoMethodBeatsIt) {
  const WeightsCase c = small_case();
  std::vector<WeightsRow> rows;
  for (const auto m : all_weights_methods()) rows.push_back(weights_row(c, m));
  fill_joint_speedups(rows);
  const double bound = lower_bound(c.batch, decompose(c.batch));
  for (const auto& r : rows) {
    SCOPED_TRACE(std::string(to_string(r.method)));
    EXPECT_DOUBLE_EQ(r.lower_bound_s, bound);
    EXPECT_GE(r.time_s, bound * (1 - 1e-9));
    EXPECT_GT(r.network_bytes, 0);
    EXPECT_EQ(r.tensors, static_cast<int64_t>(c.batch.tensors.size()));
    EXPECT_DOUBLE_EQ(r.joint_speedup, r.time_s / rows.front().time_s);
  }
  // Whole tensors to every destination device move at least what the joint plan moves.
  EXPECT_GE(rows[2].network_bytes, rows[0].network_bytes);
  EXPECT_GE(rows[3].network_bytes, rows[0].network_bytes);
}

}  // namespace
}  // namespace meshcast
