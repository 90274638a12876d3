// Internal to the planner layer: the balance modes choose each transfer's sender and the op order.
#pragma once

#include <vector>

#include "jobs.h"
#include "meshcast/planner/planner.h"

namespace meshcast::detail {

// First holder of each slice, jobs in task order.
std::vector<Op> balance_none(const Batch& batch, const std::vector<Job>& jobs,
                             const PlanOptions& options);
// Holder on the host whose NIC has sent the fewest bytes so far, jobs in task order.
std::vector<Op> balance_size(const Batch& batch, const std::vector<Job>& jobs,
                             const PlanOptions& options);
// How balance order delivers one slice to receivers on several hosts.
enum class Shape {
  chains,    // one chain through every receiving host (or that and a separate op to the sender's)
  per_host,  // one op from the sender to each host's receivers
  relayed,   // one op per host, each from the last receiver of the host before (store and forward)
  relayed_down,  // as relayed, round the hosts the other way
};

// How balance order's timeline counts a device's receipts.
enum class Receipts {
  apart,              // one at a time, a heuristic that keeps them from sharing its link
  over_nics_at_once,  // those from other hosts at once, each held only by its NICs: a device
                      // link takes in several NICs' worth
};

// Whether balance order with split cuts a transfer to devices beside its holders between them and
// its helpers (Transfer::helpers).
enum class Helpers { unused, used };

// Greedy list scheduling on the Timeline cost model (largest jobs first, each transfer from the
// holder that finishes it soonest), then a bounded search over job order and split choices that
// keeps the best plan found; ops in start order.
std::vector<Op> balance_order(const Batch& batch, const std::vector<Job>& jobs,
                              const PlanOptions& options, Shape shape = Shape::chains,
                              Receipts receipts = Receipts::apart,
                              Helpers helpers = Helpers::unused);

// Rails in lockstep: the jobs round by round (Job::round), each transfer from the holder on the
// least-loaded host (then device, as balance size), handed over to its stage first where it has one
// (Transfer::stages), each round's follow-up ops (the gathers inside the receiving hosts) after the
// next round's transfers, the transfers into hosts that hold their slice after every round. A
// chain's first hosts relay (send) while its last host only receives, so with chains turned round
// by round (Transfer::host_turn) each host gathers one round while it is the last host of the next,
// instead of holding the next round's relays until its gathers end, as a greedy that keeps each
// device's receipts apart does. That holds for chains through two hosts; through more, a host
// relays several rounds in a row, so `deferral` may keep a round's follow-ups back (below): each
// gather delayed every later round's chain by its time. Each holder host's jobs of a round are
// ordered so that holders on different hosts send to different receiving hosts at once where they
// can (first fit, or `rotated` first by the holder host's rank: spread_receivers in balance.cpp).
enum class Deferral {
  // Each round's follow-ups right after the next round's transfers.
  none,
  // Kept back in plan order until the first round after which none of their devices sends in the
  // next one (the round in which the host is last). It places them later wherever their devices
  // send in every round, which can cost where a device had time to spare between its sends: the
  // planner tries both.
  until_idle,
  // The same, but a follow-up whose devices send in every later round is not kept back: a chain
  // brought back to its holder's host (RailOptions::home_back) passes every other host in every
  // round, and its relays gathered only after the last (1.108x where 1.090x so, one device
  // broadcasting to 7 hosts of 2 devices with two NICs). For every lay it was worse more often than
  // better (8 cases better, 13 worse on two sets of random seeds with two and four NICs).
  until_idle_or_never,
};
std::vector<Op> balance_rounds(const Batch& batch, const std::vector<Job>& jobs,
                               const PlanOptions& options, bool rotated, Deferral deferral);

}  // namespace meshcast::detail
