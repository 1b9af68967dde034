"""Per-operator CPU-fallback counters.

An operator is named ``ns::name.overload``, or ``ns::name`` for the overload whose name is
empty (``demo::add`` is not ``demo::add.Tensor``), or given as an ``OpOverload``. A name is
known if the operator is defined, or was counted since the last reset; any other is an
:class:`~boxfall.UnknownOperatorError` that lists the closest names, so that a typo does not
read as "never fell back".
"""

from __future__ import annotations

import contextlib
import csv
import os
import threading
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from . import _boxfall

if TYPE_CHECKING:
    from . import OpName


def _name(op: OpName) -> str:
    from . import _op_name

    return _op_name(op)


def counter_value(name: OpName) -> int:
    """How many times the operator went through the CPU fallback (0 if never)."""
    return _boxfall.counter_value(_name(name))


def counters() -> dict[str, int]:
    """Every operator counted since the last reset, with its count."""
    return dict(_boxfall.counters())


def counter_names() -> list[str]:
    """The operators counted since the last reset, sorted."""
    return [n for n, _ in _boxfall.counters()]


#: The figures of an operator, and of each of its backends, in this order (the CSV's columns).
FIELDS = (
    "fallbacks",
    "failures",
    "fallback_ns",
    "to_cpu_ns",
    "kernel_ns",
    "from_cpu_ns",
    "bytes_to_cpu",
    "bytes_from_cpu",
    "kernel_calls",
    "kernel_call_ns",
    "narrowed",
)

#: What ``report`` sorts by.
SORTS = ("time", "count", "bytes", "name")


def op_stats(name: OpName) -> dict[str, Any]:
    """The CPU-fallback figures of one operator: its totals, and ``"backends"``, a dict of the same
    figures per backend name (only backends whose tensors fell back). Zeros, and no backends, if
    it never fell back.

    - ``fallbacks``: calls that reached the CPU fallback, refused and failed ones included, and
      fallbacks recorded by hand (:func:`record_fallback`: a graph program's host callbacks).
    - ``failures``: those that did not run to the end. A refusal is a failure: the fallback policy
      ``"error"`` (or a ``"warn"`` warning turned into an error), a view operator under
      ``views="refuse"`` (or its copy warning turned into an error), a key that is no backend with
      transfer hooks. So is a step that failed: a ``to_cpu``/``from_cpu``/``copy_from_cpu`` hook
      that raised, tensors on two devices, a missing CPU kernel, a CPU kernel that raised or
      returned the wrong values, a write-back that failed.
    - ``fallback_ns``: nanoseconds in the whole fallback; ``to_cpu_ns`` moving the arguments to
      the CPU, ``kernel_ns`` in the CPU kernel, ``from_cpu_ns`` moving the results back and
      writing mutated arguments back. ``to_cpu_ns + kernel_ns + from_cpu_ns <= fallback_ns``
      (the rest is the fallback's own bookkeeping); a refusal takes no time. Where every
      argument is lent rather than copied (Native's memory to a Python kernel or a Rust one),
      the move to the CPU is not timed and adds 0 to ``to_cpu_ns`` (its bytes still count): a
      clock read would cost more than the step. So are the results of a Rust CPU kernel that
      Native takes as they are (``from_cpu_ns``).
    - ``bytes_to_cpu``, ``bytes_from_cpu``: bytes moved each way.
    - ``kernel_calls``: calls of a backend's own kernel of the operator (one registered for a
      backend key other than the CPU: a Python kernel given to ``Library.impl``, or one of
      Native's Rust kernels), beside the fallback's figures, whichever way the call came;
      ``kernel_call_ns``: their time, counted only while :func:`profile` is on. The CPU's
      kernels, composite kernels and fallbacks are not counted here.
    - ``narrowed``: results a backend registered with ``narrow=True`` gave in the 32-bit
      dtype of their kind because its device lacks the 64-bit one asked for or made (a
      ``bf.NarrowingWarning`` the first time per operator and backend).
    - ``last_failure``: the last failed (or refused) fallback's exception since the last
      reset, as ``{"type": class name, "message": text}`` (``{"type": "IndexError", ...}``), or
      None: the operator's last on any backend, and in each backend's figures that backend's
      own.
    """
    return _boxfall.op_stats(_name(name))


def transfers() -> dict[str, dict[str, int]]:
    """The transfers users asked for since the last reset, per backend name, apart from the
    fallback's: ``to_host``/``bytes_to_host`` (``bf.Tensor.numpy()``, ``np.asarray(t)`` and
    ``__array__``, DLPack, ``float(t)`` and the other scalar conversions, ``to_device("cpu")``)
    and ``to_device``/``bytes_to_device`` (``Backend.tensor``, ``asarray`` or ``from_dlpack``
    of host data on a device served by the CPU fallback), each once with its bytes, where the
    values really cross: a read of a tensor whose values are on the host already (a lazy
    backend's host result or current host copy, ``t.residency`` not ``"device"``) crosses
    nothing and is not counted at all. No kernel
    of the backend could avoid them, so they are not in ``op_stats`` and do not rank under
    "implement natively first". Native lends its memory to the host: its reads are not
    transfers. ``materialized``/``bytes_materialized`` count the CPU fallback's results that
    stayed on the host (residency, ``register_backend(lazy=True)``) and were put on the device
    later, when a kernel of the backend, ``t.payload`` or ``t.materialize()`` needed them."""
    return dict(_boxfall.user_transfers())


@contextlib.contextmanager
def profile() -> Iterator[None]:
    """Times the backends' own kernels while it is on (``kernel_call_ns``; their calls are
    always counted in ``kernel_calls``): two clock reads a kernel call, which is why it is not
    always on. Profiles nest; timing stops when the outermost ends."""
    _boxfall.profile_begin()
    try:
        yield
    finally:
        _boxfall.profile_end()


def to_dict() -> dict[str, dict[str, Any]]:
    """Every operator counted since the last reset, by name, with its ``op_stats``: only str,
    int, None (a ``last_failure`` of none) and dict inside, so ``json.dumps`` takes it as it
    is."""
    return dict(_boxfall.all_stats())


def _backend_name(backend: object) -> str | None:
    """The key name of ``backend`` (a name, in any case where that names one key, or a
    Backend); an unknown name raises the KeyError that lists the known keys."""
    if backend is None:
        return None
    name = backend if isinstance(backend, str) else getattr(backend, "name", None)
    if not isinstance(name, str):
        raise TypeError(
            f"backend must be a backend name or a Backend, not {type(backend).__name__}"
        )
    known = _boxfall.key_names()
    if name in known:
        return name
    matches = [k for k in known if k.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    _boxfall.key_bits([name])  # raises UnknownKeyError, listing the known keys
    return name


def _top(top: object) -> int | None:
    if top is None:
        return None
    if isinstance(top, bool) or not isinstance(top, int):
        raise TypeError(f"top must be an int or None, not {type(top).__name__}")
    if top < 0:
        raise ValueError(f"top must be at least 0, not {top}")
    return top


def _sort(sort: object) -> str:
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(map(repr, SORTS))}, not {sort!r}")
    return str(sort)


def rows(backend: object = None) -> list[dict[str, Any]]:
    """One dict per (operator, backend) that fell back: ``operator``, ``backend`` and the
    figures of ``op_stats`` (:data:`FIELDS`), most fallback time first (only ``backend``'s if
    given: a name, in any case where that names one key, or a Backend)."""
    name = _backend_name(backend)
    out = []
    for op, stats in to_dict().items():
        for b, figures in stats["backends"].items():
            if figures["fallbacks"] and (name is None or b == name):
                out.append({"operator": op, "backend": b, **{f: figures[f] for f in FIELDS}})
    out.sort(key=lambda r: (-r["fallback_ns"], r["operator"], r["backend"]))
    return out


def to_csv(path_or_file: str | os.PathLike[str] | IO[str]) -> None:
    """Write one row per (operator, backend) that fell back, after a header row: ``operator``,
    ``backend``, then the figures of ``op_stats`` (``fallbacks`` ... ``bytes_from_cpu``), most
    fallback time first. ``path_or_file``: a path, or a text file open for writing."""
    columns = ("operator", "backend", *FIELDS)
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "w", newline="", encoding="utf-8") as f:
            _write_csv(f, columns)
    else:
        _write_csv(path_or_file, columns)


def _write_csv(f: IO[str], columns: tuple[str, ...]) -> None:
    writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows():
        writer.writerow(row)


def report(backend: object = None, sort: str = "time", top: int | None = None) -> str:
    """A table of the operators that fell back, one row per (operator, backend): calls,
    failures, the fallback's time (whole, mean, and split into moving to the CPU, the CPU kernel
    and moving back), its share of the time shown, bytes moved each way; then a total row and a
    line ranking the operators to implement natively first by the fallback time they cost.

    ``backend``: only that backend's rows (a name, in any case, or a Backend); ``sort``: ``"time"``
    (most first), ``"count"``, ``"bytes"`` or ``"name"``; ``top``: only the first rows, so many
    (the total still counts every row). Times are in us, ms or s, sizes in B, KB, MB or GB
    (1 KB = 1024 B), whichever fits each number.

    Where graph mode ran (a backend registered with ``compile=``), its figures follow
    (:func:`graphs`): graphs compiled and found cached, time compiling and running, nodes per
    graph, syncs by reason, graph breaks per operator, the last recompile's reason. Then what
    other modules add: ``boxfall.jax`` on a mesh, its fallbacks per shard and its gathers.
    """
    table = _boxfall.report(_backend_name(backend), _sort(sort), _top(top))
    extra = [text for text in (section() for section in tuple(_report_sections)) if text]
    g = graphs()
    if not (g["compiled"] or g["cache_hits"] or g["breaks"] or g["syncs"]):
        return "\n".join([table, *extra])
    lines = [
        f"graph mode: {g['compiled']} graphs compiled ({g['compile_s'] * 1e3:.1f} ms), "
        f"{g['cache_hits']} cache hits, {g['graphs_run']} run ({g['execute_s'] * 1e3:.1f} ms), "
        f"{g['nodes_per_graph']:.1f} nodes per graph (most {g['max_nodes']}), "
        f"{g['ran_ahead']} run ahead ({g['ahead_missed']} missed), {g['failures']} failed",
        "  syncs: " + (", ".join(f"{k} {v}" for k, v in sorted(g["syncs"].items())) or "none"),
        "  graph breaks: "
        + (", ".join(f"{k} {v}" for k, v in sorted(g["breaks"].items())) or "none"),
    ]
    if g["callbacks_run"]:
        lines.append(
            f"  host callbacks: {g['callbacks_run']} run, serving {g['callback_nodes_run']} nodes"
        )
    if g["recompiles"]:
        lines.append(f"  last recompile: {g['recompiles'][-1]}")
    return table + "\n" + "\n".join(lines + extra)


def plot(path: str | os.PathLike[str] | None = None, backend: object = None, top: int = 20) -> Any:
    """A matplotlib chart of where the fallback time goes: a bar per (operator, backend), the
    slowest ``top`` (all if None) at the top, split into moving to the CPU, the CPU kernel and
    moving back, each labelled with its calls, time and bytes moved. Saved to ``path`` if given
    (the format from its suffix: ``.png``, ``.svg``, ``.pdf``); returns the
    ``matplotlib.figure.Figure``. Needs matplotlib (``pip install matplotlib``); without it
    an ImportError that says so."""
    from ._plot import plot_fallbacks

    return plot_fallbacks(rows(backend), path=path, backend=_backend_name(backend), top=_top(top))


def record_fallback(
    op: OpName,
    backend: object,
    *,
    fallback_ns: int = 0,
    kernel_ns: int = 0,
    bytes_to_cpu: int = 0,
    bytes_from_cpu: int = 0,
    error: BaseException | None = None,
) -> None:
    """Counts one CPU fallback of ``op`` on ``backend`` (a name, in any case where that names
    one key, or a Backend) that ran outside boxfall's dispatcher: a graph backend's compiled
    program that runs an operator's CPU kernel as a host callback calls it at each such run
    (``boxfall.jax``'s graph mode does), as a kernel that falls back by hand would. It is then
    one of :func:`op_stats`'s ``fallbacks`` of that backend, with its time
    (``fallback_ns``, of which ``kernel_ns`` in the CPU kernel), its bytes each way, and a
    failure where ``error`` is the exception it failed with; :func:`report`, :func:`rows` and
    the pytest plugin's ``boxfall_no_fallback`` marker see it as any other fallback."""
    from . import OpOverload

    overload = op if isinstance(op, OpOverload) else _boxfall.find_op(_name(op))
    name = _backend_name(backend)
    if name is None:
        raise TypeError("record_fallback needs a backend")
    _boxfall.record_fallback(
        overload, name, fallback_ns, kernel_ns, bytes_to_cpu, bytes_from_cpu, error
    )


@contextlib.contextmanager
def _uncounted() -> Iterator[None]:
    """Nothing the thread does inside is counted (the operators' figures, the user's
    transfers): a graph compiler enters it while JAX traces a program, whose calls of kernels
    on traced values are not the program's runs (a kernel that hands a traced call to the CPU
    fallback fails there, and the program runs that node on the host, counted when it runs).
    Not public API."""
    was = _boxfall.set_counting(False)
    try:
        yield
    finally:
        _boxfall.set_counting(was)


def _compiled_in_run(ns: int) -> None:
    """The graph program running in this thread spent ``ns`` nanoseconds of its run compiling
    (``jax.jit`` traces and compiles at a program's first call): :func:`graphs` counts it in
    ``compile_s``, not ``execute_s``. Not public API."""
    _boxfall.graph_compiled_in_run(ns)


_callbacks_lock = threading.Lock()
_callbacks: dict[str, Any] = {"programs": [], "run": 0, "nodes": 0}
"""Graph mode's host callbacks (:func:`graphs`): per program, the nodes each of its callbacks
serves; the callbacks run and the nodes they served."""


def _host_callback_program(sizes: list[int]) -> None:
    """A graph compiler made a program whose host callbacks serve ``sizes`` nodes each (a run
    of host nodes is one callback): :func:`graphs`' ``host_callbacks``. Not public API."""
    with _callbacks_lock:
        programs = _callbacks["programs"]
        programs.append(list(sizes))
        del programs[:-64]


def _host_callback_ran(nodes: int) -> None:
    """A program's host callback serving ``nodes`` nodes ran (one round trip to the host).
    Not public API."""
    with _callbacks_lock:
        _callbacks["run"] += 1
        _callbacks["nodes"] += nodes


#: Called, in order, by :func:`reset` just before the counters are zeroed: the pytest plugin
#: (``pytest_boxfall``) adds what the running test has counted so far to its own records here,
#: so that a test that resets the metrics does not erase them. Not public API.
_reset_listeners: list[Callable[[], None]] = []

#: Called, in order, by :func:`report`, each giving lines to add after the table, or None:
#: ``boxfall.jax``'s mesh adds its fallbacks per shard and its gathers. Not public API.
_report_sections: list[Callable[[], str | None]] = []


def reset() -> None:
    """Zeroes every counter (graph mode's too) and forgets which operators warned."""
    for listener in tuple(_reset_listeners):
        listener()
    _boxfall.reset_metrics()
    _boxfall.reset_graph_metrics()
    with _callbacks_lock:
        _callbacks.update(programs=[], run=0, nodes=0)


def graphs() -> dict[str, Any]:
    """Graph mode's figures since the last :func:`reset`: ``compiled`` (graphs compiled),
    ``cache_hits`` (syncs whose graph was compiled already), ``compile_s`` and ``execute_s``
    (seconds in the compilers and the compiled programs; a program's first run that traced
    and compiled it, as ``jax.jit`` does, counts that time in ``compile_s``), ``graphs_run``,
    ``nodes``, ``nodes_per_graph`` and ``max_nodes`` (of the graphs run), ``donated`` (input
    buffers the programs consumed for their results: the old data of tensors written in place,
    which nothing else held), ``ran_ahead`` (syncs whose results came from their program launched
    ahead, while the graph was still being recorded: a graph the last two syncs ran, launched
    once its inputs are known, confirmed whole at the sync), ``ahead_missed`` (programs
    launched ahead whose results were let go, the recording being another graph or reading
    other data: device time spent for nothing), ``failures`` (syncs whose program failed:
    nothing committed), ``syncs`` (by reason: ``"numpy"``, ``"payload"``, ``"materialize"``,
    ``"graph break"``, ``"sync"``, ``"size limit"``, ``"another device"``: a call on another
    device of the backend, whose graph runs apart), ``breaks`` (graph breaks per operator) and
    ``recompiles`` (why each graph after a backend's first compiled: its first difference from
    the nearest compiled graph, the last 64, oldest first); ``host_callbacks`` (per program
    compiled with host callbacks, the last 64, oldest first: the nodes each of its callbacks
    serves, ``[3]`` for one callback running three operators in a row on the host),
    ``callbacks_run`` (host callbacks the programs ran: round trips to the host) and
    ``callback_nodes_run`` (the nodes those callbacks served)."""
    figures = dict(_boxfall.graph_metrics())
    with _callbacks_lock:
        figures["host_callbacks"] = [list(p) for p in _callbacks["programs"]]
        figures["callbacks_run"] = _callbacks["run"]
        figures["callback_nodes_run"] = _callbacks["nodes"]
    return figures


__all__ = [
    "FIELDS",
    "SORTS",
    "counter_names",
    "counter_value",
    "counters",
    "graphs",
    "op_stats",
    "profile",
    "plot",
    "record_fallback",
    "report",
    "reset",
    "rows",
    "to_csv",
    "to_dict",
    "transfers",
]
