// The executor over a transport, without MPI or Python: each device is a thread of this process
// with its own executor over an in-process transport (messages matched by sender, receiver and tag
// in posting order; no group collectives, so allgathers go point to point; the default control
// collectives through device 0), so that those paths and the timeouts run in every build.
#include "meshcast/runtime/transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "meshcast/error.h"
#include "meshcast/plan/chain_window.h"
#include "runtime_cases.h"

namespace meshcast {
namespace {

// Every device's posted sends and receives, matched in posting order per (sender, receiver, tag).
// A send completes when its bytes are copied (a synchronous one: when its receive matched it).
class Mailboxes {
 public:
  explicit Mailboxes(int devices) : completed_(devices) {}

  void send(int from, int to, int tag, const std::byte* data, int64_t bytes, uint64_t cookie) {
    std::lock_guard lock(mutex_);
    Channel& c = channels_[{from, to, tag}];
    if (!c.receives.empty()) {
      const Receive r = c.receives.front();
      c.receives.pop_front();
      std::memcpy(r.data, data, static_cast<size_t>(bytes));
      completed_[to].push_back(r.cookie);
    } else {
      c.sends.push_back({std::vector<std::byte>(data, data + bytes)});
    }
    completed_[from].push_back(cookie);
  }
  void receive(int from, int to, int tag, std::byte* data, uint64_t cookie) {
    std::lock_guard lock(mutex_);
    Channel& c = channels_[{from, to, tag}];
    if (!c.sends.empty()) {
      std::memcpy(data, c.sends.front().bytes.data(), c.sends.front().bytes.size());
      c.sends.pop_front();
      completed_[to].push_back(cookie);
    } else {
      c.receives.push_back({data, cookie});
    }
  }
  void poll(int device, std::vector<uint64_t>& out) {
    std::lock_guard lock(mutex_);
    out.insert(out.end(), completed_[device].begin(), completed_[device].end());
    completed_[device].clear();
  }

 private:
  struct Send {
    std::vector<std::byte> bytes;
  };
  struct Receive {
    std::byte* data;
    uint64_t cookie;
  };
  struct Channel {
    std::deque<Send> sends;
    std::deque<Receive> receives;
  };
  std::mutex mutex_;
  std::map<std::tuple<int, int, int>, Channel> channels_;
  std::vector<std::vector<uint64_t>> completed_;
};

// The most sends of plan ops a device had posted and not yet seen complete, per device.
struct SendsInFlight {
  std::vector<int> most;
};

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(Mailboxes& boxes, int rank, int size, SendsInFlight* sends = nullptr,
                     bool rendezvous = false)
      : boxes_(boxes), rank_(rank), size_(size), sends_(sends), rendezvous_(rendezvous) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int64_t max_tag() const override { return int64_t{1} << 30; }
  std::string machine() const override { return "here"; }
  bool rendezvous_sends() const override { return rendezvous_; }
  std::string name() const override { return "the in-process transport"; }
  std::string launch_hint(int devices) const override {
    return fmt::format("start {} threads", devices);
  }
  void post_send(int peer, int tag, const std::byte* data, int64_t bytes, bool,
                 uint64_t cookie) override {
    if (sends_ && tag < max_tag()) {  // a plan's op, not a control collective
      sends_posted_.insert(cookie);
      sends_->most[rank_] = std::max(sends_->most[rank_], static_cast<int>(sends_posted_.size()));
    }
    boxes_.send(rank_, peer, tag, data, bytes, cookie);
  }
  void post_receive(int peer, int tag, std::byte* data, int64_t, uint64_t cookie) override {
    boxes_.receive(peer, rank_, tag, data, cookie);
  }
  void poll(std::vector<uint64_t>& completed) override {
    const size_t before = completed.size();
    boxes_.poll(rank_, completed);
    if (sends_)
      for (size_t i = before; i < completed.size(); ++i)
        if (const auto it = sends_posted_.find(completed[i]); it != sends_posted_.end())
          sends_posted_.erase(it);
  }

 private:
  Mailboxes& boxes_;
  int rank_, size_;
  SendsInFlight* sends_;                  // counted when given
  bool rendezvous_;                       // what rendezvous_sends() says
  std::multiset<uint64_t> sends_posted_;  // cookies of this device's sends not seen complete
};

// Runs `body(executor, device)` on `devices` threads, each with its own executor.
// With `sends`, each device's most sends in flight are counted there.
void on_every_device(int devices, const std::function<void(Executor&, int)>& body,
                     double timeout_s = 0, SendsInFlight* sends = nullptr,
                     bool rendezvous = false) {
  Mailboxes boxes(devices);
  if (sends) sends->most.assign(devices, 0);
  std::vector<std::jthread> threads;
  for (int d = 0; d < devices; ++d)
    threads.emplace_back([&, d] {
      const auto executor = make_transport_executor(
          std::make_shared<InProcessTransport>(boxes, d, devices, sends, rendezvous),
          {.timeout_s = timeout_s});
      body(*executor, d);
    });
}

constexpr int kDevices = 4;

TEST(TransportExecutorTest, EveryStrategyOnThePropertyCorpusDeliversEveryElement) {
  const auto cases = testing::corpus_on(kDevices, 5, 300, 4);
  ASSERT_GE(cases.size(), 3u);
  on_every_device(kDevices, [&](Executor& executor, int) {
    for (const Resharding& p : cases)
      for (const PlanOptions& o : testing::every_strategy())
        EXPECT_EQ(testing::play_and_count_errors(executor, make_plan(p, o)), 0)
            << testing::describe(p) << " " << testing::describe(o);
  });
}

TEST(TransportExecutorTest, BatchesBucketsAndPointToPointAllgathersDeliverEveryElement) {
  const auto batches = testing::batches_on(kDevices, 3, 200, 3);
  const auto buckets = testing::bucket_plans_on(kDevices, 4, 2, 96);
  int allgathers = 0;
  auto hand_written = testing::hand_written_plans();
  for (auto& named : hand_written) {
    named.plan.batch.cluster.hosts = kDevices / 2;
    for (const Op& op : named.plan.ops) allgathers += op.kind == OpKind::allgather;
  }
  ASSERT_GT(allgathers, 0) << "no allgather to play point to point";
  on_every_device(kDevices, [&](Executor& executor, int) {
    for (const Batch& b : batches)
      EXPECT_EQ(testing::play_and_count_errors(executor, make_plan(b, PlanOptions{})), 0);
    for (const Plan& plan : buckets) EXPECT_EQ(testing::play_and_count_errors(executor, plan), 0);
    for (const testing::NamedPlan& named : hand_written)
      EXPECT_EQ(testing::play_and_count_errors(executor, named.plan), 0) << named.name;
  });
}

// Through device 0 by default: each device's value counts once.
TEST(TransportExecutorTest, ControlCollectivesCombineEveryDeviceOnce) {
  on_every_device(kDevices, [&](Executor& executor, int device) {
    executor.barrier();
    EXPECT_EQ(executor.sum_over_processes(device + 1), 1 + 2 + 3 + 4);
    EXPECT_EQ(executor.max_over_processes(device * 1.5), 4.5);
    EXPECT_EQ(executor.is_leader(), device == 0);
    EXPECT_EQ(executor.share_from_leader(device == 0 ? std::string(100000, 'p') : "other"),
              std::string(100000, 'p'));
  });
}

TEST(TransportExecutorTest, DevicesGivenDifferentPlansAllRefuse) {
  const Resharding p = testing::corpus_on(kDevices, 5, 300, 4).front();
  on_every_device(kDevices, [&](Executor& executor, int device) {
    const Strategy strategy = device == 0 ? Strategy::send_recv : Strategy::broadcast;
    try {
      executor.compile(make_plan(p, {.strategy = strategy, .balance = Balance::none}));
      ADD_FAILURE() << "device " << device << " accepted different plans";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("the 4 ranks were given different plans"),
                std::string::npos)
          << e.what();
    }
  });
}

// Device 1 compiles but never runs: every device that waits on it raises Timeout naming the run
// and what it waits for, and the plan then refuses to run again.
TEST(TransportExecutorTest, APeerThatNeverRunsTimesOutWithThePhaseAndThePeerNamed) {
  const Plan plan = testing::exchange_plan(2, 1);
  on_every_device(
      2,
      [&](Executor& executor, int device) {
        const auto compiled = executor.compile(plan);
        if (device == 1) return;
        auto buffers = allocate_tile_buffers(plan.batch, compiled->devices_here());
        const auto views = buffer_views(buffers);
        try {
          compiled->run(views);
          ADD_FAILURE() << "the run finished without its peer";
        } catch (const Timeout& e) {
          EXPECT_NE(std::string(e.what()).find("run 1 did not finish within the timeout of 0.5 s "
                                               "(device 0 waiting for device 1"),
                    std::string::npos)
              << e.what();
        }
        EXPECT_THROW(compiled->run(views), Error);
      },
      0.5);
}

// A chain hop keeps its link's bandwidth x round trip in flight: device 0 sends 40 chunks of
// 8 KiB to device 2 on the other host over a 18.432 MB/s NIC with 1 ms latency each way, whose
// 36,864 bytes per round trip are 4.5 chunks, so it keeps 5 sends posted at once (the old fixed
// window kept 2, and moved 16 KiB per round trip). Device 2 forwards to device 3 on its own host.
// Every element arrives.
TEST(TransportExecutorTest, AChainHopKeepsItsLinksBandwidthTimesRoundTripInFlight) {
  constexpr int64_t kRows = 40, kRowElements = 1024;  // float64: a row is 8 KiB
  Resharding p = testing::float64_problem({kRows, kRowElements}, 2, 2,
                                          Layout{Mesh({1}, {0}), ShardingSpec::parse("RR")},
                                          Layout{Mesh({2}, {2, 3}), ShardingSpec::parse("RR")});
  p.cluster.nic_bandwidth = 18.432e6;
  p.cluster.latency = 1e-3;
  const int64_t row_bytes = kRowElements * 8;
  const Plan plan = testing::plan_of(
      p, {testing::hand_op(0, OpKind::broadcast, Box{{{0, kRows}, {0, kRowElements}}}, 0, {2, 3},
                           row_bytes)});
  ASSERT_EQ(chain_window(row_bytes, chain_hop_bandwidth(p.cluster, 0, 2), p.cluster.latency), 5);
  SendsInFlight sends;
  on_every_device(
      kDevices,
      [&](Executor& executor, int) {
        EXPECT_EQ(testing::play_and_count_errors(executor, plan), 0);
      },
      0, &sends);
  EXPECT_EQ(sends.most[0], 5);
}

// A transport whose sends move bytes only into posted receives (gloo) gets every chunk a hop may
// keep in flight, whatever the link's bandwidth x round trip: the same hop as above posts all its
// 40 chunks at once (under kChainMaxWindow), and every element arrives.
TEST(TransportExecutorTest, AChainHopOverRendezvousSendsKeepsEveryChunkItMayInFlight) {
  constexpr int64_t kRows = 40, kRowElements = 1024;
  Resharding p = testing::float64_problem({kRows, kRowElements}, 2, 2,
                                          Layout{Mesh({1}, {0}), ShardingSpec::parse("RR")},
                                          Layout{Mesh({2}, {2, 3}), ShardingSpec::parse("RR")});
  p.cluster.nic_bandwidth = 18.432e6;
  p.cluster.latency = 1e-3;
  const Plan plan = testing::plan_of(
      p, {testing::hand_op(0, OpKind::broadcast, Box{{{0, kRows}, {0, kRowElements}}}, 0, {2, 3},
                           kRowElements * 8)});
  ASSERT_LT(kRows, kChainMaxWindow);
  SendsInFlight sends;
  on_every_device(
      kDevices,
      [&](Executor& executor, int) {
        EXPECT_EQ(testing::play_and_count_errors(executor, plan), 0);
      },
      0, &sends, true);
  EXPECT_EQ(sends.most[0], kRows);
}

}  // namespace
}  // namespace meshcast
