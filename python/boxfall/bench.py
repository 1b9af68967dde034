"""python -m boxfall bench: the Python-side figures, each beside the plain-Python baseline it is
measured against. Each row times the call and its baseline back to back, round after round, and
prints the medians of their times, of the per-round differences and of the per-round ratios,
and the spread of those ratios (never a best-of: this machine drifts by 30%).

The Rust-side figures come from criterion: cargo bench --bench dispatch, cargo bench --bench
fallback and cargo bench --bench schema.
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import boxfall as bf

# PyTorch's own schemas, shipped in the package (installed or run from a checkout alike).
SCHEMAS = Path(__file__).resolve().parent / "data" / "torch_schemas.txt"

# --quick: the same rows, on fewer calls, rounds and elements (about a minute, where the full
# run takes several); for a first look, not for figures.
QUICK = {"number": 1000, "repeat": 3, "native_n": 10_000, "jax_n": 500}


@dataclass(frozen=True)
class Paired:
    """A call and its baseline, timed back to back round after round: the medians of each
    one's time per call, and the median and the spread of the per-round ratios (the machine's
    drift moves both sides of a round alike, so it stays out of the ratio)."""

    ns: float
    base_ns: float
    added_ns: float
    ratio: float
    low: float
    high: float


def paired(
    measured: Callable[[], Any],
    baseline: Callable[[], Any],
    number: int,
    rounds: int,
    per: int = 1,
) -> Paired:
    """Times ``number`` calls of ``measured`` then of ``baseline``, ``rounds`` times; figures
    are per call, divided by ``per`` more (for a call that does ``per`` things)."""
    return paired_rounds(
        [
            (
                timeit.timeit(measured, number=number) / number / per * 1e9,
                timeit.timeit(baseline, number=number) / number / per * 1e9,
            )
            for _ in range(rounds)
        ]
    )


def paired_rounds(times: list[tuple[float, float]]) -> Paired:
    """The medians and the spread of rounds of (measured ns, baseline ns)."""
    ratios = [m / b for m, b in times]
    return Paired(
        ns=statistics.median(m for m, _ in times),
        base_ns=statistics.median(b for _, b in times),
        added_ns=statistics.median(m - b for m, b in times),
        ratio=statistics.median(ratios),
        low=min(ratios),
        high=max(ratios),
    )


HEADER = (
    f"{'measured':<48} {'median':>12}   {'baseline':<28} {'median':>12}   {'added':>12}  "
    f"{'ratio':>6}  rounds' ratios"
)


def _row(label: str, p: Paired, base_label: str) -> str:
    return (
        f"{label:<48} {p.ns:>9.0f} ns   {base_label:<28} {p.base_ns:>9.0f} ns   "
        f"{p.added_ns:>+9.0f} ns  {p.ratio:>5.2f}x  {p.low:.2f}-{p.high:.2f}x"
    )


def bench_schema(path: Path, repeat: int) -> list[str]:
    """Parse speed from Python, per schema."""
    if not path.exists():
        return [f"(schema file {path} not found: skipped)"]
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    n = len(lines)

    def strs() -> list[str]:
        return [str(s) for s in lines]

    one_by_one = paired(lambda: [bf.parse_schema(s) for s in lines], strs, 1, repeat, per=n)
    batch = paired(lambda: bf._boxfall.parse_schemas_count(lines), strs, 1, repeat, per=n)
    return [
        f"schemas parsed: {n}",
        _row("bf.parse_schema(s), all kept, per schema", one_by_one, "str(s) loop"),
        _row("parse_schemas_count(lines), per schema", batch, "str(s) loop"),
    ]


def bench_calls(number: int, repeat: int) -> list[str]:
    """A trivial Python kernel through the dispatcher, and a Python boxed fallback hop."""
    ns = f"bench{uuid.uuid4().hex[:8]}"
    rows = []
    with bf.Library(ns, "DEF") as lib:
        lib.define("ident(Tensor self) -> Tensor")
        lib.define("add(Tensor self, Tensor other) -> Tensor")

        def ident(x: Any) -> Any:
            return x

        def add(a: Any, b: Any) -> Any:
            return np.add(a, b)

        lib.impl("ident", ident, "CPU")
        lib.define("add_ufunc(Tensor self, Tensor other) -> Tensor")
        lib.impl("add", add, "CPU")
        lib.impl("add_ufunc", np.add, "CPU")
        op = getattr(bf.ops, ns).ident.default
        add_op = getattr(bf.ops, ns).add.default
        ufunc_op = getattr(bf.ops, ns).add_ufunc.default
        a = np.ones(1)
        call = paired(lambda: op(a), lambda: ident(a), number, repeat)
        rows.append(_row("op(x), trivial Python kernel", call, "the kernel called directly"))

        key = f"BenchTrace{uuid.uuid4().hex[:6]}"
        bf.register_functionality_key(key)

        def hop(op: Any, keys: Any, stack: list[Any]) -> None:
            op.redispatch_boxed(keys, stack)

        with bf.Library("_", "IMPL") as fb:
            fb.fallback(hop, key)
            # In turn, as `paired` does; the key is included for whole runs, so that the
            # context manager is not part of the figure.
            times = []
            for _ in range(repeat):
                with bf.include_keys(key):
                    hopped = timeit.timeit(lambda: op(a), number=number) / number * 1e9
                plain = timeit.timeit(lambda: op(a), number=number) / number * 1e9
                times.append((hopped, plain))
        hop_row = _row(
            "op(x), hop by op.redispatch_boxed(keys, stack)", paired_rounds(times), "op(x)"
        )
        rows.append(hop_row)

        def documented(op: Any, keys: Any, stack: list[Any]) -> None:
            stack[:] = [op.redispatch(keys, *stack)]

        with bf.Library("_", "IMPL") as fb:
            fb.fallback(documented, key)
            times = []
            for _ in range(repeat):
                with bf.include_keys(key):
                    hopped = timeit.timeit(lambda: op(a), number=number) / number * 1e9
                plain = timeit.timeit(lambda: op(a), number=number) / number * 1e9
                times.append((hopped, plain))
        rows.append(
            _row("op(x), hop by stack[:] = [op.redispatch(..)]", paired_rounds(times), "op(x)")
        )

        # Two tensors, not one passed twice: one tensor twice is lent once, which would
        # flatter the figure. The baseline is NumPy's own `np.add(a, b)`, the call a user
        # would write; the NumPy kernel is the ufunc `np.add` itself, registered as the CPU
        # kernel, and the last NumPy row has a Python function around it (the kernels of most
        # libraries).
        a2 = np.ones(1)
        x, y = bf.native.tensor(a), bf.native.tensor(a2)
        through = paired(lambda: ufunc_op(x, y), lambda: np.add(a, a2), number, repeat)
        cpu_call = paired(lambda: ufunc_op(a, a2), lambda: np.add(a, a2), number, repeat)
        cpu_py = paired(lambda: add_op(a, a2), lambda: np.add(a, a2), number, repeat)
        # As torch users write it: the namespace, the packet and its overload looked up on
        # every call (``getattr`` stands for ``bf.ops.<ns>``).
        packet = paired(
            lambda: getattr(bf.ops, ns).add_ufunc(a, a2), lambda: np.add(a, a2), number, repeat
        )
        rows.append(_row("add(x, y), Native 1 elem, fallback, np.add", through, "np.add(a, b)"))
        rows.append(_row("add(a, b), NumPy arrays, kernel np.add", cpu_call, "np.add(a, b)"))
        rows.append(_row("add(a, b), NumPy arrays, kernel def: np.add", cpu_py, "np.add(a, b)"))
        rows.append(_row("bf.ops.<ns>.add(a, b), the packet, np.add", packet, "np.add(a, b)"))
        big, big2 = np.ones(1 << 20), np.ones(1 << 20)
        xb, yb = bf.native.tensor(big), bf.native.tensor(big2)
        # Native memory is Rust's, so the NumPy kernel's result is copied into it: the fair
        # baseline is the kernel and that one copy (into memory already mapped, as Rust's
        # allocator reuses it).
        dest = np.empty_like(big)
        through_big = paired(lambda: ufunc_op(xb, yb), lambda: np.add(big, big2), 20, repeat)
        through_big2 = paired(
            lambda: ufunc_op(xb, yb), lambda: np.copyto(dest, np.add(big, big2)), 20, repeat
        )
        # One call against two baselines: each row names what it is compared with, so that no
        # label repeats.
        rows.append(_row("add(x, y), Native 1M f64 fallback / kernel", through_big, "np.add(a, b)"))
        rows.append(
            _row(
                "add(x, y), Native 1M f64 fallback / kernel+copy",
                through_big2,
                "np.add + copy of its result",
            )
        )
    bf.metrics.reset()
    return rows


def bench_array_api(number: int, repeat: int) -> list[str]:
    """The array object's rows: `x + y` on 1-element float64 `bf.Tensor`s on Native (the operator
    `array_api::add`, reached through `bf.Tensor.__add__`) against NumPy's `a + b`, measured in
    the same run: with Native's Rust kernel, and through the CPU fallback."""
    import boxfall.array_api as xp

    nx = xp.namespace("Native")
    x, y = nx.asarray([1.0]), nx.asarray([2.0])
    a, b = np.asarray([1.0]), np.asarray([2.0])
    op = bf.ops.array_api.add.default
    rows = []
    if op.dispatch_table().get("Native") == "kernel":
        native = paired(lambda: x + y, lambda: a + b, number, repeat)
        rows.append(_row("x + y, Native 1 elem f64, Rust kernel", native, "NumPy a + b"))
        # The same operator through the CPU fallback: the fallback registered as its Native
        # kernel for the length of the row (the kernel it replaces comes back on close).
        with bf.Library("array_api", "IMPL") as lib:
            lib.impl("add", bf.cpu_fallback, "Native", allow_override=True)
            through = paired(lambda: x + y, lambda: a + b, number, repeat)
    else:
        rows.append("x + y, Native 1 elem f64, Rust kernel: no Native kernel for array_api::add")
        through = paired(lambda: x + y, lambda: a + b, number, repeat)
    rows.append(_row("x + y, Native 1 elem f64, CPU fallback", through, "NumPy a + b"))
    # Views: a basic-index read makes a view (no copy), and a write through a view is the
    # setitem it stands for.
    m = nx.reshape(nx.arange(12.0), (3, 4))
    mn = np.arange(12.0).reshape(3, 4)
    read = paired(lambda: m[0, 1:3], lambda: mn[0, 1:3], number, repeat)
    rows.append(_row("x[0, 1:3], Native, a view", read, "NumPy a[0, 1:3]"))
    v = m[0, 1:3]

    def through_view() -> None:
        v[...] = 5.0

    def setitem() -> None:
        m[0, 1:3] = 5.0

    write = paired(through_view, setitem, number, repeat)
    rows.append(_row("v[...] = 5.0, v = x[0, 1:3], Native", write, "x[0, 1:3] = 5.0"))
    return rows


def bench_registration(rounds: int) -> list[str]:
    """Registration while another thread sleeps inside a Python kernel, against registration
    with no such thread: medians of paired rounds (one round of each, back to back), so that
    a long call is seen to hold back no reclamation of replaced dispatch tables."""
    import threading
    import time

    ns = f"benchreg{uuid.uuid4().hex[:8]}"
    cycles = 1000

    def churn() -> float:
        start = time.perf_counter()
        for _ in range(cycles):
            with bf.Library(ns, "IMPL") as imp:
                imp.impl("churn", lambda x: x, "CPU")
        return (time.perf_counter() - start) / cycles * 1e9

    with bf.Library(ns, "DEF") as lib:
        lib.define("churn(Tensor x) -> Tensor")
        lib.define("sleep(Tensor x) -> Tensor")
        entered, release = threading.Event(), threading.Event()

        def sleep(x: Any) -> Any:
            entered.set()
            release.wait(60)
            return x

        lib.impl("sleep", sleep, "CPU")
        op = getattr(bf.ops, ns).sleep.default
        churn()
        times = []
        for _ in range(rounds):
            alone = churn()
            entered.clear()
            release.clear()
            sleeper = threading.Thread(target=op, args=(np.ones(1),))
            sleeper.start()
            entered.wait(10)
            beside = churn()
            release.set()
            sleeper.join()
            times.append((beside, alone))
    label = "register + close, a thread asleep in a kernel"
    return [_row(label, paired_rounds(times), "no thread asleep")]


def bench_native_kernels(repeat: int, n: int = 1_000_000) -> list[str]:
    """Native's Rust kernels of the array API's operators against NumPy's own call on the same
    data, for ``n`` elements (elementwise and reductions) and for one element."""
    from . import array_api

    xp: Any = array_api  # its functions are made at import: typed as Any

    rng = np.random.default_rng(0)
    rows: list[str] = [f"Native's Rust kernels of boxfall.array_api, {n} elements:"]
    number = max(1, 20_000_000 // max(n, 1) // 10)
    for dtype in ("float64", "float32", "int32", "int8", "complex128"):
        a = rng.normal(size=n).astype(dtype) if dtype[0] != "i" else rng.integers(-9, 9, n)
        a = a.astype(dtype)
        b = (a[::-1] + 1).astype(dtype)
        x, y = bf.native.tensor(a), bf.native.tensor(b)
        cases = [
            ("add", partial(xp.add, x, y), partial(np.add, a, b), "np.add(a, b)"),
            (
                "multiply",
                partial(xp.multiply, x, y),
                partial(np.multiply, a, b),
                "np.multiply(a, b)",
            ),
            ("less", partial(xp.less, x, y), partial(np.less, a, b), "np.less(a, b)"),
            ("add scalar", partial(xp.add, x, 3), partial(np.add, a, 3), "np.add(a, 3)"),
            ("sum", partial(xp.sum, x), partial(np.sum, a), "np.sum(a)"),
        ]
        if dtype == "float64":
            cases += [
                ("divide", partial(xp.divide, x, y), partial(np.divide, a, b), "np.divide(a, b)"),
                ("mean", partial(xp.mean, x), partial(np.mean, a), "np.mean(a)"),
                ("max", partial(xp.max, x), partial(np.max, a), "np.max(a)"),
            ]
        for label, call, base, base_label in cases:
            p = paired(call, base, number, repeat)
            rows.append(_row(f"xp.{label}, {dtype}", p, base_label))
    one_a, one_b = np.array([1.5]), np.array([2.5])
    one_x, one_y = bf.native.tensor(one_a), bf.native.tensor(one_b)
    add = bf.ops.array_api.add.default
    p = paired(lambda: add(one_x, one_y), lambda: one_a + one_b, 20000, repeat)
    rows.append(_row("array_api::add, float64[1]", p, "a + b"))
    p = paired(lambda: one_x + one_y, lambda: one_a + one_b, 20000, repeat)
    rows.append(_row("x + y, float64[1]", p, "a + b"))
    return rows


def _row_ms(label: str, p: Paired, base_label: str) -> str:
    """`_row` of times in milliseconds (given in ns), in the same columns."""
    return (
        f"{label:<48} {p.ns / 1e6:>9.1f} ms   {base_label:<28} {p.base_ns / 1e6:>9.1f} ms   "
        f"{p.added_ns / 1e6:>+9.1f} ms  {p.ratio:>5.2f}x  {p.low:.2f}-{p.high:.2f}x"
    )


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def bench_workload(repeat: int) -> list[str]:
    """k-means then ridge (``boxfall.workload``) on each device setup: the bytes moved (the
    metrics' fallback bytes, the user's transfers and what was materialized) against the least
    the placement needs, and the time against NumPy's, as medians of paired rounds."""
    from . import workload

    p = workload.Problem()
    rows = [
        f"workload (boxfall.workload): clustering by Lloyd's algorithm ({p.iterations} steps, "
        f"k={p.k}) then a ridge fit, {p.n} x {p.d} float64 points:"
    ]
    for name, r, need, times in workload.rows(p, repeat):
        ns = [(m * 1e9, b * 1e9) for m, b in times]
        rows.append(_row_ms(f"workload, {name}", paired_rounds(ns), "the workload on NumPy"))
        hooks = f", the hooks {_mb(r.hook_bytes)}" if name != "native" else ""
        if need is None:
            rows.append(
                f"  bytes, {name}: moved {_mb(r.moved)} (lent: Native's memory is the host's, "
                "nothing has to cross)"
            )
        else:
            rows.append(
                f"  bytes, {name}: moved {_mb(r.moved)} / least needed {_mb(need.least)} = "
                f"{r.moved / need.least:.2f}x (without residency, every argument and result "
                f"each call: {_mb(need.eager)}{hooks})"
            )
    return rows


def bench_jax_workload(repeat: int, n: int = 4_000) -> list[str]:
    """The workload (``boxfall.workload.kmeans_ridge``, float32, ``n`` points) on JAX's default
    device four ways, timed back to back in each round (the order turning): boxfall.jax eager,
    boxfall.jax in graph mode (one compiled program a call), ``jax.numpy`` op by op and
    ``jax.jit`` of the same function; each call waits for its results. Rows: graph mode
    against ``jax.jit``, eager against ``jax.numpy``, and the recording of one call (the
    workload's calls made, not computed; the launch of its program run ahead left out), per
    recorded node. Skipped without JAX."""
    try:
        import jax
        import jax.numpy as jnp

        from . import jax as bj
    except ImportError:
        return ["(JAX is not installed: the workload's rows on JAX are skipped)"]
    from . import workload

    p = workload.Problem(n=n)
    x, y = (a.astype(np.float32) for a in workload.make_data(p))
    ex, gx = bj.namespace(), bj.namespace(graph=True)
    exx, exy, gxx, gxy = ex.asarray(x), ex.asarray(y), gx.asarray(x), gx.asarray(y)
    jx, jy = jnp.asarray(x), jnp.asarray(y)
    jitted = jax.jit(lambda a, b: workload.kmeans_ridge(jnp, a, b, p))

    def eager() -> Any:
        return jax.block_until_ready([t.payload for t in workload.kmeans_ridge(ex, exx, exy, p)])

    def graph() -> Any:
        out = workload.kmeans_ridge(gx, gxx, gxy, p)
        bf.sync()
        return jax.block_until_ready([t.payload for t in out])

    def op_by_op() -> Any:
        return jax.block_until_ready(workload.kmeans_ridge(jnp, jx, jy, p))

    def compiled() -> Any:
        return jax.block_until_ready(jitted(jx, jy))

    calls = {"eager": eager, "graph": graph, "jnp": op_by_op, "jit": compiled}
    for fn in calls.values():  # compiles, and the caches' first entries
        fn()
        fn()
    times: dict[str, list[float]] = {k: [] for k in calls}
    order = list(calls)
    for r in range(repeat):
        for k in order if r % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            calls[k]()
            times[k].append((time.perf_counter() - start) * 1e9)
    per_node, nodes = [], 0
    for _ in range(repeat):
        before = bf.metrics.graphs()
        start = time.perf_counter()
        out = workload.kmeans_ridge(gx, gxx, gxy, p)
        took = time.perf_counter() - start
        bf.sync()
        del out
        after = bf.metrics.graphs()
        nodes = after["nodes"] - before["nodes"]
        # A call that repeats the last ones launches its program while it records (graph mode
        # runs it ahead): that launch, counted as the run's time, is not the recording's.
        if after["ran_ahead"] > before["ran_ahead"]:
            took -= after["execute_s"] - before["execute_s"]
        per_node.append(took * 1e9 / max(nodes, 1))
    q = statistics.quantiles(per_node, n=4) if len(per_node) > 1 else per_node * 3
    device = jax.devices()[0].platform
    return [
        f"the workload on JAX ({device}), {n:,} x {p.d} float32, each call waiting for its "
        "results:",
        _row_ms(
            "workload, boxfall.jax graph mode",
            paired_rounds(list(zip(times["graph"], times["jit"], strict=True))),
            "jax.jit of the function",
        ),
        _row_ms(
            "workload, boxfall.jax eager",
            paired_rounds(list(zip(times["eager"], times["jnp"], strict=True))),
            "jax.numpy op by op",
        ),
        f"{'workload recorded (graph mode), per node':<48} {statistics.median(per_node):>9.0f} ns"
        f"   ({nodes} nodes a call; rounds' quartiles {q[0]:.0f} to {q[2]:.0f} ns)",
    ]


class _Box:
    """The graph-mode bench's payload: a NumPy array in a box."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    @property
    def dtype(self) -> np.dtype:
        return self.a.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.a.shape


def bench_graph(number: int, repeat: int) -> list[str]:
    """Graph mode. Recording: ``xp.add`` on a graph backend records a node
    and returns a pending tensor, against the same call run eagerly on the same backend (its
    kernel a Python function of NumPy payloads); the results are dropped, so each graph cut at
    its size limit computes nothing. A step: a chain of 100 recorded adds and ``bf.sync()`` of
    its graph, found in the cache (the program a Python function that gives a ready payload, so
    the row is graph mode's own cost), against the same 100 adds run eagerly. Each row checks
    once, before it is timed, that its calls are recorded, not graph breaks."""
    result = _Box(np.ones(1))
    graph = bf.register_backend(
        "BenchGraph",
        replace=True,
        to_cpu=lambda p: p.a,
        from_cpu=lambda a: _Box(a.copy()),
        copy_from_cpu=lambda p, a: _Box(a.copy()),
        compile=lambda g: lambda payloads: [result] * len(g.outputs),
    )
    from . import array_api as xp

    with bf.Library("array_api", "IMPL") as lib, bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, "BenchGraph")
        wrap = graph.tensor_from_payload
        lib.impl("add", lambda a, b: wrap(_Box(a.payload.a + b.payload.a)), "BenchGraph")
        x = graph.tensor(np.ones(1))
        ns = xp.namespace("BenchGraph:0")

        def step() -> None:
            y = x
            for _ in range(100):
                y = ns.add(y, x)
            bf.sync()

        def eager_step() -> None:
            with bf.eager():
                y = x
                for _ in range(100):
                    y = ns.add(y, x)

        _check_recorded(ns.add(x, x))
        bf.sync()
        recorded = paired(lambda: ns.add(x, x), lambda: None, number, repeat)
        bf.sync()
        with bf.eager():
            eagerly = paired(lambda: ns.add(x, x), lambda: None, number, repeat)
        before = bf.metrics.graphs()["cache_hits"]
        step()
        step()
        if bf.metrics.graphs()["cache_hits"] == before:
            raise RuntimeError("bench_graph: the step's graph was not found in the cache")
        steps = paired(step, eager_step, max(number // 100, 1), repeat)
        rows = [
            _row("xp.add recorded (graph mode), 1 elem", recorded, "nothing"),
            _row("xp.add eager, same backend, Python kernel", eagerly, "nothing"),
            _row("100 xp.add recorded + bf.sync() (cached)", steps, "100 xp.add eager"),
        ]
    bf.sync()
    return rows


def _check_recorded(result: bf.Tensor) -> None:
    """Raises unless `result` is pending: a call that broke the graph ran eagerly, and its row
    would time that instead."""
    if not bf.graph.is_pending(result):
        breaks = bf.metrics.graphs()["breaks"]
        raise RuntimeError(f"bench_graph: the call was not recorded (graph breaks: {breaks})")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print the table."""
    parser = argparse.ArgumentParser(
        prog="python -m boxfall bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--number",
        type=int,
        help=f"calls per timing run (default 20000; with --quick {QUICK['number']})",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        help="paired rounds; each row gives their medians and the spread of their ratios "
        f"(default 9; with --quick {QUICK['repeat']})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every row on fewer calls, rounds and elements: about a minute (default: off)",
    )
    parser.add_argument(
        "--schemas",
        type=Path,
        default=SCHEMAS,
        help="the schemas to parse, one a line (default: PyTorch's, shipped in the package, "
        "%(default)s)",
    )
    parser.add_argument(
        "--only",
        choices=("workload",),
        help="only these rows: workload (boxfall.workload's bytes and times)",
    )
    args = parser.parse_args(argv)
    if args.number is None:
        args.number = QUICK["number"] if args.quick else 20000
    if args.repeat is None:
        args.repeat = QUICK["repeat"] if args.quick else 9
    native_n = QUICK["native_n"] if args.quick else 1_000_000
    jax_n = QUICK["jax_n"] if args.quick else 4_000
    policy = bf.get_fallback_policy()
    bf.set_fallback_policy("allow")
    try:
        print(f"medians of {args.repeat} paired rounds (the call and its baseline back to back)")
        print(HEADER)
        if args.only == "workload":
            print("\n".join(bench_workload(args.repeat)))
            return 0
        for line in bench_schema(args.schemas, args.repeat) + bench_calls(args.number, args.repeat):
            print(line)
        for line in bench_array_api(args.number, args.repeat):
            print(line)
        for line in bench_registration(args.repeat):
            print(line)
        for line in bench_native_kernels(args.repeat, native_n):
            print(line)
        for line in bench_graph(args.number, args.repeat):
            print(line)
        for line in bench_workload(args.repeat):
            print(line)
        for line in bench_jax_workload(args.repeat, jax_n):
            print(line)
    finally:
        bf.set_fallback_policy(policy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
