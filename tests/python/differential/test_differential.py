"""Differential tests: random array API programs on NumPy (the reference), Native, boxfall.jax's
eager mode and its graph mode, compared step by step and value by value (README.md here).

A failure prints the program (``Program('''...''')``, ready for ``DEFECTS``), what each
backend did differently, and a script that reproduces it on the first backend that differs.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import re
import threading
import time
import warnings
from typing import Any

import boxfall as bf
import boxfall.array_api as bxp
import numpy as np
import pytest
from diffprog import (
    PROFILE,
    STATS,
    Program,
    Reference,
    count,
    describe,
    parse,
    programs,
    run_backend,
)
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

try:
    import boxfall.jax as bj
    import jax
except ImportError:  # JAX absent: NumPy against Native only, and the JAX tests skip
    bj = None

X64 = bool(bj.X64) if bj is not None else True
"""Whether the JAX devices hold 64-bit dtypes (JAX_ENABLE_X64=1, read at boxfall.jax's import)."""

SECONDS = float(os.environ.get("BOXFALL_DIFF_SECONDS", "inf"))
"""Each random test runs no new program past this many seconds (the long run's budget)."""
_LONG = int(SECONDS * 4) if SECONDS != float("inf") else 100_000
BUDGET = {
    "dev": (8, 8, 3),
    "ci": (50, 40, 8) if X64 else (90, 70, 12),
    "long": (_LONG, _LONG, 300),
}
"""Programs, scalar programs and threads cases per profile (BOXFALL_DIFF_EXAMPLES overrides
the first two). CI's x64-on run, the second, is the smaller; the long profile's is more than
its seconds hold (four a second)."""
PROGRAMS = int(os.environ.get("BOXFALL_DIFF_EXAMPLES", BUDGET[PROFILE][0]))
SCALAR_PROGRAMS = int(os.environ.get("BOXFALL_DIFF_EXAMPLES", BUDGET[PROFILE][1]))
THREADS = BUDGET[PROFILE][2]

PROFILE_SETTINGS = settings.get_profile(f"boxfall-diff-{PROFILE}")

NATIVE_SETUP = 'import boxfall.array_api as bxp\nxp = bxp.namespace("Native")'
BACKENDS: list[tuple[str, object, bool, str]] = [
    ("Native", bxp.namespace("Native"), False, NATIVE_SETUP),
]
if bj is not None:
    BACKENDS += [
        ("JAX eager", bj.namespace(), False, "import boxfall.jax as bj\nxp = bj.namespace()"),
        ("JAX graph", bj.namespace(graph=True), True,
         "import boxfall.jax as bj\nxp = bj.namespace(graph=True)"),
    ]  # fmt: skip


_SALTS = itertools.count(1)
_LAST: list[Program | None] = [None]


def _counters() -> dict[str, int]:
    return dict(bf.metrics.counters())


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def differences(program: Program) -> list[str]:
    """Every difference between NumPy's run of ``program`` and each backend's."""
    plain = Reference(narrow=False)
    for step in program.steps:
        plain.step(step)
        count(plain, step)
    STATS["programs"] += 1
    plain_run = Reference(narrow=False).run(program)
    narrow_run = plain_run if X64 else Reference(narrow=True).run(program)
    found: list[str] = []
    try:
        bf.sync()
    except Exception as e:  # noqa: BLE001
        found.append(
            f"bf.sync() before the program raised {describe(e)}: the program before it left "
            f"the thread unable to sync:\n{_LAST[0]!r}"
        )
    _LAST[0] = program
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, xp, graph, setup in BACKENDS:
            ref = plain_run if name == "Native" else narrow_run
            runs = 2 if graph else 1
            salt = next(_SALTS) if graph else 0
            deltas = []
            for run in range(runs):
                before = _counters()
                problems = run_backend(program, xp, ref, graph, salt)
                if graph:
                    gc.collect()  # what the program made is gone: nothing of it is pending
                    try:
                        bf.sync()
                    except Exception as e:  # noqa: BLE001
                        problems.append(f"bf.sync() after the program raised {describe(e)}")
                deltas.append(_delta(before, _counters()))
                label = name if run == 0 else f"{name}, second run"
                found += [f"[{label}] {p}" for p in problems if run == 0 or p not in found]
                if problems:
                    found.append(f"[{label}] reproduce:\n{program.script(setup)}")
                    break
            if len(deltas) == 2 and deltas[0] != deltas[1]:
                found.append(
                    f"[{name}] the CPU fallback's counters differ between two runs of the same "
                    f"program: first {deltas[0]}, second {deltas[1]}"
                )
    return found


class ErrorsDiffer(AssertionError):
    """A step raised where NumPy computed, or computed where NumPy raised, or raised another
    kind of error."""


class ReadFails(AssertionError):
    """A read (a sync) raised where no error of the program was due: an unrelated tensor's,
    or a ``bf.sync()`` after the program."""


class ValuesDiffer(AssertionError):
    """A dtype, a shape or values differ from NumPy's."""


class CountsDiffer(AssertionError):
    """The CPU fallback's counters differ between two runs of one program."""


def kind_of(found: list[str]) -> type[AssertionError] | None:
    """Which of the classes above a run's differences are (the first that applies)."""
    problems = [p for p in found if "reproduce:" not in p]
    if not problems:
        return None
    if any("raised" in p and "step " in p and "graph mode raised it neither" not in p
           for p in problems):  # fmt: skip
        return ErrorsDiffer
    if any("raised" in p for p in problems):
        return ReadFails
    if any("counters differ" not in p for p in problems):
        return ValuesDiffer
    return CountsDiffer


def minimized(program: Program, sig: tuple[str, ...]) -> tuple[Program, list[str]]:
    """``program`` with every line dropped whose removal keeps a difference of signature
    ``sig`` (see ``signatures``): most steps of a random program play no part in it."""

    def run(p: Program) -> list[str]:
        if sig[0] == CountsDiffer.__name__ and bj is not None:
            jax.clear_caches()  # a count that differs only at a first trace shows again
        return differences(p)

    best, found = program, run(program)
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(best.lines))):
            trial = Program(best.lines[:i] + best.lines[i + 1 :])
            if not trial.lines:
                continue
            trial_found = run(trial)
            if sig in signatures(trial_found):
                best, found, changed = trial, trial_found, True
    return best, found


def check(program: Program) -> None:
    """Raises one of the classes above when a backend differs from NumPy on ``program``."""
    found = differences(program)
    kind = kind_of(found)
    if kind is not None:
        raise kind(f"\n{program!r}\n" + "\n".join(found))


DEFECTS = [
    # 2: graph mode cast an out-of-range Python int to the tensor's dtype (200 -> -56) and
    # reused the program compiled for another scalar: int8 `x < 200` was all False.
    (
        "defect2-int8-less-200",
        Program("""
v0 = xp.asarray(np.array([1, -128, 127], dtype=np.int8))
v1 = v0 < 200
"""),
    ),
    # 5: a Python int that fits the dtype raised OverflowError in JAX's eager mode (jax.jit's
    # argument parsing) where NumPy computes.
    (
        "defect5-scalars-that-fit",
        Program("""
v0 = xp.asarray(np.array([1, 2, 3], dtype=np.uint32))
v1 = v0 + 2**31
v2 = xp.asarray(np.array([1.5, -2.0, 0.0], dtype=np.float32))
v3 = v2 + 2**31
v4 = xp.maximum(v0, 2**31)
v5 = xp.full((2,), 2**31, dtype=xp.uint32)
"""),
    ),
    # 5: a comparison with 2**40 (computed) made every pending tensor of the thread fail at
    # its sync, recorded before or after it.
    (
        "defect5-poisoned-thread",
        Program("""
v0 = xp.asarray(np.array([1, 2, 3], dtype=np.int32))
v1 = v0 + 1
v2 = v0 < 2**40
v3 = v0 * 2
"""),
    ),
    # 6: with x64 off a Python int that int32 cannot hold, asked for as int64, became int32
    # [0] silently; NumPy's int64 narrowed to the device's int32 cannot hold it:
    # OverflowError, as JAX's own jnp.asarray raises.
    (
        "defect6-asarray-wraps",
        Program("""
v0 = xp.asarray([2**40], dtype=xp.int64)
v1 = xp.asarray([2**63 - 1], dtype=xp.int64)
"""),
    ),
    # 6 (the same with full and arange): the value wrapped (graph mode) or saturated.
    (
        "defect6-full-wraps",
        Program("""
v0 = xp.full((), 2**31, dtype=xp.int64)
"""),
    ),
    (
        "defect6-arange-wraps",
        Program("""
v0 = xp.arange(2**40, 2**40 + 2)
"""),
    ),
    (
        "defect6-full-float-saturates",
        Program("""
v0 = xp.full((2,), 1e10, dtype=xp.int64)
"""),
    ),
    # 8: the first run of a graph counted a CPU fallback of `add` (met while tracing), the
    # second (the cached program) none.
    (
        "defect8-counts-first-run",
        Program("""
v0 = xp.asarray(np.array([False, True], dtype=np.bool))
v1 = v0 + v0
"""),
    ),
    # In-place operators refused every NumPy scalar (TypeError: unsupported operand type for
    # the in-place add: int8) on every backend, Native included; NumPy computes.
    (
        "inplace-numpy-scalar",
        Program("""
v0 = xp.asarray(np.array([1, 2], dtype=np.int8))
v0 += np.int8(1)
v1 = xp.asarray(np.array([False, True], dtype=np.bool))
v1 |= np.bool_(True)
v2 = xp.asarray(np.array([1.5, 2.0], dtype=np.float32))
v2 *= np.float64(3.0)
"""),
    ),
    # Graph mode cast a Python float to float32 before dividing (3.5e38 -> inf): -inf where
    # NumPy (and eager mode) give -2.734e36 (int8 / float is float64, narrowed to float32).
    (
        "graph-float-scalar-cast",
        Program("""
v0 = xp.asarray(np.array(-128, dtype=np.int8))
v1 = 3.5e+38 / v0
"""),
    ),
    # A 0-d tensor with a NumPy scalar (either side, every operator) gave a NumPy scalar, not
    # a tensor, on every backend: it left the device, and with x64 off was float64.
    (
        "zero-d-tensor-numpy-scalar",
        Program("""
v0 = xp.asarray(np.array(2**31 - 1, dtype=np.int32))
v1 = xp.asarray(np.array(14, dtype=np.int64))
v2 = v1 >> np.int16(3)
v3 = np.float32(2.0) * v0
v4 = v0 / v2
"""),
    ),
]


def signatures(found: list[str]) -> list[tuple[str, ...]]:
    """The kinds of difference a run shows, one per problem: its class, the operator of the
    step, what differs and the errors named (the backends that show it are in its text). One
    program of each is reported."""
    out: list[tuple[str, ...]] = []
    for p in found:
        if "reproduce:" in p or not p.startswith("["):
            continue
        kind = kind_of([p])
        op = ""
        step = re.search(r"`([^`]*)`", p)
        if step:
            try:
                op = parse(step.group(1)).op
            except Exception:  # noqa: BLE001 - not a line of a program: no operator
                op = ""
        what = next(
            (w for w in ("counters", "made a", "dtype", "shape", "neither", "reading", "raised")
             if w in p),
            "values",
        )  # fmt: skip
        errors = tuple(sorted(set(re.findall(r"\b(\w+Error)\b", p))))
        sig = (kind.__name__ if kind else "", op, what, *errors)
        if sig not in out:
            out.append(sig)
    return out


KNOWN_OPEN = (
    (
        re.compile(r"'array_api::matmul' on backend '\w+' made the integer"),
        "x64 off, graph mode: a narrowed matmul's OverflowError is raised at a later step",
    ),
)
"""Differences of defects still open, each the pattern of its problem line and why: a
backend's problems in a program that shows one are counted (``STATS``) and not reported, so
that a bounded run fails on a new kind only. A fix shows as the count falling to 0."""


def without_known_open(found: list[str]) -> list[str]:
    """``found`` without the problems of the backends that show a known open difference."""
    hidden = set()
    for line in found:
        for pattern, why in KNOWN_OPEN:
            if line.startswith("[") and pattern.search(line):
                hidden.add(line.partition("]")[0])
                STATS[f"known open: {why}"] += 1
    return [line for line in found if line.partition("]")[0] not in hidden]


def survey(strategy: st.SearchStrategy[Program], budget: int, test: str) -> None:
    """Runs ``budget`` random programs (hypothesis, no shrinking) and fails at the end with
    one program of each kind of difference found, minimized line by line, and how many
    programs showed it: a bounded run reports every defect it met, not the first."""
    failures: dict[tuple[str, ...], list[Any]] = {}
    started = time.monotonic()

    @settings(PROFILE_SETTINGS, max_examples=budget, phases=[Phase.generate])
    @given(program=strategy)
    def one(program: Program) -> None:
        if time.monotonic() - started > SECONDS:
            STATS["not run: past BOXFALL_DIFF_SECONDS"] += 1
            return
        found = without_known_open(differences(program))
        for sig in signatures(found):
            failures.setdefault(sig, [program, found, 0])[2] += 1

    one()
    if not failures:
        return
    STATS[f"differences ({test})"] += sum(e[2] for e in failures.values())
    parts = []
    for i, (sig, (program, found, n)) in enumerate(sorted(failures.items())):
        if i < 10:  # minimizing costs runs of every backend: the first kinds only
            program, found = minimized(program, sig)
        parts.append(f"== {' | '.join(sig)}: {n} program(s)\n{program!r}\n" + "\n".join(found))
    raise AssertionError(
        f"{len(failures)} kind(s) of difference from NumPy in the {test}:\n\n" + "\n\n".join(parts)
    )


def test_programs_agree_with_numpy() -> None:
    """Random programs (elementwise with tensors and scalars of every kind and magnitude,
    reductions, views, in-place writes, setitem, astype, matmul, creation): every backend's
    dtypes, shapes, values and errors are NumPy's."""
    survey(programs(narrow_data=not X64), PROGRAMS, "programs")


def test_scalar_programs_agree_with_numpy() -> None:
    """Programs whose every step meets a Python or NumPy scalar of any kind and magnitude (an
    operator either way round, in place, a creation function's value): NEP 50's rules, on every
    backend, in both modes."""
    survey(programs(narrow_data=not X64, scalars=True), SCALAR_PROGRAMS, "scalar programs")


OPEN: dict[str, str] = {}
"""Kept programs whose defect is still open, each with what is wrong: expected to fail
(strictly: a fix makes its test pass, which fails until it leaves this list)."""


OPEN_X64_OFF: set[str] = set()
"""Of ``OPEN``, those open with JAX's 64-bit types off only (with them on, they pass)."""


def _kept(name: str, program: Program) -> Any:
    if name in OPEN and not (X64 and name in OPEN_X64_OFF):
        return pytest.param(
            program, id=name, marks=pytest.mark.xfail(strict=True, reason="open: " + OPEN[name])
        )
    return pytest.param(program, id=name)


@pytest.mark.parametrize("program", [_kept(n, p) for n, p in DEFECTS])
def test_defects_found_stay_fixed(program: Program) -> None:
    """The programs the tester found defects with, each a test of its own in every profile
    (kept apart from the random tests, which an open one would otherwise stop before they
    generate anything)."""
    check(program)


@pytest.mark.skipif(bj is None, reason="boxfall.jax needs JAX, which is not installed")
@settings(PROFILE_SETTINGS, max_examples=THREADS)
@given(
    writers=st.integers(1, 3),
    readers=st.integers(0, 2),
    n=st.integers(1, 20),
    dtype=st.sampled_from(("float32", "int32")),
    tensor_step=st.booleans(),
)
def test_threads_writing_and_reading_one_graph_tensor(
    writers: int, readers: int, n: int, dtype: str, tensor_step: bool
) -> None:
    """Writers ``x += 1`` and readers of one graph-mode tensor: after the joins ``x`` is the
    start plus every increment, no thread raised, and every read lies between the start and
    the end (a whole number of increments, never fewer than the reader saw before)."""
    STATS["threads"] += 1
    gx = bj.namespace(graph=True)
    start = np.arange(4).astype(dtype)
    x = gx.asarray(start)
    one = gx.ones(4, dtype=getattr(gx, dtype))
    errors: list[str] = []
    seen: list[list[float]] = [[] for _ in range(readers)]
    barrier = threading.Barrier(writers + readers)

    def write() -> None:
        try:
            barrier.wait(timeout=30)
            for _ in range(n):
                y = x
                y += one if tensor_step else 1
        except Exception as e:  # noqa: BLE001
            errors.append(f"writer: {e!r}")

    def read(k: int) -> None:
        try:
            barrier.wait(timeout=30)
            for i in range(n):
                if i % 2:
                    seen[k].append(float(gx.sum(x)))
                else:
                    seen[k].append(float(np.sum(x.numpy())))
        except Exception as e:  # noqa: BLE001
            errors.append(f"reader: {e!r}")

    threads = [threading.Thread(target=write, daemon=True) for _ in range(writers)]
    threads += [threading.Thread(target=read, args=(k,), daemon=True) for k in range(readers)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not end within 120 s"
    assert not errors, errors
    total = writers * n
    np.testing.assert_array_equal(x.numpy(), start + total)
    base = float(start.sum())
    for k, values in enumerate(seen):
        steps = [(v - base) / 4 for v in values]
        assert all(0 <= s <= total and s == int(s) for s in steps), (k, values)
        assert steps == sorted(steps), f"reader {k} saw x go back: {values}"


@pytest.fixture(scope="module", autouse=True)
def _statistics_file() -> Any:
    """Writes the steps run per operator x dtype x scalar class where BOXFALL_DIFF_STATS says,
    when the module's tests end. (A fixture, not a conftest.py hook: a second conftest module
    would shadow ``tests/python/conftest.py``, which other test modules import from.)"""
    start = time.monotonic()
    yield
    path = os.environ.get("BOXFALL_DIFF_STATS")
    if not path:
        return
    stats = dict(sorted(STATS.items()))
    summary = {
        "profile": PROFILE,
        "x64": os.environ.get("JAX_ENABLE_X64", "") not in ("", "0", "false", "False"),
        "wall_s": round(time.monotonic() - start, 1),
        "programs": stats.pop("programs", 0),
        "threads_cases": stats.pop("threads", 0),
        "not_run_past_seconds": stats.pop("not run: past BOXFALL_DIFF_SECONDS", 0),
        "known_open": {k: stats.pop(k) for k in list(stats) if k.startswith("known open: ")},
        "steps": sum(stats.values()),
        "by_operator_dtype_scalar": stats,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
