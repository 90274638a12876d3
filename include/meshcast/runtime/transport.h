// Transport: what the executor needs from a network, and the one executor that plays plans over
// any transport (docs/executors.md). The ordering rules (a device sends in one op at a time in plan
// order and receives from any number at once; chains forwarded chunk by chunk; buckets packed and
// unpacked; a receipt area per peer; bounded staging memory; timeouts) live in that executor,
// once; a transport moves byte ranges and adds no rule of its own. Open MPI is one transport
// (mpi_executor.h), torch.distributed another (the Python package's backend "torch").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/error.h"
#include "meshcast/runtime/executor.h"
#include "meshcast/runtime/strided_copy.h"

namespace meshcast {

// A phase (compiling, a run, a control collective) that did not finish within its timeout: a peer
// died or hangs. Python sees TimeoutError.
class Timeout : public Error {
 public:
  using Error::Error;
};

// When a phase must be over. A transport's blocking calls give up with Timeout once it passes.
// Allocates nothing until it throws: a run's deadline is made by every run.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  // The phase is `phase` and, when `number` > 0, that number ("run 3"); `timeout_s` 0: never.
  Deadline(std::string_view phase, int number, double timeout_s);

  bool passed() const { return timeout_s_ > 0 && Clock::now() > at_; }
  // Throws Timeout naming the phase, this process's device and `waiting_for` (e.g. "device 3")
  // when the deadline passed.
  void check(int device, std::string_view waiting_for) const;
  // "run 3", "compiling the plan".
  std::string phase() const;

 private:
  std::string_view phase_;
  int number_ = 0;
  double timeout_s_ = 0;
  Clock::time_point at_;
};

// A poller's pause when it found nothing to do: first a yield, then sleeps of 1 us doubling up to
// 50 us; progress starts it over. A process waiting on its peers leaves the CPU to the processes
// that move bytes (an emulated cluster runs many ranks on few cores).
class Backoff {
 public:
  void progressed() { pause_ = std::chrono::microseconds(0); }
  void idle();

 private:
  std::chrono::microseconds pause_{0};
};

// Point-to-point messages between the devices of a plan (a transport's peers are device ids: the
// transport maps them to its processes), plus the few control collectives an executor needs.
// Requests are named by a cookie the executor chooses; poll() reports the cookies of those that
// completed. Messages from one peer with one tag match the receives posted for them in posting
// order. Every call comes from one thread at a time.
class Transport {
 public:
  virtual ~Transport() = default;

  // This process's device, and the number of devices.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The largest tag a message may carry (tags are >= 0); the executor keeps max_tag() itself for
  // the default control collectives.
  virtual int64_t max_tag() const = 0;
  // The most bytes one message may carry.
  virtual int64_t max_message() const { return int64_t{1} << 62; }
  // The name of the machine this process runs on (a cluster host's devices must share one).
  virtual std::string machine() const = 0;
  // What started the processes, and how to start the right number, for messages ("MPI",
  // "launch with mpirun -np 8").
  virtual std::string name() const = 0;
  virtual std::string launch_hint(int devices) const = 0;
  // Whether a send moves its bytes only once the peer has posted the matching receive, and the
  // sends to one peer go out one after another in posting order (gloo's pairs: one TCP connection
  // each, a send waiting for the receiver's notice). Then sends posted ahead of the receiver cannot
  // crowd a NIC with bytes nobody takes yet, nor stall a chain's pipelining, and a chain hop keeps
  // all the chunks it may (kChainMaxWindow) in flight instead of its link's bandwidth x round
  // trip: a transport whose completions reach the executor late (the Python transport's waiter
  // threads, a loaded machine) then still keeps the wire full.
  virtual bool rendezvous_sends() const { return false; }
  // Room for `requests` requests in flight at once (a compiled plan's most), so that running it
  // allocates nothing.
  virtual void reserve(int64_t requests) { (void)requests; }

  // Posts a send of `bytes` at `data` to `peer`. `synchronous`: the request completes only once
  // the receiver has matched it (MPI_Issend); a transport that cannot tell completes it when the
  // bytes are sent. The memory stays untouched until the request completes.
  virtual void post_send(int peer, int tag, const std::byte* data, int64_t bytes, bool synchronous,
                         uint64_t cookie) = 0;
  virtual void post_receive(int peer, int tag, std::byte* data, int64_t bytes, uint64_t cookie) = 0;
  // Appends the cookies of requests completed since the last poll to `completed`, without
  // blocking. Throws Error naming the peer when a request failed (its connection closed).
  virtual void poll(std::vector<uint64_t>& completed) = 0;

  // Optional capability: collectives on groups of devices (MPI_Ibcast, MPI_Iallgatherv). Without
  // it, broadcasts run as chains and allgathers as point-to-point messages.
  virtual bool has_group_collectives() const { return false; }
  // A group of `members` (in that order), made once by exactly those devices (all call it at the
  // same op of a compile) and cached; `tag` is unique to the op. Returns the group's handle.
  virtual int make_group(const std::vector<int>& members, int tag);
  // Broadcast from the group's first member; allgather of `counts[i]` bytes at `displs[i]` held by
  // member i (each member's own part already in place).
  // Each returns how many completions of `cookie` poll() will report.
  virtual int post_group_broadcast(int group, std::byte* data, int64_t bytes, uint64_t cookie);
  virtual int post_group_allgather(int group, std::byte* data, const std::vector<int64_t>& counts,
                                   const std::vector<int64_t>& displs, uint64_t cookie);

  // Memory the executor stages and packs messages in, allocated once per compiled plan. The
  // default is host memory; a transport of device memory (CUDA) gives its own and copies in it.
  virtual std::byte* allocate(int64_t bytes);
  virtual void release(std::byte* memory);
  // Whether copy() must be used for copies between buffers (device memory); otherwise the
  // executor copies with run_strided_copy itself.
  virtual bool copies_itself() const { return false; }
  virtual void copy(const StridedCopy& copy, const std::byte* from, std::byte* to);

  // Control collectives over every device, blocking until done or `deadline` (Timeout). The
  // defaults go point to point through device 0 with tag max_tag(); a transport may do better.
  // Every device's `mine` (the same size on every device), in device order.
  virtual std::vector<std::string> allgather(const std::string& mine, const Deadline& deadline);
  // Device 0's `text` on every device.
  virtual std::string broadcast(std::string text, const Deadline& deadline);

 protected:
  // Waits until `pending` requests named `cookie` have completed (other completions are not
  // expected while a control collective runs: the executor is idle).
  void wait_for(int pending, uint64_t cookie, int peer, const Deadline& deadline);
  // Cookies of the control collectives' requests (the executor's own are (op, chunk) pairs).
  static constexpr uint64_t kControlCookie = ~uint64_t{0};
};

struct TransportOptions {
  // Broadcasts by the transport's group broadcast instead of the chunked chain (a transport
  // without group collectives refuses it).
  bool group_broadcast = false;
  // compile() refuses, on every device, a plan for which a device's staging memory (boxes it
  // relays or keeps beside its destination tile, and the buffer it packs messages in) is larger;
  // 0: no limit.
  int64_t max_staging_bytes = 0;
  // Each device plays its ops one after another in plan order (an op starts once the device's
  // previous op has finished), so every pair of devices posts its messages in the same order on
  // both sides: what NCCL needs, which matches messages by order, not by tag.
  bool ordered = false;
  // Seconds compiling or one run may last before it throws Timeout on this process (0: forever).
  double timeout_s = 0;
  // Name of the backend, for reports ("mpi", "torch").
  std::string backend = "transport";
};

// The executor over `transport`: one process per device of the plan's cluster, this process
// playing device transport->rank(). compile() is collective over every device and throws
// InvalidArgument on every one when the cluster's devices differ from the transport's size, the
// devices were given different plans, or one device's staging would exceed the bound.
std::unique_ptr<Executor> make_transport_executor(std::shared_ptr<Transport> transport,
                                                  const TransportOptions& options = {});

}  // namespace meshcast
