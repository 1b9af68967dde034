"""python -m boxfall bench: the Python-side figures, each beside the plain-Python baseline it is
measured against, as ratios from the same run.

The Rust-side figures come from criterion: cargo bench --bench dispatch, cargo bench --bench
fallback and cargo bench --bench schema.
"""

from __future__ import annotations

import argparse
import timeit
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import boxfall as bf


def _find_schemas() -> Path:
    """torch_schemas.txt of the checkout this package runs from (``maturin develop`` and editable
    installs run from ``python/`` inside it), else of the checkout in the working directory.
    Nothing outside the package or the checkout is looked at."""
    relative = Path("tests") / "data" / "torch_schemas.txt"
    here = Path(__file__).resolve()
    for base in (here.parents[2], Path.cwd()):
        if (base / relative).exists():
            return base / relative
    return here.parents[2] / relative


SCHEMAS = _find_schemas()


def per_call_ns(fn: Callable[[], Any], number: int, repeat: int) -> float:
    """The best of ``repeat`` runs of ``number`` calls, in nanoseconds per call."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def paired_ns(
    measured: Callable[[], Any], baseline: Callable[[], Any], number: int, repeat: int
) -> tuple[float, float]:
    """The best runs of a call and of its baseline, timed in turn so that both see the same
    machine (a shared machine's speed drifts between runs far more than the figures differ)."""
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, fn in enumerate((measured, baseline)):
            best[i] = min(best[i], timeit.timeit(fn, number=number))
    return best[0] / number * 1e9, best[1] / number * 1e9


def _row(label: str, ns: float, base_label: str, base_ns: float) -> str:
    return (
        f"{label:<48} {ns:>10.0f} ns   {base_label:<28} {base_ns:>8.0f} ns   "
        f"{ns - base_ns:>+8.0f} ns  {ns / base_ns:>6.2f}x"
    )


def bench_schema(path: Path, repeat: int) -> list[str]:
    """Parse speed from Python, per schema."""
    if not path.exists():
        return [f"(schema file {path} not found: skipped)"]
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    n = len(lines)
    one_by_one = per_call_ns(lambda: [bf.parse_schema(s) for s in lines], 1, repeat) / n
    batch = per_call_ns(lambda: bf._boxfall.parse_schemas_count(lines), 1, repeat) / n
    baseline = per_call_ns(lambda: [str(s) for s in lines], 1, repeat) / n
    return [
        f"schemas parsed: {n}",
        _row("bf.parse_schema(s), all kept, per schema", one_by_one, "str(s) loop", baseline),
        _row("parse_schemas_count(lines), per schema", batch, "str(s) loop", baseline),
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
        lib.impl("add", add, "CPU")
        op = getattr(bf.ops, ns).ident.default
        add_op = getattr(bf.ops, ns).add.default
        a = np.ones(1)
        call, base = paired_ns(lambda: op(a), lambda: ident(a), number, repeat)
        rows.append(_row("op(x), trivial Python kernel", call, "the kernel called directly", base))

        key = f"BenchTrace{uuid.uuid4().hex[:6]}"
        bf.register_functionality_key(key)

        def hop(op: Any, keys: Any, stack: list[Any]) -> None:
            op.redispatch_boxed(keys, stack)

        with bf.Library("_", "IMPL") as fb:
            fb.fallback(hop, key)
            # In turn, as `paired_ns` does; the key is included for whole runs, so that the
            # context manager is not part of the figure.
            hopped = plain = float("inf")
            for _ in range(repeat):
                plain = min(plain, timeit.timeit(lambda: op(a), number=number))
                with bf.include_keys(key):
                    hopped = min(hopped, timeit.timeit(lambda: op(a), number=number))
            hopped, plain = hopped / number * 1e9, plain / number * 1e9
        rows.append(_row("op(x) through a Python boxed fallback hop", hopped, "op(x)", plain))

        # Two tensors, not one passed twice: one tensor twice is lent once, which would
        # flatter the figure.
        a2 = np.ones(1)
        x, y = bf.native.tensor(a), bf.native.tensor(a2)
        through, direct = paired_ns(lambda: add_op(x, y), lambda: add(a, a2), number, repeat)
        cpu_call, direct_cpu = paired_ns(lambda: add_op(a, a2), lambda: add(a, a2), number, repeat)
        rows.append(
            _row("add(x, y), Native 1 elem, CPU fallback", through, "NumPy kernel direct", direct)
        )
        rows.append(
            _row("add(a, b), NumPy arrays, CPU kernel", cpu_call, "NumPy kernel direct", direct_cpu)
        )
        big, big2 = np.ones(1 << 20), np.ones(1 << 20)
        xb, yb = bf.native.tensor(big), bf.native.tensor(big2)
        # Native memory is Rust's, so the NumPy kernel's result is copied into it: the fair
        # baseline is the kernel and that one copy (into memory already mapped, as Rust's
        # allocator reuses it).
        dest = np.empty_like(big)
        through_big, direct_big = paired_ns(
            lambda: add_op(xb, yb), lambda: add(big, big2), 20, repeat
        )
        through_big2, copied_big = paired_ns(
            lambda: add_op(xb, yb), lambda: np.copyto(dest, add(big, big2)), 20, repeat
        )
        # One call against two baselines: each row names what it is compared with, so that no
        # label repeats.
        rows.append(
            _row(
                "add(x, y), Native 1M f64 fallback / kernel",
                through_big,
                "NumPy kernel direct",
                direct_big,
            )
        )
        rows.append(
            _row(
                "add(x, y), Native 1M f64 fallback / kernel+copy",
                through_big2,
                "kernel + copy of its result",
                copied_big,
            )
        )
    bf.metrics.reset()
    return rows


def bench_registration(rounds: int) -> list[str]:
    """Registration while another thread sleeps inside a Python kernel, against registration
    with no such thread: medians of paired rounds (one round of each, back to back), so that
    a long call is seen to hold back no reclamation (issue 15, section 3)."""
    import statistics
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
        plain, slept, ratios = [], [], []
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
            plain.append(alone)
            slept.append(beside)
            ratios.append(beside / alone)
    ratio = statistics.median(ratios)
    label, base_label = "register + close, a thread asleep in a kernel", "no thread asleep"
    return [
        f"{label:<48} {statistics.median(slept):>10.0f} ns   "
        f"{base_label:<28} {statistics.median(plain):>8.0f} ns   "
        f"median of {rounds} paired rounds {ratio:.2f}x "
        f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x)"
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print the table."""
    parser = argparse.ArgumentParser(
        prog="python -m boxfall bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--number", type=int, default=20000, help="calls per timing run (default %(default)s)"
    )
    parser.add_argument(
        "--repeat", type=int, default=9, help="timing runs, the best counts (default %(default)s)"
    )
    parser.add_argument(
        "--schemas",
        type=Path,
        default=SCHEMAS,
        help="the schemas to parse, one a line (default: tests/data/torch_schemas.txt of the "
        "checkout, %(default)s)",
    )
    args = parser.parse_args(argv)
    policy = bf.get_fallback_policy()
    bf.set_fallback_policy("allow")
    try:
        print(
            f"{'measured':<48} {'time':>13}   {'baseline':<28} {'time':>11}   {'added':>10}  ratio"
        )
        for line in bench_schema(args.schemas, args.repeat) + bench_calls(args.number, args.repeat):
            print(line)
        for line in bench_registration(args.repeat):
            print(line)
    finally:
        bf.set_fallback_policy(policy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
