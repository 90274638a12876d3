// Internal to the planner layer: slices sent from their holders to each host that needs them,
// spread over every NIC of those hosts and paired NIC to NIC (an open shop).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "jobs.h"

namespace meshcast::detail {

// How nic_shop spreads a host's bytes over its NICs.
enum class ShopLevel {
  bytes,  // NICs above the mean give bytes to those below it, to a holder there where one is
  ports,  // bytes laid where they end soonest, counting the send ports of the devices that
          // send, hand over and forward them (a device sends one op at a time); a NIC with
          // receivers may be entered at a device there that takes nothing else of the slice
};

// A piece of a slice on its way: handed over the device link from `holder` to `sender` (where they
// differ), sent over the NICs to `entry`, forwarded over the device link to each of `receivers`
// (all on one host) but the entry. A piece into its holder's own host goes from `holder` (==
// sender) over the device link to its one receiver (== entry), or, relayed (Beside), to one of its
// receivers that forwards it to the others.
struct ShopPiece {
  const Job* job = nullptr;
  Box slice = {};
  int64_t bytes = 0;
  DeviceId holder = 0;
  DeviceId sender = 0;
  DeviceId entry = 0;
  std::vector<DeviceId> receivers = {};
  int round = 0;  // its place among the pieces of its pair of NICs
};

// The pieces of nic_shop: those into their holders' own hosts, then those across hosts, by pair of
// NICs and in each pair by round.
struct Shop {
  std::vector<ShopPiece> beside;
  std::vector<ShopPiece> across;
};

// The pieces of `jobs` where only copies follow (else nullopt; also where no slice moves), each
// transfer taken as one per receiving host: a receiver on a host that holds the slice takes it from
// a holder beside it, the receivers of another host together by one flow, which enters that host at
// them (one on each of their NICs) and at a device of each NIC without one, and is passed on from
// where it entered to the host's other receivers over the device link (no receiving host relays a
// slice to another: rails do that). A device stages one flow of a slice at most, or it would take
// its elements twice. Then:
// - each slice goes from its receiver's host where that holds it (cut into pieces of the busiest
//   such holder's bytes / `rounds`, at least `min_piece_bytes`), else from the holding host with
//   the least to send per NIC so far (largest slices first);
// - each host's sending is spread over its NICs that have devices, by `level`, and sent on each NIC
//   by a holder of the slice there, else by the device of that NIC with the least to send (a
//   stage, handed the piece by the first holder on its host; with ShopLevel::ports and
//   `stages_beside_holders`, a stage may also share a holder's NIC, whose port may be busy
//   handing over); each host's
//   receiving likewise, entering at a receiver on its NIC and at a device that forwards it on the
//   others;
// - what a slice sends by each NIC and takes in by each NIC are paired in order (the north-west
//   corner rule: the fewest cuts), and each pair cut into pieces of the busiest NIC's bytes /
//   `rounds` (at least `min_piece_bytes`), so that pieces of one size take turns.
// The rules are ShopRules' members (the first of each enum the default):
// With `Sources::any_host`, slices also leave hosts other than the one chosen above (else nullopt,
// where that changes nothing): a slice into its holder's own host that other hosts hold too has a
// part of it sent from afar (at most one such part per job, and none for a job with another slice
// across hosts), the same share of each on a host, so that its holders' send ports end with its
// NICs whose devices hold none of those slices, after what else enters the host, or with the
// helping hosts' NICs that have devices, after what they send besides, whichever ends later; and
// with ShopLevel::ports each slice across hosts is laid a quantum at a time on whichever holding
// host's NICs and ports end it soonest. With `Sources::levelled_hosts`, each slice across hosts
// is cut between the hosts that hold it so that the busiest of their NICs sends for the least
// time (else nullopt, where that saves under 0.1%): choosing a host slice by slice, a host that
// held two slices sent both while a third holder of one had little else to send.
// With `Funnel::by_senders`, each pair of a sending NIC and a receiving host is taken by one of the
// NIC's senders (else nullopt, where that changes nothing); with `Funnel::with_spares`, where the
// NIC has no sender left for a pair, by a device of the NIC that sends nothing (else nullopt, where
// no such device takes a share).
// With `Pieces::by_phases`, each pair of NICs' bytes is cut instead where the phases of an open
// shop of the NICs end (shop_phases in shop.cpp: matchings of sending to receiving NICs, each for
// a time, under which every NIC is busy with one pair at most), so that each piece lies in one
// phase: where every receiving NIC and the busiest sender are at the bound, pieces of one size
// taking turns shared a receiving NIC between two senders while another idled.
// With `Beside::relayed`, where two or more of a slice's receivers beside its holder hold nothing
// to send, its pieces (at least one per such receiver) enter at those receivers in turn, each
// passing its pieces on to the slice's other receivers there (else nullopt, where no slice is
// so): the holder's port carries the slice once rather than once per receiver, while it may also
// have pieces from other hosts to pass on (random suite seed 1710 r30 with eight NICs, 1.544x ->
// 1.323x). Not always, as a receiver that stages pieces for the NICs has its port busy then.
// With `Beside::relayed_by_all`, so through every receiver beside the holder, those that hold
// slices of their own too (else nullopt, where no such receiver relays).
// With `Beside::relayed_by_non_senders`, as relayed, but only by those receivers that send nothing
// over the NICs in the shop laid relayed, one of them enough (else nullopt, where no such receiver
// relays there): a stage that sends over its NIC sends one op at a time, so the pieces it relayed
// beside the holder waited for its sends over the NIC or held them up (random suite seed 2101 r17
// with two NICs: a stage on each NIC relayed 88 MiB beside the holder besides its 64 MiB over the
// NIC; that shop 1.158x -> 1.063x, the plan 1.155x -> 1.060x).
// With `Feeds::least_busy_holder` and ShopLevel::ports, a stage is handed its pieces by the holder
// on its host whose port is least busy when the stage is first laid a quantum (else nullopt, where
// no host of a slice has two holders): the first holder handed every stage its share while it sent
// over its own NIC too, and the other holders sent over theirs alone (seed 1707 r28 with eight
// NICs, two holders of the whole tensor, 1.212x -> 1.139x). Not always, as a holder chosen so
// early may end busier than the first would have.
// With `Entries::mirrored`, each share of a flow enters its receiving host by the NIC of the index
// it leaves by (at a receiver on it, else at a device there), so that each sending NIC is paired
// with one receiving NIC (else nullopt: where a NIC has no device to enter at, where a receiving
// NIC would take in for longer than the busiest sending NIC sends, or where no entry moves). Laid
// by the ports, the NICs of holders that also hand the other NICs their shares send less than
// the others; levelled entries then paired most sending NICs with two receiving ones, which two
// senders shared while the holders' ports waited (random suite seed 1901 r26 with eight NICs: the
// first play of such a shop 1.74x, mirrored 1.14x; the plan 1.142x -> 1.067x).
// With `Quanta::fine`, laid by the ports with each flow in 256 / (the number of flows) quanta
// (else 32; nullopt laid by bytes, or where that is not more): with few flows, a quantum was a
// large part of a NIC's share, and the NICs that took one more ended later (a single holder of
// 512 MiB whose thirds three devices of another host need, eight NICs a host: one stage's NIC
// sent 74.7 MiB and the others 69.3, random suite seed 1905 r22, 1.072x -> 1.032x).
enum class Sources { chosen_host, any_host, levelled_hosts };
enum class Funnel { none, by_senders, with_spares };
enum class Pieces { even, by_phases };
enum class Beside { from_holders, relayed, relayed_by_all, relayed_by_non_senders };
enum class Feeds { first_holder, least_busy_holder };
enum class Entries { levelled, mirrored };
enum class Quanta { per_flow, fine };
struct ShopRules {
  ShopLevel level = ShopLevel::bytes;
  Sources sources = Sources::chosen_host;
  Funnel funnel = Funnel::none;
  bool stages_beside_holders = false;
  Pieces pieces = Pieces::even;
  Beside beside = Beside::from_holders;
  Feeds feeds = Feeds::first_holder;
  Entries entries = Entries::levelled;
  Quanta quanta = Quanta::per_flow;
};
std::optional<Shop> nic_shop(const Batch& batch, const std::vector<Job>& jobs, int rounds,
                             int64_t min_piece_bytes, const ShopRules& rules);

// The shop as jobs for balance order: each piece one job of round ShopPiece::round, through its
// stage where it has one (Transfer::through_stage), followed by its forward; the copies of `jobs`
// last.
std::vector<Job> shop_jobs(const Batch& batch, const Shop& shop, const std::vector<Job>& jobs);

// One send of a played plan: `from` sends `slice` of `job`'s task to `to` (over the device link, or
// over their NICs where they are on different hosts) once step `after` brought it to `from` (-1:
// `from` holds it).
struct PlayStep {
  const Job* job = nullptr;
  Box slice = {};
  int64_t bytes = 0;
  DeviceId from = 0;
  DeviceId to = 0;
  int after = -1;
  bool hand_over = false;  // to a device that sends it on over its NIC

  bool operator==(const PlayStep&) const = default;
};

// The shop's pieces as steps: each piece's hand-over, send and forward.
std::vector<PlayStep> shop_steps(const Shop& shop);

// Rails as steps, where some transfer has several receivers: each slice that leaves its holders'
// hosts cut into pieces of the busiest host's bytes per NIC / `rounds` (at least
// `min_piece_bytes`); piece j leaves holding host j (cyclic) by one of its NICs, from a holder on
// that NIC or handed over to the NIC's device with the least to send, and goes host to host
// through the receiving hosts in a ring (each to the next host after it) on the same NIC, each
// host entered at a receiver on that NIC or else at its device with the least to send, which
// relays it and forwards it to the host's other receivers; receivers on holding hosts get it from
// a holder beside them (one that is a stage too, the pieces it was not handed over). The NIC is j's
// (cyclic) for `RailPick::cyclic`, else the one whose busiest device port or receiving NIC ends
// least busy, on host j's or on another holding host where that ends less busy by more than twice
// the piece's time on a NIC. Else nullopt. With `RailSpread::spread`, a job's transfers of one
// slice are one (a broadcast's receivers beside other holders too, so that they may stage its
// pieces), each piece goes from its holding host by 1 to all receiving hosts' chains (the receiving
// hosts in order, cut into that many runs), as leaves its busiest port or receiving NIC least busy,
// and each holding host's receivers take each piece from one of them, which has it as a stage or
// else from a holder. With `RailSpread::handing`, spread too, and the holders' ports charged with
// that serving while the pieces choose their senders, a piece may also leave by a stage on a NIC
// that has a holder: a holder that sends over its own NIC at the NIC's rate has its port busy while
// its host waits. With `RailSpread::returning`, spread too, and each holding host's receivers take
// a piece that no stage there has from a holder or from the receiving hosts' device that has it and
// sends least, whichever leaves the ports and the receiving NIC less busy (it comes back over NICs
// that often carry nothing else), and a device that alone holds slices that leave its host is
// charged with them at its NIC's rate until they are laid, so that it is not handed another
// holder's rail first. The last piece is taken back no earlier than a piece's time on a NIC after
// the busiest host's NICs have sent everything. With `RailSpread::returning_in_turn`, returning,
// with each holding host's receivers served once every slice has left, the slices' pieces in turn:
// served slice by slice, the first slices' receivers took their pieces back from afar while the
// receiving hosts' ports were idle, and the last ones' from holders whose ports sent their own
// slices too (two hosts of two devices, the halves of 512 MiB on host 0 wanted by every device,
// two NICs: 128 of each half's 256 MiB came back, 1.055x; in turn 232, 1.045x; random suite seed
// 2605 r10). Slices that stay on their holders' hosts are laid
// first, so that the rails see the ports they keep busy: each receiver beside a holder takes one
// from the holder, or where that would keep the holder's port busier than the busiest host's NICs,
// in a chain of pieces through the receivers. The receiving hosts of a slice go in host order after
// its holding host, or with `RailRelays::least_sent_first` those whose NICs have sent least so far
// first (all but a chain's last host relay it: in host order one host relayed two slices while
// another relayed none), or with `RailRelays::least_due_first` so, counting too what they alone
// hold and must still send (a host whose own slice was laid later looked idle and relayed first:
// random suite seed 3003 r5 with two NICs), or with `RailRelays::turned`
// turned by two hosts per round of pieces (one piece per rail; so that each host relays only some
// of a rail's rounds, and the rounds that follow one another down their chains enter different
// hosts at once), or with `RailRelays::turned_through_all` turned so too, and one place more every
// n / 2 rounds where the n receiving hosts are even in number, so that each of them is the last in
// some rounds. With `RailRelays::turned_least_busy`, each piece's chain goes through the hosts in
// whichever turn of the host order (each with another host last) leaves its busiest port or
// receiving NIC least busy, levelled as below: a host whose receivers take much from its relays
// relays less. With `RailLevel::levelled`, of the chains whose busiest port or receiving NIC ends
// within 2% of the least busy, the one that adds least to the sum of the squares of the seconds its
// ports and NICs carry: the one that loads the less busy of them.
enum class RailPick { cyclic, least_busy };
enum class RailSpread { none, spread, handing, returning, returning_in_turn };
enum class RailRelays {
  by_host,
  least_sent_first,
  least_due_first,
  turned,
  turned_through_all,
  turned_least_busy
};
enum class RailLevel { busiest, levelled };
struct RailRules {
  RailPick pick = RailPick::cyclic;
  RailSpread how = RailSpread::none;
  RailRelays relays = RailRelays::by_host;
  RailLevel level = RailLevel::busiest;
};
std::optional<std::vector<PlayStep>> rail_steps(const Batch& batch, const std::vector<Job>& jobs,
                                                int rounds, int64_t min_piece_bytes,
                                                const RailRules& rules);

// The steps by which a device passes one piece on to several devices beside it, and that no step
// waits for, made to go round the host instead: to the first of them by local index after the
// sender's, which passes it to the next, and so on. Passed on from where it entered, a host's
// entries sent into one receiver's link at once while other links idled (random suite seed 2208
// r9 on hosts of 8 devices and 8 NICs: 1.278x the bound; in rings 1.039x); but the last receiver
// takes a piece a hop per receiver later, and played so instead, more cases played slower than
// faster with four NICs.
std::vector<PlayStep> passed_in_rings(const Cluster& c, std::vector<PlayStep> steps);

// The steps' ops in the order a play of the simulator's rules starts them, each device choosing
// its next step when its last one ends (then the copies of `jobs`): a hand-over to a stage with
// fewer than `stock` sends it could start (with `stock_counts_coming`, counting the hand-overs on
// their way to it as sends it could start); else a send into a NIC that takes nothing now, the one
// with the most still to take in (or with `Sends::in_phases`, the one of the earliest phase; with
// `Sends::to_idle_pairs`, also out of a NIC that no other device sends over now, as a send that
// shares its own NIC halves the other's rate there too); else
// a send inside its host, into the device that takes in the fewest now, then has the most still to
// take in; else any hand-over; else a send into the NIC with the fewest flows (or of the earliest
// phase). Devices choose in order of what their NICs still have to send (most first, or with
// `Turns::least_left_first` least first: neither wins everywhere), and flows share the NICs and
// receiving device links they cross max-min fairly, as in the simulator: a link that two sends
// share takes twice as long for each, and a device whose every receiver is busy still sends (it
// sends one op after another), so the order decides how often that happens. Of its hand-overs a
// device chooses the first in step order, or with `HandOvers::to_idle_nics` the one whose stage
// sends it on into the NIC that takes in fewest now, then has the most still to take in (in step
// order, the stages all fed one host first, while another's NICs idled); either way, with
// `in_turn`, first to the stage with the fewest sends it could start (in step order, a holder
// filled one stage's stock before it handed the next one anything). With
// `Forwards::between_sends`, a send inside its host into a device that takes nothing from its host
// now comes before the sends over the NICs: seven relays of a host that sent every piece on to
// the next host first and then all to the one receiver beside them took turns at its device link
// once the NICs were done, 1.8x the bound (random suite seed 1505 r14 on hosts of 8 devices and 8
// NICs); but so for every play, more cases played slower than faster.
// The phases: what each pair of NICs carries cut into matchings whose lengths add up to the busiest
// NIC's bytes (each NIC sends into one NIC and takes in from one at a time; with work that may be
// cut anywhere no NIC would wait), each step in the phase of its pair where its middle byte falls.
// Of a device's steps of one kind, with `Ties::longest_chain` the one with the longest chain of
// steps that wait for it (each at its slowest link's rate, with the latency) goes first, instead
// of the one into the NIC or device with the most still to take in, whatever waits for it: rails
// that turn the relaying host round by round loaded every port within 1.17x the bound but played
// at 1.58x so (random suite seed 3301 r29 with four NICs, a half held on one host that two hosts
// of four receivers each need; the plan 1.382x -> 1.243x).
enum class HandOvers { in_order, to_idle_nics };
enum class Turns { most_left_first, least_left_first };
enum class Sends { to_idle_nics, in_phases, to_idle_pairs };
enum class Forwards { after_sends, between_sends };
enum class Ties { most_to_take, longest_chain };
// With `latency`, each step waits the cluster's latency before its bytes move, as the simulator
// plays a send: pieces of a few hundred KB took longer than a play without it counted, and devices
// that chose by the play's clock sent into NICs that were still busy (random suite seed 2809 r23
// with four NICs, 3,200 sends: 1.358x -> 1.114x the bound). Without, some shops played faster
// (seed 1106 r5 with two NICs, 1.030x against 1.102x), as neither wins everywhere.
struct PlayRules {
  bool latency = true;
  int stock = 1;
  bool stock_counts_coming = false;
  HandOvers hand_overs = HandOvers::in_order;
  bool in_turn = false;
  Turns turns = Turns::most_left_first;
  Sends sends = Sends::to_idle_nics;
  Forwards forwards = Forwards::after_sends;
  Ties ties = Ties::most_to_take;
};
std::vector<Op> play_steps(const Batch& batch, const std::vector<PlayStep>& steps,
                           const std::vector<Job>& jobs, const PlayRules& rules);

}  // namespace meshcast::detail
