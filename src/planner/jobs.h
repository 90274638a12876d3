// Internal to the planner layer: the strategies turn unit tasks into jobs whose senders the balance
// modes then choose.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast::detail {

// One slice that one sender (chosen among `candidates`) delivers to `receivers` by a send (one
// receiver) or a chained broadcast.
struct Transfer {
  Box slice;
  int64_t bytes = 0;
  std::vector<DeviceId> receivers;   // ascending device ids
  std::vector<DeviceId> candidates;  // devices holding the slice, in mesh order
  bool splittable = false;           // may be cut into parts sent by different hosts
  // Holders on other hosts, where every receiver is on the candidates' host: balance order with
  // split and Helpers::used may send a part of the slice from one of them over the receivers'
  // host's NICs while a candidate sends the rest over device links.
  std::vector<DeviceId> helpers = {};
  // Devices that do not hold the slice, at most one per holders' host, each on the NIC the slice
  // should leave that host by: balance order may also send the slice to the stage of its sender's
  // host over the device link, and from it to the receivers.
  std::vector<DeviceId> stages = {};
  // Balance order sends the slice through the one stage only: a rail whose stage receives it
  // (below), or a piece of nic_shop (shop.h) that leaves by its stage's NIC.
  bool through_stage = false;
  // The one stage is a receiver of the whole slice on the one holders' host, which keeps this
  // rail as its part and gets the other parts by other transfers (with through_stage).
  bool stage_receives = false;
  // A chain through several other hosts starts at the `host_turn`-th of them (cyclic, in id
  // order): rails turn it round by round, so that each host relays only some rounds and, while
  // it is a chain's last host (which forwards nothing), gives its devices' send ports to the
  // gathers inside it.
  int host_turn = 0;
  // The chain goes through the other hosts in the order host_turn gives them, whatever else they
  // have to send: relay_tree_jobs chose which of them relays.
  bool hosts_in_turn = false;
  // The receivers on the sender's host end the chain, entered from its last other host
  // (ChainKeys::home_last), whatever else they have to take: rail_jobs with `home_back`.
  bool home_back = false;

  // The stage on `host`, if it has one.
  std::optional<DeviceId> stage_on(int host, const Cluster& cluster) const;
  // Whether every receiver is on a host that holds the slice (so it needs no NIC).
  bool within_holding_hosts(const Cluster& cluster) const;
  // Whether helpers could send a part of it (a split may cut it).
  bool helpable() const { return splittable && !helpers.empty(); }

  bool operator==(const Transfer&) const = default;
};

// The work of one unit task that is scheduled as a whole: transfers whose senders are chosen,
// then fixed ops (copies, an allgather) that follow them.
struct Job {
  int tensor = 0;
  int task = 0;  // within the tensor
  std::vector<Transfer> transfers = {};
  std::vector<Op> then = {};
  int round = 0;  // of a job laid on rails (rail_jobs)
  int64_t bytes() const;
  // Whether the follow-ups are only copies, so that the job's slices may be cut into parts.
  bool only_copies_follow() const;
  // The receivers of the job's transfers other than `t` (one of them): a device that stages or
  // relays `t`'s slice must be none of them, or it would take some elements twice.
  std::vector<DeviceId> receivers_besides(const Transfer& t) const;

  bool operator==(const Job&) const = default;
};

// The jobs of `strategy` for each task of each tensor, in tensor order, then task order. `tasks`
// are decompose(batch). Unless `gather` is false, receivers that already hold parts of their
// host's tasks take the others by allgathers (jobs of their own, after the rest).
std::vector<Job> make_jobs(const Batch& batch, const std::vector<std::vector<UnitTask>>& tasks,
                           Strategy strategy, bool gather = true);

// `jobs` laid on rails, where that applies: each job whose follow-ups are only copies and that has
// a transfer into hosts that do not hold its slice, with g >= 2 rails on every one of them (its g
// receivers, or else a device on each of its first g NICs: rail_hosts in jobs.cpp), is cut into
// up to `rounds` jobs (torch.chunk of each slice's longest dimension; fewer where a slice is too
// short, or a round would have less than `min_round_bytes` per rail), and each such transfer of a
// round into g rails: part i of the slice (allgather_part) goes by one op through the i-th rail of
// each host, then each host's receivers exchange the parts by an allgather (or each rail sends
// its part to the host's other receivers). So a host's receiving spreads over all its NICs, where
// a chain through every device of a host holds all of them as relays and so runs one at a time,
// over one NIC per hop, and a host with one receiver took everything through that one's NIC; and
// one round's gathers run while the next round's rails arrive. A rail leaves each holding host by
// the holders on the rail's NIC, or may be staged at that NIC's first device that neither holds
// nor receives the slice (Transfer::stages): only where that device holds no slice, or
// `stage_at_holders` anywhere; where one host holds the slice and only receivers are on that NIC,
// at the first of them (Transfer::stage_receives). Where several hosts hold it and some holders
// are on the rail's NIC, only those send it, unless `beside`: then the other hosts may stage it.
// Where the devices of one host that hold a slice each send a rail over their own NIC, those rails
// are cut smaller (rail_parts in jobs.cpp); a single holder's also by what it sends to devices
// beside it of that slice, and `home`: of the slices it alone holds that only devices beside it
// need, in proportion.
// With `only_stages`, where several hosts hold a slice and some have a stage for a rail, only
// those send that rail (their holders hand it over rather than send it over their own NIC).
// With `ports`, where one host with one device per NIC feeds the rails' receiving hosts alone,
// the rails are cut in proportion to what each NIC's device can send (port_loads in jobs.cpp):
// what it must also send to devices beside it and hand over to the other NICs' devices leaves
// its NIC idle meanwhile.
// With `relays`, a host's devices on a NIC that receive nothing of a slice take turns with its
// receivers on that NIC in taking rails in (and sending them on to its receivers), and on a NIC
// with no receiver with each other: a device that relays a chain sends one op at a time, so the
// one device of a NIC that relays every round of a chain through several hosts has no time left
// to hand its parts to the host's receivers.
// With `tapered`, the last round is cut in two rounds of half its size: the rails' last pieces
// end a chain later than the NICs that sent them, each host forwarding them to the next and
// handing them to its receivers only once it has them whole.
// With `home_back`, where one host holds a slice and a receiver of it there stages a rail, the
// receivers there take each rail they do not stage back from the rail's last other host, at the
// end of its chain (Transfer::home_back), rather than from the holder over its device link, and
// the rails are cut as for a holder that serves nobody beside it; and every host's receivers
// exchange their parts by sends, not an allgather (a send holds its sender's port alone, so a
// part waits only for its own sender's relaying: balance_rounds, Deferral::until_idle_or_never).
// A single holder whose neighbours need every part hands one rail to its stage and sends its own,
// and then each part its neighbours need over its link too, while their NICs take in nothing: one
// device broadcasting 512 MiB to 7 hosts of 2 devices with two NICs, 1.104x, 1.066x so.
// With `home_stages`, where several hosts hold a slice, no holder and no free device of any of them
// is on a rail's NIC, and a receiver there takes the slice from its own host's holders, one of
// those hosts in turn (by rail and round) stages the rail at that receiver, which keeps it as its
// part and takes the other parts from its holders (Transfer::stage_receives); else every rail
// leaves by the holders' NICs.
// With `through_stages`, where one host holds a slice, each rail with a stage there goes through
// it (Transfer::through_stage): balance order otherwise sends a rail from the holder where that
// ends it soonest, and a holder that sends the rail of another NIC over its own holds its port
// and its NIC for it while that NIC idles.
struct RailOptions {
  bool stage_at_holders = false;
  bool per_receiver = false;
  bool beside = false;
  bool home = false;
  bool ports = false;
  bool only_stages = false;
  bool relays = false;
  bool tapered = false;
  bool home_back = false;
  bool home_stages = false;
  bool through_stages = false;
};
std::vector<Job> rail_jobs(const Batch& batch, const std::vector<Job>& jobs, int rounds,
                           int64_t min_round_bytes, const RailOptions& options);

// `jobs` with each transfer into the one host of its holders (a host that holds the slice and
// serves its own receivers over device links) that devices of other hosts also hold cut in two
// along the slice's longest dimension: the part that host's holders send, and the part those
// others send over the host's NICs, sized so that the host's holders' device links and its NICs
// (or the helping hosts' NICs, where those carry less) end together. Empty where no transfer is
// cut. A holder that alone serves several devices of its host sends all of it over one device
// link, while the host's NICs could take a part from a holder elsewhere at the same time.
std::vector<Job> helped_jobs(const Batch& batch, const std::vector<Job>& jobs);

// How exchanged_jobs passes each host's part on: to the next host (in host order, cyclic), or
// through every other host.
enum class Exchange { next_host, every_host };

// `jobs` with each slice that two or more of its holders' hosts take in from holders there (one
// transfer into each, with a receiver that sends nothing) cut into a part each host's holders
// send beside them and, per host, a part that its holders send to such a receiver, which passes it
// on to the receivers of other hosts (`how`): each holder then sends less than the slice beside
// it, and the hosts' NICs carry the rest. The parts are sized so that each holder's device link and
// the NICs its parts enter by end together. Empty where no slice is cut. A holder that alone
// serves several devices of its host sends all of it over one device link, while every other
// holding host holds it only at a holder as busy, and a receiver there that takes the slice anyway
// can pass a part on.
std::vector<Job> exchanged_jobs(const Batch& batch, const std::vector<Job>& jobs, Exchange how);

// `jobs` with the transfers from one holding host into two or more other hosts cut so that the
// hosts' sending levels out: while the host that sends longest over its NICs holds such a slice
// that it sends to two or more hosts itself, one of those hosts takes it from another of them
// instead, by a chain through both (Transfer::hosts_in_turn). The relay is the one that would
// then send for the shortest time, where that is shorter than the busiest host's; a relay passes
// the slice on to one host. Empty where no transfer is cut. A chain through every receiving host
// has each host but the last relay the slice, and one op per host leaves all the sending to the
// holders; a host that needs only some of the slices can relay others (random suite seed 2005
// r23: three holding hosts that each send their slices to three hosts, one NIC per host, 1.251x;
// relayed, 1.140x laid whole by balance order, 1.067x in quarters taking receipts in at once).
std::vector<Job> relay_tree_jobs(const Batch& batch, const std::vector<Job>& jobs);

// `job` cut into `n` jobs, one per round: each of its transfers' slices cut into `n` parts
// (allgather_part: torch.chunk of the longest dimension), round i taking part i, and its
// follow-ups after the first round's transfers.
std::vector<Job> in_rounds(const Batch& batch, const Job& job, int n);

// `jobs` with the slices that leave their holders' hosts staged, in rounds: each job whose
// follow-ups are only copies and that has a transfer into hosts that do not hold its slice, where a
// holding host has a device that holds no slice and does not receive this one (or, where one host
// holds it, a receiver of it on that host), is cut into up to `rounds` jobs as rail_jobs does, and
// each such transfer into the receivers on other hosts, which that device may stage
// (Transfer::stages), and the receivers on the holders' hosts. A holder that sends over its NIC
// and to devices of its own host plays those sends one after the other (a device sends one op at
// a time), so the NIC idles while it serves its host: handed over the device link round by round,
// in a tenth of the NIC's time or so, the slice leaves by the stage while the holder serves its
// host.
std::vector<Job> staged_jobs(const Batch& batch, const std::vector<Job>& jobs, int rounds,
                             int64_t min_round_bytes);

// `jobs` with a stage on each holding host for every transfer that is its job's only one and whose
// receivers all sit on hosts that hold its slice: the host's first device that holds no slice and
// receives none. A device starts its next op as soon as its last one ends (a plan cannot make it
// wait), so a send whose receiver is busy with another took its link at half the rate; handed to
// an idle device, the slice waits there until the receiver is free. Empty where no transfer gets
// a stage.
std::vector<Job> delay_line_jobs(const Batch& batch, const std::vector<Job>& jobs);

// Optional preferences for the chain of a broadcast (transfer_op): each may be empty.
struct ChainKeys {
  // Another host's devices start at the one with the smallest key (the balance mode's choice).
  std::function<std::tuple<double, int, double>(DeviceId)> entry = {};
  // The other host with the largest key comes last (it forwards nothing).
  std::function<double(int)> last_host = {};
  // Of the last host's devices but its entry, the one with the largest key comes last (the one
  // device of the chain that sends nothing in it): a device with its own sends ahead should not
  // be held as a relay.
  std::function<double(DeviceId)> sending = {};
  // The receivers on the sender's host end the chain, entered from its last other host: the
  // sender's port and its host's NICs carry the slice once, and it comes back over NICs that
  // may have nothing else to carry.
  bool home_last = false;
};

// The op that moves `slice` (the whole of a transfer or one part of it) from `sender` to
// `receivers` (the transfer's, or some of them): a send for one receiver, else a broadcast chained
// host by host (the sender's host first, or last with `keys.home_last`; each host's devices
// consecutive, the other hosts turned by the transfer's `host_turn`) with `chunk_bytes` (0 =
// chosen from the cost model). Without `keys`, another host's devices start at the lowest id, and
// the other host of highest id comes last.
Op transfer_op(std::vector<DeviceId> receivers, int host_turn, const Box& slice, const Job& job,
               DeviceId sender, const Batch& batch, int64_t chunk_bytes,
               const ChainKeys& keys = {});

// The pipelining chunk of broadcast `op`: `chunk_bytes` when > 0 (at most the message), else the
// cost model's best for its chain, in whole elements of `element_size` bytes.
int64_t chain_chunk_bytes(const Op& op, const Cluster& cluster, int64_t chunk_bytes,
                          int element_size);

// Parts a split of `transfer` is cut into: one per host holding it, fewer when its longest
// dimension is too short to give every part an element. 1 means it cannot be split.
int split_parts(const Transfer& transfer, int holder_hosts);

// `slice` cut along its longest dimension (as allgather_part cuts) into consecutive parts in
// proportion to `weights` (rounded to whole elements; a part may be empty).
std::vector<Box> cut_at_weights(const Box& slice, const std::vector<double>& weights);

// The bytes of `slice` of `job`'s tensor.
int64_t slice_bytes(const Batch& batch, const Job& job, const Box& slice);

// Distinct hosts of `devices`, in first-seen order.
std::vector<int> hosts_of(const std::vector<DeviceId>& devices, const Cluster& cluster);

}  // namespace meshcast::detail
