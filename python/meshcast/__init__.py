"""meshcast: move sharded tensors between device meshes, from numpy arrays or CPU torch tensors.

The classes here only hold Python values; planning, simulation, tiles and execution are the C++
library's (meshcast._core). docs/python.md has the guide.
"""

import math as _math
import operator as _operator
import threading as _threading

from meshcast import _core
from meshcast._core import Simulation, Link  # noqa: F401
# The library's exceptions: bad values raise InvalidArgument and ParseError (both ValueError);
# Error (a RuntimeError) is a run that failed.
from meshcast._core import Error, InvalidArgument, ParseError  # noqa: F401

__all__ = ["Cluster", "Mesh", "Layout", "P", "Shard", "Replicate", "Plan", "plan", "Resharder",
           "shard", "unshard", "model_batch", "ModelBatch", "Simulation", "Link", "Error",
           "InvalidArgument", "ParseError"]


def _integer(value, what, bits=64, least=None):
    """`value` as a Python int that fits the library's `bits`-bit integer (and is >= `least`), or
    TypeError/ValueError naming `what`: the library would only say 'Unable to cast'."""
    try:
        number = _operator.index(value)
    except TypeError:
        raise TypeError(f"{what} {value!r}: expected an integer") from None
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if least is not None and number < least:
        raise ValueError(f"bad {what} {number}: expected an integer >= {least}")
    if not lo <= number <= hi:
        raise ValueError(f"bad {what} {number}: expected an integer in [{lo}, {hi}]")
    return number


def _number(value, what):
    """`value` as a float, or TypeError naming `what`."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} {value!r}: expected a number") from None


class Cluster:
    """hosts x devices_per_host; bandwidths in Gbps per direction, latency in microseconds;
    host_nic_gbps and host_nics, one entry per host, where hosts differ (docs/json.md)."""

    def __init__(self, hosts, devices_per_host, nic_gbps=10.0, dev_gbps=100.0, latency_us=5.0,
                 nics_per_host=1, *, host_nic_gbps=None, host_nics=None):
        self.hosts = _integer(hosts, "hosts", 32)
        self.devices_per_host = _integer(devices_per_host, "devices_per_host", 32)
        self.nic_gbps = _number(nic_gbps, "nic_gbps")
        self.dev_gbps = _number(dev_gbps, "dev_gbps")
        self.latency_us = _number(latency_us, "latency_us")
        self.nics_per_host = _integer(nics_per_host, "nics_per_host", 32)
        self.host_nic_gbps = [] if host_nic_gbps is None else \
            [_number(g, "host_nic_gbps entry") for g in host_nic_gbps]
        self.host_nics = [] if host_nics is None else \
            [_integer(n, "host_nics entry", 32) for n in host_nics]

    @classmethod
    def load(cls, path):
        """The cluster of a cluster document (docs/json.md), such as `meshcast calibrate -o`
        writes: what `meshcast plan --cluster FILE` plans for."""
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            return cls(**_core.cluster_document(text))
        except ValueError as e:
            raise type(e)(f"cluster file {str(path)!r}: {e}") from None

    def __repr__(self):
        per_host = "".join(f", {name}={value}" for name, value in
                           (("host_nic_gbps", self.host_nic_gbps), ("host_nics", self.host_nics))
                           if value)
        return (f"Cluster(hosts={self.hosts}, devices_per_host={self.devices_per_host}, "
                f"nic_gbps={self.nic_gbps}, dev_gbps={self.dev_gbps}{per_host})")


class Mesh:
    """An N-D row-major array of device ids; axis_names are what PartitionSpecs refer to
    (`mesh_dim_names`, DTensor's word for them, is taken too)."""

    def __init__(self, shape, devices=None, axis_names=None, *, mesh_dim_names=None):
        if axis_names is not None and mesh_dim_names is not None and \
                [str(n) for n in axis_names] != [str(n) for n in mesh_dim_names]:
            raise ValueError(f"axis_names {tuple(axis_names)} and mesh_dim_names "
                             f"{tuple(mesh_dim_names)} differ: give one of them")
        names = axis_names if axis_names is not None else mesh_dim_names
        self.shape = [_integer(s, "mesh shape entry", 64) for s in shape]
        self.devices = list(range(_math.prod(self.shape))) if devices is None else \
            [_integer(d, "device id", 32) for d in devices]
        self.axis_names = [] if names is None else [str(n) for n in names]

    def __repr__(self):
        return f"Mesh({self.shape}, devices={self.devices}, axis_names={self.axis_names})"


class Shard:
    """DTensor placement: this mesh axis splits tensor dim `dim`."""

    def __init__(self, dim):
        self.dim = dim

    def __repr__(self):
        return f"Shard({self.dim})"


class Replicate:
    """DTensor placement: the tensor is replicated over this mesh axis."""

    def __repr__(self):
        return "Replicate()"


def _entry_text(entry):
    if entry is None:
        return "None"
    if isinstance(entry, (tuple, list)):
        return "(" + ", ".join(_entry_text(e) for e in entry) + ("," if len(entry) == 1 else "") + ")"
    return repr(str(entry))


class P(tuple):
    """JAX PartitionSpec: one entry per tensor dim, None, a mesh axis name or a tuple of names."""

    def __new__(cls, *entries):
        return super().__new__(cls, entries)

    def __repr__(self):
        return "P(" + ", ".join(_entry_text(e) for e in self) + ")"


def _spec_text(spec):
    """The text the library parses, for any of the three vocabularies."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, tuple):  # P or a plain tuple: a PartitionSpec
        return repr(P(*spec))
    if isinstance(spec, list) and spec and all(_placement_text(p) for p in spec):
        return ",".join(_placement_text(p) for p in spec)
    raise TypeError(f"spec {spec!r}: expected an Alpa string ('S0R'), a list of Shard/Replicate "
                    f"placements, or a PartitionSpec (mc.P(...) or a tuple)")


def _placement_text(placement):
    """The text of a DTensor placement: mc.Shard/mc.Replicate, or torch's own placement objects
    (torch.distributed.tensor's Shard, Replicate, Partial), known by class name and `dim` so that
    no torch version is imported; "" when `placement` is none of them."""
    kind = type(placement).__name__
    if kind == "Shard" and isinstance(getattr(placement, "dim", None), int):
        return f"Shard({placement.dim})"
    if kind in ("Replicate", "Partial"):  # the library refuses Partial, saying why
        return f"{kind}()"
    return ""


class Layout:
    """A tensor sharded over a mesh, with a spec in any vocabulary (docs/concepts.md)."""

    def __init__(self, mesh, spec, ndim=0):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh {mesh!r}: expected an mc.Mesh")
        self.mesh = mesh
        self.spec_text = _spec_text(spec)
        self.ndim = _integer(ndim, "ndim", 32, least=0)
        _core.alpa_spec(self, self.ndim)  # a bad spec is refused here, not at first use

    @property
    def spec(self):
        """The Alpa form, e.g. 'S0R' (nested dims as 'S0/1')."""
        return _core.alpa_spec(self, self.ndim)

    def tiles(self, shape):
        """{device: ((lo, hi), ...)}: the box of a tensor of `shape` every device of the mesh holds,
        in mesh order (an empty box, lo == hi in some dim, where a device holds nothing)."""
        return _core.tiles(_shape(shape, "shape"), self)

    def tile(self, shape, device):
        """The box ((lo, hi), ...) of a tensor of `shape` that `device` holds."""
        tiles = self.tiles(shape)
        device = _integer(device, "device", 32)
        if device not in tiles:
            raise ValueError(f"device {device} is not in the mesh (devices "
                             f"{', '.join(map(str, self.mesh.devices))})")
        return tiles[device]

    def tile_shape(self, shape, device):
        """The shape of `device`'s tile of a tensor of `shape`: what to allocate for it (a 0 in
        it where the device holds nothing)."""
        return tuple(hi - lo for lo, hi in self.tile(shape, device))

    def __repr__(self):
        return f"Layout({self.mesh!r}, {self.spec!r})"


Plan = _core.Plan


def _shape(shape, what):
    try:
        entries = list(shape)
    except TypeError:
        raise TypeError(f"{what} {shape!r}: expected a sequence of integers") from None
    return [_integer(n, f"{what} entry", 64) for n in entries]


def _dtype_name(dtype, what):
    """The library's name of a dtype given as a name ('bfloat16'), a torch dtype (torch.bfloat16)
    or a numpy dtype or type (np.float32, np.dtype('float32'))."""
    if isinstance(dtype, str):
        return dtype
    text = str(dtype)
    if text.startswith("torch."):  # a torch.dtype, without importing torch
        return text[len("torch."):]
    import numpy
    try:
        return numpy.dtype(dtype).name
    except TypeError:
        raise TypeError(f"{what} {dtype!r}: expected a dtype name ('float32'), a torch dtype or "
                        f"a numpy dtype") from None


def plan(tensors=None, *, shape=None, dtype=None, src=None, dst=None, cluster, strategy="broadcast",
         balance=None, split=False, chunk_bytes=0, search_effort=1.0, bucket_bytes=None):
    """Plans resharding one tensor (`shape`, `dtype`, layouts `src` -> `dst`) or a batch,
    `tensors` = {name: (shape, dtype, src, dst)} planned together; the other keywords are the
    CLI's --strategy, --balance, --split, --chunk-bytes, --search-effort and --bucket-bytes
    (None: the cluster's default, 0: no buckets)."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster {cluster!r}: expected an mc.Cluster")
    if tensors is None:
        checked = _checked([("tensor", shape, dtype, src, dst)], "")
    elif any(v is not None for v in (shape, dtype, src, dst)):
        raise TypeError("plan(): give either tensors= or shape=, dtype=, src=, dst=, not both")
    else:
        checked = _checked_batch(tensors)
    return _core.plan(checked, tensors is not None, cluster, str(strategy),
                      None if balance is None else str(balance), bool(split),
                      _integer(chunk_bytes, "chunk_bytes"), _number(search_effort, "search_effort"),
                      None if bucket_bytes is None else _integer(bucket_bytes, "bucket_bytes"))


def _checked(entries, where_prefix):
    """(name, shape, dtype name, src, dst) of each (name, shape, dtype, src, dst), checked; errors
    name the tensor as tensors['name'] unless `where_prefix` is ""."""
    checked = []
    for name, shape_, dtype_, src_, dst_ in entries:
        where = f"{where_prefix}[{name!r}]: " if where_prefix else ""
        if shape_ is None or dtype_ is None:
            raise TypeError(f"{where}shape and dtype are required")
        for side, value in (("src", src_), ("dst", dst_)):
            if not isinstance(value, Layout):
                raise TypeError(f"{where}{side} {value!r}: expected an mc.Layout")
        checked.append((name, _shape(shape_, f"{where}shape"), _dtype_name(dtype_, f"{where}dtype"),
                        src_, dst_))
    return checked


def _checked_batch(tensors):
    """The checked entries of a batch {name: (shape, dtype, src, dst)}."""
    if not isinstance(tensors, dict) or not tensors:
        raise TypeError(f"tensors: expected a non-empty dict {{name: (shape, dtype, src, dst)}}")
    entries = []
    for name, entry in tensors.items():
        if not isinstance(entry, (tuple, list)) or len(entry) != 4:
            raise TypeError(f"tensors[{name!r}]: {entry!r}, expected (shape, dtype, src, dst)")
        entries.append((str(name), *entry))
    return _checked(entries, "tensors")


def shrink_batch(tensors, bytes):
    """The batch {name: (shape, dtype, src, dst)} with dim 0 of every tensor shrunk by one factor
    so that it has about `bytes` bytes, as `meshcast bench --bytes` shrinks a model: each tensor
    keeps at least one row, and a dim 0 that both layouts split evenly stays a multiple of their
    parts (its shards stay even). A new dict, in the same order; unchanged when already that
    small."""
    checked = _checked_batch(tensors)
    shapes = _core.shrunk_shapes(checked, _integer(bytes, "bytes"))
    return {name: (tuple(shape), *entry[1:]) for (name, entry), shape in zip(tensors.items(), shapes)}


class ModelBatch:
    """A model's weight sync as mc.plan takes it: `tensors` = {name: (shape, dtype, src, dst)}
    in the model's parameter order, on `cluster` (the hosts both sides need)."""

    def __init__(self, tensors, cluster):
        self.tensors = tensors
        self.cluster = cluster

    def __repr__(self):
        return f"ModelBatch({len(self.tensors)} tensors, {self.cluster!r})"


def model_batch(*, arch="", preset="", dtype="bfloat16", train="tp=1", serve="tp=1", cluster,
                **dimensions):
    """Every parameter of a llama-, gpt- or moe-like model with its trainer and serving layouts,
    as `meshcast model` writes them (docs/models.md): `preset` "deepseek-v3", "kimi-k2" or
    "qwen3-235b-a22b", or `arch` "llama" (the default), "gpt" or "moe" (DeepSeek-V3's dimensions);
    `dimensions` change them: the CLI's options with underscores (hidden, layers, heads, kv_heads,
    ffn, vocab, positions, head_dim, experts, shared_experts, moe_ffn, dense_layers, q_lora_rank,
    kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim, router_bias). `train`
    "tp=T,pp=P,dp=D,ep=E,etp=X", `serve` "tp=T,pp=P,replicas=R,ep=E"; `cluster` gives devices per
    host and links, its host count is replaced by the hosts both sides need. Plan it with
    mc.plan(b.tensors, cluster=b.cluster)."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster {cluster!r}: expected an mc.Cluster")
    keys = _core.model_dimension_keys()
    given = []
    for name, value in dimensions.items():
        key = name.replace("_", "-")
        if key not in keys:
            known = ", ".join(k.replace("-", "_") for k in keys)
            raise TypeError(f"model_batch() got an unexpected keyword argument {name!r}: "
                            f"expected arch, preset, dtype, train, serve, cluster or one of {known}")
        given.append((key, _integer(value, name)))
    entries, fields = _core.model_batch(str(arch), str(preset), given, _dtype_name(dtype, "dtype"),
                                        str(train),
                                        str(serve), cluster)

    def layout(parts):
        mesh_shape, devices, spec = parts
        return Layout(Mesh(mesh_shape, devices), spec)

    tensors = {name: (tuple(shape), dtype_, layout(src), layout(dst))
               for name, shape, dtype_, src, dst in entries}
    return ModelBatch(tensors, Cluster(**fields))


def _is_torch(value):
    return type(value).__module__.startswith("torch")


# float8 tensors are bytes to meshcast: held in torch's float8 dtypes where torch has them (2.1 and
# later), else (and in numpy, which has none) in uint8 arrays of the same bytes.
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2")


def _numpy_empty(shape, dtype):
    import numpy
    return numpy.empty(shape, dtype="uint8" if dtype in _FLOAT8 else dtype)


def _torch_empty(shape, dtype):
    import torch
    if dtype in _FLOAT8 and not hasattr(torch, dtype):
        dtype = "uint8"
    return torch.empty(shape, dtype=getattr(torch, dtype))


# Resharder(array=...): how outputs are allocated, and the dtypes that kind has none for.
_ALLOCATORS = {"numpy": (_numpy_empty, {"bfloat16"}), "torch": (_torch_empty, set())}


class Resharder:
    """A plan compiled once for a backend: 'local' (threads in this process), 'mpi' (one rank
    per device; the rank's device is its rank in comm, which must be MPI.COMM_WORLD) or 'torch'
    (one process per device in a torch.distributed group: device d is rank ranks[d] of `group`,
    default the default group and ranks[d] = d; arrays, and the outputs it allocates, are torch
    tensors on the group's device, CPU for gloo, CUDA for nccl; a timeout or a peer that died
    raises TimeoutError or RuntimeError on every surviving rank instead of ending the process).
    `array`: what outputs not given in `out` are allocated as, 'numpy' or 'torch', the same on
    every rank whatever it holds (numpy has no bfloat16: a plan with one needs 'torch' or out=).
    `timeout`: seconds compiling or one wait() may block waiting for other ranks (mpi, torch: a
    peer process that died or hangs) before it raises TimeoutError; 0 or above 1e9: forever.
    `max_staging_bytes`: the plan is refused (ValueError, before any byte moves) when the memory
    this process would hold besides the arrays (boxes it relays or keeps beside a destination
    shard, packed messages) is larger; 0: no limit. `staging_bytes` gives
    that memory: allocated once, reused by every run. One run is in flight at a time: run() from
    several threads takes turns; start() or wait() while another thread's run is in flight raises
    RuntimeError."""

    def __init__(self, plan, backend="local", comm=None, threads=0, timeout=300.0,
                 max_staging_bytes=0, array="numpy", group=None, ranks=None):
        if not isinstance(plan, Plan):
            raise TypeError(f"plan {plan!r}: expected an mc.Plan")
        self._transport = None
        if backend == "torch":
            from meshcast import _torch
            self._transport = _torch.TorchTransport(plan, group, ranks)
            array = "torch"
        elif group is not None or ranks is not None:
            raise ValueError(f"group, ranks: given for backend {backend!r}, expected them only "
                             f"with backend='torch'")
        if array not in _ALLOCATORS:
            raise ValueError(f"bad array {array!r}: expected 'numpy' or 'torch'")
        if backend == "mpi" and comm is not None:
            from mpi4py import MPI
            if MPI.Comm.Compare(comm, MPI.COMM_WORLD) not in (MPI.IDENT, MPI.CONGRUENT):
                raise ValueError("comm: expected MPI.COMM_WORLD (rank r plays device r)")
        self._allocate, unheld = _ALLOCATORS[array]
        self._unheld = {t["name"]: t["dtype"] for t in plan.batch if t["dtype"] in unheld}
        self.array = array
        if self._transport is not None:
            self._allocate = self._transport.allocator()
        self._core = _core.Resharder(plan, str(backend), _integer(threads, "threads", 32),
                                     _number(timeout, "timeout"),
                                     _integer(max_staging_bytes, "max_staging_bytes"),
                                     self._transport,
                                     self._transport is not None and self._transport.ordered)
        self._names = self._core.tensor_names
        self._turns = _threading.Lock()  # run() from several threads: one at a time
        self.plan = plan

    @property
    def devices(self):
        """Devices whose shards this process passes."""
        return self._core.devices

    @property
    def staging_bytes(self):
        """Memory this process holds for the plan besides the arrays (bytes)."""
        return self._core.staging_bytes

    def start(self, src, out=None):
        """Starts moving `src` {device: array} (a batch: {name: {device: array}}) into `out`
        (allocated as `array` says when None) and returns; wait() returns the outputs. The GIL is
        released while the bytes move."""
        names = self._names
        # A batch's shards are {name: {device: array}}; a plan of one tensor also takes
        # {device: array}, and returns its outputs in the form it was given.
        batched = len(names) > 1 or (isinstance(src, dict) and any(isinstance(k, str) for k in src))
        what = "{name: {device: array}}" if batched else "{device: array}"
        if not isinstance(src, dict):
            raise TypeError(f"src: got {type(src).__name__}, expected a dict {what}")
        if out is not None and not isinstance(out, dict):
            raise TypeError(f"out: got {type(out).__name__}, expected a dict {what} or None")
        if batched:
            for given, side in ((src, "src"), (out or {}, "out")):
                unknown = set(given) - set(names)
                if unknown:
                    raise ValueError(f"{side}: tensor {sorted(unknown, key=str)[0]!r} is not in the "
                                     f"plan (tensors {', '.join(names)})")
            srcs = [src.get(n, {}) for n in names]
            outs = [None if out is None else out.get(n, {}) for n in names]
        else:
            srcs, outs = [src], [out]
        for i, s in enumerate(srcs):
            if not isinstance(s, dict):
                raise TypeError(f"src[{names[i]!r}]: got {type(s).__name__}, expected {{device: array}}")
        # Decided by the plan and which outputs were given, never by what this rank holds, so
        # that every rank of an MPI job refuses the same run before any byte moves.
        for name, given in zip(names, outs):
            if given is None and name in self._unheld:
                tensor = f"tensor {name!r}" if batched else "the tensor"
                raise ValueError(f"{tensor} is {self._unheld[name]}, which {self.array} has no "
                                 f"dtype for: make the Resharder with array='torch', or pass its "
                                 f"outputs in out=")
        if self._transport is not None:
            self._transport.register([a for d in srcs + [o or {} for o in outs] for a in d.values()])
        self._core.start(srcs, outs, self._allocate, batched)

    def wait(self):
        """Waits for the run in flight; returns its outputs, in the form start() was given."""
        self.seconds, out = self._core.wait()
        return out

    def run(self, src, out=None):
        """start() then wait(); threads calling it take turns."""
        with self._turns:
            self.start(src, out)
            return self.wait()


def _slices(box):
    return tuple(slice(lo, hi) for lo, hi in box)


def _empty(box):
    return any(hi <= lo for lo, hi in box)


def shard(array, layout, devices=None):
    """{device: tile} of a global numpy array or torch tensor, of every device of the layout or
    of `devices` only (e.g. a Resharder's devices: this rank's); tiles are contiguous (views of
    `array` where they can be), empty ones left out."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout {layout!r}: expected an mc.Layout")
    tiles = layout.tiles(array.shape)
    if devices is not None:
        devices = {_integer(d, "device", 32) for d in devices}
        tiles = {d: b for d, b in tiles.items() if d in devices}
    if _is_torch(array):
        return {d: array[_slices(b)].contiguous() for d, b in tiles.items() if not _empty(b)}
    import numpy
    return {d: numpy.ascontiguousarray(array[_slices(b)]) for d, b in tiles.items() if not _empty(b)}


def unshard(shards, layout, shape=None):
    """The global array from {device: tile}; `shape` is needed only when the tiles do not say it
    (it defaults to the union of the tiles)."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout {layout!r}: expected an mc.Layout")
    if not shards:
        raise ValueError("shards: empty, expected {device: array}")
    first = next(iter(shards.values()))
    if shape is None:
        shape = _core.global_shape({d: list(a.shape) for d, a in shards.items()}, layout)
    tiles = _core.tiles(list(shape), layout)
    if _is_torch(first):
        import torch
        whole = torch.empty(tuple(shape), dtype=first.dtype)
    else:
        import numpy
        whole = numpy.empty(tuple(shape), dtype=first.dtype)
    for device, box in tiles.items():
        if _empty(box):
            continue
        if device not in shards:
            raise ValueError(f"shards: no tile for device {device}, expected the tile {box}")
        tile = shards[device]
        want = tuple(hi - lo for lo, hi in box)
        if tuple(tile.shape) != want:
            raise ValueError(f"shards[{device}]: shape {tuple(tile.shape)}, expected {want}")
        whole[_slices(box)] = tile
    return whole
