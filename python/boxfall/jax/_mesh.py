"""boxfall.jax over a mesh of devices: tensors whose payloads are ``jax.Array``s sharded over a
``jax.sharding.Mesh``, and the CPU fallback per shard.

Each mesh is one boxfall device: a backend of its own (``"JAXMesh"`` for the first mesh asked
for, ``"JAXMesh2"`` for a second, ``"JAXMeshGraph"`` for graph mode's), whose only device,
``"JAXMesh:0"``, is the whole mesh. So tensors of two meshes, or of a mesh and one device, are
tensors of two backends, which boxfall refuses to mix, as it refuses two devices. A tensor's
placement within the mesh is its payload's ``NamedSharding``; the kernels are the JAX backend's
own ``jax.numpy`` kernels, which XLA partitions over the mesh as they are.

The CPU fallback of a mesh backend is this module's boxed fallback (:func:`MeshBackend.fallback`):

- an operator whose output shards come from the same shards of its inputs (:func:`plan`:
  element-wise operators, reductions and scans along unsharded axes, ``astype``, ``where``, and
  what :func:`register_sharding_rule` declares) runs shard by shard: each addressable shard
  goes to the host alone, through the plain JAX backend's CPU fallback on that shard's device
  (``bf.metrics`` counts each), and the results are put together again
  (``jax.make_array_from_single_device_arrays``), so nothing crosses devices or hosts; a call
  whose tensors are all replicated runs once per process;
- any other operator gathers its sharded inputs (counted apart, per operator, as gathered
  bytes), runs once per process, and gives its results the sharding of a sharded input of the
  same shape, else a replicated one.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import boxfall as bf

from . import _graph, _hooks, _kernels


def _mesh_platform(mesh: Any) -> str:
    return str(mesh.devices.flat[0].platform)


class Placement(NamedSharding):
    """The replicated sharding of a mesh, standing where the JAX kernels expect their backend's
    device (they read its ``platform`` and ``jax.device_put`` their results to it)."""

    @property
    def platform(self) -> str:
        return _mesh_platform(self.mesh)


def check_mesh(mesh: Any) -> None:
    """Refuses what boxfall cannot place tensors on: anything but a ``jax.sharding.Mesh``, and
    a mesh with an axis that is not Auto (JAX 0.10.2's ``jax.make_mesh`` makes Explicit axes,
    under which XLA asks an operator such as ``X.T @ X`` of row-sharded ``X`` for its output's
    sharding)."""
    if not isinstance(mesh, jax.sharding.Mesh):
        raise TypeError(f"mesh is a jax.sharding.Mesh, not {type(mesh).__name__}")
    types = getattr(mesh, "axis_types", None)
    auto = getattr(getattr(jax.sharding, "AxisType", None), "Auto", None)
    if types is not None and auto is not None and any(t != auto for t in types):
        raise ValueError(
            f"boxfall.jax takes a mesh of Auto axes; this mesh's axes {mesh.axis_names} are "
            f"{tuple(str(t) for t in types)}: make it with "
            f"axis_types=(jax.sharding.AxisType.Auto,) * {len(mesh.axis_names)}, as "
            f"jax.make_mesh({tuple(mesh.devices.shape)}, {mesh.axis_names}, axis_types=...)"
        )


def axis_size(mesh: Any, entry: Any) -> int:
    """How many parts a ``PartitionSpec`` entry cuts a dimension into."""
    if entry is None:
        return 1
    names = entry if isinstance(entry, tuple) else (entry,)
    return math.prod(int(mesh.shape[n]) for n in names)


def check_divides(sharding: NamedSharding, shape: Sequence[int], what: str = "") -> None:
    """Refuses a shape that ``sharding`` cuts unevenly (boxfall pads nothing): the error names
    the dimension and the mesh axis."""
    spec = tuple(sharding.spec)
    if len(spec) > len(shape):
        raise ValueError(
            f"{what}the sharding {spec} names {len(spec)} dimensions; the array has "
            f"{len(shape)} (shape {tuple(shape)})"
        )
    for dim, entry in enumerate(spec):
        parts = axis_size(sharding.mesh, entry)
        if shape[dim] % parts:
            raise ValueError(
                f"{what}dimension {dim} of shape {tuple(shape)} has {shape[dim]} elements, "
                f"which mesh axis {entry!r} ({parts} devices) does not divide: boxfall pads "
                "nothing; make the dimension a multiple, or leave it unsharded"
            )


class _Stats:
    """Per operator, what the mesh fallback moved: shard-wise calls, bytes per device each
    way, and the gathers (calls and bytes) of the operators that could not run per shard."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ops: dict[str, dict[str, Any]] = {}

    def entry(self, op: str) -> dict[str, Any]:
        found = self.ops.get(op)
        if found is None:
            found = self.ops.setdefault(
                op,
                {
                    "shard_calls": 0,
                    "shard_runs": 0,
                    "bytes_to_cpu": defaultdict(int),
                    "bytes_from_cpu": defaultdict(int),
                    "gathers": 0,
                    "gathered_bytes": 0,
                    "graph_shard_runs": 0,
                },
            )
        return found

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {
                op: {k: dict(v) if isinstance(v, defaultdict) else v for k, v in e.items()}
                for op, e in self.ops.items()
            }


STATS = _Stats()

_RULES: dict[str, Any] = {}
"""Sharding rules by operator name (``"demo::scale"``), :func:`register_sharding_rule`'s."""

_ELEMENTWISE = frozenset(
    "abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_invert "
    "bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos "
    "cosh divide equal exp expm1 floor floor_divide greater greater_equal hypot imag isfinite "
    "isinf isnan less less_equal log log10 log1p log2 logaddexp logical_and logical_not "
    "logical_or logical_xor maximum minimum multiply negative nextafter not_equal positive pow "
    "real reciprocal remainder round sign signbit sin sinh sqrt square subtract tan tanh trunc "
    "astype where".split()
)
_REDUCTIONS = frozenset("sum prod mean std var max min all any argmax argmin".split())
_SCANS = frozenset("cumulative_sum cumulative_prod".split())


def register_sharding_rule(op: Any, rule: str) -> None:
    """Declares how operator ``op`` (a ``bf.OpOverload``, a ``bf.custom_op``, or its name,
    ``"demo::scale"``) shards, beside its CPU kernel: ``"elementwise"`` (each output element
    comes from the inputs' elements at the same place after broadcasting: its outputs' shards
    are computed from the same shards of its inputs), ``"reduction"`` (it reduces over its
    ``axis`` argument and keeps the other axes, as ``sum``), ``"scan"`` (its output has its
    input's shape, each element from the input's along ``axis``, as ``cumulative_sum``), or
    ``"gather"`` (none of these: it gathers). The CPU fallback then runs it per shard on a
    mesh where the rule allows."""
    if rule not in ("elementwise", "reduction", "scan", "gather"):
        raise ValueError(
            f"a sharding rule is 'elementwise', 'reduction', 'scan' or 'gather', not {rule!r}"
        )
    name = getattr(op, "name", op)
    if not isinstance(name, str):
        raise TypeError(f"op is an operator or its name, not {type(op).__name__}")
    _RULES[name] = rule
    if rule == "elementwise" and not name.startswith("array_api::"):
        for mb in _GRAPH_MESHES:
            mb.shard_kernel(name)


def _rule_of(op: Any) -> str:
    name = op.name
    found = _RULES.get(name)
    if found is not None:
        return str(found)
    ns, _, base = name.partition("::")
    if ns != "array_api":
        return "gather"
    if base in _ELEMENTWISE:
        return "elementwise"
    if base in _REDUCTIONS:
        return "reduction"
    if base in _SCANS:
        return "scan"
    return "gather"


def _spec_of(sharding: NamedSharding, ndim: int) -> tuple[Any, ...]:
    spec = tuple(sharding.spec)
    return spec + (None,) * (ndim - len(spec))


def plan(op: Any, args: dict[str, Any], tensors: list[bf.Tensor]) -> tuple[Any, ...] | None:
    """How a call runs per shard: ``(sharding, out_spec)`` with the inputs' common sharding
    (None where every tensor is replicated: once per process) and the outputs' spec; None where
    it cannot (the fallback gathers)."""
    if any(a.is_write for a in op.schema.arguments):
        return None
    rule = _rule_of(op)
    if rule == "gather":
        return None
    sharded = [t for t in tensors if not t.payload.sharding.is_fully_replicated]
    if not sharded:
        return (None, None)
    first = sharded[0]
    sharding, shape = first.payload.sharding, tuple(first.shape)
    if not isinstance(sharding, NamedSharding):
        return None
    for t in sharded[1:]:
        if tuple(t.shape) != shape or t.payload.sharding != sharding:
            return None
    spec = _spec_of(sharding, len(shape))
    cut = {d for d, e in enumerate(spec) if e is not None}
    try:
        check_divides(sharding, shape)
    except ValueError:
        return None
    if rule == "elementwise":
        # A replicated operand broadcast against the shards must not span a sharded axis.
        for t in tensors:
            if t in sharded:
                continue
            lead = len(shape) - t.ndim
            if lead < 0 or any(t.shape[d - lead] != 1 for d in cut if d >= lead):
                return None
        return (sharding, spec)
    axis = args.get("axis")
    if rule == "scan":
        if axis is None and len(shape) > 1:
            return None
        a = 0 if axis is None else axis % len(shape)
        return None if a in cut else (sharding, spec)
    if axis is None:
        return None
    axes = {a % len(shape) for a in ([axis] if isinstance(axis, int) else axis)}
    if axes & cut:
        return None
    if args.get("keepdims"):
        return (sharding, tuple(None if d in axes else e for d, e in enumerate(spec)))
    return (sharding, tuple(e for d, e in enumerate(spec) if d not in axes))


def _tensors(stack: Sequence[Any], name: str) -> list[bf.Tensor]:
    found = []
    for v in stack:
        items = v if isinstance(v, (list, tuple)) else (v,)
        for x in items:
            if isinstance(x, bf.Tensor) and x.device.partition(":")[0] == name:
                found.append(x)
    return found


def _call_parts(op: Any, stack: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    args, kwargs = [], {}
    for a, v in zip(op.schema.arguments, stack, strict=False):
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    return args, kwargs


class MeshHooks(_hooks.JaxHooks):
    """The transfer hooks of a mesh's backend: payloads are ``jax.Array``s on the mesh. A host
    array comes to the mesh with the sharding the fallback asked for (``placing``) where its
    shape is that one's, else replicated; a payload goes to the host whole (gathered from
    every process where it spans several)."""

    def __init__(self, mesh: jax.sharding.Mesh) -> None:
        super().__init__(list(mesh.devices.flat))
        self.mesh = mesh
        self.replicated = Placement(mesh, PartitionSpec())
        self._local = threading.local()

    def placing(self, shardings: dict[tuple[int, ...], NamedSharding]) -> Any:
        """A context in which ``from_cpu`` places an array of one of these shapes with its
        sharding (a gathering fallback's results)."""
        hooks = self

        class _Placing:
            def __enter__(self) -> None:
                hooks._local.shardings = shardings

            def __exit__(self, *exc: object) -> None:
                hooks._local.shardings = None

        return _Placing()

    def sharding_for(self, shape: tuple[int, ...]) -> NamedSharding:
        shardings = getattr(self._local, "shardings", None)
        if shardings:
            found = shardings.get(tuple(shape))
            if found is not None:
                return found
        return self.replicated

    def to_cpu(self, payload: jax.Array) -> np.ndarray:
        if payload.is_fully_addressable:
            return np.asarray(payload)
        if payload.sharding.is_fully_replicated:
            return np.asarray(payload.addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(payload, tiled=True))

    def to_cpu_many(self, payloads: list[jax.Array]) -> list[np.ndarray]:
        return [self.to_cpu(p) for p in payloads]

    def from_cpu(self, array: np.ndarray, *, device: int = 0) -> jax.Array:
        return place(array, self.sharding_for(array.shape))

    def copy_from_cpu(self, payload: jax.Array, array: np.ndarray) -> jax.Array:
        sharding = payload.sharding if tuple(array.shape) == tuple(payload.shape) else None
        return place(array, sharding or self.replicated)

    def no_device(self, index: Any) -> str:
        return f"a mesh's backend has one device, index 0 (the mesh), not {index}"


def place(array: np.ndarray, sharding: Any) -> jax.Array:
    """``array``'s values (the same in every process) as a ``jax.Array`` of ``sharding``, each
    process making its own shards only; copied first on JAX's CPU, whose ``device_put`` of a
    NumPy array keeps sharing its memory (``_hooks.put``)."""
    if next(iter(sharding.device_set)).platform == "cpu":
        array = np.array(array, copy=True, order="C")
    if isinstance(sharding, NamedSharding) and not sharding.is_fully_replicated:
        check_divides(sharding, array.shape)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def from_shards(
    shape: tuple[int, ...], sharding: NamedSharding, arrays: list[jax.Array]
) -> jax.Array:
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)


class MeshBackend:
    """One mesh's backends (eager, and graph mode's once asked for) and its fallback."""

    def __init__(self, mesh: jax.sharding.Mesh, name: str, register: Callable[..., Any]) -> None:
        self.mesh = mesh
        self.name = name
        self.hooks = MeshHooks(mesh)
        self._register = register
        self.backend, _ = register(name, self.hooks, None, self.fallback_for(name))
        self.graph_name = name.replace("JAXMesh", "JAXMeshGraph", 1)
        self.graph: Any = None

    def graph_compiler(self) -> Any:
        if self.graph is None:
            compiler = MeshCompiler(self.graph_name, self.hooks)
            _, names = self._register(
                self.graph_name, self.hooks, compiler, self.fallback_for(self.graph_name)
            )
            compiler.serve(names)
            self.graph = compiler
            _GRAPH_MESHES.append(self)
            for op, rule in list(_RULES.items()):
                if rule == "elementwise" and not op.startswith("array_api::"):
                    self.shard_kernel(op)
        return self.graph

    def shard_kernel(self, name: str) -> None:
        """Registers, for graph mode's backend, the kernel of ``name``, a user's operator
        declared element-wise that has a CPU kernel only: in a program, its CPU kernel runs as
        a host callback per shard, inside ``jax.shard_map`` (without it XLA would bring the
        operands whole to one device); on arrays (a graph break, ``bf.eager()``), the CPU
        fallback per shard."""
        op = bf._boxfall.find_op(name)
        if op.dispatch_table().get(self.graph_name) == "kernel":
            return
        library = bf.Library(name.partition("::")[0], "IMPL")
        library.impl(op, _shard_mapped(op, self), self.graph_name)
        library._for_process_life()
        _KERNEL_LIBRARIES.append(library)

    def sharding(self, device: Any) -> NamedSharding | None:
        """The sharding a ``device=`` argument names on this mesh: a ``PartitionSpec`` (read on
        the mesh), a ``NamedSharding`` of the mesh; None for anything else."""
        if isinstance(device, PartitionSpec):
            for entry in device:
                for axis in entry if isinstance(entry, tuple) else (entry,):
                    if axis is not None and axis not in self.mesh.axis_names:
                        raise ValueError(
                            f"the PartitionSpec {device} names the axis {axis!r}, which the "
                            f"namespace's mesh does not have: its axes are {self.mesh.axis_names}"
                        )
            return NamedSharding(self.mesh, device)
        if isinstance(device, NamedSharding):
            if device.mesh != self.mesh:
                raise ValueError(
                    f"the sharding's mesh {device.mesh} is not this namespace's mesh {self.mesh}"
                )
            return device
        return None

    def fallback_for(self, name: str) -> Callable[..., None]:
        hooks = self.hooks
        eager = _eager_backend()

        def fallback(op: Any, keys: Any, stack: list[Any]) -> None:
            tensors = _tensors(stack, name)
            args, kwargs = _call_parts(op, stack)
            named = {a.name: v for a, v in zip(op.schema.arguments, stack, strict=False)}
            planned = plan(op, named, tensors) if tensors else None
            if planned is None:
                _gather(op, keys, stack, tensors, hooks)
                return
            out = _per_shard(op, args, kwargs, tensors, planned, hooks, eager, name)
            stack[:] = list(out) if isinstance(out, tuple) else [out]

        fallback.__name__ = fallback.__qualname__ = f"mesh_fallback_{name}"
        return fallback


def _eager_backend() -> Any:
    """The plain JAX backend and its devices, whose CPU fallback serves each shard."""
    from . import backend, device_hooks

    return backend, {d: i for i, d in enumerate(device_hooks.devices)}


def _gather(
    op: Any, keys: Any, stack: list[Any], tensors: list[bf.Tensor], hooks: MeshHooks
) -> None:
    gathered = sum(t.payload.nbytes for t in tensors if not t.payload.sharding.is_fully_replicated)
    shardings: dict[tuple[int, ...], NamedSharding] = {}
    for t in tensors:
        s = t.payload.sharding
        if not s.is_fully_replicated and isinstance(s, NamedSharding):
            shardings.setdefault(tuple(t.shape), s)
    if gathered:  # a call of replicated tensors alone runs once per process, gathering nothing
        with STATS.lock:
            entry = STATS.entry(op.name)
            entry["gathers"] += 1
            entry["gathered_bytes"] += gathered
    with hooks.placing(shardings):
        bf.cpu_fallback(op, keys, stack)


def _per_shard(
    op: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    tensors: list[bf.Tensor],
    planned: tuple[Any, ...],
    hooks: MeshHooks,
    eager: Any,
    name: str,
) -> Any:
    sharding, out_spec = planned
    jax_backend, index_of = eager
    mesh = hooks.mesh
    order = {d: i for i, d in enumerate(mesh.devices.flat)}
    if sharding is None:
        # Every tensor replicated: this process's devices hold one block, the whole array.
        devices = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
        block: dict[Any, Any] = {d: () for d in devices}
    else:
        # In the mesh's order, so each process walks its shards alike.
        devices = sorted(sharding.addressable_devices, key=lambda d: order[d])
        where = sharding.addressable_devices_indices_map(tuple(tensors[0].shape))
        block = {d: tuple((i.start, i.stop, i.step) for i in where[d]) for d in devices}
    # One CPU kernel run per distinct block: a block that several devices hold (replicated
    # along a mesh axis, or wholly) runs on the first of them, and its result is copied to the
    # others, device to device.
    runner: dict[Any, Any] = {}
    for d in devices:
        runner.setdefault(block[d], d)
    runs = list(runner.values())
    shards: dict[int, dict[Any, jax.Array]] = {}
    for t in tensors:
        shards[id(t)] = {s.device: s.data for s in t.payload.addressable_shards}
    moved_in: dict[str, int] = defaultdict(int)
    moved_out: dict[str, int] = defaultdict(int)
    results: dict[Any, list[Any]] = {}
    for d in runs:

        def local(v: Any, d: Any = d) -> Any:
            if isinstance(v, bf.Tensor) and id(v) in shards:
                data = shards[id(v)][d]
                moved_in[str(d)] += data.nbytes
                return jax_backend.tensor_from_payload(data, index_of[d])
            if isinstance(v, list):
                return [local(x) for x in v]
            return v

        out = bf.call_fallback(
            bf.cpu_fallback,
            op,
            *[local(a) for a in args],
            **{k: local(v) for k, v in kwargs.items()},
        )
        outs = out if isinstance(out, tuple) else (out,)
        payloads = []
        for o in outs:
            p = o.payload
            moved_out[str(d)] += p.nbytes
            payloads.append(p)
        results[d] = payloads
    with STATS.lock:
        entry = STATS.entry(op.name)
        entry["shard_calls"] += 1
        entry["shard_runs"] += len(runs)
        for k, v in moved_in.items():
            entry["bytes_to_cpu"][k] += v
        for k, v in moved_out.items():
            entry["bytes_from_cpu"][k] += v
    backend = bf.get_backend(name)
    wrapped = []
    for at in range(len(results[runs[0]])):
        arrays = []
        for d in devices:
            ran = runner[block[d]]
            made = results[ran][at]
            arrays.append(made if d == ran else jax.device_put(made, d))
        local_shape = tuple(arrays[0].shape)
        if sharding is None:
            out_sharding = NamedSharding(mesh, PartitionSpec())
            shape = local_shape
        else:
            spec = tuple(out_spec)
            if len(local_shape) < len(spec):
                raise ValueError(
                    f"{op.name}: its sharding rule ({_rule_of(op)!r}) gives results of "
                    f"{len(spec)} dimensions; its CPU kernel returned a shard of shape "
                    f"{local_shape} on the mesh backend {name}"
                )
            # A result broadcast to more dimensions than its operands has them in front.
            spec = (None,) * (len(local_shape) - len(spec)) + spec
            shape = tuple(n * axis_size(mesh, e) for n, e in zip(local_shape, spec, strict=True))
            out_sharding = NamedSharding(mesh, PartitionSpec(*spec))
        wrapped.append(backend.tensor_from_payload(from_shards(shape, out_sharding, arrays), 0))
    return tuple(wrapped) if len(wrapped) > 1 else wrapped[0]


_GRAPH_MESHES: list[MeshBackend] = []
"""The meshes whose graph mode is registered: a rule declared later gives them its kernel."""
_KERNEL_LIBRARIES: list[bf.Library] = []


def _narrowed(dtype: str) -> np.dtype[Any]:
    from . import X64

    d = np.dtype(dtype)
    if X64 or d.name not in _hooks.WIDE:
        return d
    return np.dtype({"i": "int32", "u": "uint32", "f": "float32", "c": "complex64"}[d.kind])


def _shard_mapped(op: Any, mb: MeshBackend) -> Callable[..., Any]:
    """The graph backend's kernel of ``op`` (element-wise, a CPU kernel only)."""
    mesh = mb.mesh
    axes = tuple(mesh.axis_names)
    along = axes[0] if len(axes) == 1 else axes
    parts = int(mesh.size)
    shard_map = getattr(jax, "shard_map", None)
    eager = mb.fallback_for(mb.graph_name)
    wrap = bf.get_backend(mb.graph_name).tensor_from_payload

    def kernel(*args: Any, **kwargs: Any) -> Any:
        metas = bf._boxfall._output_metas(op.name, *args, **kwargs)
        values = list(args) + list(kwargs.values())
        traced = any(
            isinstance(v, jax.core.Tracer)
            or (isinstance(v, bf.Tensor) and isinstance(v.payload, jax.core.Tracer))
            for v in values
        )
        if not traced or metas is None:
            return bf.call_fallback(eager, op, *args, **kwargs)
        shape = tuple(metas[0][1])
        cut = shard_map is not None and bool(shape) and shape[0] % parts == 0
        operands: list[Any] = []
        specs: list[Any] = []

        def take(v: Any) -> Any:
            if isinstance(v, bf.Tensor):
                p = v.payload
                rows = cut and p.ndim == len(shape) and p.shape[0] == shape[0]
                operands.append(p)
                specs.append(PartitionSpec(along) if rows else PartitionSpec())
                return ("operand", len(operands) - 1, False)
            if isinstance(v, jax.core.Tracer):  # a Python scalar, an input of the program
                operands.append(v)
                specs.append(PartitionSpec())
                return ("operand", len(operands) - 1, True)
            if isinstance(v, list):
                return ("list", [take(x) for x in v])
            return ("const", v)

        pos = [take(a) for a in args]
        kws = {k: take(v) for k, v in kwargs.items()}
        outs = [
            (_narrowed(d), tuple(s), cut and len(s) == len(shape) and s[0] == shape[0])
            for d, s in metas
        ]
        blocks = tuple(
            jax.ShapeDtypeStruct((s[0] // parts, *s[1:]) if rows else s, d) for d, s, rows in outs
        )

        def host(*arrays: Any) -> tuple[Any, ...]:
            def back(slot: Any) -> Any:
                if slot[0] == "operand":
                    a = np.asarray(arrays[slot[1]])
                    return a.item() if slot[2] else a
                if slot[0] == "list":
                    return [back(x) for x in slot[1]]
                return slot[1]

            with STATS.lock:
                entry = STATS.entry(op.name)
                entry["graph_shard_runs"] += 1
            got = op(*[back(a) for a in pos], **{k: back(v) for k, v in kws.items()})
            got = got if isinstance(got, tuple) else (got,)
            return tuple(np.asarray(g, dtype=b.dtype) for g, b in zip(got, blocks, strict=True))

        def per_block(*arrays: Any) -> Any:
            return jax.pure_callback(host, blocks, *arrays)

        if cut:
            mapped = shard_map(  # type: ignore[misc]
                per_block,
                mesh=mesh,
                in_specs=tuple(specs),
                out_specs=tuple(
                    PartitionSpec(along) if rows else PartitionSpec() for _, _, rows in outs
                ),
                check_vma=False,
            )
            made = mapped(*operands)
        else:
            made = per_block(*operands)
        wrapped = [wrap(m) for m in made]
        return tuple(wrapped) if len(wrapped) > 1 else wrapped[0]

    kernel.__name__ = kernel.__qualname__ = f"shard_mapped_{op.name.replace('::', '_')}"
    return kernel


class MeshCompiler(_graph.JaxCompiler):
    """Graph mode's compiler on a mesh: a program with no inputs is placed on the mesh,
    replicated; one with inputs runs where their shardings put it (``jax.jit`` compiles a
    program per set of input shardings, keyed by them)."""

    def __init__(self, backend_name: str, hooks: MeshHooks) -> None:
        from . import X64

        super().__init__(backend_name, X64, hooks.devices)
        self.replicated = hooks.replicated

    def _placement(self, graph: Any) -> Any:
        return self.replicated

    def __call__(self, whole: bf.Graph) -> Callable[[list[Any]], list[Any]]:
        # An operator with no kernel here would run its CPU kernel as one host callback, on
        # operands XLA gathers to one device: on a mesh it breaks the graph instead, from the
        # next recording on (this program has it already), and runs eagerly, per shard where it
        # can, else gathering, counted (``mesh_stats``).
        for op, _, _ in whole.nodes:
            name = op.name
            if name in self.native or op.dispatch_table().get(self.backend_name) == "kernel":
                continue
            if bf._boxfall._graph_refusal(name, self.backend_name) is None:
                bf._boxfall._refuse_in_graph(
                    name,
                    self.backend_name,
                    "on a mesh its CPU kernel runs eagerly (per shard where its sharding rule "
                    "allows), not as a host callback on operands gathered to one device",
                )
        return super().__call__(whole)


def register_kernels(backend: bf.Backend, hooks: MeshHooks) -> tuple[bf.Library, list[str]]:
    """The JAX kernels of a mesh's backend: those of one device, placing what they make on the
    mesh, replicated."""
    return _kernels.register(
        backend,
        hooks.replicated,  # type: ignore[arg-type]
        in_place=_hooks.takes("view_write"),
        devices=[hooks.replicated],  # type: ignore[list-item]
    )


def stats() -> dict[str, dict[str, Any]]:
    """Per operator, what the CPU fallback on a mesh moved: ``shard_calls`` (calls run per
    shard), ``shard_runs`` (CPU kernel runs they took: one per distinct block a process
    holds, so one per process for replicated tensors), ``bytes_to_cpu``/``bytes_from_cpu``
    (per device, by its name), ``gathers`` (calls that gathered their sharded inputs),
    ``gathered_bytes``, and
    ``graph_shard_runs`` (host callbacks a graph's program ran per shard, inside
    ``jax.shard_map``)."""
    return STATS.snapshot()


def reset_stats() -> None:
    """Forgets :func:`stats`' counts."""
    with STATS.lock:
        STATS.ops.clear()


def _size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            break
    return f"{n:.1f} {unit}"


def report_section() -> str | None:
    """``bf.metrics.report()``'s lines for the CPU fallback on meshes: per operator, its calls
    run per shard (CPU kernel runs, bytes each way, how many devices and the most one moved)
    and its gathers (calls, bytes), the operators that gathered first; None where none ran."""
    found = stats()
    if not found:
        return None
    lines = ["CPU fallback on a mesh (boxfall.jax): per shard, and gathered"]
    for op, e in sorted(found.items(), key=lambda kv: (-kv[1]["gathered_bytes"], kv[0])):
        parts = []
        if e["shard_calls"]:
            to = e["bytes_to_cpu"]
            parts.append(
                f"{e['shard_calls']} per shard ({e['shard_runs']} runs, "
                f"{_size(sum(to.values()))} to the host from {len(to)} devices, at most "
                f"{_size(max(to.values(), default=0))} each; "
                f"{_size(sum(e['bytes_from_cpu'].values()))} back)"
            )
        if e["graph_shard_runs"]:
            parts.append(f"{e['graph_shard_runs']} host callbacks per shard in graph mode")
        if e["gathers"]:
            parts.append(f"{e['gathers']} gathered ({_size(e['gathered_bytes'])})")
        if parts:
            lines.append(f"  {op}: " + "; ".join(parts))
    return "\n".join(lines) if len(lines) > 1 else None


bf.metrics._reset_listeners.append(reset_stats)
bf.metrics._report_sections.append(report_section)
