// Max-min fair rates: closed-form cases, the definition checked on random flows, and filling
// only the flows a change reaches against filling them all.
#include "meshcast/sim/fair_share.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "meshcast/error.h"

namespace meshcast::sim {
namespace {

constexpr double kNoLimit = std::numeric_limits<double>::infinity();

// A table of the flows `uses`, flow f limited to limits[f] (none where the list is short).
FairShare table(std::vector<double> capacities, const std::vector<std::vector<LinkUse>>& uses,
                std::vector<double> limits = {}) {
  std::vector<LinkUse> flat;
  std::vector<size_t> first{0};
  for (const auto& of_flow : uses) {
    flat.insert(flat.end(), of_flow.begin(), of_flow.end());
    first.push_back(flat.size());
  }
  limits.resize(uses.size(), kNoLimit);
  return FairShare(std::move(capacities), std::move(flat), std::move(first), std::move(limits));
}

TEST(FairShareTest, FlowsOnOneLinkShareItEqually) {
  FairShare rates = table({9.0}, {{{0}}, {{0}}, {{0}}});
  for (int f = 0; f < 3; ++f) rates.start(f);
  rates.fill();
  for (int f = 0; f < 3; ++f) EXPECT_DOUBLE_EQ(rates.rate(f), 3.0);
}

TEST(FairShareTest, WhatAFlowCannotUseGoesToTheOthers) {
  // Flow 0 is held to 1 by link 1, flow 1 to 2 by its own limit: flow 2 takes the rest of link 0.
  FairShare rates = table({10.0, 1.0}, {{{0}, {1}}, {{0}}, {{0}}}, {kNoLimit, 2.0});
  const int a = 0, b = 1, c = 2;
  for (int f : {a, b, c}) rates.start(f);
  rates.fill();
  EXPECT_DOUBLE_EQ(rates.rate(a), 1.0);
  EXPECT_DOUBLE_EQ(rates.rate(b), 2.0);
  EXPECT_DOUBLE_EQ(rates.rate(c), 7.0);
  // Flow 1 ends: flow 2 takes what it left, flow 0 stays held by link 1.
  rates.end(b);
  rates.fill();
  EXPECT_DOUBLE_EQ(rates.rate(a), 1.0);
  EXPECT_DOUBLE_EQ(rates.rate(c), 9.0);
}

TEST(FairShareTest, AFlowCrossingALinkTwiceUsesItTwice) {
  FairShare rates = table({12.0}, {{{0, 2.0}}, {{0, 1.0}}});
  const int twice = 0, once = 1;
  rates.start(twice);
  rates.start(once);
  rates.fill();
  EXPECT_DOUBLE_EQ(rates.rate(twice), 4.0);
  EXPECT_DOUBLE_EQ(rates.rate(once), 4.0);
}

TEST(FairShareTest, OnlyTheFlowsAChangeReachesAreFilledAgain) {
  // Links 0 and 1 share no flow: a start on link 1 leaves link 0's flow alone.
  FairShare rates = table({4.0, 6.0}, {{{0}}, {{1}}, {{1}}});
  const int left = 0, right = 1, more = 2;
  rates.start(left);
  rates.start(right);
  rates.fill();
  rates.start(more);
  rates.fill();
  EXPECT_EQ(rates.filled(), (std::vector<int>{right, more}));
  EXPECT_DOUBLE_EQ(rates.rate(left), 4.0);
  EXPECT_DOUBLE_EQ(rates.rate(right), 3.0);
  rates.fill();
  EXPECT_TRUE(rates.filled().empty());
}

TEST(FairShareTest, RejectsLinksOutOfOrderOrOutsideTheTableAndUsesOutOfStep) {
  const auto fails_naming = [](const auto& make, const std::string& named) {
    try {
      make();
      ADD_FAILURE() << "accepted: " << named;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  fails_naming([] { table({1.0, 1.0}, {{{0}}, {{1}, {0}}}); }, "flow 1 crosses link 1 then 0");
  fails_naming([] { table({1.0, 1.0}, {{{2}}}); }, "link 2 of flow 0");
  fails_naming([] { FairShare({1.0}, {{0}}, {0, 1, 2}, {kNoLimit}); }, "1 flows' first uses (3");
  fails_naming(
      [] {
        FairShare({1.0}, {{0}, {0}}, {0, 3, 2}, {kNoLimit, kNoLimit});
      },
      "flow 1's uses start at 3, the next's at 2");
}

// Random flows over a few links, started and ended at random; after each fill the rates are
// max-min fair (feasible, and every flow at its limit or on a full link where none goes faster)
// and equal to a fresh table's that fills every active flow at once.
TEST(FairShareTest, RandomStartsAndEndsKeepEveryRateMaxMinFair) {
  for (unsigned seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const int links = 2 + static_cast<int>(rng() % 7);
    std::vector<double> capacity(static_cast<size_t>(links));
    for (double& c : capacity) c = 1.0 + static_cast<double>(rng() % 100);
    std::vector<std::vector<LinkUse>> uses;
    std::vector<double> limits;
    for (int f = 0; f < 30; ++f) {
      std::vector<LinkUse> u;
      for (int l = 0; l < links; ++l)
        if (rng() % 3 == 0) u.push_back({l, rng() % 4 == 0 ? 2.0 : 1.0});
      if (u.empty()) u.push_back({static_cast<int>(rng() % links), 1.0});
      limits.push_back(rng() % 4 == 0 ? 1.0 + static_cast<double>(rng() % 30) : kNoLimit);
      uses.push_back(u);
    }
    FairShare rates = table(capacity, uses, limits);
    std::vector<bool> active(uses.size(), false);
    for (int event = 0; event < 60; ++event) {
      for (int changes = 1 + static_cast<int>(rng() % 3); changes > 0; --changes) {
        const auto f = static_cast<int>(rng() % uses.size());
        active[f] ? rates.end(f) : rates.start(f);
        active[f] = !active[f];
      }
      rates.fill();
      FairShare whole = table(capacity, uses, limits);
      for (size_t f = 0; f < uses.size(); ++f)
        if (active[f]) whole.start(static_cast<int>(f));
      whole.fill();
      std::vector<double> load(static_cast<size_t>(links), 0);
      for (size_t f = 0; f < uses.size(); ++f)
        if (active[f]) {
          const double rate = rates.rate(static_cast<int>(f));
          EXPECT_NEAR(rate, whole.rate(static_cast<int>(f)), 1e-9 * rate) << "flow " << f;
          EXPECT_LE(rate, limits[f] * (1 + 1e-9)) << "flow " << f;
          for (const LinkUse& u : uses[f]) load[u.link] += u.weight * rate;
        }
      for (int l = 0; l < links; ++l) EXPECT_LE(load[l], capacity[l] * (1 + 1e-9)) << "link " << l;
      for (size_t f = 0; f < uses.size(); ++f) {
        if (!active[f]) continue;
        const double rate = rates.rate(static_cast<int>(f));
        bool bottlenecked = rate >= limits[f] * (1 - 1e-9);
        for (const LinkUse& u : uses[f]) {
          if (load[u.link] < capacity[u.link] * (1 - 1e-9)) continue;
          bool fastest = true;
          for (int g : rates.flows_on(u.link))
            fastest = fastest && rates.rate(g) <= rate * (1 + 1e-9);
          bottlenecked = bottlenecked || fastest;
        }
        EXPECT_TRUE(bottlenecked) << "flow " << f << " at " << rate << " could go faster";
      }
    }
  }
}

}  // namespace
}  // namespace meshcast::sim
