"""meshcast: move sharded tensors between device meshes, from numpy arrays or CPU torch tensors.

The classes here only hold Python values; planning, simulation, tiles and execution are the C++
library's (meshcast._core). docs/python.md has the guide.
"""

import math as _math

from meshcast import _core
from meshcast._core import Simulation, Link  # noqa: F401

__all__ = ["Cluster", "Mesh", "Layout", "P", "Shard", "Replicate", "Plan", "plan", "Resharder",
           "shard", "unshard", "model_batch", "ModelBatch", "Simulation", "Link"]


class Cluster:
    """hosts x devices_per_host; bandwidths in Gbps per direction, latency in microseconds."""

    def __init__(self, hosts, devices_per_host, nic_gbps=10.0, dev_gbps=100.0, latency_us=5.0,
                 nics_per_host=1):
        self.hosts = hosts
        self.devices_per_host = devices_per_host
        self.nic_gbps = nic_gbps
        self.dev_gbps = dev_gbps
        self.latency_us = latency_us
        self.nics_per_host = nics_per_host

    def __repr__(self):
        return (f"Cluster(hosts={self.hosts}, devices_per_host={self.devices_per_host}, "
                f"nic_gbps={self.nic_gbps}, dev_gbps={self.dev_gbps})")


class Mesh:
    """An N-D row-major array of device ids; axis_names are what PartitionSpecs refer to."""

    def __init__(self, shape, devices=None, axis_names=None):
        self.shape = [int(s) for s in shape]
        self.devices = list(range(_math.prod(self.shape))) if devices is None else list(devices)
        self.axis_names = [] if axis_names is None else [str(n) for n in axis_names]

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
    if isinstance(spec, list) and all(isinstance(p, (Shard, Replicate)) for p in spec):
        return ",".join(repr(p) for p in spec)
    raise TypeError(f"spec {spec!r}: expected an Alpa string ('S0R'), a list of Shard/Replicate "
                    f"placements, or a PartitionSpec (mc.P(...) or a tuple)")


class Layout:
    """A tensor sharded over a mesh, with a spec in any vocabulary (docs/concepts.md)."""

    def __init__(self, mesh, spec, ndim=0):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh {mesh!r}: expected an mc.Mesh")
        self.mesh = mesh
        self.spec_text = _spec_text(spec)
        self.ndim = ndim
        _core.alpa_spec(self, ndim)  # a bad spec is refused here, not at first use

    @property
    def spec(self):
        """The Alpa form, e.g. 'S0R' (nested dims as 'S0/1')."""
        return _core.alpa_spec(self, self.ndim)

    def __repr__(self):
        return f"Layout({self.mesh!r}, {self.spec!r})"


Plan = _core.Plan


def plan(tensors=None, *, shape=None, dtype=None, src=None, dst=None, cluster, strategy="broadcast",
         balance=None, split=False, chunk_bytes=0, search_effort=1.0, bucket_bytes=None):
    """Plans resharding one tensor (`shape`, `dtype`, layouts `src` -> `dst`) or a batch,
    `tensors` = {name: (shape, dtype, src, dst)} planned together; the other keywords are the
    CLI's --strategy, --balance, --split, --chunk-bytes, --search-effort and --bucket-bytes
    (None: the cluster's default, 0: no buckets)."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster {cluster!r}: expected an mc.Cluster")
    if tensors is None:
        entries = [("tensor", shape, dtype, src, dst)]
    elif not isinstance(tensors, dict) or not tensors:
        raise TypeError(f"tensors: expected a non-empty dict {{name: (shape, dtype, src, dst)}}")
    elif any(v is not None for v in (shape, dtype, src, dst)):
        raise TypeError("plan(): give either tensors= or shape=, dtype=, src=, dst=, not both")
    else:
        entries = []
        for name, entry in tensors.items():
            if not isinstance(entry, (tuple, list)) or len(entry) != 4:
                raise TypeError(f"tensors[{name!r}]: {entry!r}, expected (shape, dtype, src, dst)")
            entries.append((str(name), *entry))
    for name, shape_, dtype_, src_, dst_ in entries:
        where = "" if tensors is None else f"tensors[{name!r}]: "
        if shape_ is None or dtype_ is None:
            raise TypeError(f"{where}shape and dtype are required")
        for side, value in (("src", src_), ("dst", dst_)):
            if not isinstance(value, Layout):
                raise TypeError(f"{where}{side} {value!r}: expected an mc.Layout")
    return _core.plan([(n, list(sh), str(dt), s_, d_) for n, sh, dt, s_, d_ in entries],
                      tensors is not None, cluster, strategy, balance, split, chunk_bytes,
                      search_effort, bucket_bytes)


class ModelBatch:
    """A model's weight sync as mc.plan takes it: `tensors` = {name: (shape, dtype, src, dst)}
    in the model's parameter order, on `cluster` (the hosts both sides need)."""

    def __init__(self, tensors, cluster):
        self.tensors = tensors
        self.cluster = cluster

    def __repr__(self):
        return f"ModelBatch({len(self.tensors)} tensors, {self.cluster!r})"


def model_batch(*, arch="llama", hidden, layers, heads, kv_heads=0, ffn, vocab, positions=2048,
                dtype="bfloat16", train="tp=1", serve="tp=1", cluster):
    """Every parameter of a llama- or gpt-like model with its trainer and serving layouts, as
    `meshcast model` writes them (docs/models.md): `train` "tp=T,pp=P,dp=D", `serve`
    "tp=T,pp=P,replicas=R"; `cluster` gives devices per host and links, its host count is
    replaced by the hosts both sides need. Plan it with mc.plan(b.tensors, cluster=b.cluster)."""
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster {cluster!r}: expected an mc.Cluster")
    entries, hosts = _core.model_batch(str(arch), hidden, layers, heads, kv_heads, ffn, vocab,
                                       positions, str(dtype), str(train), str(serve), cluster)

    def layout(parts):
        mesh_shape, devices, spec = parts
        return Layout(Mesh(mesh_shape, devices), spec)

    tensors = {name: (tuple(shape), dtype_, layout(src), layout(dst))
               for name, shape, dtype_, src, dst in entries}
    on = Cluster(hosts, cluster.devices_per_host, cluster.nic_gbps, cluster.dev_gbps,
                 cluster.latency_us, cluster.nics_per_host)
    return ModelBatch(tensors, on)


def _is_torch(value):
    return type(value).__module__.startswith("torch")


def _allocator(like):
    if like is not None and _is_torch(like):
        import torch
        return lambda shape, dtype: torch.empty(shape, dtype=getattr(torch, dtype))
    import numpy
    return lambda shape, dtype: numpy.empty(shape, dtype=dtype)


class Resharder:
    """A plan compiled once for a backend: 'local' (threads in this process) or 'mpi' (one rank
    per device; the rank's device is its rank in comm, which must be MPI.COMM_WORLD).
    `timeout`: seconds compiling or one wait() may block (a peer process that died or hangs)
    before the process prints what it waited in and exits with status 3, so that mpirun stops
    every rank; 0: forever. `max_staging_bytes`: the plan is refused (ValueError, before any byte
    moves) when the memory this process would hold besides the arrays (boxes it relays or keeps
    beside a destination shard, packed messages) is larger; 0: no limit. `staging_bytes` gives
    that memory: allocated once, reused by every run."""

    def __init__(self, plan, backend="local", comm=None, threads=0, timeout=300.0,
                 max_staging_bytes=0):
        if not isinstance(plan, Plan):
            raise TypeError(f"plan {plan!r}: expected an mc.Plan")
        if backend == "mpi" and comm is not None:
            from mpi4py import MPI
            if MPI.Comm.Compare(comm, MPI.COMM_WORLD) not in (MPI.IDENT, MPI.CONGRUENT):
                raise ValueError("comm: expected MPI.COMM_WORLD (rank r plays device r)")
        self._core = _core.Resharder(plan, backend, threads, float(timeout),
                                     int(max_staging_bytes))
        self._names = self._core.tensor_names
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
        (allocated when None) and returns; wait() returns the outputs. The GIL is released while
        the bytes move."""
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
        first = next((a for s in srcs for a in s.values()), None)
        allocate = _allocator(first) if out is None or batched else None
        outputs = self._core.start(srcs, outs, allocate)
        self._out = dict(zip(names, outputs)) if batched else outputs[0]

    def wait(self):
        """Waits for the run started last; returns the outputs, as start() was given them."""
        self.seconds = self._core.wait()
        out, self._out = self._out, None
        return out

    def run(self, src, out=None):
        self.start(src, out)
        return self.wait()


def _slices(box):
    return tuple(slice(lo, hi) for lo, hi in box)


def _empty(box):
    return any(hi <= lo for lo, hi in box)


def shard(array, layout):
    """{device: tile} of a global numpy array or torch tensor; tiles are contiguous (views of
    `array` where they can be)."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout {layout!r}: expected an mc.Layout")
    tiles = _core.tiles(list(array.shape), layout)
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
