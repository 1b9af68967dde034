"""Graph mode on JAX: a recorded graph becomes one ``jax.jit``-compiled
program. Each node runs the graph backend's own kernel on traced arrays (the kernels are the
eager backend's, registered again for the graph backend); a node that no JAX kernel serves runs
its CPU kernel inside the program as a host callback (``jax.pure_callback``), with the output
shapes and dtypes that the shape rules recorded; such nodes in a row, which no kernel between
them reads, are one host callback, one round trip to the host (``_host_run.py``).

The replay is Python, but it runs only while JAX traces the program: a compiled graph's later
calls run the compiled program alone.

In-place updates donate their input buffers: the program opts in to boxfall's ``donate=``
(its attribute ``donates``), and consumes the payloads boxfall offers (the old data of a tensor
written in place, which nothing else holds) with ``jax.jit``'s ``donate_argnums``, so the
device holds one copy of an updated array, not two. A program with a host callback consumes
none: its Python kernel may raise after the inputs were given up, and a failed sync keeps the
graph for a retry.

A program without a host callback says, once traced, that it may run ahead (its attribute
``runs_ahead``): a call of it only dispatches (JAX computes asynchronously) and has no other
effect, so boxfall may launch it while a repeated graph is still being recorded, and the device
computes meanwhile. A host callback's CPU kernel counts its calls, which a run let go would
miscount, so such a program runs at its sync.
"""

from __future__ import annotations

import threading
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

import boxfall as bf

from . import _hooks, _kernels
from ._host_run import HostNode, HostRun

Step = Callable[[Sequence[Any], list[list[Any]]], list[Any]]


_PACKS: dict[tuple[str, tuple[Any, ...]], Any] = {}
"""Packed scalar inputs already on the device, by dtype and values (a float by its bits)."""


def _packed(dtype: np.dtype[Any], values: list[Any]) -> Any:
    """``values`` (Python scalars) as one 1-D array of ``dtype`` on the device: a Python scalar
    handed to a compiled program is copied there at every call (a transfer each, tens of
    microseconds on a TPU), while the values a program sees are mostly the same few (a step's
    factor), so a pack of the same values is the same array. A float too large for a float32
    pack is its infinity, as NumPy converts it beside a float32 array."""
    key = (dtype.str, tuple(v.hex() if type(v) is float else v for v in values))
    got = _PACKS.get(key)
    if got is None:
        if len(_PACKS) >= 1024:
            _PACKS.clear()
        with np.errstate(over="ignore"):
            host = np.array(values, dtype=dtype)
        got = _PACKS[key] = jax.numpy.asarray(host)
    return got


def opaque(arrays: list[Any]) -> list[Any]:
    """The values of a node with no operand (``asarray(-0.0)``, a constant made on the host),
    which are constants of the program, behind an optimization barrier: XLA simplifies with
    the constants it sees (``-0.0 + 0.0`` compiled as ``-0.0``, where ``A + 0`` is taken for
    ``A``), which eager mode, whose values are never constants of a program, never does, so
    graph mode's values would differ from eager mode's."""
    return list(jax.lax.optimization_barrier(tuple(arrays)))


class _Packing:
    """How a program takes its scalar inputs: packed into one 1-D array per dtype, each
    scalar converted to the dtype it meets in its node (``JaxCompiler.scalar_dtypes``), so
    the program has a few inputs however many scalars it reads (600 ``x += 1.0`` made 600
    inputs, whose compile ran past 3 GB) and indexes them inside. The packs' dtypes and
    lengths follow from the graph's key, never from the values."""

    __slots__ = ("dtypes", "slots", "members")

    def __init__(self, scalar_dtypes: Sequence[np.dtype[Any]]) -> None:
        self.dtypes: list[np.dtype[Any]] = []
        """Each pack's dtype, in the order the packs follow the inputs' payloads."""
        self.slots: list[tuple[int, int]] = []
        """Per scalar input: its pack and its place in it."""
        self.members: list[list[int]] = []
        """Per pack: the scalar inputs in it, in order."""
        for j, d in enumerate(scalar_dtypes):
            if d not in self.dtypes:
                self.dtypes.append(d)
                self.members.append([])
            k = self.dtypes.index(d)
            self.slots.append((k, len(self.members[k])))
            self.members[k].append(j)

    def pack(self, values: Sequence[Any]) -> list[Any]:
        """The packs of a run's scalar values, on the device."""
        return [
            _packed(d, [values[j] for j in m])
            for d, m in zip(self.dtypes, self.members, strict=True)
        ]

    def unpack(self, packs: Sequence[Any]) -> list[Any]:
        """The scalars, inside the program (traced): each a 0-d array of its pack's dtype. One
        ``unstack`` a pack (XLA compiled 600 scalars so in 60% of the time 600 indexings
        took)."""
        parts = [jax.numpy.unstack(p) for p in packs]
        return [parts[k][i] for k, i in self.slots]


class _LastScalars:
    """A program's scalar inputs as they were at its last run, and their packs on the device:
    a loop runs a program with the same scalars each time (a step's factor), and deciding them
    again was most of the Python a run adds to JAX's call (about 5 of 13 us on this machine,
    for the workload's 6)."""

    __slots__ = ("last", "packing")

    def __init__(self, packing: _Packing) -> None:
        self.packing = packing
        # One tuple, replaced whole: two threads running the program see one run's three.
        self.last: tuple[tuple[Any, ...], tuple[type, ...], list[Any]] = ((), (), [])

    def of(self, scalars: list[Any]) -> list[Any]:
        values = tuple(scalars)
        types = tuple(map(type, values))
        last_values, last_types, on_device = self.last
        # Equal values of one type are the same value, but for a zero (0.0 == -0.0), which is
        # decided by its bits; a NaN is never equal, and is decided again.
        if values == last_values and types == last_types and 0 not in values:
            return on_device
        on_device = self.packing.pack(values)
        self.last = (values, types, on_device)
        return on_device


def _fitted(value: Any, dtype: np.dtype[Any], op: str) -> np.ndarray:
    """A host callback's result in the dtype the program holds it in: NumPy's int64 is int32
    on a device without 64-bit types, and an int that int32 cannot hold is refused
    (``OverflowError``), as eager mode's narrowing refuses it, never wrapped."""
    a = np.asarray(value)
    if a.dtype != dtype and a.dtype.kind in "iu" and dtype.kind in "iu" and a.size:
        info = np.iinfo(dtype)
        least, greatest = a.min(), a.max()
        if least < info.min or greatest > info.max:
            bad = least if least < info.min else greatest
            raise OverflowError(
                f"'{op}' in a graph's program made the integer {bad}, which {dtype} (the "
                f"device's dtype for its {a.dtype} result) cannot hold"
            )
    return np.asarray(a, dtype=dtype)


_MASKS = 4
"""The donation masks one program compiles for (each a trace and compile of its own); a further
one consumes nothing. A program's mask is normally one: the same tensors written each step."""

DONATE_MIN_BYTES = 1 << 20
"""The least bytes of a buffer a program consumes (``JaxCompiler.donate_min_bytes``'s default):
donation saves device memory and an allocation, which matter for large buffers only, while on
JAX's CPU a donating call of a small program cost more than it saved (``x += y`` synced each
step, against keeping the buffer: about 3x the step at 4 KiB, 1.2x at 256 KiB, 0.7x at 1 MiB,
0.2x at 64 MiB; benches/graph_donate.py)."""


class _Parts:
    """A ``bf.Graph``'s parts, read once: each read of one of its attributes builds its list
    anew, and a step reads them (a graph of 600 nodes read its 600 nodes 600 times, most of
    its compile's Python)."""

    __slots__ = ("device", "inputs", "nodes", "outputs", "scalars")

    def __init__(self, graph: bf.Graph) -> None:
        self.device = graph.device
        self.inputs = graph.inputs
        self.scalars = graph.scalars
        self.nodes = graph.nodes
        self.outputs = graph.outputs


class _Trace:
    """What tracing a graph's program found: ``host``, set where a node runs its CPU kernel as
    a host callback (decided while JAX traces: a kernel may hand a case to the CPU then), or
    where the program checks its values (``checks``: per check, the error NumPy raises where
    it fails, and its message; the program's last output is their flags)."""

    __slots__ = ("checks", "host", "counted", "_tracing")

    def __init__(self) -> None:
        self.host = False
        self.checks: list[tuple[type[Exception], str]] = []
        self.counted = False
        """Whether `bf.metrics.graphs()` has the program's host callbacks (a program traced
        again, its donating form, is the same program)."""
        self._tracing = threading.local()

    @property
    def run(self) -> HostRun | None:
        """The host nodes being gathered into one host callback while this thread traces the
        program (`HostRun`): per thread, since two threads that run one graph for the first
        time trace its program at once."""
        run: HostRun | None = getattr(self._tracing, "run", None)
        return run

    @run.setter
    def run(self, run: HostRun | None) -> None:
        self._tracing.run = run

    @property
    def keeps(self) -> bool:
        """Whether the program consumes none of its inputs: a host callback's Python kernel,
        or a check read after the run, may fail it after the inputs were given up, and a
        failed sync keeps the graph for a retry."""
        return self.host or bool(self.checks)


def _raise_failed(flags: Any, trace: _Trace) -> None:
    """NumPy's error for the first of a program's checks that failed (a singular ``solve``, an
    index out of range), if one did. Reading the flags waits for the program."""
    ok = np.asarray(flags)
    if not ok.all():
        error, message = trace.checks[int(np.argmin(ok))]
        raise error(f"{message} (found when the graph's program ran)")


class _HostCallback(Exception):
    """Raised while a donating program is traced, where it has a host callback: before anything
    ran, so nothing was consumed, and the program runs without donating instead."""


class _Donating(NamedTuple):
    """A program's donating form for one mask: its jit, the payloads it consumes (``given``)
    and keeps (``kept``), by index, and the bytes it consumes."""

    jitted: Any
    given: list[int]
    kept: list[int]
    nbytes: int
    consumed: list[bool]
    """Per payload: whether it is consumed (what ``donate`` is set to)."""


def _compiled_first(jitted: Any) -> Callable[..., Any]:
    """``jitted`` (a ``jax.jit`` function), its first call traced and compiled ahead
    (``lower().compile()`` fills jax.jit's caches) and timed as the graph's compile, not its
    run (``bf.metrics.graphs()``): a program's donating form, made at its first run with a
    mask, whose first call compiles it."""
    compiled = False

    def call(*args: Any) -> Any:
        nonlocal compiled
        if not compiled:
            start = time.perf_counter_ns()
            try:
                jitted.lower(*args).compile()  # consumes nothing: it runs nothing
            finally:
                bf.metrics._compiled_in_run(time.perf_counter_ns() - start)
            compiled = True
        return jitted(*args)

    return call


_UNSEEN: Any = object()
"""A mask a program has not seen yet."""


class JaxCompiler:
    """``compile=`` of a JAX graph backend: ``compiler(graph)`` is the graph's program, a
    function of the inputs' payloads (a list of ``jax.Array``s) giving the outputs'."""

    def __init__(
        self, backend_name: str, x64: bool, devices: Sequence[jax.Device] | None = None
    ) -> None:
        self.backend_name = backend_name
        self.x64 = x64
        # The backend's devices by index ("JAXGraph:1" is devices[1]).
        self.devices = list(devices) if devices else jax.devices()
        self.native: set[str] = set()
        self.compiles = 0
        self.host_callbacks: Counter[str] = Counter()
        """Per operator, how many times a program ran its CPU kernel as a host callback."""
        self.host_constants: Counter[str] = Counter()
        """Per operator, how many times a program's trace ran its CPU kernel for a node with
        no operand (a creation function no JAX kernel serves): its values are a constant of
        the program, computed once per compile, never a host callback."""
        self.untraced: dict[str, str] = {}
        """Per operator of a user's library whose kernel of this backend JAX could not trace:
        why (its calls break the graph instead)."""
        self._donate = True
        self.checks = True
        """Whether the programs check the values of the kernels whose JAX function gives
        numbers where NumPy raises (a singular ``solve``, ``inv`` or ``cholesky``, a ``take``
        out of range), so that the sync raises NumPy's error: a flag read from the device at
        each sync of such a program (on a TPU v5e about 0.4 ms: the bench's workload, a
        ``take`` and a ``solve``, ran at 1.66x ``jax.jit`` at n=4,000 and 1.42x at n=250,000
        with the checks, 1.30x and 1.05x without). False gives JAX's numbers there
        (infinities, NaNs, a clamped index) and saves the read; a change compiles anew."""
        self._least = DONATE_MIN_BYTES
        self._programs: weakref.WeakSet[Any] = weakref.WeakSet()
        """The programs made, whose ``donates`` (what boxfall offers them) follows these."""
        self.donated = 0
        """Input buffers the programs consumed (donated) to hold their results."""
        self.donated_bytes = 0
        """Their bytes."""
        self._last_lowered: Any = None

    def lowered_text(self) -> str:
        """The StableHLO of the program compiled last (``""`` before any), as
        ``jax.jit(f).lower(...).as_text()`` gives a jitted function's: to compare what graph
        mode made of a recording with what jit makes of the same function (a view is a
        ``slice``, not a ``gather``, where its layout is one)."""
        return "" if self._last_lowered is None else str(self._last_lowered.as_text())

    @property
    def donate(self) -> bool:
        """Whether the programs consume (donate) the input buffers boxfall offers them: False
        keeps every one (to compare, or to rule donation out), and boxfall offers none."""
        return self._donate

    @donate.setter
    def donate(self, on: bool) -> None:
        self._donate = bool(on)
        self._publish()

    @property
    def donate_min_bytes(self) -> int:
        """The least bytes of a buffer the programs consume (``DONATE_MIN_BYTES`` unless set);
        boxfall offers no smaller one."""
        return self._least

    @donate_min_bytes.setter
    def donate_min_bytes(self, n: int) -> None:
        self._least = int(n)
        self._publish()

    def _donates(self) -> int | bool:
        """A program's ``donates``: the least bytes it consumes, or False for none."""
        return self._least if self._donate else False

    def _publish(self) -> None:
        for run in list(self._programs):
            run.donates = self._donates()

    def serve(self, names: Sequence[str]) -> None:
        """The operators the backend's JAX kernels serve, as ``register`` names them
        (``"add"``, ``"add.Tensor_Scalar"``): a program runs them on the device."""
        self.native = {"array_api::" + n for n in names}

    def settings(self) -> str:
        """JAX's settings that change what a compile makes, read at each sync (boxfall keys its
        cache of compiled graphs by them, so a change compiles anew and the recompile's reason
        names it): x64, and the default matmul precision, which
        ``jax.default_matmul_precision(...)`` sets for a block of the thread as well."""
        # Read as attributes, which see a context manager's value (``config.read`` refuses
        # these flags); JAX's stubs do not declare them.
        config: Any = jax.config
        return (
            f"x64={config.jax_enable_x64} matmul_precision={config.jax_default_matmul_precision}"
            + ("" if self.checks else " checks=False")
        )

    def _narrowed(self, dtype: str) -> np.dtype[Any]:
        d = np.dtype(dtype)
        if self.x64 or d.name not in _hooks.WIDE:
            return d
        return np.dtype({"i": "int32", "u": "uint32", "f": "float32", "c": "complex64"}[d.kind])

    def __call__(self, whole: bf.Graph) -> Callable[[list[Any]], list[Any]]:
        self.compiles += 1
        graph = _Parts(whole)
        wrap = bf.get_backend(self.backend_name).tensor_from_payload
        # The scalar inputs' values follow the inputs' payloads, packed (`_Packing`); jax.jit
        # traces them, so a new value compiles nothing.
        trace = _Trace()
        steps = [
            self._step(op, args, outs, wrap, graph, trace, i)
            for i, (op, args, outs) in enumerate(graph.nodes)
        ]
        outputs = graph.outputs
        first = len(graph.inputs)
        packing = _Packing(self.scalar_dtypes(graph))

        def program(payloads: list[Any]) -> list[Any]:
            if packing.slots:
                # each scalar in its place after the inputs, as the steps read it
                payloads = payloads[:first] + packing.unpack(payloads[first:])
            values: list[list[Any]] = []
            # Host nodes in a row become one host callback (`HostRun`), made where a kernel
            # reads one of their values or at the end.
            trace.run = HostRun(graph, values)
            # Traced once a compile: nothing the kernels do here is counted (a kernel that hands
            # a traced call to the CPU fallback fails there, and the node runs on the host,
            # counted at each run: `cpu` below), so the figures never depend on which test or
            # call compiled the program.
            with bf.eager(), bf.metrics._uncounted(), _kernels.collecting_checks() as checks:
                for step in steps:
                    values.append(step(payloads, values))
                trace.run.flush()
            sizes, trace.run = trace.run.sizes, None  # it held the trace's values
            if sizes and not trace.counted:
                trace.counted = True
                bf.metrics._host_callback_program(sizes)
            if not self.checks:
                checks.clear()
            trace.checks = [(error, message) for _, error, message in checks]
            if not checks:
                return [values[n][k] for n, k in outputs]
            # Kernels whose JAX function gives numbers where NumPy raises checked their values:
            # the flags are the last output, read when the sync commits the results
            # (`check_results`); the program keeps its inputs (`_Trace.keeps`).
            flags = jax.numpy.stack([ok for ok, _, _ in checks])
            return [values[n][k] for n, k in outputs] + [flags]

        # A program's inputs place it (JAX runs it where its committed arrays are); one with
        # none (creation alone) is placed on the graph's device.
        placed = {} if first else {"out_shardings": self._placement(graph)}
        jit_program = jax.jit(program, **placed)

        def jitted(values: list[Any]) -> Any:
            # The program's first call, where JAX traces and compiles it: done ahead of the
            # call (`lower().compile()` fills jax.jit's caches, so the call compiles nothing)
            # and timed as the graph's compile, not its run (`bf.metrics.graphs()`); every later
            # call goes to the jitted program itself, with nothing in between.
            nonlocal jitted
            start = time.perf_counter_ns()
            try:
                lowered = jit_program.lower(values)
                self._last_lowered = lowered
                lowered.compile()
            finally:
                bf.metrics._compiled_in_run(time.perf_counter_ns() - start)
            jitted = jit_program
            return jit_program(values)

        # Per (offered mask, least bytes): the donating form, or None where it consumes none.
        donating: dict[tuple[tuple[bool, ...], int], _Donating | None] = {}

        def donating_program(mask: tuple[bool, ...], least: int) -> _Donating | None:
            """The program taking the offered payloads of ``least`` bytes or more as its first
            argument, which it consumes, and the others, then the scalars, as its second."""
            # Each input's bytes, from the graph (made once a mask, not read from the arrays).
            sizes = [
                int(np.prod(shape, dtype=np.int64)) * self._narrowed(dtype).itemsize
                for dtype, shape in graph.inputs
            ]
            given = [i for i, m in enumerate(mask) if m and sizes[i] >= least]
            if not given:
                return None
            kept = [i for i in range(first) if i not in given]

            def split(donated: list[Any], rest: list[Any]) -> list[Any]:
                payloads: list[Any] = [None] * first
                for i, p in zip(given, donated, strict=True):
                    payloads[i] = p
                for i, p in zip(kept, rest, strict=False):
                    payloads[i] = p
                outs = program(payloads + rest[len(kept) :])
                if trace.keeps:
                    raise _HostCallback
                return outs

            consumed = [i in given for i in range(first)]
            nbytes = sum(sizes[i] for i in given)
            jitted_split = _compiled_first(jax.jit(split, donate_argnums=0))
            return _Donating(jitted_split, given, kept, nbytes, consumed)

        has_scalars = bool(graph.scalars)
        last = _LastScalars(packing)

        def run(values: list[Any], donate: list[bool] | None = None) -> list[Any]:
            if has_scalars:
                values = values[:first] + last.of(values[first:])
            if donate is None:
                outs = jitted(values)
                # Traced now: a program without a host callback only launches (JAX dispatches
                # it and returns), so boxfall may run it ahead of its graph's sync.
                run.runs_ahead = not trace.host  # type: ignore[attr-defined]
                return checking(outs) if trace.checks else outs
            key = (tuple(donate), self.donate_min_bytes)
            d = donating.get(key, _UNSEEN)
            if d is _UNSEEN:
                d = None
                if self.donate and not trace.keeps and len(donating) < _MASKS:
                    d = donating[key] = donating_program(*key)
            if d is None or not self.donate or trace.keeps:
                donate[:] = [False] * len(donate)  # nothing consumed
                outs = jitted(values)
                run.runs_ahead = not trace.host  # type: ignore[attr-defined]
                return checking(outs) if trace.checks else outs
            donate[:] = d.consumed  # an offered payload under the least bytes is kept
            try:
                outs = d.jitted(
                    [values[i] for i in d.given], [values[i] for i in d.kept] + values[first:]
                )
            except _HostCallback:
                donating.clear()
                donate[:] = [False] * len(donate)
                outs = jitted(values)
                return checking(outs) if trace.checks else outs
            self.donated += len(d.given)
            self.donated_bytes += d.nbytes
            return outs

        # boxfall passes ``donate=`` (which payloads the program may consume) to a function
        # that says it takes it, offering only payloads of ``donates`` bytes or more (read at
        # each run: the setters above change it).
        run.donates = self._donates()  # type: ignore[attr-defined]
        # Until its first run traces it, nothing says whether it has a host callback.
        run.runs_ahead = False  # type: ignore[attr-defined]

        # A checking program's flags by its first output's id, from its run (which only
        # launches: it may run ahead) until the sync commits that run's results and boxfall
        # calls `check_results` with them (the flags read then: a wait for the device).
        unchecked: dict[int, Any] = {}

        def checking(outs: list[Any]) -> list[Any]:
            flags = outs.pop()
            if not outs:  # no result to find it by: checked now
                _raise_failed(flags, trace)
                return outs
            if len(unchecked) >= 16:  # the oldest: a run ahead whose results were let go
                unchecked.pop(next(iter(unchecked)))
            # Its copy to the host starts as soon as the device has it: read at the sync, a
            # TPU's round trip for it alone added 0.35 ms to the bench's workload.
            flags.copy_to_host_async()
            unchecked[id(outs[0])] = flags
            run.checks_results = True  # type: ignore[attr-defined]
            return outs

        def check_results(payloads: list[Any]) -> None:
            flags = unchecked.pop(id(payloads[0]), None) if payloads else None
            if flags is not None:
                _raise_failed(flags, trace)

        run.checks_results = False  # type: ignore[attr-defined]
        run.check_results = check_results  # type: ignore[attr-defined]
        self._programs.add(run)
        return run

    def scalar_dtypes(self, graph: bf.Graph | _Parts) -> list[np.dtype[Any]]:
        """The dtype each scalar input of ``graph`` is converted to, as NumPy converts a Python
        scalar beside an array (NEP 50), on the device: the dtype of the array it meets, where
        its kind takes it (an int beside an integer or a floating array, a float beside a
        floating one; a complex array's real dtype); else its own kind's default dtype (an
        int beside a bool, a float beside an integer). The recorder makes an int a scalar
        input only where that dtype holds it (else a constant), so no conversion overflows."""
        default = {
            "bool": np.dtype(bool),
            "int": self._narrowed("int64"),
            "float": self._narrowed("float64"),
        }
        dtypes = [default[t] for t in graph.scalars]
        for _, args, _ in graph.nodes:
            operand = next((a for a in args if a[0] in ("input", "node")), None)
            if operand is None:
                continue
            if operand[0] == "input":
                name = graph.inputs[operand[1]][0]
            else:
                name = graph.nodes[operand[1]][2][operand[2]][0]
            d = self._narrowed(name)
            if d.kind == "c":
                d = np.dtype(f"f{d.itemsize // 2}")
            for a in args:
                if a[0] == "scalar":
                    t = graph.scalars[a[1]]
                    if (t == "int" and d.kind in "iufV") or (t == "float" and d.kind in "fV"):
                        dtypes[a[1]] = d
        return dtypes

    def _own_kernel(self, op: bf.OpOverload) -> bool:
        """Whether ``op``, an operator of a user's library (``bf.custom_op``, ``lib.define``),
        has a kernel of this backend: a program runs it on traced arrays, as it runs the array
        API's JAX kernels (it was recorded because it has a shape rule)."""
        if op.name.startswith("array_api::"):
            return False
        return op.dispatch_table().get(self.backend_name) == "kernel"

    def _untraceable(self, op: bf.OpOverload, error: Exception) -> Exception:
        """A user's kernel that JAX cannot trace (it reads the values, calls NumPy...): the
        operator is refused on this backend, so its calls break the graph from now on (counted,
        this sync's too: boxfall computes the graph a node at a time, eagerly, where the kernel
        runs), with the reason in ``untraced``, ``bf._boxfall._graph_refusal`` and a warning;
        the program fails with the error returned."""
        reason = (
            f"its {self.backend_name!r} kernel cannot be traced by JAX "
            f"({type(error).__name__}: {error})"
        )
        self.untraced[op.name] = reason
        bf._boxfall._refuse_in_graph(op.name, self.backend_name, reason)
        warnings.warn(
            f"graph mode: '{op.name}' breaks the graph on {self.backend_name!r}: {reason}",
            RuntimeWarning,
            stacklevel=2,
        )
        return RuntimeError(f"'{op.name}': {reason}")

    def _placement(self, graph: bf.Graph | _Parts) -> Any:
        """The sharding of one device that puts a program on ``graph``'s device."""
        index = int(graph.device.rpartition(":")[2] or 0)
        return jax.sharding.SingleDeviceSharding(self.devices[index])

    def _step(
        self,
        op: bf.OpOverload,
        args: tuple[Any, ...],
        outs: list[Any],
        wrap: Any,
        graph: _Parts,
        trace: _Trace,
        index: int,
    ) -> Step:
        kwarg_only = [a.kwarg_only for a in op.schema.arguments]
        names = [a.name for a in op.schema.arguments]
        first_scalar = len(graph.inputs)

        def resolve(
            payloads: Sequence[Any], values: list[list[Any]], tensor: Any, host: bool = False
        ) -> list[Any]:
            got = []
            for a in args:
                if a[0] == "input":
                    got.append(tensor(payloads[a[1]]))
                elif a[0] == "node":
                    v = values[a[1]][a[2]]
                    if not host and trace.run is not None:
                        v = trace.run.read(v)  # a value of the gathered host nodes: made now
                    got.append(tensor(v))
                elif a[0] == "scalar":
                    got.append(payloads[first_scalar + a[1]])
                else:
                    got.append(a[1])
            return got

        def call(values: list[Any]) -> Any:
            pos = [v for v, kw in zip(values, kwarg_only, strict=True) if not kw]
            kws = {n: v for v, n, kw in zip(values, names, kwarg_only, strict=True) if kw}
            return op(*pos, **kws)

        shapes = tuple(jax.ShapeDtypeStruct(tuple(s), self._narrowed(d)) for d, s in outs)
        name = op.name

        positions = [i for i, a in enumerate(args) if a[0] in ("input", "node", "scalar")]
        scalars = {i for i, a in enumerate(args) if a[0] == "scalar"}

        devices = {i for i, a in enumerate(op.schema.arguments) if a.type.startswith("Device")}

        def constant(payloads: Sequence[Any], values: list[list[Any]]) -> list[Any]:
            # A node with no operand (a creation function no JAX kernel serves, or a case one
            # hands to the CPU) reads nothing the program computes: its CPU kernel runs now,
            # while JAX traces, and its values are a constant of the program. Never a host
            # callback without an operand: on a TPU one whose kernel was told the device
            # created there from inside the running program, and the process died.
            self.host_constants[name] += 1
            got = [None if i in devices else a[1] for i, a in enumerate(args)]
            out = call(got)
            out = out if isinstance(out, tuple) else (out,)
            return opaque(
                [
                    jax.numpy.asarray(_fitted(o, s.dtype, name))
                    for o, s in zip(out, shapes, strict=True)
                ]
            )

        def cpu(arrays: list[Any], crossed: list[bool], back: list[bool]) -> tuple[Any, ...]:
            # A CPU fallback of the graph backend at each run of the program: counted in
            # boxfall's figures (`bf.metrics.op_stats`, the report, the pytest plugin) with its
            # time and the bytes that crossed (an operand from the device, ``crossed``; a result
            # that goes back to it, ``back``; not a value passed on within the host callback),
            # as the dispatcher counts an eager one.
            self.host_callbacks[name] += 1
            start = time.perf_counter_ns()
            into = sum(np.asarray(a).nbytes for a, c in zip(arrays, crossed, strict=True) if c)
            kernel_ns, made, error = 0, 0, None
            try:
                # A device argument is the host's (None) for the CPU kernel: told the graph's
                # device, an operator without an array (asarray of host data) would record and
                # sync a graph inside the running program, which a TPU does not survive (the
                # process is killed).
                got = [
                    a[1] if a[0] == "const" and i not in devices else None
                    for i, a in enumerate(args)
                ]
                for i, arr in zip(positions, arrays, strict=True):
                    # a scalar input is a Python scalar again for the CPU kernel
                    got[i] = np.asarray(arr).item() if i in scalars else np.asarray(arr)
                ran = time.perf_counter_ns()
                out = call(got)
                kernel_ns = time.perf_counter_ns() - ran
                out = out if isinstance(out, tuple) else (out,)
                results = tuple(_fitted(o, s.dtype, name) for o, s in zip(out, shapes, strict=True))
                made = sum(r.nbytes for r, b in zip(results, back, strict=True) if b)
                return results
            except BaseException as e:
                error = e
                raise
            finally:
                bf.metrics.record_fallback(
                    op,
                    self.backend_name,
                    fallback_ns=time.perf_counter_ns() - start,
                    kernel_ns=kernel_ns,
                    bytes_to_cpu=into,
                    bytes_from_cpu=made,
                    error=error,
                )

        def on_host(payloads: Sequence[Any], values: list[list[Any]]) -> list[Any]:
            if not positions:
                return constant(payloads, values)
            trace.host = True  # the program keeps its inputs (see `_HostCallback`)
            resolved = resolve(payloads, values, lambda p: p, host=True)
            # Gathered with the host nodes next to it into one host callback (`HostRun`).
            run = trace.run
            assert run is not None
            return run.add(HostNode(index, cpu, [resolved[i] for i in positions], shapes))

        if name not in self.native and not self._own_kernel(op):
            return on_host
        if scalars:
            return self._scalar_step(op, args, shapes, on_host, graph, trace)

        def on_device(payloads: Sequence[Any], values: list[list[Any]]) -> list[Any]:
            try:
                out = call(resolve(payloads, values, wrap))
            except Exception as e:  # noqa: BLE001 - a case the kernel hands to the CPU
                if name not in self.native:  # a user's kernel JAX cannot trace
                    raise self._untraceable(op, e) from e
                return on_host(payloads, values)
            out = out if isinstance(out, tuple) else (out,)
            if not positions:
                return opaque([t.payload for t in out])
            return [t.payload for t in out]

        return on_device

    def _scalar_step(
        self,
        op: bf.OpOverload,
        args: tuple[Any, ...],
        shapes: Any,
        on_host: Step,
        graph: _Parts,
        trace: _Trace,
    ) -> Step:
        """An elementwise operator's scalar overload (``multiply.Tensor_Scalar``) whose scalar
        is a traced input: the JAX function of the tensor-tensor operator on the traced
        values, in the dtype the shape rules recorded, where the eager kernel would compute it
        with JAX too (``_kernels.scalar_fits`` of the tensor's dtype and the scalar's type;
        an int's range was checked when the node was recorded); else on the host."""
        base, _, overload = op.name.removeprefix("array_api::").partition(".")
        if base in _kernels.BINARY and overload in ("Tensor_Scalar", "Scalar_Tensor"):
            fn, kinds = _kernels.BINARY[base]
            tensor = args[0] if overload == "Tensor_Scalar" else args[1]
        elif op.name in _kernels.SCALAR_STEPS:  # `where`, `clip` with a scalar
            fn, kinds, at = _kernels.SCALAR_STEPS[op.name]
            tensor = args[at]
        else:
            return on_host
        if tensor[0] == "input":
            dtype = graph.inputs[tensor[1]][0]
        else:
            dtype = graph.nodes[tensor[1]][2][tensor[2]][0]
        for scalar in (a for a in args if a[0] == "scalar"):
            # a representative of the scalar's type: only its type decides here
            example = {"bool": True, "int": 0, "float": 0.0}[graph.scalars[scalar[1]]]
            if not _kernels.scalar_fits(self._narrowed(dtype), example, kinds):
                return on_host
        (shape,) = shapes
        first = len(graph.inputs)

        def operand(payloads: Sequence[Any], values: list[list[Any]], a: Any) -> Any:
            if a[0] == "input":
                return payloads[a[1]]
            if a[0] == "node":
                v = values[a[1]][a[2]]
                return v if trace.run is None else trace.run.read(v)
            return payloads[first + a[1]] if a[0] == "scalar" else a[1]

        def on_device(payloads: Sequence[Any], values: list[list[Any]]) -> list[Any]:
            out = fn(*(operand(payloads, values, a) for a in args))
            return [out if out.dtype == shape.dtype else out.astype(shape.dtype)]

        return on_device
