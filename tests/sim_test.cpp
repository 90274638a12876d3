// The flow-level simulator against closed-form answers on hand-written plans.
#include "meshcast/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>

#include "meshcast/error.h"
#include "meshcast/plan/chain_window.h"

namespace meshcast {
namespace {

constexpr double kNic = 1.25e9;  // 10 Gbps
constexpr double kDev = 12.5e9;  // 100 Gbps
constexpr double kLat = 5e-6;
constexpr int64_t kBytes = 125'000'000;  // 0.1 s on one NIC
constexpr double S = static_cast<double>(kBytes);

Cluster cluster(int hosts, int devices_per_host = 4) {
  return Cluster{.hosts = hosts,
                 .devices_per_host = devices_per_host,
                 .nic_bandwidth = kNic,
                 .device_bandwidth = kDev,
                 .latency = kLat};
}

// A plan on `c` whose tensor is a 1-D int8 vector, so a box of n elements is n bytes.
Plan plan_on(const Cluster& c) {
  Plan plan;
  plan.batch.cluster = c;
  plan.batch.tensors.push_back({.name = "vector", .tensor = TensorSpec{{1LL << 40}, DType::int8}});
  return plan;
}

Op op(OpKind kind, std::optional<DeviceId> sender, std::vector<DeviceId> receivers,
      int64_t bytes = kBytes, int64_t chunk = 0) {
  return Op{.kind = kind,
            .pieces = {{0, 0, Box{{{0, bytes}}}, bytes}},
            .bytes = bytes,
            .sender = sender,
            .receivers = std::move(receivers),
            .chunk_bytes = chunk};
}

void add(Plan& plan, Op o) {
  o.id = static_cast<int>(plan.ops.size());
  plan.ops.push_back(std::move(o));
}

const LinkStats& link(const SimResult& r, const std::string& name) {
  auto it = std::find_if(r.links.begin(), r.links.end(),
                         [&](const LinkStats& l) { return l.name == name; });
  EXPECT_NE(it, r.links.end()) << name;
  return *it;
}

int64_t nic_bytes(const SimResult& r) {
  int64_t total = 0;
  for (const auto& l : r.links)
    if (l.name.find("nic") != std::string::npos) total += l.bytes;
  return total;
}

void expect_time(double actual, double expected) {
  EXPECT_NEAR(actual, expected, 1e-9 * expected) << "expected " << expected;
}

// chain_window_limit prices a chain by its slowest hop alone; that is the lowest of every hop's
// window rate (the rule as stated hop by hop), for chunks from one byte to the whole message.
TEST(SimulatorTest, ChainWindowLimitIsTheLowestHopWindowRate) {
  std::mt19937 rng(25);
  const double capacities[] = {1e6,  1.25e9, 12.5e9,
                               45e9, 450e9,  std::numeric_limits<double>::infinity()};
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<double> hops(1 + rng() % 6);
    for (double& c : hops) c = capacities[rng() % std::size(capacities)];
    const int64_t bytes = 1 + static_cast<int64_t>(rng() % (1 << 30));
    const int64_t chunk = 1 + static_cast<int64_t>(rng() % bytes);
    const double latency = (rng() % 4) * 5e-6;
    double lowest = std::numeric_limits<double>::infinity();
    for (double c : hops)
      lowest = std::min(lowest,
                        chain_window_rate(bytes, chunk, chain_window(chunk, c, latency), latency));
    EXPECT_EQ(chain_window_limit(bytes, chunk, hops, latency), lowest)
        << bytes << " bytes, chunk " << chunk << ", latency " << latency;
  }
}

TEST(SimulatorTest, OneSendAcrossHostsTakesBytesOverNicPlusLatency) {
  Plan plan = plan_on(cluster(2));
  add(plan, op(OpKind::send, 0, {4}));
  const SimResult r = simulate(plan);
  expect_time(r.time_s, S / kNic + kLat);
  ASSERT_EQ(r.ops.size(), 1u);
  EXPECT_EQ(r.ops[0].start_s, 0);
  expect_time(r.ops[0].end_s, S / kNic + kLat);
  EXPECT_EQ(link(r, "host0.nic0.out").bytes, kBytes);
  EXPECT_EQ(link(r, "host1.nic0.in").bytes, kBytes);
  EXPECT_EQ(link(r, "dev0.out").bytes, kBytes);
  EXPECT_EQ(link(r, "dev4.in").bytes, kBytes);
  expect_time(link(r, "host0.nic0.out").busy_s, S / kNic);
  EXPECT_EQ(link(r, "host0.nic0.in").bytes, 0);
}

TEST(SimulatorTest, TwoFlowsSharingANicGetHalfEach) {
  Plan plan = plan_on(cluster(2));
  add(plan, op(OpKind::send, 0, {4}));
  add(plan, op(OpKind::send, 1, {5}));
  const SimResult r = simulate(plan);
  for (const auto& t : r.ops) {
    EXPECT_EQ(t.start_s, 0);
    expect_time(t.end_s, 2 * S / kNic + kLat);
  }
  EXPECT_EQ(link(r, "host0.nic0.out").bytes, 2 * kBytes);
}

TEST(SimulatorTest, TheSurvivorOfTwoFlowsSpeedsUpWhenTheOtherEnds) {
  Plan plan = plan_on(cluster(2));
  add(plan, op(OpKind::send, 0, {4}));
  add(plan, op(OpKind::send, 1, {5}, 2 * kBytes));
  const SimResult r = simulate(plan);
  expect_time(r.ops[0].end_s, 2 * S / kNic + kLat);
  // Half rate for the first 2S/nic, then the whole NIC for its remaining S.
  expect_time(r.ops[1].end_s, 3 * S / kNic + kLat);
}

TEST(SimulatorTest, SharesAreMaxMinFairNotEqual) {
  Cluster c = cluster(3);
  c.host_nic_bandwidth = {kNic, kNic / 4, kNic};  // host 1 receives at a quarter
  Plan plan = plan_on(c);
  add(plan, op(OpKind::send, 0, {4}));  // host 0 -> host 1: capped at nic/4
  add(plan, op(OpKind::send, 1, {8}));  // host 0 -> host 2: takes the other 3/4 of host 0's NIC
  const SimResult r = simulate(plan);
  expect_time(r.ops[0].end_s, 4 * S / kNic + kLat);
  expect_time(r.ops[1].end_s, S / (0.75 * kNic) + kLat);
}

TEST(SimulatorTest, ChainBroadcastToKHostsTakesAboutOneTransferPlusFill) {
  for (int k : {1, 2, 5}) {
    Plan plan = plan_on(cluster(k + 1));
    std::vector<DeviceId> receivers;
    for (int h = 1; h <= k; ++h) receivers.push_back(h * 4);
    const int64_t chunk = 1 << 20;
    add(plan, op(OpKind::broadcast, 0, receivers, kBytes, chunk));
    const SimResult r = simulate(plan);
    expect_time(r.time_s, (S + (k - 1) * static_cast<double>(chunk)) / kNic + k * kLat);
    for (int h = 1; h <= k; ++h)
      EXPECT_EQ(link(r, "host" + std::to_string(h) + ".nic0.in").bytes, kBytes) << h;
  }
}

TEST(SimulatorTest, BroadcastWithoutChunkingIsStoreAndForward) {
  Plan plan = plan_on(cluster(3));
  add(plan, op(OpKind::broadcast, 0, {4, 8}));
  expect_time(simulate(plan).time_s, 2 * S / kNic + 2 * kLat);
}

TEST(SimulatorTest, ChainThroughAHostTwiceMovesAtHalfItsNic) {
  Plan plan = plan_on(cluster(3));
  const int64_t chunk = 1 << 20;
  add(plan, op(OpKind::broadcast, 0, {4, 8, 5}, kBytes, chunk));
  const SimResult r = simulate(plan);
  // Three NIC hops: the data streams at nic/2 (host 1's NIC in carries it twice); the fill is
  // the first chunk's time on the two other hops.
  expect_time(r.time_s, S / (kNic / 2) + 2.0 * chunk / kNic + 3 * kLat);
  EXPECT_EQ(link(r, "host1.nic0.in").bytes, 2 * kBytes);
}

TEST(SimulatorTest, FastHopsOfAChainAddOnlyTheirOwnFill) {
  Plan plan = plan_on(cluster(2));
  const int64_t chunk = 1 << 20;
  add(plan, op(OpKind::broadcast, 0, {4, 5, 6, 7}, kBytes, chunk));
  // One NIC hop into host 1, then three device-link hops inside it.
  expect_time(simulate(plan).time_s, S / kNic + 3.0 * chunk / kDev + 4 * kLat);
}

TEST(SimulatorTest, ChunksWhoseWindowFallsShortOfTheRoundTripMoveAWindowPerRoundTrip) {
  // 5,000 chunks of 100 bytes to two hosts: a hop's bandwidth x round trip (1.25 GB/s x 10 us =
  // 12,500 bytes) would take 125 chunks in flight, more than the executors keep (64), so after
  // the first chunk has crossed both hops (a latency each, and its time on the faster of them)
  // the other 4,999 follow 64 per round trip, not at the NIC's rate.
  Plan plan = plan_on(cluster(3));
  const int64_t bytes = 500'000, chunk = 100;
  add(plan, op(OpKind::broadcast, 0, {4, 8}, bytes, chunk));
  expect_time(simulate(plan).time_s, 2 * kLat + chunk / kNic + 4'999 * 2 * kLat / 64);
  // Chunks of 2,000 bytes (1.6 us on the NIC, less than a latency): 7 of them fill the round
  // trip, and they stream at the NIC's rate.
  Plan wide = plan_on(cluster(3));
  add(wide, op(OpKind::broadcast, 0, {4, 8}, bytes, 2'000));
  EXPECT_EQ(chain_window(2'000, kNic, kLat), 7);
  expect_time(simulate(wide).time_s, 2 * kLat + 2'000 / kNic + bytes / kNic);
  // OpTimer times the op alone the same way.
  EXPECT_NEAR(OpTimer(plan.batch).time_of(plan.ops[0]), simulate(plan).time_s, 1e-12);
}

TEST(SimulatorTest, ASendOverALinkWhoseRoundTripOutgrowsTheWindowMovesAWindowPerRoundTrip) {
  // A 400 Gb/s NIC with a 10 us round trip needs 500 KB in flight: 8 chunks of kCrossHostChunk,
  // and a send across hosts moves at the NIC's rate.
  Cluster fast = cluster(2);
  fast.nic_bandwidth = 50e9;
  fast.device_bandwidth = 500e9;
  fast.latency = 5e-6;
  EXPECT_EQ(chain_window(kCrossHostChunk, fast.nic_bandwidth, fast.latency), 8);
  const int64_t bytes = 1'000'000'000;
  Plan plan = plan_on(fast);
  add(plan, op(OpKind::send, 0, {4}, bytes));
  expect_time(simulate(plan).time_s, fast.latency + bytes / fast.nic_bandwidth);
  // With 1 ms each way it would need 100 MB in flight; the executors keep 64 chunks (4 MB), so
  // the send's 15,501 chunks move 64 per 2 ms round trip after the first: 0.48 s, not the 20 ms
  // of the NIC's rate.
  Cluster far = fast;
  far.latency = 1e-3;
  Plan slow = plan_on(far);
  add(slow, op(OpKind::send, 0, {4}, bytes));
  const int64_t chunks = (bytes + kCrossHostChunk - 1) / kCrossHostChunk;
  ASSERT_EQ(chunks, 15'501);
  expect_time(simulate(slow).time_s, far.latency + (chunks - 1) * 2 * far.latency / 64);
  EXPECT_NEAR(OpTimer(slow.batch).time_of(slow.ops[0]), simulate(slow).time_s, 1e-12);
}

TEST(SimulatorTest, AChainLimitedByItsWindowLeavesTheRestOfTheNicToOthers) {
  // Host 0's NIC carries a chain of 50-byte chunks (64 per 10 us round trip = 0.32 GB/s) and a
  // send to host 3, which takes the remaining 0.93 GB/s while the chain runs, not the 0.625 GB/s
  // of an equal share.
  Plan plan = plan_on(cluster(4));
  const int64_t bytes = 2'000'000, chunk = 50;
  add(plan, op(OpKind::broadcast, 0, {4, 8}, bytes, chunk));
  add(plan, op(OpKind::send, 1, {12}, bytes));
  const SimResult r = simulate(plan);
  const double chain_start = 2 * kLat + chunk / kNic;
  const double chain_rate = bytes * 64 / (39'999.0 * 2 * kLat);
  const double chain_end = chain_start + bytes / chain_rate;
  expect_time(r.ops[0].end_s, chain_end);
  // The send: alone from its latency to the chain's start, then beside it until it ends.
  const double alone_before = (chain_start - kLat) * kNic;
  expect_time(r.ops[1].end_s, chain_start + (bytes - alone_before) / (kNic - chain_rate));
  EXPECT_LT(r.ops[1].end_s, chain_end);
}

TEST(SimulatorTest, IntraHostTransfersUseDeviceLinksOnly) {
  Plan plan = plan_on(cluster(2));
  add(plan, op(OpKind::send, 0, {1}));
  const SimResult r = simulate(plan);
  expect_time(r.time_s, S / kDev + kLat);
  EXPECT_EQ(nic_bytes(r), 0);
  EXPECT_EQ(link(r, "dev0.out").bytes, kBytes);
  EXPECT_EQ(link(r, "dev1.in").bytes, kBytes);
}

TEST(SimulatorTest, AllgatherInsideAHostIsARingOverDeviceLinks) {
  Plan plan = plan_on(cluster(1));
  add(plan, op(OpKind::allgather, std::nullopt, {0, 1, 2, 3}, 4 * kBytes));
  const SimResult r = simulate(plan);
  // Three ring steps, each moving a quarter of the slice over every device link.
  expect_time(r.time_s, 3 * S / kDev + 3 * kLat);
  EXPECT_EQ(nic_bytes(r), 0);
  EXPECT_EQ(link(r, "dev2.out").bytes, 3 * kBytes);
  EXPECT_EQ(link(r, "dev3.in").bytes, 3 * kBytes);
}

TEST(SimulatorTest, CopyPaysOneLatencyAndNoLink) {
  Plan plan = plan_on(cluster(1));
  add(plan, op(OpKind::copy, 2, {2}));
  const SimResult r = simulate(plan);
  expect_time(r.time_s, kLat);
  for (const auto& l : r.links) EXPECT_EQ(l.bytes, 0) << l.name;
}

// Ops below move boxes at distinct offsets unless they forward what an earlier op delivered: the
// devices of plan_on hold nothing at the start, so what a device sends it received in the plan.
Op op_at(int64_t offset, OpKind kind, DeviceId sender, std::vector<DeviceId> receivers) {
  Op o = op(kind, sender, std::move(receivers));
  o.pieces[0].slice = Box{{{offset, offset + kBytes}}};
  return o;
}

TEST(SimulatorTest, ATwoDeviceExchangeTakesOneTransferNotTwo) {
  Plan plan = plan_on(cluster(1));
  add(plan, op_at(0, OpKind::send, 0, {1}));
  add(plan, op_at(kBytes, OpKind::send, 1, {0}));  // full duplex: its own ports are free
  const SimResult r = simulate(plan);
  EXPECT_EQ(r.ops[1].start_s, 0);
  expect_time(r.time_s, S / kDev + kLat);
}

TEST(SimulatorTest, TwoSendsFromOneDeviceAreSerialised) {
  Plan plan = plan_on(cluster(1));
  add(plan, op_at(0, OpKind::send, 0, {1}));
  add(plan, op_at(kBytes, OpKind::send, 0, {2}));  // device 0 sends after op 0
  const SimResult r = simulate(plan);
  expect_time(r.ops[1].start_s, S / kDev + kLat);
  expect_time(r.time_s, 2 * (S / kDev + kLat));
}

// Receiving is passive: a device that gets one slice from its own host and one over the NIC
// receives both at once, sharing its in-link, not one after the other.
TEST(SimulatorTest, ADeviceReceivesFromSeveralOpsAtOnce) {
  Plan plan = plan_on(cluster(2));
  add(plan, op_at(0, OpKind::send, 4, {1}));       // over host 0's NIC in
  add(plan, op_at(kBytes, OpKind::send, 2, {1}));  // over device links: what the NIC leaves
  const SimResult r = simulate(plan);
  EXPECT_EQ(r.ops[1].start_s, 0);
  expect_time(r.ops[1].end_s, S / (kDev - kNic) + kLat);
  expect_time(r.time_s, S / kNic + kLat);
}

// Two senders on different hosts into one host share its NIC in: each at half of it.
TEST(SimulatorTest, SendsFromTwoHostsIntoOneDeviceShareItsNic) {
  Plan plan = plan_on(cluster(3));
  add(plan, op_at(0, OpKind::send, 4, {0}));
  add(plan, op_at(kBytes, OpKind::send, 8, {0}));
  const SimResult r = simulate(plan);
  EXPECT_EQ(r.ops[1].start_s, 0);
  expect_time(r.ops[0].end_s, 2 * S / kNic + kLat);
  expect_time(r.ops[1].end_s, 2 * S / kNic + kLat);
}

TEST(SimulatorTest, ARelayForwardsOnlyAfterItsReceipt) {
  Plan plan = plan_on(cluster(2));
  add(plan, op_at(0, OpKind::send, 0, {4}));  // across hosts
  add(plan, op_at(0, OpKind::send, 4, {5}));  // forwards what op 0 delivers: no port in common
  const SimResult r = simulate(plan);
  expect_time(r.ops[1].start_s, S / kNic + kLat);
  expect_time(r.time_s, S / kNic + S / kDev + 2 * kLat);
}

TEST(SimulatorTest, AnOpWaitsForItsPortsAndTheReceiptsOfWhatItSends) {
  Plan plan = plan_on(cluster(3));
  add(plan, op(OpKind::send, 0, {4}));  // 0: host 0 -> host 1
  add(plan, op(OpKind::send, 8, {5}));  // 1: shares host 1's NIC in with op 0
  add(plan, op(OpKind::send, 4, {9}));  // 2: forwards what op 0 delivers to device 4
  add(plan, op(OpKind::send, 1, {2}));  // 3: independent, inside host 0
  const SimResult r = simulate(plan);
  EXPECT_EQ(r.ops[0].start_s, 0);
  EXPECT_EQ(r.ops[1].start_s, 0);
  expect_time(r.ops[0].end_s, 2 * S / kNic + kLat);  // ops 0 and 1 share host 1's NIC in
  expect_time(r.ops[2].start_s, r.ops[0].end_s);
  EXPECT_EQ(r.ops[3].start_s, 0);
  expect_time(r.ops[3].end_s, S / kDev + kLat);
  expect_time(r.time_s, r.ops[2].start_s + S / kNic + kLat);
}

TEST(SimulatorTest, DevicesSpreadOverSeveralNics) {
  Cluster c = cluster(2, 8);
  c.nics_per_host = 4;  // devices 0,4 on NIC 0; 1,5 on NIC 1; ...
  Plan plan = plan_on(c);
  add(plan, op(OpKind::send, 0, {8}));
  add(plan, op(OpKind::send, 1, {9}));
  add(plan, op(OpKind::send, 4, {12}));
  const SimResult r = simulate(plan);
  expect_time(r.ops[1].end_s, S / kNic + kLat);      // alone on NIC 1
  expect_time(r.ops[0].end_s, 2 * S / kNic + kLat);  // shares NIC 0 with op 2
  expect_time(r.ops[2].end_s, 2 * S / kNic + kLat);
  EXPECT_EQ(link(r, "host1.nic1.in").bytes, kBytes);
  EXPECT_EQ(link(r, "host0.nic0.out").bytes, 2 * kBytes);
}

TEST(SimulatorTest, RunsOnAnotherCluster) {
  Plan plan = plan_on(cluster(2));
  add(plan, op(OpKind::send, 0, {4}));
  Cluster fast = cluster(2);
  fast.nic_bandwidth = 2 * kNic;
  expect_time(simulate(plan, fast).time_s, S / (2 * kNic) + kLat);
  EXPECT_THROW(simulate(plan, cluster(1)), InvalidArgument);
}

TEST(SimulatorTest, StepsDoNotGrowWithBytes) {
  auto steps = [](int64_t bytes) {
    Plan plan = plan_on(cluster(4));
    for (int h = 1; h < 4; ++h) add(plan, op(OpKind::send, 0, {4 * h + 1}, bytes * h));
    add(plan, op(OpKind::broadcast, 1, {4, 8, 12}, bytes, 1 << 16));
    add(plan, op(OpKind::allgather, std::nullopt, {4, 5, 6, 7}, bytes));
    return simulate(plan).events;
  };
  EXPECT_EQ(steps(1 << 20), steps(int64_t{1} << 36));
}

TEST(SimulatorTest, RecordsLinkRatesOnRequest) {
  Plan plan = plan_on(cluster(2));
  add(plan, op(OpKind::send, 0, {4}));
  add(plan, op(OpKind::send, 1, {5}, 2 * kBytes));
  const SimResult quiet = simulate(plan);
  EXPECT_TRUE(quiet.link_rates.empty());
  const SimResult r = simulate(plan, plan.batch.cluster, {.record_link_rates = true});
  std::vector<LinkRateSample> nic_out;
  for (const auto& s : r.link_rates)
    if (r.links[s.link].name == "host0.nic0.out") nic_out.push_back(s);
  ASSERT_EQ(nic_out.size(), 2u);  // full from the start; idle when the second flow ends
  expect_time(nic_out[0].time_s, kLat);
  expect_time(nic_out[0].bytes_per_s, kNic);
  EXPECT_EQ(nic_out[1].bytes_per_s, 0);
  expect_time(nic_out[1].time_s, 3 * S / kNic + kLat);
}

TEST(SimulatorTest, RejectsMalformedOpsNamingThem) {
  const auto message = [](Op bad) {
    Plan plan = plan_on(cluster(2));
    add(plan, op(OpKind::send, 0, {4}));
    add(plan, std::move(bad));
    try {
      simulate(plan);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(op(OpKind::send, 0, {8})),
            "op 1: device 8 is outside the cluster of 8 devices");
  EXPECT_EQ(message(op(OpKind::send, std::nullopt, {4})),
            "op 1 (send): no sender and 1 receivers, expected a sender and one receiver");
  EXPECT_EQ(message(op(OpKind::copy, 1, {2})), "op 1 (copy): sender 1 differs from receiver 2");
  EXPECT_EQ(message(op(OpKind::broadcast, 1, {})),
            "op 1 (broadcast): a sender and 0 receivers, expected a sender and at least one "
            "receiver");
  EXPECT_EQ(message(op(OpKind::send, 0, {4}, -1)), "op 1: bad byte count -1: expected >= 0");
}

}  // namespace
}  // namespace meshcast
