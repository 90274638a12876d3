// Every shop and every rails the planner plays deliver each destination element exactly once, on
// random layouts with one, two and four NICs per host (the shops relayed beside their holders also
// as the jobs the greedy lays). The planner drops a candidate that does not (its stages, relays
// and forwards are laid by heuristics), so a lay that loses or doubles bytes would only show as a
// slower plan; here it fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "balance.h"
#include "jobs.h"
#include "meshcast/error.h"
#include "meshcast/plan/validate.h"
#include "meshcast/suites/bench.h"
#include "meshcast/tasks/batch.h"
#include "meshcast/tasks/paper_cases.h"
#include "shop.h"

namespace meshcast {
namespace {

// `ops` as a plan of `batch`: an exception names what is wrong.
void validate_ops(const Batch& batch, std::vector<Op> ops) {
  Plan plan;
  plan.batch = batch;
  plan.ops = std::move(ops);
  for (int i = 0; i < static_cast<int>(plan.ops.size()); ++i) plan.ops[i].id = i;
  validate_plan(plan);
}

// The ops of `steps` played as a plan of `batch`, with forwards after the sends over the NICs and
// between them, each passed on from where a piece entered and in rings: an exception names what
// is wrong. How many of the plays in rings differ from those passed on from where pieces entered.
int validate_played(const Batch& batch, const std::vector<detail::PlayStep>& steps,
                    const std::vector<detail::Job>& jobs) {
  int ringed = 0;
  for (detail::Forwards forwards :
       {detail::Forwards::after_sends, detail::Forwards::between_sends}) {
    std::vector<Op> from_entry =
        detail::play_steps(batch, steps, jobs, {.stock = 3, .forwards = forwards});
    std::vector<Op> in_rings =
        detail::play_steps(batch, detail::passed_in_rings(batch.cluster, steps), jobs,
                           {.stock = 3, .forwards = forwards});
    ringed += in_rings != from_entry;
    validate_ops(batch, std::move(from_entry));
    validate_ops(batch, std::move(in_rings));
  }
  return ringed;
}

TEST(PlayedPropertyTest, EveryShopAndEveryRailsDeliverEachElementOnce) {
  int ringed_plays = 0;  // plays in rings that differ from those passed on from the entries
  int shops = 0, several_receivers = 0, phased = 0, relayed = 0, by_all = 0, fed = 0, mirrored = 0,
      fine = 0, rails = 0;
  for (int nics : {1, 2, 4})
    for (const BenchCase& c : random_suite(1105, 30)) {
      Resharding p = c.problem;
      p.cluster.nics_per_host = nics;
      const Batch batch = Batch::of_one(p);
      for (bool gather : {true, false}) {
        const std::vector<detail::Job> jobs =
            detail::make_jobs(batch, decompose(batch), Strategy::broadcast, gather);
        bool multi = false;
        for (const detail::Job& job : jobs)
          for (const detail::Transfer& t : job.transfers) multi = multi || t.receivers.size() > 1;
        for (detail::ShopLevel level : {detail::ShopLevel::bytes, detail::ShopLevel::ports})
          for (detail::Sources sources : {detail::Sources::chosen_host, detail::Sources::any_host,
                                          detail::Sources::levelled_hosts})
            for (detail::Funnel funnel :
                 {detail::Funnel::none, detail::Funnel::by_senders, detail::Funnel::with_spares})
              for (bool beside : {false, true})
                for (detail::Pieces pieces : {detail::Pieces::even, detail::Pieces::by_phases})
                  for (detail::Beside relays :
                       {detail::Beside::from_holders, detail::Beside::relayed,
                        detail::Beside::relayed_by_all})
                    for (detail::Feeds feeds :
                         {detail::Feeds::first_holder, detail::Feeds::least_busy_holder})
                      for (const auto& [entries, quanta] :
                           {std::pair{detail::Entries::levelled, detail::Quanta::per_flow},
                            std::pair{detail::Entries::mirrored, detail::Quanta::per_flow},
                            std::pair{detail::Entries::levelled, detail::Quanta::fine}}) {
                        const auto shop = detail::nic_shop(batch, jobs, 8, 0,
                                                           {.level = level,
                                                            .sources = sources,
                                                            .funnel = funnel,
                                                            .stages_beside_holders = beside,
                                                            .pieces = pieces,
                                                            .beside = relays,
                                                            .feeds = feeds,
                                                            .entries = entries,
                                                            .quanta = quanta});
                        if (!shop) continue;
                        ++shops;
                        several_receivers += multi;
                        phased += pieces == detail::Pieces::by_phases;
                        relayed += relays != detail::Beside::from_holders;
                        by_all += relays == detail::Beside::relayed_by_all;
                        fed += feeds == detail::Feeds::least_busy_holder;
                        mirrored += entries == detail::Entries::mirrored;
                        fine += quanta == detail::Quanta::fine;
                        EXPECT_NO_THROW(ringed_plays +=
                                        validate_played(batch, detail::shop_steps(*shop), jobs))
                            << c.label << " " << c.description << " with " << nics
                            << " NICs, level " << static_cast<int>(level) << " sources "
                            << static_cast<int>(sources) << " funnel " << static_cast<int>(funnel)
                            << " beside " << beside << " pieces " << static_cast<int>(pieces)
                            << " relays " << static_cast<int>(relays) << " feeds "
                            << static_cast<int>(feeds) << " entries " << static_cast<int>(entries)
                            << " quanta " << static_cast<int>(quanta);
                        // Mirrored, each piece enters by the NIC of the index it leaves by.
                        if (entries == detail::Entries::mirrored) {
                          for (const detail::ShopPiece& piece : shop->across) {
                            EXPECT_EQ(p.cluster.nic_of(piece.sender), p.cluster.nic_of(piece.entry))
                                << c.label << " " << c.description << " with " << nics << " NICs";
                          }
                        }
                        if (relays != detail::Beside::from_holders) {
                          EXPECT_NO_THROW(validate_ops(
                              batch,
                              detail::balance_order(batch, detail::shop_jobs(batch, *shop, jobs),
                                                    PlanOptions{})))
                              << c.label << " " << c.description << " with " << nics
                              << " NICs, relayed, as jobs";
                        }
                      }
        for (detail::RailPick pick : {detail::RailPick::cyclic, detail::RailPick::least_busy})
          for (detail::RailSpread how :
               {detail::RailSpread::none, detail::RailSpread::spread, detail::RailSpread::handing,
                detail::RailSpread::returning, detail::RailSpread::returning_in_turn})
            for (detail::RailRelays relays :
                 {detail::RailRelays::by_host, detail::RailRelays::least_sent_first,
                  detail::RailRelays::least_due_first, detail::RailRelays::turned,
                  detail::RailRelays::turned_through_all, detail::RailRelays::turned_least_busy}) {
              const auto steps = detail::rail_steps(batch, jobs, 8, 0,
                                                    {.pick = pick, .how = how, .relays = relays});
              if (!steps) continue;
              ++rails;
              EXPECT_NO_THROW(ringed_plays += validate_played(batch, *steps, jobs))
                  << c.label << " " << c.description << " with " << nics << " NICs, pick "
                  << static_cast<int>(pick) << " how " << static_cast<int>(how) << " relays "
                  << static_cast<int>(relays);
            }
      }
    }
  // The layouts reach both kinds of lay, and shops of slices with several receivers, cut at their
  // phases, relayed beside their holders (by every receiver there too), with stages fed by the
  // least busy holders, with entries that mirror the sending NICs or in fine quanta.
  EXPECT_GT(shops, 100);
  EXPECT_GT(several_receivers, 50);
  EXPECT_GT(phased, 50);
  EXPECT_GT(relayed, 100);
  EXPECT_GT(by_all, 100);
  EXPECT_GT(fed, 40);
  EXPECT_GT(mirrored, 40);
  EXPECT_GT(fine, 40);
  EXPECT_GT(rails, 100);
  EXPECT_GT(ringed_plays, 100);
}

// Shops relayed beside their holders only by receivers that send over no NIC deliver each element
// once, and none of those relays sends over the NICs in the same shop relayed (Beside::relayed).
TEST(PlayedPropertyTest, ShopsRelayedByNonSendersDeliverEachElementOnce) {
  int shops = 0;
  for (int nics : {1, 2, 4})
    for (unsigned seed = 2101; seed <= 2110; ++seed)
      for (const BenchCase& c : random_suite(seed, 30)) {
        Resharding p = c.problem;
        p.cluster.nics_per_host = nics;
        const Batch batch = Batch::of_one(p);
        const std::vector<detail::Job> jobs =
            detail::make_jobs(batch, decompose(batch), Strategy::broadcast, false);
        for (detail::ShopLevel level : {detail::ShopLevel::bytes, detail::ShopLevel::ports})
          for (detail::Sources sources : {detail::Sources::chosen_host, detail::Sources::any_host,
                                          detail::Sources::levelled_hosts})
            for (detail::Funnel funnel :
                 {detail::Funnel::none, detail::Funnel::by_senders, detail::Funnel::with_spares})
              for (bool beside : {false, true}) {
                detail::ShopRules rules{.level = level,
                                        .sources = sources,
                                        .funnel = funnel,
                                        .stages_beside_holders = beside,
                                        .beside = detail::Beside::relayed_by_non_senders};
                const auto shop = detail::nic_shop(batch, jobs, 8, 0, rules);
                if (!shop) continue;
                ++shops;
                SCOPED_TRACE(::testing::Message()
                             << c.label << " " << c.description << " with " << nics
                             << " NICs, level " << static_cast<int>(level) << " sources "
                             << static_cast<int>(sources) << " funnel " << static_cast<int>(funnel)
                             << " beside " << beside);
                EXPECT_NO_THROW(validate_played(batch, detail::shop_steps(*shop), jobs));
                rules.beside = detail::Beside::relayed;
                const auto relayed = detail::nic_shop(batch, jobs, 8, 0, rules);
                ASSERT_TRUE(relayed.has_value());
                for (const detail::ShopPiece& piece : shop->beside) {
                  if (piece.receivers.size() < 2) continue;
                  for (const detail::ShopPiece& across : relayed->across)
                    EXPECT_NE(piece.entry, across.sender);
                }
              }
      }
  EXPECT_GE(shops, 20);
}

// What each host sends over its NICs in `ops`: a send or chain's bytes once for each hop that
// leaves the host.
std::vector<int64_t> host_sending(const Batch& batch, const std::vector<Op>& ops) {
  const Cluster& cluster = batch.cluster;
  std::vector<int64_t> out(static_cast<size_t>(cluster.hosts), 0);
  for (const Op& op : ops) {
    if (!op.sender) continue;
    DeviceId from = *op.sender;
    for (DeviceId to : op.receivers) {
      if (cluster.host_of(from) != cluster.host_of(to))
        out[static_cast<size_t>(cluster.host_of(from))] += op.bytes;
      from = to;
    }
  }
  return out;
}

// Calls `check(c, nics, batch, jobs)` for each case `c` of the random suites of `seeds` (30 cases
// each) with each count of NICs per host: the case's batch and its broadcast jobs.
template <typename Check>
void for_each_random_case(std::initializer_list<int> nics_per_host,
                          std::initializer_list<unsigned> seeds, Check check) {
  for (int nics : nics_per_host)
    for (unsigned seed : seeds)
      for (const BenchCase& c : random_suite(seed, 30)) {
        Resharding p = c.problem;
        p.cluster.nics_per_host = nics;
        const Batch batch = Batch::of_one(p);
        check(c, nics, batch, detail::make_jobs(batch, decompose(batch), Strategy::broadcast));
      }
}

// The transfers relay_tree_jobs cuts deliver each element once, laid by either greedy, and the
// busiest host sends less than with one op from the holders to each host.
TEST(PlayedPropertyTest, RelayTreesDeliverEachElementOnceAndLevelTheSending) {
  int cut = 0, compared = 0;
  for_each_random_case(
      {1, 2}, {1105u, 2005u},
      [&](const BenchCase& c, int nics, const Batch& batch, const std::vector<detail::Job>& jobs) {
        const std::vector<detail::Job> trees = detail::relay_tree_jobs(batch, jobs);
        if (trees.empty()) return;
        ++cut;
        SCOPED_TRACE(::testing::Message()
                     << c.label << " " << c.description << " with " << nics << " NICs");
        for (detail::Receipts receipts :
             {detail::Receipts::apart, detail::Receipts::over_nics_at_once})
          EXPECT_NO_THROW(validate_ops(
              batch,
              detail::balance_order(batch, trees, PlanOptions{}, detail::Shape::chains, receipts)));
        // Where every slice has one holding host (else the chains through several hosts that the
        // other slices take make their hosts relay too), the busiest host sends less.
        bool one_holding_host = true;
        for (const detail::Job& job : jobs)
          for (const detail::Transfer& t : job.transfers)
            one_holding_host =
                one_holding_host && detail::hosts_of(t.candidates, batch.cluster).size() == 1;
        if (!one_holding_host) return;
        ++compared;
        const auto per_host = host_sending(
            batch, detail::balance_order(batch, jobs, PlanOptions{}, detail::Shape::per_host));
        const auto relayed = host_sending(
            batch, detail::balance_order(batch, trees, PlanOptions{}, detail::Shape::chains));
        EXPECT_LT(*std::max_element(relayed.begin(), relayed.end()),
                  *std::max_element(per_host.begin(), per_host.end()));
      });
  // The layouts reach transfers that are cut, some where every slice has one holding host.
  EXPECT_GE(cut, 8);
  EXPECT_GE(compared, 3);
}

// Whether a transfer of `jobs` is one that `is` says.
bool any_transfer(const std::vector<detail::Job>& jobs,
                  const std::function<bool(const detail::Transfer&)>& is) {
  return std::any_of(jobs.begin(), jobs.end(), [&](const detail::Job& job) {
    return std::any_of(job.transfers.begin(), job.transfers.end(), is);
  });
}

// Lays the rails of `options` (per receiver and not) of the random cases of `seeds` with two and
// four NICs by either greedy and in lockstep with every deferral of the gathers, where `reached`
// says they have what the test is about, and expects each lay to deliver each element once. The
// number of rails reached.
int expect_rails_deliver_each_element_once(
    std::initializer_list<unsigned> seeds, detail::RailOptions options,
    const std::function<bool(const Batch&, const std::vector<detail::Job>& jobs,
                             const std::vector<detail::Job>& rails)>& reached) {
  int count = 0;
  for_each_random_case(
      {2, 4}, seeds,
      [&](const BenchCase& c, int nics, const Batch& batch, const std::vector<detail::Job>& jobs) {
        for (bool per_receiver : {true, false}) {
          options.per_receiver = per_receiver;
          const std::vector<detail::Job> rails = detail::rail_jobs(batch, jobs, 8, 0, options);
          if (!reached(batch, jobs, rails)) continue;
          ++count;
          SCOPED_TRACE(::testing::Message() << c.label << " " << c.description << " with " << nics
                                            << " NICs, per receiver " << per_receiver);
          for (detail::Receipts receipts :
               {detail::Receipts::apart, detail::Receipts::over_nics_at_once})
            EXPECT_NO_THROW(
                validate_ops(batch, detail::balance_order(batch, rails, PlanOptions{},
                                                          detail::Shape::chains, receipts)));
          for (bool rotated : {false, true})
            for (detail::Deferral deferral : {detail::Deferral::none, detail::Deferral::until_idle,
                                              detail::Deferral::until_idle_or_never})
              EXPECT_NO_THROW(validate_ops(
                  batch, detail::balance_rounds(batch, rails, PlanOptions{}, rotated, deferral)));
        }
      });
  return count;
}

// Rails of slices held on several hosts that a receiver beside the holders stages on one of those
// hosts in turn (its rail kept as its part, the other parts from its host's holders) deliver each
// element once.
TEST(PlayedPropertyTest, RailsStagedAtAReceiverOfOneHoldingHostDeliverEachElementOnce) {
  const int staged_at_home = expect_rails_deliver_each_element_once(
      {1103u, 2001u, 2002u, 2009u, 2010u, 2501u}, {.home_stages = true},
      [](const Batch& batch, const std::vector<detail::Job>& jobs,
         const std::vector<detail::Job>& rails) {
        const auto held_on_several_hosts = [&](const detail::Job& rail_job) {
          return std::any_of(jobs.begin(), jobs.end(), [&](const detail::Job& job) {
            return job.tensor == rail_job.tensor && job.task == rail_job.task &&
                   std::any_of(job.transfers.begin(), job.transfers.end(),
                               [&](const detail::Transfer& t) {
                                 return detail::hosts_of(t.candidates, batch.cluster).size() > 1;
                               });
          });
        };
        return std::any_of(rails.begin(), rails.end(), [&](const detail::Job& job) {
          return held_on_several_hosts(job) &&
                 std::any_of(job.transfers.begin(), job.transfers.end(),
                             [](const detail::Transfer& t) { return t.stage_receives; });
        });
      });
  // The layouts reach such rails.
  std::cout << "rails staged at a receiver of one of several holding hosts: " << staged_at_home
            << "\n";
  EXPECT_GE(staged_at_home, 10);
}

// Rails laid through their stages (RailOptions::through_stages) deliver each element once.
TEST(PlayedPropertyTest, RailsThroughTheirStagesDeliverEachElementOnce) {
  const int through = expect_rails_deliver_each_element_once(
      {2001u, 2002u, 2009u, 2010u}, {.through_stages = true},
      [](const Batch&, const std::vector<detail::Job>&, const std::vector<detail::Job>& rails) {
        return any_transfer(
            rails, [](const detail::Transfer& t) { return t.through_stage && !t.stage_receives; });
      });
  // The layouts reach such rails.
  std::cout << "rails laid through their stages: " << through << "\n";
  EXPECT_GE(through, 100);
}

// Rails that bring a single holder's neighbours their parts back (RailOptions::home_back) deliver
// each element once.
TEST(PlayedPropertyTest, RailsBroughtBackToTheHoldersHostDeliverEachElementOnce) {
  const int brought_back = expect_rails_deliver_each_element_once(
      {2001u, 2002u, 2009u, 2010u}, {.home_back = true},
      [](const Batch&, const std::vector<detail::Job>&, const std::vector<detail::Job>& rails) {
        return any_transfer(rails, [](const detail::Transfer& t) { return t.home_back; });
      });
  // The layouts reach rails brought back.
  EXPECT_GE(brought_back, 15);
}

// Device 0 holds a slice that one device on each of hosts 1 to n needs (one NIC per host).
// Turned, each round's chain through those hosts is turned by two: hop i of round q enters host
// 1 + (i + 2q) mod n. With n = 3, each host is the last of a chain (relays nothing) in one round of
// three, and the rounds that follow one another down their chains (round q - i at hop i) enter
// three different hosts at once. With n = 4, two places a round reach only hosts 2 and 4 as the
// last; turned through all, every two rounds the turn moves one place more, and each host is the
// last in two rounds of eight (with n = 3, as turned). In host order host n is last in every round.
TEST(PlayedPropertyTest, TurnedRailsTakeTurnsAtTheEndOfTheChain) {
  for (int n : {3, 4}) {
    Resharding p;
    p.tensor = TensorSpec{{4096, 1024}, DType::float32};
    p.src = Layout{Mesh({1}, {0}), ShardingSpec::parse("RR")};
    std::vector<DeviceId> receivers(static_cast<size_t>(n));
    std::iota(receivers.begin(), receivers.end(), 1);
    p.dst = Layout{Mesh({n}, receivers), ShardingSpec::parse("RR")};
    p.cluster = paper_cluster(n + 1);
    p.cluster.devices_per_host = 1;
    const Batch batch = Batch::of_one(p);
    const std::vector<detail::Job> jobs =
        detail::make_jobs(batch, decompose(batch), Strategy::broadcast);
    const int rounds = 2 * n;
    for (detail::RailRelays relays : {detail::RailRelays::by_host, detail::RailRelays::turned,
                                      detail::RailRelays::turned_through_all}) {
      const auto steps = detail::rail_steps(batch, jobs, rounds, 0, {.relays = relays});
      ASSERT_TRUE(steps.has_value());
      validate_played(batch, *steps, jobs);
      // Each round's chain: the hosts it enters, in order (its steps from device 0 start a round).
      std::vector<std::vector<int>> chains;
      for (const detail::PlayStep& step : *steps) {
        if (step.from == 0) chains.emplace_back();
        ASSERT_FALSE(chains.empty());
        chains.back().push_back(step.to);
      }
      ASSERT_EQ(chains.size(), static_cast<size_t>(rounds));
      std::vector<int> last(static_cast<size_t>(n + 1), 0);  // rounds each host ends
      for (int q = 0; q < rounds; ++q) {
        SCOPED_TRACE(::testing::Message()
                     << n << " hosts, relays " << static_cast<int>(relays) << ", round " << q);
        ASSERT_EQ(chains[q].size(), static_cast<size_t>(n));
        int turn = 0;
        if (relays != detail::RailRelays::by_host) turn = 2 * q;
        if (relays == detail::RailRelays::turned_through_all && n % 2 == 0) turn += 2 * q / n;
        for (int i = 0; i < n; ++i) EXPECT_EQ(chains[q][i], 1 + (i + turn) % n);
        ++last[static_cast<size_t>(chains[q].back())];
      }
      // The rounds each host is the last in.
      std::vector<int> expected(static_cast<size_t>(n + 1), 0);
      if (relays == detail::RailRelays::by_host)
        expected[n] = rounds;
      else if (relays == detail::RailRelays::turned && n == 4)
        expected = {0, 0, 4, 0, 4};
      else
        std::fill(expected.begin() + 1, expected.end(), 2);
      EXPECT_EQ(last, expected) << n << " hosts, relays " << static_cast<int>(relays);
    }
  }
}

}  // namespace
}  // namespace meshcast
