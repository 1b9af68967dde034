"""A real workload on a device, to measure what the CPU fallback costs it: k-means (Lloyd's
iterations) then a ridge fit by the normal equations, written with the array API standard's
functions only, so that it runs unchanged on NumPy and on any ``boxfall.array_api`` namespace.

``python -m boxfall bench`` prints its figures and ``tests/python/test_workload.py`` checks them;
both use :func:`run`, :func:`setups` and :func:`least_needed` from here.

The setups (:func:`setups`):

- ``numpy``: NumPy itself, the baseline of the times.
- ``fallback``: a backend written in Python (:class:`Buffer` payloads, a private NumPy copy
  each: "device memory" the CPU kernels cannot read) with no kernel of its own, every operator
  through ``bf.cpu_fallback``.
- ``kernels``: the same backend with native kernels (NumPy on the payloads, no transfer) for
  ``add``, ``subtract``, ``multiply`` (tensor-tensor and tensor-scalar), ``sum`` and ``matmul``:
  the kernels a device gets first.
- ``native``: boxfall's Native backend (host memory: nothing has to cross).

Bytes moved are what ``bf.metrics`` counts for the backend: every operator's ``bytes_to_cpu``
and ``bytes_from_cpu``, plus ``bf.metrics.transfers()``: the results the user reads that were
on the device only (the backends are lazy, so a result the CPU fallback made stays on the host
and reading it crosses nothing), and ``bytes_materialized``, the fallback's host results put
on the device because a kernel of the backend read them.
The two Python backends' hooks also count the bytes they are given or give (``hook_bytes``),
which would see what the metrics do not. Both backends have a ``view`` hook (a NumPy view of the
payload's memory), so that a view a kernel of the backend reads (``x.T``, ``centers.T``,
``expand_dims``) is made on the device from its base's payload: the base's payload is made
once (``from_cpu``, counted as materialized) and no view moves its base's bytes again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import boxfall as bf


@dataclass(frozen=True)
class Problem:
    """The workload's size: ``n`` points of ``d`` features, ``k`` clusters, ``iterations`` of
    Lloyd's algorithm, the ridge penalty ``alpha``, and the seed of the data."""

    n: int = 20_000
    d: int = 16
    k: int = 8
    iterations: int = 5
    alpha: float = 1.0
    seed: int = 0


def make_data(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """``k`` well separated Gaussian blobs (float64, ``(n, d)``; point ``i`` in blob ``i % k``)
    and a linear target with noise (``(n, 1)``): the same arrays for the same problem."""
    rng = np.random.default_rng(p.seed)
    means = rng.normal(scale=8.0, size=(p.k, p.d))
    x = means[np.arange(p.n) % p.k] + rng.normal(size=(p.n, p.d))
    w = rng.normal(size=(p.d, 1))
    y = x @ w + 0.1 * rng.normal(size=(p.n, 1))
    return x, y


def kmeans_ridge(xp: Any, x: Any, y: Any, p: Problem) -> tuple[Any, Any, Any]:
    """The workload: ``p.iterations`` of Lloyd's algorithm from the first ``k`` points,
    then ridge regression of ``y`` on ``x`` through ``linalg.solve`` of the normal equations.
    Returns the centers ``(k, d)``, each point's cluster ``(n, 1)`` and the coefficients
    ``(d, 1)``. No step depends on the data's values (a fixed count of iterations), so no value
    is read back before the end."""
    centers, x_sq, ids = _kmeans_start(xp, x, p)
    labels = None
    for _ in range(p.iterations):
        centers, labels = _lloyd_step(xp, x, x_sq, ids, centers)
    return centers, labels, _ridge(xp, x, y, p)


def kmeans_converging(xp: Any, x: Any, p: Problem, tol: float = 1e-3) -> tuple[Any, Any, int]:
    """Lloyd's algorithm until no center moves more than ``tol`` (at most
    ``4 * p.iterations`` steps): the workload's variant that reads a value every step (a
    convergence check), as real k-means does. It starts from ``k`` points of one blob (points
    ``0, k, 2k, ...``), a poor start, so that it takes several steps. Returns the centers, the
    labels and the count of steps."""
    _, x_sq, ids = _kmeans_start(xp, x, p)
    centers = xp.take(x, xp.arange(0, p.k * p.k, p.k), axis=0)
    labels = None
    steps = 0
    while steps < 4 * p.iterations:
        new, labels = _lloyd_step(xp, x, x_sq, ids, centers)
        steps += 1
        moved = float(xp.max(xp.abs(xp.subtract(new, centers))))
        centers = new
        if moved <= tol:
            break
    return centers, labels, steps


def kmeans_ridge_clusters_used(xp: Any, x: Any, y: Any, p: Problem) -> tuple[Any, Any, Any]:
    """The workload with one data-dependent operator between k-means and ridge: which
    clusters hold a point (``unique_values`` of the labels, whose length depends on their
    values). Returns the clusters used, the labels and the coefficients."""
    centers, x_sq, ids = _kmeans_start(xp, x, p)
    labels = None
    for _ in range(p.iterations):
        centers, labels = _lloyd_step(xp, x, x_sq, ids, centers)
    used = xp.unique_values(labels)
    return used, labels, _ridge(xp, x, y, p)


def _kmeans_start(xp: Any, x: Any, p: Problem) -> tuple[Any, Any, Any]:
    """The first centers (the first ``k`` points), each point's squared norm and the clusters'
    ids, a row."""
    centers = xp.take(x, xp.arange(p.k), axis=0)
    x_sq = xp.sum(xp.multiply(x, x), axis=1, keepdims=True)
    ids = xp.expand_dims(xp.arange(p.k), axis=0)
    return centers, x_sq, ids


def _lloyd_step(xp: Any, x: Any, x_sq: Any, ids: Any, centers: Any) -> tuple[Any, Any]:
    """One of Lloyd's iterations: each point to its nearest center, each center to the mean of
    its points (an empty cluster's center goes to the origin's side: its sum over one)."""
    # ||x||^2 - 2 x.c + ||c||^2, the squared distance of each point to each center.
    c_sq = xp.expand_dims(xp.sum(xp.multiply(centers, centers), axis=1), axis=0)
    cross = xp.matmul(x, xp.matrix_transpose(centers))
    dist = xp.add(xp.subtract(x_sq, xp.multiply(cross, 2.0)), c_sq)
    labels = xp.argmin(dist, axis=1, keepdims=True)
    onehot = xp.astype(xp.equal(labels, ids), x.dtype)
    counts = xp.sum(onehot, axis=0)
    sums = xp.matmul(xp.matrix_transpose(onehot), x)
    counts = xp.maximum(counts, xp.ones_like(counts))
    return xp.divide(sums, xp.expand_dims(counts, axis=1)), labels


def _ridge(xp: Any, x: Any, y: Any, p: Problem) -> Any:
    """Ridge regression's coefficients by ``linalg.solve`` of the normal equations."""
    d = x.shape[1]
    xt = xp.matrix_transpose(x)
    gram = xp.add(xp.matmul(xt, x), xp.multiply(xp.eye(d, dtype=x.dtype), p.alpha))
    return xp.linalg.solve(gram, xp.matmul(xt, y))


# -- the backends -----------------------------------------------------------------------------


class Buffer:
    """A payload of the workload's Python backends: a private NumPy array ("device memory")."""

    __slots__ = ("data",)

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        """The contents' shape (boxfall reads a payload's ``shape``)."""
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        """The contents' dtype (boxfall reads a payload's ``dtype``)."""
        return self.data.dtype


@dataclass
class HookBytes:
    """What a backend's hooks moved: bytes given to the host (``to_cpu``) and to the device
    (``from_cpu``, ``copy_from_cpu``)."""

    to_host: int = 0
    to_device: int = 0

    @property
    def total(self) -> int:
        """Both ways."""
        return self.to_host + self.to_device


HOOK_BYTES: dict[str, HookBytes] = {}
"""The bytes each of the workload's Python backends' hooks moved, by backend name."""


def _view(b: Buffer, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Any:
    """The ``view`` hook: a NumPy view of the payload's memory (no byte moves), as a device
    makes a view of its buffer; None for a payload not in C order (the hook's strides count
    elements in C order)."""
    a = b.data
    if not a.flags.c_contiguous:
        return None
    flat = a.reshape(-1)
    item = a.itemsize
    return Buffer(
        np.lib.stride_tricks.as_strided(
            flat[offset:], shape=shape, strides=tuple(s * item for s in strides)
        )
    )


def _hooks(name: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """``to_cpu``, ``from_cpu`` and ``copy_from_cpu`` of the backend ``name``, counting their
    bytes into ``HOOK_BYTES[name]``."""
    counted = HOOK_BYTES.setdefault(name, HookBytes())

    def to_cpu(b: Buffer) -> np.ndarray:
        counted.to_host += b.data.nbytes
        return b.data.copy()

    def from_cpu(a: np.ndarray) -> Buffer:
        counted.to_device += a.nbytes
        return Buffer(np.array(a, copy=True))

    def copy_from_cpu(b: Buffer, a: np.ndarray) -> None:
        counted.to_device += a.nbytes
        b.data = np.array(a, copy=True)

    return to_cpu, from_cpu, copy_from_cpu


FALLBACK_BACKEND = "WorkloadHost"
KERNELS_BACKEND = "WorkloadKernels"

NATIVE_KERNELS = frozenset(
    {
        "add",
        "add.Tensor_Scalar",
        "subtract",
        "subtract.Tensor_Scalar",
        "multiply",
        "multiply.Tensor_Scalar",
        "sum",
        "matmul",
    }
)
"""The operators (overloads of ``boxfall.array_api``) that the ``kernels`` setup's backend runs
with kernels of its own."""

_libraries: list[bf.Library] = []  # kept for the process's life, as the backends are
_registered: dict[str, bf.Backend] = {}


def _register(name: str, kernels: bool) -> bf.Backend:
    """Registers the backend ``name`` once a process (a second call returns the first's)."""
    found = _registered.get(name)
    if found is not None:
        return found
    to_cpu, from_cpu, copy_from_cpu = _hooks(name)
    backend = bf.register_backend(
        name, to_cpu=to_cpu, from_cpu=from_cpu, copy_from_cpu=copy_from_cpu, view=_view
    )
    fb = bf.Library("_", "IMPL")
    fb._for_process_life()
    fb.fallback(bf.cpu_fallback, name)
    _libraries.append(fb)
    if kernels:
        _libraries.append(_register_kernels(backend))
    _registered[name] = backend
    return backend


_KERNELS = ("add", "subtract", "multiply", "sum", "matmul")


def _register_kernels(backend: bf.Backend, names: tuple[str, ...] = _KERNELS) -> bf.Library:
    """Kernels that compute on the payloads with NumPy, for the float tensors of this backend
    they are given (anything else goes to the CPU fallback, as a device's kernels do): those of
    ``names`` (a binary operator's with its ``Tensor_Scalar`` overload)."""
    ops = bf.ops.array_api
    wrap = backend.tensor_from_payload
    mine = backend.name + ":"

    def data(v: Any) -> Any:
        if isinstance(v, bf.Tensor):
            if not v.device.startswith(mine) or v.dtype.kind != "f":
                return None
            return v.payload.data
        return v if isinstance(v, float) else None

    def binary(ufunc: Any, overload: Any) -> Any:
        def kernel(x1: Any, x2: Any) -> Any:
            a, b = data(x1), data(x2)
            if a is None or b is None:
                return bf.call_fallback(bf.cpu_fallback, overload, x1, x2)
            return wrap(Buffer(np.asarray(ufunc(a, b))))

        return kernel

    def sum_(x: Any, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        a = data(x)
        if a is None or dtype is not None or not isinstance(x, bf.Tensor):
            return bf.call_fallback(
                bf.cpu_fallback, ops.sum.default, x, axis=axis, dtype=dtype, keepdims=keepdims
            )
        axes = None if axis is None else tuple(axis)
        return wrap(Buffer(np.asarray(np.sum(a, axis=axes, keepdims=keepdims))))

    def matmul(x1: Any, x2: Any) -> Any:
        a, b = data(x1), data(x2)
        if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
            return bf.call_fallback(bf.cpu_fallback, ops.matmul.default, x1, x2)
        return wrap(Buffer(np.asarray(np.matmul(a, b))))

    lib = bf.Library("array_api", "IMPL")
    lib._for_process_life()
    for name, ufunc in (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply)):
        if name not in names:
            continue
        packet = getattr(ops, name)
        lib.impl(name, binary(ufunc, packet.default), backend.name)
        lib.impl(
            f"{name}.Tensor_Scalar",
            binary(ufunc, packet.Tensor_Scalar),
            backend.name,
        )
    for name, kernel in (("sum", sum_), ("matmul", matmul)):
        if name in names:
            lib.impl(name, kernel, backend.name)
    return lib


# -- setups and runs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """Where the workload runs: a name, the namespace, the backend (None for NumPy) and the
    operators served by kernels of the backend's own (what :func:`least_needed` places on the
    device)."""

    name: str
    xp: Any
    backend: str | None
    native: frozenset[str] = field(default_factory=frozenset)
    host_memory: bool = False


def setups() -> list[Setup]:
    """The four setups, registering the workload's two Python backends on first use."""
    import boxfall.array_api as bxp

    _register(FALLBACK_BACKEND, kernels=False)
    _register(KERNELS_BACKEND, kernels=True)
    return [
        Setup("numpy", np, None),
        Setup("fallback", bxp.namespace(FALLBACK_BACKEND), FALLBACK_BACKEND),
        Setup("kernels", bxp.namespace(KERNELS_BACKEND), KERNELS_BACKEND, NATIVE_KERNELS),
        Setup("native", bxp.namespace("Native"), "Native", host_memory=True),
    ]


@dataclass(frozen=True)
class Run:
    """One run of the workload on a setup: its results as NumPy arrays, its time, and the bytes
    the metrics counted on the setup's backend (0 for NumPy): ``fallback_bytes`` (every
    operator's ``bytes_to_cpu + bytes_from_cpu``), ``by_op`` (the same per operator),
    ``user_bytes`` (``bf.metrics.transfers()``, both ways: the reads of results whose values
    were on the device only; a read of a host result crosses nothing and is not counted),
    ``materialized_bytes`` (``bf.metrics.transfers()``'s ``bytes_materialized``: the fallback's
    host results a kernel of the backend needed on the device) and the hooks' own count."""

    results: tuple[np.ndarray, ...]
    seconds: float
    fallback_bytes: int
    by_op: dict[str, int]
    user_bytes: int
    materialized_bytes: int
    hook_bytes: int

    @property
    def moved(self) -> int:
        """The bytes moved: the fallback's, the user's, and the fallback's host results put on
        the device later (residency)."""
        return self.fallback_bytes + self.user_bytes + self.materialized_bytes


def _on_device(s: Setup, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    if s.backend is None:
        return x, y
    return s.xp.asarray(x), s.xp.asarray(y)


def run(s: Setup, p: Problem, data: tuple[np.ndarray, np.ndarray] | None = None) -> Run:
    """Runs the workload on ``s`` from inputs already on its device (put there before the
    metrics are reset: the user's transfer of the inputs is not the workload's), through to
    the results read back as NumPy arrays (``np.asarray``: counted in
    ``bf.metrics.transfers()``). Resets ``bf.metrics``."""
    x, y = make_data(p) if data is None else data
    dx, dy = _on_device(s, x, y)
    hooks = HOOK_BYTES.get(s.backend or "")
    bf.metrics.reset()
    hooks_before = hooks.total if hooks else 0
    start = time.perf_counter()
    results = tuple(np.asarray(r) for r in kmeans_ridge(s.xp, dx, dy, p))
    seconds = time.perf_counter() - start
    by_op: dict[str, int] = {}
    user = materialized = 0
    if s.backend is not None:
        for op, stats in bf.metrics.to_dict().items():
            f = stats["backends"].get(s.backend)
            if f is not None and f["bytes_to_cpu"] + f["bytes_from_cpu"]:
                by_op[op] = f["bytes_to_cpu"] + f["bytes_from_cpu"]
        t = bf.metrics.transfers().get(s.backend, {})
        user = t.get("bytes_to_host", 0) + t.get("bytes_to_device", 0)
        materialized = t.get("bytes_materialized", 0)
    hook_total = (hooks.total if hooks else 0) - hooks_before
    return Run(results, seconds, sum(by_op.values()), by_op, user, materialized, hook_total)


def timed(s: Setup, p: Problem, rounds: int) -> list[tuple[float, float]]:
    """``rounds`` paired rounds of (the workload on ``s``, the workload on NumPy), in seconds,
    each pair back to back on the same data (the bench's medians and spread come from them)."""
    data = make_data(p)
    numpy_setup = Setup("numpy", np, None)
    out = []
    for _ in range(rounds):
        out.append((run(s, p, data).seconds, run(numpy_setup, p, data).seconds))
    return out


# -- the least data movement a placement allows -----------------------------------------------

VIEWS = frozenset(
    {"matrix_transpose", "permute_dims", "expand_dims", "squeeze", "reshape", "broadcast_to"}
)
"""The functions that give a view of their argument (``boxfall.array_api._views``): no kernel
runs and nothing moves to make one."""


@dataclass
class _Value:
    nbytes: int
    side: str  # "device" or "host"
    root: int  # the value whose storage it is (itself, or a view's base)


@dataclass
class _Step:
    name: str  # the operator's overload, as NATIVE_KERNELS names it
    args: list[int]  # the values it reads, as passed (a view as itself)
    outs: list[int]


class _Trace:
    """A namespace over NumPy that records each call: which function (and overload), which
    arrays it read and which it made. What :func:`least_needed` computes the data flow from."""

    def __init__(self, module: Any, trace: _Flow) -> None:
        self._module = module
        self._flow = trace

    @property
    def linalg(self) -> _Trace:
        return _Trace(self._module.linalg, self._flow)

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            self._flow.record(name, args, kwargs, out)
            return out

        return call


class _Flow:
    def __init__(self) -> None:
        self.values: list[_Value] = []
        self.steps: list[_Step] = []
        self._ids: dict[int, int] = {}
        self._keep: list[Any] = []  # the arrays, so that their ids stay theirs

    def value(self, a: np.ndarray, side: str, root: int | None = None) -> int:
        i = len(self.values)
        self.values.append(_Value(a.nbytes, side, i if root is None else root))
        self._ids[id(a)] = i
        self._keep.append(a)
        return i

    def known(self, a: Any) -> int | None:
        return self._ids.get(id(a)) if isinstance(a, np.ndarray) else None

    def record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        read = [i for a in (*args, *kwargs.values()) if (i := self.known(a)) is not None]
        if name in VIEWS:
            self.value(out, "view", self.values[read[0]].root)
            return
        if name in ("add", "subtract", "multiply") and len(read) == 1:
            name = f"{name}.Tensor_Scalar" if self.known(args[0]) is not None else name
        outs = [self.value(o, "?") for o in (out if isinstance(out, tuple) else (out,))]
        self.steps.append(_Step("linalg_" + name if name == "solve" else name, read, outs))


@dataclass(frozen=True)
class Needed:
    """The bytes of the workload's data flow for one placement: ``least`` crossing the device
    and the host at the least (:func:`least_needed`), and ``eager``, what a fallback moves when
    it moves every device argument to the CPU and every result back on every call."""

    least: int
    eager: int


def least_needed(p: Problem, native: frozenset[str] = frozenset()) -> Needed:
    """The least bytes that must cross between the device and the host for the workload on a
    backend whose own kernels serve the operators ``native`` (overload names, as
    :data:`NATIVE_KERNELS`) and the CPU fallback every other operator.

    The workload runs once on a recording namespace over NumPy, which gives its data flow: each
    operator called, the arrays it read and the arrays it made. Each array has a side: the
    inputs are on the device (the user put them there); an operator's results are on the
    device if a kernel of the backend made them, on the host if a CPU kernel did; a view is its
    base's storage (making it moves nothing). Then:

    - an array read by an operator of the other side crosses once, with all its bytes (a view
      read there moves its base, once for every view of it): it is kept where it was moved,
      and is never written (the workload writes nothing in place);
    - every result the user reads back (centers, labels, coefficients) that is on the device
      crosses once, to the user; one a CPU kernel made, or one already moved to the host for a
      CPU kernel, is there already.

    ``eager`` is the same flow's bytes as the fallback moves them without residency: every
    operator served by the fallback moves each tensor argument to the CPU (a view with its own
    bytes, one passed twice twice) and each result to the device, each call, and the user's
    reads cross once. A kernel of the backend moves nothing here (a view given to it is made on
    the device from its base's payload, by the backends' ``view`` hook)."""
    x, y = make_data(p)
    flow = _Flow()
    flow.value(x, "device")
    flow.value(y, "device")
    results = kmeans_ridge(_Trace(np, flow), x, y, p)
    least = eager = 0
    crossed: set[tuple[int, str]] = set()
    for step in flow.steps:
        side = "device" if step.name in native else "host"
        for o in step.outs:
            flow.values[o].side = side
        for a in step.args:
            root = flow.values[a].root
            if flow.values[root].side != side and (root, side) not in crossed:
                crossed.add((root, side))
                least += flow.values[root].nbytes
            if side == "host":
                eager += flow.values[a].nbytes
        if side == "host":
            eager += sum(flow.values[o].nbytes for o in step.outs)
    for r in results:
        i = flow.known(r)
        assert i is not None
        root = flow.values[i].root
        if flow.values[root].side == "device" and (root, "host") not in crossed:
            least += flow.values[i].nbytes
        eager += flow.values[i].nbytes
    return Needed(least, eager)


def rows(
    p: Problem, rounds: int
) -> Iterator[tuple[str, Run, Needed | None, list[tuple[float, float]]]]:
    """For each device setup: its name, one run's bytes, the flow's bytes (None on Native, whose
    memory is the host's: nothing has to cross) and ``rounds`` paired timings against NumPy."""
    for s in setups():
        if s.backend is None:
            continue
        r = run(s, p)
        need = None if s.host_memory else least_needed(p, s.native)
        yield s.name, r, need, timed(s, p, rounds)


def median_ratio(times: list[tuple[float, float]]) -> float:
    """The median of the rounds' ratios."""
    return statistics.median(m / b for m, b in times)


__all__ = [
    "FALLBACK_BACKEND",
    "KERNELS_BACKEND",
    "NATIVE_KERNELS",
    "Buffer",
    "HookBytes",
    "Needed",
    "Problem",
    "Run",
    "Setup",
    "kmeans_ridge",
    "least_needed",
    "make_data",
    "median_ratio",
    "rows",
    "run",
    "setups",
    "timed",
]
