// The MPI executor, one rank per device: run by runtime_mpi_test.sh under mpirun with 2..16
// ranks. Every test is collective; errors are summed over the ranks and rank 0 reports.
#include "meshcast/runtime/mpi/mpi_executor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "meshcast/error.h"
#include "meshcast/tasks/paper_cases.h"
#include "mpi_test_main.h"
#include "runtime_allocations.h"
#include "runtime_cases.h"

namespace meshcast {
namespace {

Executor*& world = testing::mpi_world;  // created by the shared main (mpi_test_main.cpp)
int& ranks = testing::mpi_ranks;

// Corpus cases grown to exactly `ranks` devices; enough of them that every op kind shows up.
std::vector<Resharding> corpus_for_this_run() {
  return testing::corpus_on(ranks, 3, 2000, 14);
}

TEST(MpiExecutorTest, EveryStrategyOnThePropertyCorpusDeliversEveryElement) {
  const auto cases = corpus_for_this_run();
  ASSERT_GE(cases.size(), 5u) << "too few corpus cases fit " << ranks << " ranks";
  if (world->is_leader())
    fmt::print("{} corpus cases x {} plan options on {} ranks\n", cases.size(),
               testing::every_strategy().size(), ranks);
  for (const Resharding& p : cases)
    for (const PlanOptions& o : testing::every_strategy())
      ASSERT_EQ(testing::play_and_count_errors(*world, make_plan(p, o)), 0)
          << testing::describe(p) << " " << testing::describe(o);
}

TEST(MpiExecutorTest, RandomBatchesDeliverEveryElementOfEveryTensor) {
  const auto batches = testing::batches_on(ranks, 5, 400, 6);
  ASSERT_GE(batches.size(), 3u) << "too few random batches fit " << ranks << " ranks";
  for (size_t i = 0; i < batches.size(); ++i)
    for (const PlanOptions& o : testing::every_strategy())
      ASSERT_EQ(testing::play_and_count_errors(*world, make_plan(batches[i], o)), 0)
          << "batch " << i << " " << testing::describe(o);
}

TEST(MpiExecutorTest, BucketsOfTinyTensorsDeliverEveryElement) {
  auto bcast = make_mpi_executor({.broadcast = MpiBroadcast::mpi_bcast});
  for (int64_t bucket : {int64_t{96}, int64_t{1} << 20}) {
    // One option per strategy: every rank count of the suite plays these.
    const auto plans = testing::bucket_plans_on(
        ranks, 7, 2, bucket,
        {{.strategy = Strategy::send_recv, .search_effort = 0},
         {.strategy = Strategy::allgather, .search_effort = 0},
         {.strategy = Strategy::broadcast, .split = true, .chunk_bytes = 64, .search_effort = 0}});
    ASSERT_GT(testing::buckets_in(plans), 0) << "buckets of " << bucket;
    for (size_t i = 0; i < plans.size(); ++i) {
      ASSERT_EQ(testing::play_and_count_errors(*world, plans[i]), 0)
          << "buckets of " << bucket << ", plan " << i;
      ASSERT_EQ(testing::play_and_count_errors(*bcast, plans[i]), 0)
          << "MPI_Bcast, buckets of " << bucket << ", plan " << i;
    }
  }
}

// The relay rank holds one row at a time; a bound below that is refused on every rank together.
TEST(MpiExecutorTest, StagingMemoryIsReusedAndBoundedOnEveryRank) {
  if (ranks < 4 || ranks % 2 != 0)
    GTEST_SKIP() << "the relay plan needs an even number >= 4 of ranks, not " << ranks;
  Plan plan = testing::row_by_row_relay_plan();
  plan.batch.cluster.hosts = ranks / 2;  // extra ranks idle
  auto bounded = make_mpi_executor({.max_staging_bytes = testing::kRowBytes});
  const auto compiled = bounded->compile(plan);
  EXPECT_EQ(bounded->max_over_processes(static_cast<double>(compiled->staging_bytes())),
            static_cast<double>(testing::kRowBytes));
  EXPECT_EQ(testing::play_and_count_errors(*bounded, plan), 0);
  // 200 rows through one row of staging memory, the relay receiving while it forwards.
  Plan long_plan = testing::row_by_row_relay_plan(200);
  long_plan.batch.cluster.hosts = ranks / 2;
  EXPECT_EQ(testing::play_and_count_errors(*bounded, long_plan), 0);
  auto tight = make_mpi_executor({.max_staging_bytes = testing::kRowBytes - 1});
  int refused = 0;
  try {
    tight->compile(plan);
  } catch (const InvalidArgument& e) {
    refused = std::string(e.what()).find("needs 72 bytes of staging memory") != std::string::npos;
  }
  EXPECT_EQ(world->sum_over_processes(refused), ranks);
}

TEST(MpiExecutorTest, SameMeshRedistributionsDeliverEveryElement) {
  const auto plans = testing::same_mesh_plans_on(ranks, 11, 6);
  // With an even count, hosts have 2 or 4 devices: some gathers must show up.
  if (ranks % 2 == 0) {
    ASSERT_GT(testing::held_pieces_in(plans), 0) << ranks << " ranks";
  }
  for (size_t i = 0; i < plans.size(); ++i)
    ASSERT_EQ(testing::play_and_count_errors(*world, plans[i]), 0) << "plan " << i;
}

TEST(MpiExecutorTest, BroadcastsOnMpiBcastCommunicatorsDeliverEveryElement) {
  auto bcast = make_mpi_executor({.broadcast = MpiBroadcast::mpi_bcast});
  for (const Resharding& p : corpus_for_this_run())
    for (const PlanOptions& o : testing::every_strategy())
      if (o.strategy == Strategy::broadcast) {
        ASSERT_EQ(testing::play_and_count_errors(*bcast, make_plan(p, o)), 0)
            << testing::describe(p) << " " << testing::describe(o);
      }
}

TEST(MpiExecutorTest, HandWrittenPlansWithRelaysStagingAndAllgathers) {
  if (ranks < 4 || ranks % 2 != 0)
    GTEST_SKIP() << "the hand-written plans need an even number >= 4 of ranks, not " << ranks;
  for (auto [name, plan] : testing::hand_written_plans()) {
    plan.batch.cluster.hosts = ranks / 2;  // extra ranks idle
    EXPECT_EQ(testing::play_and_count_errors(*world, plan), 0) << name;
  }
}

TEST(MpiExecutorTest, ExchangesAndAllToAllsDeliverEveryElement) {
  auto bcast = make_mpi_executor({.broadcast = MpiBroadcast::mpi_bcast});
  for (Executor* executor : {world, bcast.get()}) {
    for (const Plan& plan : testing::all_to_all_plans_on(ranks))
      ASSERT_EQ(testing::play_and_count_errors(*executor, plan), 0)
          << plan.batch.cluster.devices_per_host << " per host, " << to_string(plan.strategy);
    for (int per_host : {1, 2})
      if (ranks % per_host == 0) {
        ASSERT_EQ(
            testing::play_and_count_errors(*executor, testing::exchange_plan(ranks, per_host)), 0)
            << per_host << " per host";
      }
  }
}

TEST(MpiExecutorTest, SlicesForwardedHostByHostDeliverEveryElement) {
  const auto plans = testing::forwarding_plans_on(ranks);
  // 3, 4 and 6 ranks give forwarding plans (the planner's choice, far from the bound otherwise).
  if (ranks == 3 || ranks == 4 || ranks == 6) {
    EXPECT_GT(testing::forwarded_ops_in(plans), 0);
  }
  for (const Plan& plan : plans)
    ASSERT_EQ(testing::play_and_count_errors(*world, plan), 0)
        << plan.batch.cluster.devices_per_host << " per host";
}

// Ranks 0 and 1 of an exchange each send to the other while receiving from it: both sends are in
// flight at once on each of them (playing one op at a time would give 1).
TEST(MpiExecutorTest, ARankSendsAndReceivesAtOnce) {
  for (int per_host : {1, 2}) {
    if (ranks % per_host != 0) continue;
    const Plan plan = testing::exchange_plan(ranks, per_host);
    const auto compiled = world->compile(plan);
    auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
    prepare_tiles(plan.batch, buffers);
    const int peak = compiled->run(buffer_views(buffers)).peak_ops_in_flight;
    EXPECT_EQ(world->sum_over_processes(count_destination_errors(plan.batch, buffers)), 0);
    EXPECT_EQ(world->sum_over_processes(peak), 4) << per_host << " per host";
    EXPECT_EQ(world->sum_over_processes(world->is_leader() ? peak : 0), 2);
  }
}

// A rank receives from several peers at once, also into scratch memory: device 2's two receipts
// (one from device 0, one from device 1, each unpacked from scratch memory) are both in flight on
// it from the start. Before, receipts into scratch memory took turns, so a slow sender held up
// every other sender to the device (paper case 6 allgather on the emulated cluster: 1.68x its
// simulated time).
TEST(MpiExecutorTest, ARankReceivesFromSeveralPeersAtOnceIntoScratchMemory) {
  if (ranks < 3) GTEST_SKIP() << "the plan needs 3 ranks, not " << ranks;
  const Plan plan = testing::two_senders_into_scratch_plan(ranks);
  const auto compiled = world->compile(plan);
  const DeviceId me = compiled->devices_here().front();
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  prepare_tiles(plan.batch, buffers);
  const int peak = compiled->run(buffer_views(buffers)).peak_ops_in_flight;
  EXPECT_EQ(world->sum_over_processes(count_destination_errors(plan.batch, buffers)), 0);
  EXPECT_EQ(world->max_over_processes(me == 2 ? peak : 0), 2);
}

// A sender's bytes wait for their receiver. Relay 2 takes op 1 (device 1 -> 2 -> 0) only once its
// send of op 0 (device 2 -> device 0) has released it, and rank 0 starts its run late, so op 0
// cannot end on device 2 before rank 0 has started: device 1's part of op 1 must not end before
// then either. Its 144 bytes are one eager message, so a plain MPI_Isend would complete at once
// and the bytes would wait unasked at the relay (with many senders they crowd out the op the
// relay needs now). The ranks compare times of the steady clock, which all processes of one
// machine share.
TEST(MpiExecutorTest, ASendEndsOnlyAfterItsReceiverHasStartedIt) {
  if (ranks < 3) GTEST_SKIP() << "the plan needs 3 ranks, not " << ranks;
  const Plan plan = testing::relay_busy_sending_plan(ranks);
  const auto compiled = world->compile(plan);
  const DeviceId me = compiled->devices_here().front();
  auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
  prepare_tiles(plan.batch, buffers);
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  world->barrier();
  if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double started = now();
  compiled->run(buffer_views(buffers));
  const double ended = now();
  const double first_sender_started = world->max_over_processes(me == 0 ? started : 0);
  const double second_sender_ended = world->max_over_processes(me == 1 ? ended : 0);
  EXPECT_GE(second_sender_ended, first_sender_started)
      << "device 1's send ended " << first_sender_started - second_sender_ended
      << " s before its receiver could start it";
  EXPECT_EQ(world->sum_over_processes(count_destination_errors(plan.batch, buffers)), 0);
}

TEST(MpiExecutorTest, ARankCountThatDiffersFromTheClusterIsAnErrorOnEveryRank) {
  Plan plan = testing::hand_written_plans()[0].plan;
  plan.batch.cluster.hosts = ranks;  // 2 devices per host: twice the ranks
  try {
    world->compile(plan);
    ADD_FAILURE() << "compile accepted " << 2 * ranks << " devices on " << ranks << " ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format(
                  "has {} devices ({} hosts x 2 per host), but MPI started {} ranks: launch with "
                  "mpirun -np {}",
                  2 * ranks, ranks, ranks, 2 * ranks)),
              std::string::npos)
        << e.what();
  }
}

TEST(MpiExecutorTest, RanksGivenDifferentPlansAllRefuseBeforeAnyByteMoves) {
  const Resharding p = corpus_for_this_run().front();
  // Rank 0 plans with send_recv, the others with broadcast: the same problem, other ops.
  const Strategy strategy = world->is_leader() ? Strategy::send_recv : Strategy::broadcast;
  const Plan plan = make_plan(p, {.strategy = strategy, .balance = Balance::none});
  try {
    world->compile(plan);
    ADD_FAILURE() << "compile accepted different plans on different ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(
        std::string(e.what()).find(fmt::format("the {} ranks were given different plans", ranks)),
        std::string::npos)
        << e.what();
  }
  // Every rank refused (none is left waiting in the plan): the same plan compiles and runs.
  EXPECT_EQ(testing::play_and_count_errors(
                *world, make_plan(p, {.strategy = Strategy::send_recv, .balance = Balance::none})),
            0);
}

// Serving engines' fused parameters on every rank (testing::fused_model_batches_on): every
// element of every buffer checked, and nothing outside the bound regions touched.
TEST(MpiExecutorTest, FusedModelBuffersGetEveryElementAndNothingOutsideTheirRegions) {
  const auto batches = testing::fused_model_batches_on(ranks);
  ASSERT_GE(batches.size(), 4u);
  for (size_t b = 0; b < batches.size(); ++b)
    for (const PlanOptions& o : testing::every_strategy()) {
      int64_t outside = 0;
      ASSERT_EQ(testing::play_bound_and_count_errors(*world, make_plan(batches[b], o), &outside), 0)
          << "batch " << b << " " << testing::describe(o);
      if (b == 1 || b + 2 >= batches.size()) {  // slotted llama and moe, gpt
        EXPECT_GT(outside, 0) << "batch " << b;
      }
    }
}

// Property: random batches with every tile a random strided view of a larger buffer (new
// strides on each run of one compiled plan); sends and receives in place only where the view
// holds the bytes contiguously.
TEST(MpiExecutorTest, RandomStridedViewsAsSourcesAndDestinations) {
  const auto batches = testing::batches_on(ranks, 11, 400, 4);
  ASSERT_GE(batches.size(), 2u) << "too few random batches fit " << ranks << " ranks";
  for (size_t i = 0; i < batches.size(); ++i)
    for (const PlanOptions& o : testing::every_strategy())
      ASSERT_EQ(testing::play_strided_and_count_errors(*world, make_plan(batches[i], o),
                                                       static_cast<unsigned>(i)),
                0)
          << "batch " << i << " " << testing::describe(o);
}

TEST(MpiExecutorTest, StartWaitAndASecondRunThatAllocatesNothing) {
  const Resharding p = corpus_for_this_run().front();
  const auto compiled =
      world->compile(make_plan(p, {.strategy = Strategy::broadcast, .search_effort = 0}));
  auto buffers = allocate_tile_buffers(p, compiled->devices_here());
  const auto views = buffer_views(buffers);
  prepare_tiles(p, buffers);
  compiled->run(views);
  prepare_tiles(p, buffers);
  testing::allocations = 0;
  testing::counting_allocations = true;
  compiled->start(views);
  const RunTiming timing = compiled->wait();
  testing::counting_allocations = false;
  EXPECT_GE(timing.seconds, 0);
  EXPECT_EQ(testing::allocations, 0);
  EXPECT_EQ(world->sum_over_processes(count_destination_errors(p, buffers)), 0);
  EXPECT_THROW(compiled->wait(), InvalidArgument);
}

}  // namespace
}  // namespace meshcast
