// Executor: the backend-neutral interface that plays a Plan on real tile buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshcast/plan/plan.h"

namespace meshcast {

// The buffers of one device for one tensor of the plan's batch (index into plan.batch.tensors; 0
// for a single tensor): its source tile (read) and destination tile (written). A device outside a
// tensor's mesh has an empty tile and an empty span, and may be left out.
//
// A tile is row-major and contiguous over its box unless strides are given: then element i of
// the tile (0-based in its box) sits at sum(i[d] * strides[d]) elements from the span's start,
// and the span runs from the tile's first element to its last. So a tile may be a region of a
// larger buffer (q inside a serving engine's fused qkv_proj) or any strided view; the executors
// read and write through the strides and touch nothing else of that buffer (docs/executors.md).
// Strides are non-negative; a destination's must not make two elements share memory.
struct DeviceBuffers {
  DeviceId device = 0;
  std::span<const std::byte> src = {};
  std::span<std::byte> dst = {};
  int tensor = 0;
  // Element strides, one per dimension of the tensor; empty: row-major and contiguous.
  std::vector<int64_t> src_strides = {};
  std::vector<int64_t> dst_strides = {};
};

struct RunTiming {
  double seconds = 0;  // from start() until this process's devices finished all their ops
  // The most ops of this process in flight at once: released (every op they wait for is done)
  // and not yet finished. Above 1 when ops overlap, e.g. a device sending to one peer while
  // receiving from another (docs/concepts.md, execution).
  int peak_ops_in_flight = 0;
};

// A Plan compiled once for one executor: groups, chunking, staging and pack buffers, MPI
// communicators and datatypes persist, so running it again neither plans nor allocates.
class CompiledPlan {
 public:
  virtual ~CompiledPlan() = default;

  // Devices whose buffers this process passes: every device of the plan in-process, the rank's
  // own device under MPI.
  virtual const std::vector<DeviceId>& devices_here() const = 0;
  // Memory this process holds for the plan besides the caller's buffers: staging buffers (boxes a
  // device relays, or keeps beside its destination tile) and the buffer messages are packed in.
  // Allocated once by compile(), reused by every run.
  virtual int64_t staging_bytes() const = 0;

  // Starts playing the plan and returns. Throws InvalidArgument, before any byte moves, when the
  // buffers of a (device, tensor) with a non-empty tile are missing, given twice, of a size that
  // differs from the tile's bytes (with strides: from its first to its last element), or have
  // bad strides; the message names the device and the tensor. A run whose buffers have other
  // strides than the previous run's first redoes, in this process, the copies that depend on
  // them (no communication); a run with the same strides allocates nothing.
  // The buffers must stay alive and untouched until wait() returns.
  virtual void start(std::span<const DeviceBuffers> buffers) = 0;
  // Blocks until this process's part of the run started last is done.
  virtual RunTiming wait() = 0;
  // start() then wait(); a backend may run it on the calling thread.
  virtual RunTiming run(std::span<const DeviceBuffers> buffers) {
    start(buffers);
    return wait();
  }
};

// A communicator-like context, created once per process and reused for many plans.
class Executor {
 public:
  virtual ~Executor() = default;

  virtual std::string_view backend() const = 0;
  // Throws InvalidArgument when the plan is malformed for execution (a device outside the
  // cluster, a sender that does not hold its box at that point) or does not fit the context
  // (an MPI rank count that differs from the cluster's devices).
  virtual std::unique_ptr<CompiledPlan> compile(const Plan& plan) = 0;

  // Collectives over the processes of the context (trivial in-process), for timing and reports.
  virtual void barrier() = 0;
  virtual double max_over_processes(double value) = 0;
  virtual int64_t sum_over_processes(int64_t value) = 0;
  // The one process that prints reports (rank 0).
  virtual bool is_leader() const = 0;
  // The leader's `text` on every process (e.g. the plan it made, so that every rank plays the
  // same plan even if the ranks' binaries were built differently).
  virtual std::string share_from_leader(std::string text) = 0;
};

}  // namespace meshcast
