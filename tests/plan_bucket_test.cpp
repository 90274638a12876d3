// Buckets: small sends and broadcasts to the same receivers travel as one message of several
// pieces. The planner makes them, the validator, the estimate and the
// simulator take them as one op, and plan documents list the pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "corpus.h"
#include "meshcast/error.h"
#include "meshcast/plan/json.h"
#include "meshcast/plan/validate.h"
#include "meshcast/planner/estimate.h"
#include "meshcast/planner/planner.h"
#include "meshcast/sim/simulator.h"

namespace meshcast {
namespace {

// Sends and broadcasts of several pieces (an allgather of several pieces is a gather of what its
// devices hold, docs/concepts.md#gathers, made whatever the bucket size).
int buckets_of(const Plan& plan) {
  return static_cast<int>(std::count_if(plan.ops.begin(), plan.ops.end(), [](const Op& op) {
    return op.pieces.size() > 1 && op.kind != OpKind::allgather;
  }));
}

// Every piece of every op, sorted: what a plan moves, however it is packed.
std::vector<std::tuple<int, int, Box>> pieces_of(const Plan& plan) {
  std::vector<std::tuple<int, int, Box>> out;
  for (const Op& op : plan.ops)
    for (const Piece& p : op.pieces) out.emplace_back(p.tensor, p.task, p.slice);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(BucketTest, DefaultSizeKeepsOneMessagesLatencyNearOnePercent) {
  Cluster c;  // 10 Gbps NIC, 5 us
  EXPECT_EQ(default_bucket_bytes(c), 618750);
  const double message_s = c.latency + default_bucket_bytes(c) / c.nic_bandwidth;
  EXPECT_NEAR(c.latency / message_s, 0.01, 1e-6);
  c.latency = 0;
  EXPECT_EQ(default_bucket_bytes(c), 0);
}

TEST(BucketTest, TinyPiecesOfOneSenderAndChainAreFusedUpToTheBucketSize) {
  std::mt19937 rng(7);
  int buckets = 0;
  for (int round = 0; round < testing::sanitized_count(30); ++round) {
    const Batch batch = testing::tiny_tensor_batch(rng, 20 + static_cast<int>(rng() % 60),
                                                   1 + static_cast<int>(rng() % 4),
                                                   1 + static_cast<int>(rng() % 4));
    for (const int64_t bucket : {int64_t{64}, int64_t{1000}, default_bucket_bytes(batch.cluster)})
      for (Strategy s : {Strategy::send_recv, Strategy::allgather, Strategy::broadcast}) {
        SCOPED_TRACE(fmt::format("round {} bucket {} {}", round, bucket, to_string(s)));
        const Plan plan = make_plan(batch, {.strategy = s, .bucket_bytes = bucket});
        const Plan unfused = make_plan(batch, {.strategy = s, .bucket_bytes = 0});
        ASSERT_NO_THROW(validate_plan(plan));
        EXPECT_EQ(buckets_of(unfused), 0);
        // The same pieces, fewer messages, the same bytes over the NICs.
        EXPECT_EQ(pieces_of(plan), pieces_of(unfused));
        EXPECT_EQ(plan.network_bytes, unfused.network_bytes);
        EXPECT_LE(plan.ops.size(), unfused.ops.size());
        for (const Op& op : plan.ops) {
          if (op.pieces.size() == 1 || op.kind == OpKind::allgather) continue;
          ++buckets;
          EXPECT_TRUE(op.kind == OpKind::send || op.kind == OpKind::broadcast);
          // Pieces below the bucket size fill buckets; larger ones, streams of one chain
          // (LargePiecesOfOneSenderAndChainTravelAsOneStream).
          if (op.pieces[0].bytes < bucket)
            EXPECT_LE(op.bytes, bucket);
          else
            EXPECT_LE(op.bytes, bucket * static_cast<int64_t>(op.receivers.size()));
          int64_t bytes = 0;
          for (const Piece& p : op.pieces) bytes += p.bytes;
          EXPECT_EQ(op.bytes, bytes);
        }
        EXPECT_GE(simulate(plan).time_s, plan.lower_bound_s * (1 - 1e-9));
      }
  }
  EXPECT_GT(buckets, testing::sanitized_count(100));
}

TEST(BucketTest, ABigPieceStaysAloneAndChunkPipelined) {
  std::mt19937 rng(3);
  Batch batch = testing::tiny_tensor_batch(rng, 30, 3, 2);
  batch.tensors[0].tensor.shape = {1 << 20};  // 1 Mi elements: above any bucket here
  batch.tensors[0].src.spec = ShardingSpec::parse("R");
  batch.tensors[0].dst.spec = ShardingSpec::parse("R");
  const Plan plan = make_plan(batch);
  int big = 0;
  for (const Op& op : plan.ops)
    if (op.bytes >= default_bucket_bytes(batch.cluster)) {
      ++big;
      EXPECT_EQ(op.pieces.size(), 1u);
      EXPECT_EQ(op.pieces[0].tensor, 0);
      if (op.kind == OpKind::broadcast) {
        EXPECT_GT(op.chunk_bytes, 0);
        EXPECT_LT(op.chunk_bytes, op.bytes);
      }
    }
  EXPECT_GT(big, 0);
  EXPECT_GT(buckets_of(plan), 0);
  EXPECT_NO_THROW(validate_plan(plan));
}

// Each message pays the latency once: on tiny tensors, a plan of buckets beats one message per
// piece in the simulator and in the planner's estimate alike.
TEST(BucketTest, ABucketPaysOneMessagesLatency) {
  std::mt19937 rng(11);
  Batch batch = testing::tiny_tensor_batch(rng, 200, 2, 4);
  const Plan fused = make_plan(batch);
  const Plan unfused = make_plan(batch, {.bucket_bytes = 0});
  ASSERT_GT(buckets_of(fused), 0);
  EXPECT_LT(simulate(fused).time_s, 0.5 * simulate(unfused).time_s);
  EXPECT_LT(estimate(fused), 0.5 * estimate(unfused));
}

// A trainer's pipeline stages each hold their layers' small replicated tensors (norms, router
// biases) on several devices, and every serving device needs all of them: a chain through every
// serving device, which each small tensor paid once (a latency per device). Any holder's chain
// to the same receivers may carry another's pieces, so whatever sender and chain order the
// planner picked for each tensor, a stage's small tensors travel in one bucket.
TEST(BucketTest, SmallPiecesForOneSetOfReceiversShareABucketWhateverTheirSendersAndChains) {
  Batch batch;
  batch.cluster = Cluster::from_gbps(
      {.hosts = 6, .devices_per_host = 4, .nic_gbps = 100, .dev_gbps = 900, .nics_per_host = 4});
  const Mesh serving = Mesh::placed({4, 4}, 2, 4);
  constexpr int kStages = 2;
  constexpr int kPerStage = 12;
  for (int stage = 0; stage < kStages; ++stage)
    for (int i = 0; i < kPerStage; ++i) {
      const Mesh trainer = Mesh::placed({4}, stage, 4);
      const std::string layer = fmt::format("layers.{}.", stage * kPerStage + i);
      batch.tensors.push_back({.name = layer + "norm.weight",
                               .tensor = {.shape = {64}, .dtype = DType::float32},
                               .src = {trainer, ShardingSpec::parse("R")},
                               .dst = {serving, ShardingSpec::parse("R")}});
    }
  const Plan plan = make_plan(batch);
  const Plan unfused = make_plan(batch, {.bucket_bytes = 0});
  ASSERT_NO_THROW(validate_plan(plan));
  EXPECT_EQ(pieces_of(plan), pieces_of(unfused));
  // One message per stage (only a stage's devices hold its tensors), each paying the chain's
  // latencies once.
  const auto small = std::count_if(plan.ops.begin(), plan.ops.end(),
                                   [](const Op& op) { return op.pieces[0].bytes < 1024; });
  EXPECT_EQ(small, kStages);
  EXPECT_LT(simulate(plan).time_s, 2.0 * kStages / kPerStage * simulate(unfused).time_s);
}

// A trainer's expert-parallel ranks each hold some experts of every MoE layer, and each serving
// replica takes every expert tile on one device: a chain of one device per replica, from the one
// device holding it. One chain per tile paid the latency of every device it passes, and the
// fill, per tile; a sender's tiles for the same chain travel as one stream instead (a shrunk
// Kimi-K2 256 -> 2,048 GPUs: 4 experts per trainer rank, 16 replicas of one host).
TEST(BucketTest, LargePiecesOfOneSenderAndChainTravelAsOneStream) {
  Batch batch;
  batch.cluster = Cluster::from_gbps(
      {.hosts = 18, .devices_per_host = 2, .nic_gbps = 10, .dev_gbps = 100, .nics_per_host = 2});
  const Mesh trainer = Mesh::placed({2, 2}, 0, 2);
  const Mesh serving = Mesh::placed({16, 2}, 2, 2);
  for (int layer = 0; layer < 2; ++layer)
    for (const char* weight : {"gate_proj", "up_proj", "down_proj"})
      batch.tensors.push_back({.name = fmt::format("layers.{}.mlp.experts.{}", layer, weight),
                               .tensor = {.shape = {16, 512, 1024}, .dtype = DType::float8_e4m3fn},
                               .src = {trainer, ShardingSpec::parse("S01RR")},
                               .dst = {serving, ShardingSpec::parse("S1RR")}});
  const Plan plan = make_plan(batch);
  const Plan unfused = make_plan(batch, {.bucket_bytes = 0});
  ASSERT_NO_THROW(validate_plan(plan));
  EXPECT_EQ(pieces_of(plan), pieces_of(unfused));
  for (const Op& op : plan.ops) {
    if (op.pieces.size() == 1) continue;
    // A stream is one sender's chain: at most a bucket per device it passes.
    EXPECT_EQ(op.kind, OpKind::broadcast);
    EXPECT_LE(op.bytes,
              default_bucket_bytes(batch.cluster) * static_cast<int64_t>(op.receivers.size()));
  }
  EXPECT_GT(buckets_of(plan), 0);
  EXPECT_LT(simulate(plan).time_s, 1.25 * plan.lower_bound_s);  // 1.52x one chain per tile
}

// Every serving device needs a pipeline stage's small replicated tensors, and a chain through all
// of them holds each until the last has its bytes: a latency per device, as many as the whole
// model's experts cost at 2,048 GPUs. Too many tensors for the planner's candidates (over 1,024
// unit tasks), the chain goes through one device of each host, and each host's other receivers
// get the bytes from that one.
TEST(BucketTest, ALatencyBoundChainPassesEachHostOnceThenFansOutInside) {
  Batch batch;
  constexpr int kServingHosts = 16;
  batch.cluster = Cluster::from_gbps({.hosts = 1 + kServingHosts,
                                      .devices_per_host = 4,
                                      .nic_gbps = 10,
                                      .dev_gbps = 100,
                                      .nics_per_host = 4});
  const Mesh trainer = Mesh::placed({4}, 0, 4);
  const Mesh serving = Mesh::placed({kServingHosts, 4}, 1, 4);
  for (int i = 0; i < 1100; ++i)
    batch.tensors.push_back({.name = fmt::format("layers.{}.norm.weight", i),
                             .tensor = {.shape = {16}, .dtype = DType::float32},
                             .src = {trainer, ShardingSpec::parse("R")},
                             .dst = {serving, ShardingSpec::parse("R")}});
  const Plan plan = make_plan(batch);
  ASSERT_NO_THROW(validate_plan(plan));
  for (const Op& op : plan.ops) {
    // No op passes a device of each host: one passes a device per host, the others one host.
    std::set<int> hosts;
    for (DeviceId r : op.receivers) hosts.insert(batch.cluster.host_of(r));
    EXPECT_TRUE(hosts.size() == 1 || hosts.size() == op.receivers.size()) << op.receivers.size();
  }
  // A chain through all 64 serving devices took at least 64 latencies.
  EXPECT_LT(simulate(plan).time_s, 4.0 * kServingHosts * batch.cluster.latency);
}

TEST(BucketTest, NegativeBucketBytesAreRefused) {
  std::mt19937 rng(1);
  try {
    make_plan(testing::tiny_tensor_batch(rng, 3, 2, 2), {.bucket_bytes = -1});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bad bucket bytes -1: expected >= 0"), std::string::npos)
        << e.what();
  }
}

TEST(BucketTest, PlansWithBucketsRoundTripThroughJson) {
  std::mt19937 rng(23);
  for (int round = 0; round < 10; ++round) {
    const Plan plan = make_plan(testing::tiny_tensor_batch(rng, 40, 2, 2));
    ASSERT_GT(buckets_of(plan), 0);
    const auto j = plan_to_json(plan);
    EXPECT_GT(j["ops"][0]["pieces"].size(), 0u);
    EXPECT_EQ(plan_from_json(nlohmann::json::parse(j.dump())), plan);
  }
}

// Hand-broken buckets: the validator names the op and the piece.
TEST(BucketTest, TheValidatorCheckMessagesPieceByPiece) {
  std::mt19937 rng(29);
  const Plan plan = make_plan(testing::tiny_tensor_batch(rng, 40, 2, 2));
  const auto bucket = std::find_if(plan.ops.begin(), plan.ops.end(),
                                   [](const Op& op) { return op.pieces.size() > 1; });
  ASSERT_NE(bucket, plan.ops.end());
  const int k = static_cast<int>(bucket - plan.ops.begin());
  const auto rejected = [&](Plan broken, const std::string& expected) {
    try {
      validate_plan(broken);
      ADD_FAILURE() << "accepted a plan that should fail with: " << expected;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  Plan twice = plan;  // one piece listed twice: its receivers get it twice
  twice.ops[k].pieces.push_back(twice.ops[k].pieces[0]);
  twice.ops[k].bytes += twice.ops[k].pieces[0].bytes;
  rejected(twice, fmt::format("op {} (", k));
  rejected(twice, "a second time");
  Plan bytes = plan;
  bytes.ops[k].bytes += 1;
  rejected(bytes, "do not match the pieces'");
  Plan empty = plan;
  empty.ops[k].pieces.clear();
  rejected(empty, "has no pieces");
  Plan piece = plan;
  piece.ops[k].pieces[1].task = 1000;
  rejected(piece, fmt::format("op {} ({}, piece 1 of {}", k, to_string(plan.ops[k].kind),
                              plan.ops[k].pieces.size()));
}

// Devices 3 and 50 (hosts 0 and 6 of nine hosts of eight devices and eight NICs) each hold a
// 128 MiB tensor whose 64ths go to the devices of hosts 0-7: each holder hands pieces of 64-256 KiB
// to the seven devices beside it, which send them over their own NICs. Fused into the holder's
// bucket for the same receiver (the holder holds them too), those pieces went over the holder's
// one NIC and the hand-overs were for nothing (1.608x the bound). A piece its sender was handed
// keeps its sender.
TEST(BucketTest, APieceHandedToAStageKeepsItsSender) {
  Resharding p;
  p.tensor = TensorSpec{{67108864}, DType::float16};
  p.src = Layout{Mesh({2}, {3, 50}), ShardingSpec::parse("R")};
  p.dst = Layout{Mesh::placed({8, 8}, 0, 8), ShardingSpec::parse("S0/1")};
  p.cluster = Cluster::from_gbps(
      {.hosts = 9, .devices_per_host = 8, .nic_gbps = 10, .dev_gbps = 100, .nics_per_host = 8});
  const Plan plan = make_plan(p);
  const Plan unfused = make_plan(p, {.bucket_bytes = 0});
  ASSERT_NO_THROW(validate_plan(plan));
  EXPECT_EQ(pieces_of(plan), pieces_of(unfused));
  // Each piece's sender per set of receivers (a handed piece goes holder -> stage -> receiver).
  const auto senders = [](const Plan& of) {
    std::map<std::tuple<int, int, Box, std::vector<DeviceId>>, DeviceId> sender;
    for (const Op& op : of.ops)
      if (op.sender)
        for (const Piece& piece : op.pieces)
          sender[{piece.tensor, piece.task, piece.slice, op.receivers}] = *op.sender;
    return sender;
  };
  const auto fused_senders = senders(plan);
  int handed = 0;
  for (const auto& [piece, sender] : senders(unfused)) {
    if (sender == 3 || sender == 50) continue;
    ++handed;
    EXPECT_EQ(fused_senders.at(piece), sender);
  }
  EXPECT_GT(handed, 0);
  EXPECT_LT(buckets_of(plan), static_cast<int>(plan.ops.size()));
  EXPECT_LE(simulate(plan).time_s, 1.40 * plan.lower_bound_s);
}

}  // namespace
}  // namespace meshcast
