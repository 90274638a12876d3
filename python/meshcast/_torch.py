"""The torch backend: meshcast's executor over a torch.distributed process group.

The executor (C++, one thread) keeps every ordering rule; this module is only its transport:
post a send or a receive of a byte range to or from a device with a tag, and report which
requests completed. Device d of the plan is played by rank ranks[d] of the group.

gloo (CPU tensors): a send's or receive's Work of torch 1.13 says it completed only once wait()
was called on it (is_completed() stays False, get_future() is not implemented), so posted
requests are waited for by waiter threads (Work.wait releases the GIL), one per lane in flight
(an op's sends, or its receives, with one peer), each waiting for its lane's requests in posting
order (_Waiters). Messages between two ranks with one tag are matched in posting order (gloo's pairs are
one TCP connection each and its pending receives a queue; tests/python/torch_ranks.py relies on
it with up to 64 chunks of one tag in flight).

nccl (CUDA tensors, not verified on this machine: it has no GPU): NCCL matches messages by order,
not by tag, so every device plays its ops one after another in plan order (the executor's ordered
mode), packing and unpacking runs as torch copies on the device, and requests are polled with
Work.is_completed().
"""
import collections
import ctypes
import socket
import threading

import torch
import torch.distributed as dist

from meshcast import _core

# Tags are 32-bit in gloo's slots and ints in torch's API.
_MAX_TAG = 2**31 - 1


def _host_bytes(address, nbytes):
    """A uint8 CPU tensor over host memory the executor owns (no copy)."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), dtype=torch.uint8)


class _Waiters:
    """Threads that wait for the requests in flight and record each one's cookie (or its error).

    Requests come in lanes: the sends, or the receives, of one op with one peer (one tag), whose
    chunks complete in posting order (gloo matches them in order on the pair's one connection).
    A thread serves one lane at a time, waiting for its requests in order, and takes another lane
    when it is empty, so that a request never waits behind another op's. One thread per request
    (as before) cost a thread wake-up and a GIL hand-over per message: bench/chain_torch.py's hop
    with 8 messages in flight moved one per ~800 us on the 2-core machine, one per ~150-250 us
    with lanes. Each record raises `events`, a counter the executor's poll reads without the GIL,
    so that it calls poll() only when something was recorded."""

    def __init__(self):
        self._lanes = {}  # lane -> deque of (work, cookie, what); present while served or ready
        self._ready = collections.deque()  # lanes with requests and no thread
        self._lock = threading.Condition()
        self._idle = 0
        self.done = collections.deque()
        self.errors = collections.deque()
        self.events = ctypes.c_uint64(0)

    def submit(self, lane, work, cookie, what):
        with self._lock:
            requests = self._lanes.get(lane)
            if requests is not None:  # a thread serves it, or will
                requests.append((work, cookie, what))
                return
            self._lanes[lane] = collections.deque([(work, cookie, what)])
            self._ready.append(lane)
            if self._idle < len(self._ready):
                self._idle += 1
                threading.Thread(target=self._serve, daemon=True).start()
            self._lock.notify()

    def _serve(self):
        while True:
            with self._lock:
                while not self._ready:
                    self._lock.wait()
                lane = self._ready.popleft()
                self._idle -= 1
            while True:
                with self._lock:
                    requests = self._lanes[lane]
                    if not requests:
                        del self._lanes[lane]
                        self._idle += 1
                        break
                    work, cookie, what = requests[0]
                try:
                    work.wait()
                    self.done.append(cookie)
                except Exception as e:  # noqa: BLE001 - reported by poll() on the executor's thread
                    self.errors.append(f"{what}: {e}")
                with self._lock:
                    requests.popleft()
                    self.events.value += 1  # after the record, so that poll() finds it


class TorchTransport(_core.Transport):
    """Device d of `plan` is rank ranks[d] of `group` (None: the default group, ranks[d] = d)."""

    def __init__(self, plan, group=None, ranks=None):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("backend torch: torch.distributed is not initialized, expected "
                               "dist.init_process_group(...) (torchrun sets the env:// variables)")
        self.group = dist.group.WORLD if group is None else group
        group_size = dist.get_world_size(self.group)
        devices = plan.cluster_devices
        if ranks is None:
            if group_size != devices:
                raise ValueError(
                    f"the plan's cluster has {devices} devices, but the group has {group_size} "
                    f"ranks: expected one rank per device (torchrun --nproc_per_node {devices}), "
                    f"or ranks= with one group rank per device")
            ranks = list(range(devices))
        ranks = [int(r) for r in ranks]
        if len(ranks) != devices:
            raise ValueError(f"ranks: {len(ranks)} ranks, expected one per device of the plan's "
                             f"cluster ({devices})")
        if len(set(ranks)) != len(ranks) or not all(0 <= r < group_size for r in ranks):
            raise ValueError(f"ranks {ranks}: expected {devices} distinct ranks of the group "
                             f"(0..{group_size - 1})")
        me = dist.get_rank(self.group)
        if me not in ranks:
            raise ValueError(f"ranks {ranks}: this process is rank {me} of the group and plays "
                             f"no device of the plan")
        self.ranks = ranks
        self._device = ranks.index(me)
        self._peers = [r if self.group is dist.group.WORLD
                       else dist.distributed_c10d._get_global_rank(self.group, r) for r in ranks]
        self.backend = dist.get_backend(self.group)
        if self.backend == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        self.ordered = self.backend == "nccl"
        self._waiters = _Waiters()
        if self.device.type == "cpu":
            self.watch_events(ctypes.addressof(self._waiters.events))
        self._polled = []      # nccl: (work, cookie, what, copy_back) still in flight
        self._memory = {}      # address -> tensor the executor stages in
        # (start, end, flat uint8 tensor) of device memory, for address lookups: the executor's
        # memory, and the arrays of the run started last.
        self._registered = []
        self._run_arrays = []

    # What the executor asks about the network.
    def rank(self):
        return self._device

    def size(self):
        return len(self.ranks)

    def max_tag(self):
        return _MAX_TAG

    def machine(self):
        return socket.gethostname()

    def name(self):
        return f"torch.distributed ({self.backend})"

    def rendezvous_sends(self):
        """gloo: a send moves its bytes once the receiver has posted its receive, in posting order
        on the pair's one connection, so a chain hop keeps every chunk it may in flight: each
        completion reaches the executor through a waiter thread, too late for a window of the
        link's bandwidth x round trip. NCCL: not known here (no GPU), the default window."""
        return self.backend == "gloo"

    def launch_hint(self, devices):
        return (f"launch {devices} ranks (torchrun --nproc_per_node {devices}) or give ranks= "
                f"with one group rank per device")

    # Memory and copies: host memory for gloo (the executor copies itself), device memory for
    # nccl.
    def allocate(self, nbytes):
        t = torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device=self.device)
        self._memory[t.data_ptr()] = t
        if self.device.type != "cpu":
            self._registered.append(_flat_range(t))
        return t.data_ptr()

    def release(self, address):
        t = self._memory.pop(address, None)
        if t is not None:
            self._registered = [r for r in self._registered if r[2].data_ptr() != address]

    def copies_itself(self):
        return self.device.type != "cpu"

    def register(self, arrays):
        """The arrays of the run about to start, whose memory the executor reads or writes: on a
        device (nccl) their addresses are looked up here to make tensors of byte ranges."""
        if self.device.type != "cpu":
            self._run_arrays = [_flat_range(t) for t in arrays]

    def _device_bytes(self, address):
        for start, end, flat in self._registered + self._run_arrays:
            if start <= address < end or (address == start == end):
                return flat, address - (flat.data_ptr() - flat.storage_offset())
        return None, 0

    def _bytes(self, address, nbytes):
        if self.device.type == "cpu":
            return _host_bytes(address, nbytes), None
        flat, offset = self._device_bytes(address)
        if flat is not None:
            return flat.as_strided((nbytes,), (1,), offset), None
        # Host memory (a control collective's message): staged through the device.
        host = _host_bytes(address, nbytes)
        return host.to(self.device), host

    def copy(self, from_address, to_address, run_bytes, counts, from_strides, to_strides):
        src, src_offset = self._device_bytes(from_address)
        dst, dst_offset = self._device_bytes(to_address)
        size = tuple(counts) + (run_bytes,)
        dst.as_strided(size, tuple(to_strides) + (1,), dst_offset).copy_(
            src.as_strided(size, tuple(from_strides) + (1,), src_offset))

    # Messages.
    def post_send(self, peer, tag, address, nbytes, synchronous, cookie):
        # gloo and NCCL have no synchronous send: a send completes when its bytes are sent.
        tensor, _ = self._bytes(address, nbytes)
        work = dist.isend(tensor, self._peers[peer], group=self.group, tag=tag)
        self._track(("send", peer, tag), work, cookie,
                    f"send to device {peer} (rank {self.ranks[peer]})", None)

    def post_receive(self, peer, tag, address, nbytes, cookie):
        tensor, host = self._bytes(address, nbytes)
        work = dist.irecv(tensor, self._peers[peer], group=self.group, tag=tag)
        copy_back = None if host is None else (tensor, host)
        self._track(("receive", peer, tag), work, cookie,
                    f"receive from device {peer} (rank {self.ranks[peer]})", copy_back)

    def _track(self, lane, work, cookie, what, copy_back):
        if self.device.type == "cpu":
            self._waiters.submit(lane, work, cookie, what)
        else:
            self._polled.append((work, cookie, what, copy_back))

    def poll(self):
        if self.device.type == "cpu":
            waiters = self._waiters
            if waiters.errors:
                raise RuntimeError(waiters.errors.popleft())
            done = []
            while waiters.done:
                done.append(waiters.done.popleft())
            return done
        done, still = [], []
        for entry in self._polled:
            work, cookie, what, copy_back = entry
            if not work.is_completed():
                still.append(entry)
                continue
            if not work.is_success():
                raise RuntimeError(f"{what}: {work.exception()}")
            if copy_back is not None:
                copy_back[1].copy_(copy_back[0].cpu())
            done.append(cookie)
        self._polled = still
        return done

    def allocator(self):
        """Makes the outputs meshcast allocates: on the group's device."""
        def allocate(shape, dtype):
            t = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
            if self.device.type != "cpu":
                self._run_arrays.append(_flat_range(t))
            return t
        return allocate


def _flat_range(tensor):
    flat = tensor.reshape(-1).view(torch.uint8)
    return flat.data_ptr(), flat.data_ptr() + flat.numel(), flat
