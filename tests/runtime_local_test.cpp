// The in-process executor: every strategy on the property corpus, hand-written plans, reuse
// without allocation, start/wait, and bad buffers.
#include "meshcast/runtime/local/local_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <latch>
#include <numeric>
#include <random>
#include <thread>

#include "meshcast/error.h"
#include "meshcast/plan/dependencies.h"
#include "meshcast/runtime/buffer_table.h"
#include "meshcast/runtime/placement.h"
#include "meshcast/runtime/strided_copy.h"
#include "meshcast/tasks/paper_cases.h"
#include "runtime_allocations.h"
#include "runtime_cases.h"

namespace meshcast {
namespace {

using testing::every_strategy;

// Paper case 3 (RS0R -> S0RR, strided slices) at 1/512 of its size: 4 MiB.
Resharding paper_like_problem() {
  return paper_cases(512)[2].problem;
}

TEST(LocalExecutorTest, EveryStrategyOnThePropertyCorpusDeliversEveryElement) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  int plans = 0;
  for (const unsigned seed : {1u, 2u})
    for (const Resharding& p : meshcast::testing::property_corpus(seed, 150)) {
      for (const PlanOptions& o : every_strategy()) {
        const Plan plan = make_plan(p, o);
        ASSERT_EQ(testing::play_and_count_errors(*executor, plan), 0)
            << testing::describe(p) << " " << testing::describe(o);
        ++plans;
      }
    }
  EXPECT_EQ(plans, 2 * 150 * static_cast<int>(every_strategy().size()));
}

TEST(LocalExecutorTest, RandomBatchesDeliverEveryElementOfEveryTensor) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  std::mt19937 rng(31);
  for (int round = 0; round < 60; ++round) {
    const Batch batch = testing::random_batch(rng, 1 + static_cast<int>(rng() % 8));
    for (const PlanOptions& o : every_strategy())
      ASSERT_EQ(testing::play_and_count_errors(*executor, make_plan(batch, o)), 0)
          << "round " << round << " " << testing::describe(o);
  }
}

TEST(LocalExecutorTest, BucketsOfTinyTensorsDeliverEveryElement) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  for (int devices : {2, 4, 6, 8})
    for (int64_t bucket : {int64_t{96}, int64_t{1} << 20}) {
      const auto plans = testing::bucket_plans_on(devices, 100 + devices, 3, bucket);
      EXPECT_GT(testing::buckets_in(plans), 0) << devices << " devices, buckets of " << bucket;
      for (size_t i = 0; i < plans.size(); ++i)
        ASSERT_EQ(testing::play_and_count_errors(*executor, plans[i]), 0)
            << devices << " devices, buckets of " << bucket << ", plan " << i;
    }
}

TEST(LocalExecutorTest, SameMeshRedistributionsDeliverEveryElement) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  for (int devices : {2, 4, 8}) {
    const auto plans = testing::same_mesh_plans_on(devices, 200 + devices, 12);
    EXPECT_GT(testing::held_pieces_in(plans), 0) << devices << " devices";
    for (size_t i = 0; i < plans.size(); ++i)
      ASSERT_EQ(testing::play_and_count_errors(*executor, plans[i]), 0)
          << devices << " devices, plan " << i;
  }
}

TEST(LocalExecutorTest, HandWrittenPlansWithRelaysStagingAndAllgathers) {
  for (int threads : {1, 4}) {
    auto executor = make_local_executor({.threads = threads, .split_bytes = 16});
    for (const auto& [name, plan] : testing::hand_written_plans())
      EXPECT_EQ(testing::play_and_count_errors(*executor, plan), 0) << name << ", " << threads;
  }
}

TEST(LocalExecutorTest, ExchangesAndAllToAllsDeliverEveryElement) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  for (int devices : {2, 3, 4, 6, 8}) {
    for (const Plan& plan : testing::all_to_all_plans_on(devices))
      ASSERT_EQ(testing::play_and_count_errors(*executor, plan), 0)
          << devices << " devices, " << plan.batch.cluster.devices_per_host << " per host, "
          << to_string(plan.strategy);
    for (int per_host : {1, 2})
      ASSERT_EQ(
          testing::play_and_count_errors(*executor, testing::exchange_plan(devices, per_host)), 0)
          << devices << " devices, " << per_host << " per host";
  }
}

TEST(LocalExecutorTest, SlicesForwardedHostByHostDeliverEveryElement) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  for (int devices : {3, 4, 6, 8}) {
    const auto plans = testing::forwarding_plans_on(devices);
    EXPECT_GT(testing::forwarded_ops_in(plans), 0) << devices << " devices";
    for (const Plan& plan : plans)
      ASSERT_EQ(testing::play_and_count_errors(*executor, plan), 0)
          << devices << " devices, " << plan.batch.cluster.devices_per_host << " per host";
  }
}

// Slices to one receiver each, spread over both NICs of every host: handed over to stages and
// forwarded by the devices they enter at (PlannerTest.SlicesToOneReceiverEachSpreadOverEveryNic).
TEST(LocalExecutorTest, SlicesSpreadOverEveryNicDeliverEveryElement) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  Resharding p;
  p.tensor = TensorSpec{{262147, 8}, DType::int32};
  p.src = Layout{Mesh({4, 2}, {0, 1, 4, 5, 8, 9, 12, 13}), ShardingSpec::parse("S1S0")};
  p.dst = Layout{Mesh({3, 1}, {0, 4, 8}), ShardingSpec::parse("S0R")};
  p.cluster = paper_cluster(6);
  p.cluster.devices_per_host = 4;
  p.cluster.nics_per_host = 2;
  const Plan plan = make_plan(p);
  // Each receiver is forwarded pieces by a device of its host that neither holds nor receives a
  // slice (local devices 2 and 3; the receivers are local device 0).
  for (DeviceId receiver : {0, 4, 8})
    EXPECT_TRUE(std::any_of(plan.ops.begin(), plan.ops.end(),
                            [&](const Op& op) {
                              return op.sender && *op.sender / 4 == receiver / 4 &&
                                     *op.sender % 4 >= 2 &&
                                     op.receivers == std::vector<DeviceId>{receiver};
                            }))
        << "receiver " << receiver;
  EXPECT_EQ(testing::play_and_count_errors(*executor, plan), 0);
  // Slices with several receivers relayed host to host by sends, piece by piece, and forwarded
  // inside each host (PlannerTest.SlicesToSeveralReceiversGoHostToHostOnRails): device 10 alone
  // holds the tensor that 20 devices of hosts 0-4 need parts of.
  Resharding many;
  many.tensor = TensorSpec{{2097152, 2}, DType::float64};
  many.src = Layout{Mesh({1}, {10}), ShardingSpec::parse("RR")};
  std::vector<DeviceId> receivers(20);
  std::iota(receivers.begin(), receivers.end(), 0);
  many.dst = Layout{Mesh({5, 4}, receivers), ShardingSpec::parse("RS0")};
  many.cluster = paper_cluster(6);
  many.cluster.devices_per_host = 4;
  many.cluster.nics_per_host = 2;
  const Plan relayed = make_plan(many);
  EXPECT_TRUE(std::none_of(relayed.ops.begin(), relayed.ops.end(),
                           [](const Op& op) { return op.kind == OpKind::broadcast; }));
  EXPECT_TRUE(std::any_of(relayed.ops.begin(), relayed.ops.end(), [](const Op& op) {
    return op.kind == OpKind::send && op.sender != 10 && *op.sender / 4 != op.receivers[0] / 4;
  }));
  // (Pieces of megabytes: the default split, not 256 B, keeps this a second's work.)
  EXPECT_EQ(testing::play_and_count_errors(*make_local_executor({.threads = 3}), relayed), 0);
  // Held by devices 10 and 1 (a half each), the slices go from their holders to each host as a
  // shop, entering it at receivers on both NICs that pass them on to the host's others
  // (PlannerTest.ASliceForSeveralReceiversIsPlayedAsAShopToo).
  many.src = Layout{Mesh({2}, {10, 1}), ShardingSpec::parse("S0R")};
  EXPECT_EQ(testing::play_and_count_errors(*make_local_executor({.threads = 3}), make_plan(many)),
            0);
}

// Rails whose parts are cut unequally (a single holder's own rail smaller), gathered by an
// allgather of pieces each held by one rail, and slices handed over to a stage that forwards them
// over its host's one NIC deliver every element.
TEST(LocalExecutorTest, UnequalRailsAndStagedSlicesDeliverEveryElement) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  const auto problem = [](const char* src_spec, Mesh src, const char* dst_spec, Mesh dst,
                          int nics) {
    Resharding p;
    p.tensor = TensorSpec{{4194304}, DType::float32};
    p.src = Layout{std::move(src), ShardingSpec::parse(src_spec)};
    p.dst = Layout{std::move(dst), ShardingSpec::parse(dst_spec)};
    p.cluster = paper_cluster(2);
    p.cluster.devices_per_host = 2;
    p.cluster.nics_per_host = nics;
    return p;
  };
  // (At 16 MiB the rails in pieces of two buckets, without gathers, are faster.)
  Resharding larger = problem("R", Mesh({1}, {0}), "R", Mesh({2}, {2, 3}), 2);
  larger.tensor.shape = {8388608};
  const Plan rails = make_plan(larger);
  EXPECT_TRUE(std::any_of(rails.ops.begin(), rails.ops.end(), [](const Op& op) {
    return op.kind == OpKind::allgather && op.pieces.size() == 2 && op.pieces[0].holder == 0 &&
           op.pieces[0].bytes < op.pieces[1].bytes;
  }));
  EXPECT_EQ(testing::play_and_count_errors(*executor, rails), 0);
  const Plan staged = make_plan(problem("S0", Mesh({1}, {3}), "S0", Mesh({2, 1}, {0, 2}), 1));
  EXPECT_TRUE(std::any_of(staged.ops.begin(), staged.ops.end(),
                          [](const Op& op) { return op.sender == 2 && op.receivers[0] == 0; }));
  EXPECT_EQ(testing::play_and_count_errors(*executor, staged), 0);
  // Device 0's own half goes to device 1 beside it during the rounds that bring device 2's half
  // over both NICs of host 0 (PlannerTest.AHolderThatSendsNothingAwayServesItsHostDuringTheRounds).
  Resharding halves = problem("S0", Mesh({2, 1}, {0, 2}), "S0", Mesh({1}, {1}), 2);
  halves.tensor.shape = {8388608};
  const Plan during = make_plan(halves);
  const auto own_half = std::find_if(during.ops.begin(), during.ops.end(), [](const Op& op) {
    return op.sender == 0 && op.bytes == 16777216;
  });
  ASSERT_NE(own_half, during.ops.end());
  EXPECT_TRUE(std::any_of(own_half, during.ops.end(), [](const Op& op) { return op.sender == 2; }));
  EXPECT_EQ(testing::play_and_count_errors(*executor, during), 0);
  // Device 1 serves devices 0 and 2 beside it most of each half, device 5 on host 1 the rest
  // (PlannerTest.AHostServingItsOwnReceiversIsHelpedOverItsNicFromAfar).
  Resharding helped = problem("R", Mesh({2}, {5, 1}), "S0", Mesh({2}, {0, 2}), 1);
  helped.tensor.shape = {1048576};
  helped.cluster.devices_per_host = 4;
  const Plan from_afar = make_plan(helped);
  EXPECT_TRUE(std::any_of(from_afar.ops.begin(), from_afar.ops.end(),
                          [](const Op& op) { return op.sender == 5; }));
  EXPECT_TRUE(std::any_of(from_afar.ops.begin(), from_afar.ops.end(),
                          [](const Op& op) { return op.sender == 1; }));
  EXPECT_EQ(testing::play_and_count_errors(*executor, from_afar), 0);
  // Rails chained through three hosts, whose gathers a host plays in the round in which it relays
  // nothing: before the next round's chains in plan order
  // (PlannerTest.GathersWaitForARoundInWhichTheHostRelaysNothing).
  Resharding chained =
      problem("RR", Mesh({1}, {0}), "RR", Mesh({4, 2}, {0, 1, 4, 5, 8, 9, 12, 13}), 2);
  chained.tensor = TensorSpec{{131072, 8}, DType::int64};
  chained.cluster.hosts = 4;
  chained.cluster.devices_per_host = 4;
  const Plan rounds = make_plan(chained);
  const auto first_gather = std::find_if(rounds.ops.begin(), rounds.ops.end(),
                                         [](const Op& op) { return op.kind == OpKind::allgather; });
  const auto chains_from_2 = std::count_if(rounds.ops.begin(), first_gather, [](const Op& op) {
    return op.kind == OpKind::broadcast && op.sender == 2;
  });
  EXPECT_EQ(chains_from_2, 1);
  EXPECT_EQ(testing::play_and_count_errors(*executor, rounds), 0);
  // A single holder's rails chained through three hosts, its own rail cut smaller
  // (PlannerTest.ASingleHolderCutsItsOwnRailSmallerThroughAChainOfHosts).
  Resharding single = problem("R", Mesh({1}, {0}), "S1", Mesh({3, 1}, {2, 4, 6}), 2);
  single.cluster.hosts = 4;
  const Plan unequal = make_plan(single);
  const auto chain_bytes = [&](DeviceId sender) {
    const auto chain = std::find_if(unequal.ops.begin(), unequal.ops.end(), [&](const Op& op) {
      return op.kind == OpKind::broadcast && op.sender == sender;
    });
    return chain == unequal.ops.end() ? 0 : chain->bytes;
  };
  EXPECT_GT(chain_bytes(0), 0);
  EXPECT_LT(chain_bytes(0), chain_bytes(1));
  EXPECT_EQ(testing::play_and_count_errors(*executor, unequal), 0);
  // With four NICs, device 1 beside the holder stages a rail and takes the other parts from it
  // (PlannerTest.ASingleHolderCountsWhatItSendsBesideItWhenItCutsItsOwnRail).
  Resharding beside = problem("S0", Mesh({1}, {0}), "R", Mesh({2}, {1, 6}), 4);
  beside.cluster.devices_per_host = 4;
  const Plan staged_beside = make_plan(beside);
  const auto sent = [](const Plan& plan, DeviceId from, DeviceId to) {
    int64_t bytes = 0;
    for (const Op& op : plan.ops)
      if (op.sender == from && op.receivers == std::vector<DeviceId>{to}) bytes += op.bytes;
    return bytes;
  };
  EXPECT_GT(sent(staged_beside, 0, 4), 0);
  EXPECT_LT(sent(staged_beside, 0, 4), sent(staged_beside, 1, 5));
  EXPECT_EQ(testing::play_and_count_errors(*executor, staged_beside), 0);
  // Device 1 beside the holder needs half the tensor, which leaves device 0 too, and device 2's
  // half leaves host 0 by both its NICs, from devices 0 and 1
  // (PlannerTest.ASingleHolderCountsTheSlicesOnlyItsHostNeedsWhenItCutsItsOwnRail; at this size
  // the open shop of PlannerTest.SlicesToOneReceiverEachSpreadOverEveryNic plans it).
  const Plan home = make_plan(problem("R", Mesh({1}, {0}), "S0", Mesh({2}, {1, 2}), 2));
  for (DeviceId from : {0, 1})
    EXPECT_GT(sent(home, from, 2) + sent(home, from, 3), 0) << "from " << from;
  EXPECT_EQ(testing::play_and_count_errors(*executor, home), 0);
}

// Each device of an exchange sends to its peer while it receives from it: the two sends are in
// flight together (one after the other, as when a device played one op at a time, would give 1).
TEST(LocalExecutorTest, ADeviceSendsAndReceivesAtOnce) {
  auto executor = make_local_executor({.threads = 2});
  for (int per_host : {1, 2}) {
    const Plan plan = testing::exchange_plan(2, per_host);
    const auto compiled = executor->compile(plan);
    auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
    prepare_tiles(plan.batch, buffers);
    EXPECT_EQ(compiled->run(buffer_views(buffers)).peak_ops_in_flight, 2) << per_host;
    EXPECT_EQ(count_destination_errors(plan.batch, buffers), 0) << per_host;
  }
}

// A relay's staging buffer is reused for the next row only once the previous row has been
// forwarded: by the plan's rule alone, the relay would receive row 1 (op 2) while it still sends
// row 0 (op 1) from the same memory.
TEST(LocalExecutorTest, ReusedStagingMemoryWaitsForTheLastReaderOfItsPreviousBox) {
  const Plan plan = testing::row_by_row_relay_plan();
  const Placement placement = place_plan(plan);
  ASSERT_EQ(placement.staging_bytes[1], testing::kRowBytes);
  const auto rule = op_dependencies(plan.batch, plan.ops);
  const auto executed = execution_dependencies(plan, placement);
  EXPECT_EQ(rule[2], std::vector<int>{0});
  EXPECT_EQ(placement.reuse_waits[2], (std::vector<int>{0, 1}));
  EXPECT_EQ(executed[2], (std::vector<int>{0, 1}));
  for (int k = 0; k < static_cast<int>(plan.ops.size()); ++k)
    EXPECT_TRUE(
        std::includes(executed[k].begin(), executed[k].end(), rule[k].begin(), rule[k].end()))
        << "op " << k;
  // 200 rows through one row of staging memory, the relay receiving while it forwards.
  const Plan long_plan = testing::row_by_row_relay_plan(200);
  auto executor = make_local_executor({.threads = 4, .max_staging_bytes = testing::kRowBytes});
  for (int run = 0; run < 10; ++run)
    ASSERT_EQ(testing::play_and_count_errors(*executor, long_plan), 0) << "run " << run;
}

TEST(LocalExecutorTest, AnIncompletePlanLeavesPoisonThatTheCheckFinds) {
  // Only the first of two sends: device 3's tile is never written.
  auto plan = testing::hand_written_plans()[1].plan;
  plan.ops.pop_back();
  auto executor = make_local_executor();
  EXPECT_EQ(testing::play_and_count_errors(*executor, plan), 2 * 4 * 4);  // 2 runs, 4x4 each
}

TEST(LocalExecutorTest, ASecondRunOfACompiledPlanAllocatesNothing) {
  const Resharding p = paper_like_problem();
  auto executor = make_local_executor({.threads = 2, .split_bytes = 1 << 12});
  const Plan plan = make_plan(p, {.strategy = Strategy::broadcast});
  using testing::allocations;
  using testing::counting_allocations;
  allocations = 0;
  counting_allocations = true;
  const auto compiled = executor->compile(plan);
  counting_allocations = false;
  const int64_t compile_allocations = allocations;
  auto buffers = allocate_tile_buffers(p, compiled->devices_here());
  const auto views = buffer_views(buffers);
  prepare_tiles(p, buffers);
  compiled->run(views);
  allocations = 0;
  counting_allocations = true;
  compiled->run(views);
  compiled->start(views);
  compiled->wait();
  counting_allocations = false;
  EXPECT_GT(compile_allocations, 0);
  EXPECT_EQ(allocations, 0);
  EXPECT_EQ(count_destination_errors(p, buffers), 0);
}

// Staging buffers whose lives do not overlap share memory; the bound refuses a plan needing more
// before any byte moves, and a second run allocates nothing.
TEST(LocalExecutorTest, StagingMemoryIsReusedAndBounded) {
  const Plan plan = testing::row_by_row_relay_plan();
  auto executor = make_local_executor({.threads = 2, .max_staging_bytes = testing::kRowBytes});
  const auto compiled = executor->compile(plan);
  EXPECT_EQ(compiled->staging_bytes(), testing::kRowBytes);
  EXPECT_EQ(testing::play_and_count_errors(*executor, plan), 0);
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  const auto views = buffer_views(buffers);
  compiled->run(views);
  testing::allocations = 0;
  testing::counting_allocations = true;
  compiled->run(views);
  testing::counting_allocations = false;
  EXPECT_EQ(testing::allocations, 0);

  auto tight = make_local_executor({.max_staging_bytes = testing::kRowBytes - 1});
  try {
    tight->compile(plan);
    FAIL() << "compiled a plan above its staging bound";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("needs 72 bytes of staging memory in this process"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_local_executor({.max_staging_bytes = -1}), InvalidArgument);
}

TEST(LocalExecutorTest, StartReturnsAndWaitCompletesTheRun) {
  const Resharding p = paper_like_problem();
  auto executor = make_local_executor({.threads = 2});
  const auto compiled = executor->compile(make_plan(p, {.strategy = Strategy::allgather}));
  auto buffers = allocate_tile_buffers(p, compiled->devices_here());
  prepare_tiles(p, buffers);
  compiled->start(buffer_views(buffers));
  EXPECT_THROW(compiled->start(buffer_views(buffers)), InvalidArgument);  // one run at a time
  const RunTiming timing = compiled->wait();
  EXPECT_GT(timing.seconds, 0);
  EXPECT_EQ(count_destination_errors(p, buffers), 0);
  EXPECT_THROW(compiled->wait(), InvalidArgument);
}

TEST(LocalExecutorTest, OfTwoThreadsStartingOneCompiledPlanAtOnceOneRunsAndOneIsRefused) {
  // start() claims the run before it binds the buffers: a flag set only after binding let both
  // threads through, and their runs wrote one set of buffers at once (TSan also flags it).
  const Resharding p = paper_like_problem();
  auto executor = make_local_executor({.threads = 2});
  const auto compiled = executor->compile(make_plan(p, {.strategy = Strategy::send_recv}));
  auto buffers = allocate_tile_buffers(p, compiled->devices_here());
  prepare_tiles(p, buffers);
  const auto views = buffer_views(buffers);
  for (int round = 0; round < 50; ++round) {
    std::latch go(2);
    std::atomic<int> started = 0;
    std::atomic<int> refused = 0;
    const auto try_start = [&] {
      go.arrive_and_wait();
      try {
        compiled->start(views);
        ++started;
      } catch (const InvalidArgument&) {
        ++refused;
      }
    };
    std::thread a(try_start);
    std::thread b(try_start);
    a.join();
    b.join();
    ASSERT_EQ(started, 1) << "round " << round;
    ASSERT_EQ(refused, 1) << "round " << round;
    compiled->wait();
  }
  EXPECT_EQ(count_destination_errors(p, buffers), 0);
}

TEST(LocalExecutorTest, TwoCompiledPlansRunAtOnceOnOneExecutor) {
  const Resharding p = paper_like_problem();
  auto executor = make_local_executor({.threads = 2});
  const auto a = executor->compile(make_plan(p, {.strategy = Strategy::send_recv}));
  const auto b = executor->compile(make_plan(p, {.strategy = Strategy::broadcast}));
  auto buffers_a = allocate_tile_buffers(p, a->devices_here());
  auto buffers_b = allocate_tile_buffers(p, b->devices_here());
  prepare_tiles(p, buffers_a);
  prepare_tiles(p, buffers_b);
  a->start(buffer_views(buffers_a));
  b->start(buffer_views(buffers_b));
  a->wait();
  b->wait();
  EXPECT_EQ(count_destination_errors(p, buffers_a), 0);
  EXPECT_EQ(count_destination_errors(p, buffers_b), 0);
}

void expect_error(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(LocalExecutorTest, BadBuffersAreRejectedBeforeAnythingMoves) {
  const auto plan = testing::hand_written_plans()[1].plan;  // devices 0 (source), 2, 3
  auto executor = make_local_executor();
  const auto compiled = executor->compile(plan);
  EXPECT_EQ(compiled->devices_here(), (std::vector<DeviceId>{0, 2, 3}));
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  auto views = buffer_views(buffers);
  views[1].dst = views[1].dst.first(8);
  expect_error([&] { compiled->start(views); },
               "device 2, tensors[0] 'tensor': destination buffer has 8 bytes, but its destination "
               "tile needs 160");
  views = buffer_views(buffers);
  views[0].src = {};
  expect_error(
      [&] { compiled->start(views); },
      "device 0, tensors[0] 'tensor': source buffer has 0 bytes, but its source tile needs 288");
  views = buffer_views(buffers);
  views.pop_back();
  expect_error([&] { compiled->start(views); },
               "no buffers given for device 3, tensors[0] 'tensor', whose tiles need 0 source and "
               "128 destination");
  views = buffer_views(buffers);
  views.push_back(views[0]);
  expect_error([&] { compiled->start(views); },
               "device 0, tensors[0] 'tensor': buffers given twice");
  views = buffer_views(buffers);
  views[0].device = 1;
  expect_error([&] { compiled->start(views); },
               "buffers given for device 1, which is not one of this process's devices [0,2,3]");
  // After the errors the plan still runs.
  prepare_tiles(plan.batch, buffers);
  compiled->run(buffer_views(buffers));
  EXPECT_EQ(count_destination_errors(plan.batch, buffers), 0);
}

// Serving engines' fused parameters: q, k, v written straight into qkv_proj and gate, up into
// gate_up_proj (and the same one slot and one row apart), a moe's experts into w13 and w2 (one
// slot and one element apart), a gpt trainer's weights read from one stacked buffer; every
// element of every buffer checked, every strategy.
TEST(LocalExecutorTest, FusedModelBuffersGetEveryElementAndNothingOutsideTheirRegions) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  for (int devices : {2, 5, 8}) {
    const auto batches = testing::fused_model_batches_on(devices);
    ASSERT_EQ(batches.size(), devices >= 3 ? 5u : 4u);
    for (size_t b = 0; b < batches.size(); ++b)
      for (const PlanOptions& o : every_strategy()) {
        int64_t outside = 0;
        ASSERT_EQ(
            testing::play_bound_and_count_errors(*executor, make_plan(batches[b], o), &outside), 0)
            << devices << " devices, batch " << b << " " << testing::describe(o);
        // The slotted llama and moe and the gpt trainer's stacked buffer leave bytes outside
        // every region, which the check covers.
        if (b == 1 || b + 2 >= batches.size()) {
          EXPECT_GT(outside, 0) << "batch " << b;
        }
      }
  }
}

// Property: random batches, every strategy, each tile a random strided view (transposed, padded,
// offset) of a larger buffer, with new strides on each run of one compiled plan.
TEST(LocalExecutorTest, RandomStridedViewsAsSourcesAndDestinations) {
  auto executor = make_local_executor({.threads = 3, .split_bytes = 256});
  std::mt19937 rng(47);
  for (int round = 0; round < 25; ++round) {
    const Batch batch = testing::random_batch(rng, 1 + static_cast<int>(rng() % 5));
    for (const PlanOptions& o : every_strategy())
      ASSERT_EQ(testing::play_strided_and_count_errors(*executor, make_plan(batch, o), round), 0)
          << "round " << round << " " << testing::describe(o);
  }
}

// The check itself: a byte changed outside every region and a wrong element are both found.
TEST(LocalExecutorTest, TheBoundMemoryCheckFindsAChangedByteOutsideTheRegions) {
  const Batch batch = testing::fused_model_batches_on(2)[1];  // slotted: slot 0 is outside
  DeviceMemory memory = allocate_device_memory(batch, mesh_devices(batch));
  prepare_memory(batch, memory);
  const MemoryCheck before = check_memory(batch, memory);
  EXPECT_GT(before.outside_bytes, 0);
  EXPECT_EQ(before.outside_errors, 0);
  EXPECT_EQ(before.errors, before.elements);  // poisoned: nothing delivered yet
  const auto qkv = std::find_if(memory.buffers.begin(), memory.buffers.end(),
                                [](const auto& b) { return b.name.ends_with("qkv_proj"); });
  ASSERT_NE(qkv, memory.buffers.end());
  qkv->bytes[0] ^= std::byte{1};  // slot 0, outside every region
  EXPECT_EQ(check_memory(batch, memory).outside_errors, 1);
}

// A run with other strides than the last compiles this process's copies again; a run with the
// same strides allocates nothing.
TEST(LocalExecutorTest, ARunWithTheSameStridesAsTheLastAllocatesNothing) {
  const Batch batch = testing::fused_model_batches_on(4)[1];
  auto executor = make_local_executor({.threads = 2});
  const Plan plan = make_plan(batch, {.strategy = Strategy::broadcast});
  const auto compiled = executor->compile(plan);
  DeviceMemory memory = allocate_device_memory(batch, compiled->devices_here());
  prepare_memory(batch, memory);
  compiled->run(memory.views);
  using testing::allocations;
  using testing::counting_allocations;
  allocations = 0;
  counting_allocations = true;
  compiled->run(memory.views);
  counting_allocations = false;
  EXPECT_EQ(allocations, 0);
  const MemoryCheck c = check_memory(batch, memory);
  EXPECT_EQ(c.errors + c.outside_errors, 0);
}

TEST(LocalExecutorTest, BadStridesAreRejectedBeforeAnythingMoves) {
  const auto plan = testing::hand_written_plans()[1].plan;  // 4x9 float64; device 2: 4x5 tile
  auto executor = make_local_executor();
  const auto compiled = executor->compile(plan);
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  auto views = buffer_views(buffers);
  std::vector<std::byte> wide(4 * 10 * 8);  // device 2's tile as columns 0..4 of a 4x10 buffer
  views[1].dst = std::span(wide).first((3 * 10 + 5) * 8);
  views[1].dst_strides = {10};
  expect_error([&] { compiled->start(views); },
               "device 2, tensors[0] 'tensor': destination strides [10]: expected 2 non-negative "
               "strides, one per dimension of the tensor");
  views[1].dst_strides = {10, -1};
  expect_error([&] { compiled->start(views); }, "destination strides [10,-1]: expected 2");
  views[1].dst_strides = {2, 1};
  expect_error([&] { compiled->start(views); },
               "device 2, tensors[0] 'tensor': destination strides [2,1] over a tile of 4x5 make "
               "elements share memory");
  views[1].dst_strides = {10, 1};
  views[1].dst = std::span(wide);
  expect_error([&] { compiled->start(views); },
               "device 2, tensors[0] 'tensor': destination buffer has 320 bytes, but its "
               "destination tile of 4x5 with strides [10,1] spans 280 from its first element to "
               "its last");
  // With good strides the run writes the tile into columns 0..4 and leaves 5..9 alone.
  views[1].dst = std::span(wide).first(35 * 8);
  prepare_tiles(plan.batch, buffers);
  compiled->run(views);
  const Box tile{{{0, 4}, {0, 5}}};
  std::vector<std::byte> packed(4 * 5 * 8);
  run_strided_copy(plan_strided_copy(tile, BufferView{tile, {80, 8}}, row_major_view(tile, 8), 8),
                   wide.data(), packed.data());
  for (int row = 0; row < 4; ++row)
    for (int byte = 5 * 8; byte < 10 * 8; ++byte)
      EXPECT_EQ(wide[row * 80 + byte], std::byte{0}) << "row " << row << " byte " << byte;
  EXPECT_EQ(count_pattern_errors(tile, {4, 9}, 8, packed), 0);
}

// Two tensors on the same devices: leaving out one tensor's buffers is an error naming it, raised
// before any byte moves.
TEST(LocalExecutorTest, ABufferMissingForOneTensorIsNamedBeforeAnythingMoves) {
  Batch batch = Batch::of_one(testing::small_problem("RS0"), "first");
  batch.tensors.push_back(batch.tensors[0]);
  batch.tensors[1].name = "second";
  batch.tensors[1].tensor.dtype = DType::int8;
  auto executor = make_local_executor();
  const auto compiled = executor->compile(make_plan(batch));
  auto buffers = allocate_tile_buffers(batch, compiled->devices_here());
  prepare_tiles(batch, buffers);
  std::vector<DeviceBuffers> views;
  for (const DeviceBuffers& v : buffer_views(buffers))
    if (!(v.device == 2 && v.tensor == 1)) views.push_back(v);
  expect_error([&] { compiled->start(views); },
               "no buffers given for device 2, tensors[1] 'second', whose tiles need 0 source and "
               "20 destination bytes");
  auto with_bad_tensor = buffer_views(buffers);
  with_bad_tensor[0].tensor = 2;
  expect_error([&] { compiled->start(with_bad_tensor); },
               "buffers given for tensor 2, but the batch has tensors 0..1");
  // Nothing moved: every destination element is still poison.
  int64_t elements = 0;
  for (const TileBuffers& b : buffers) elements += tiles_of(batch, b.tensor, b.device).dst.volume();
  EXPECT_EQ(count_destination_errors(batch, buffers), elements);
  compiled->run(buffer_views(buffers));
  EXPECT_EQ(count_destination_errors(batch, buffers), 0);
}

TEST(LocalExecutorTest, PlansThatCannotRunAreRejectedAtCompile) {
  auto executor = make_local_executor();
  auto plan = testing::hand_written_plans()[1].plan;
  plan.ops[2].sender = 2;  // device 2 never held the right columns
  expect_error([&] { executor->compile(plan); },
               "plan op id 2 (send): device 2 must send [0,4)x[5,9), but it does not hold it");
  plan.ops[2].sender = 9;
  expect_error([&] { executor->compile(plan); }, "device 9 is outside the cluster's 4 devices");
  plan.ops[2].sender = 3;
  expect_error([&] { executor->compile(plan); }, "device 3 appears twice");
  plan.ops[2].sender.reset();
  expect_error([&] { executor->compile(plan); }, "has no sender");
  expect_error([] { make_local_executor({.threads = -1}); }, "bad thread count -1");
}

}  // namespace
}  // namespace meshcast
