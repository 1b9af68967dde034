"""Runs SciPy's and scikit-learn's installed array API tests on boxfall's namespaces and
array_api_strict in one run, and prints the passed/failed counts per module and namespace.

    python tests/clients/run.py                   # every module below (long: about an hour)
    python tests/clients/run.py --quick           # a few minutes: the subset .ci/run runs
    python tests/clients/run.py --graph           # graph mode against eager mode (CI too)
    python tests/clients/run.py --scipy special fft --no-sklearn --out table.txt
    python tests/clients/run.py --quick --jobs 2  # two pytest runs side by side (as CI)

Each module is one pytest process (``-p boxfall_clients``, the plugin beside this file) with
``SCIPY_ARRAY_API=1``: SciPy's with ``-m array_api_backends``, scikit-learn's over its test
files that loop over namespaces and ``sklearn/tests/test_common.py -k check_array_api``. Only
the tests that run on a compared namespace are run (``--boxfall-clients-only``): boxfall's
``Native`` namespace, its Python backend's, ``boxfall.jax``'s eager and graph modes (where JAX
is installed), and array_api_strict (``--namespaces`` narrows them). Errors count as failures.
``KNOWN_DIFFERENCES.md`` beside this file says which failures remain and why.

``--compare BASE OTHER`` fails the run unless every test ends on OTHER as on BASE (the
plugin's ``GRAPH_KNOWN`` expected failures aside, listed with their reasons). ``--graph`` is
that for ``boxfall_jax`` and ``boxfall_jax_graph`` on ``GRAPH_SCIPY`` and ``GRAPH_SKLEARN``:
graph mode must pass SciPy's and scikit-learn's tests as eager mode does. A module's own
``-k`` there is overridden by a ``-k`` after ``--`` (pytest keeps the last).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

SCIPY_MODULES = (
    "special",
    "stats",
    "fft",
    "cluster",
    "integrate",
    "optimize",
    "spatial",
    "differentiate",
    "interpolate",
    "_lib",
    "linalg",
    "signal",
    "ndimage",
)

SKLEARN_FILES = (
    "decomposition/tests/test_pca.py",
    "metrics/tests/test_classification.py",
    "metrics/tests/test_common.py",
    "metrics/tests/test_pairwise.py",
    "metrics/cluster/tests/test_common.py",
    "metrics/cluster/tests/test_supervised.py",
    "_loss/tests/test_loss.py",
    "_loss/tests/test_link.py",
    "preprocessing/tests/test_polynomial.py",
    "preprocessing/tests/test_data.py",
    "preprocessing/tests/test_label.py",
    "tests/test_pipeline.py",
    "tests/test_calibration.py",
    "tests/test_kernel_approximation.py",
    "tests/test_naive_bayes.py",
    "mixture/tests/test_gaussian_mixture.py",
    "utils/tests/test_array_api.py",
    "utils/tests/test_validation.py",
    "utils/tests/test_multiclass.py",
    "utils/tests/test_indexing.py",
    "utils/tests/test_extmath.py",
    "utils/tests/test_optimize.py",
    "utils/tests/test_stats.py",
    "utils/tests/test_utils.py",
    "linear_model/tests/test_logistic.py",
    "linear_model/tests/test_ridge.py",
    "linear_model/_glm/tests/test_glm.py",
    "model_selection/tests/test_split.py",
    "model_selection/tests/test_search.py",
    "model_selection/tests/test_validation.py",
)
"""scikit-learn's test files that loop over namespaces (those absent from the installed version
are left out)."""

QUICK_SCIPY = ("special", "cluster", "differentiate", "ndimage")
QUICK_SKLEARN = ("utils/tests/test_array_api.py", "decomposition/tests/test_pca.py")
QUICK_NAMESPACES = ("boxfall_native", "boxfall_python", "boxfall_jax", "array_api_strict")
"""``--quick``'s namespaces: graph mode has a subset of its own (``--graph``)."""

GRAPH_SCIPY: dict[str, list[str]] = {
    # k-means and vector quantization (iterations with a convergence check); hierarchy's 162
    # tests are left to the whole run, for CI's minutes.
    "cluster": ["-k", "test_vq"],
    # Special functions on each dtype: element-wise kernels and host callbacks in programs.
    "special": ["-k", "test_support_alternative_backends"],
    # Writes through views (`output=out[i, ...]`) of a pending `out`, from threads; one file,
    # as collecting all of ndimage's tests takes a minute.
    "ndimage.tests.test_filters": ["-k", "TestThreading"],
    # Every transform and dtype (fft rules, host callbacks), and TestFFTThreadSafe: threads
    # reading one pending tensor.
    "fft": [],
}
GRAPH_SKLEARN: dict[str, list[str]] = {
    "utils/tests/test_array_api.py": [],
    "preprocessing/tests/test_data.py": [],  # the scalers
    # The metrics of test_jax_graph_sklearn.py and their kin (56 tests a namespace); all 218
    # take four times as long.
    "metrics/tests/test_common.py": [
        "-k",
        "r2_score or mean_squared_error or accuracy_score or d2_ or mean_absolute",
    ],
    # test_pairwise_parallel_array_api among them: two joblib threads write slices of one
    # array (a view), each holding the base's write lock (tensor/write_lock.rs).
    "metrics/tests/test_pairwise.py": [],
    # The estimators and helpers of test_jax_graph_sklearn.py's kin, their array API tests.
    "decomposition/tests/test_pca.py": [],
    "linear_model/tests/test_ridge.py": ["-k", "array_api"],
    "mixture/tests/test_gaussian_mixture.py": ["-k", "array_api"],
    "tests/test_naive_bayes.py": ["-k", "array_api"],
    "tests/test_kernel_approximation.py": ["-k", "array_api"],
    "preprocessing/tests/test_label.py": ["-k", "array_api"],
    "utils/tests/test_extmath.py": ["-k", "array_api"],
    "metrics/tests/test_classification.py": ["-k", "array_api"],
}
GRAPH_NAMESPACES = ("boxfall_jax", "boxfall_jax_graph")
"""``--graph``: SciPy's modules and scikit-learn's files (with pytest arguments that narrow
them) that CI runs on boxfall.jax's eager and graph modes, to hold the second's outcomes to the
first's (``--compare boxfall_jax boxfall_jax_graph``): about six CPU minutes, three with
``--jobs 2``."""

COLUMNS = (
    ("boxfall_native", 'namespace("Native")'),
    ("boxfall_python", "Python backend"),
    ("boxfall_jax", "boxfall.jax"),
    ("boxfall_jax_graph", "boxfall.jax graph"),
    ("array_api_strict", "array_api_strict"),
)


def _jobs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    jobs: list[tuple[str, list[str]]] = []
    modules: dict[str, list[str]] = {m: [] for m in args.scipy or SCIPY_MODULES}
    files: dict[str, list[str]] = {f: [] for f in SKLEARN_FILES}
    if args.graph:
        modules = GRAPH_SCIPY if args.scipy is None else modules
        files = GRAPH_SKLEARN
    elif args.quick:
        modules = {m: [] for m in QUICK_SCIPY} if args.scipy is None else modules
        files = {f: [] for f in QUICK_SKLEARN}
    if args.scipy != [] and not args.no_scipy:
        try:
            import scipy  # noqa: F401
        except ImportError:
            print("scipy is not installed: its modules are skipped")
        else:
            for mod, narrowed in modules.items():
                jobs.append(
                    (
                        f"scipy.{mod}",
                        ["--pyargs", f"scipy.{mod}", "-m", "array_api_backends", *narrowed],
                    )
                )
    if not args.no_sklearn:
        try:
            import sklearn
        except ImportError:
            print("scikit-learn is not installed: its modules are skipped")
        else:
            root = Path(sklearn.__file__).parent
            for rel, narrowed in files.items():
                if (root / rel).exists():
                    label = "sklearn." + rel.removesuffix(".py").replace("/tests/", ".").replace(
                        "/", "."
                    )
                    jobs.append((label, [str(root / rel), *narrowed]))
            if not (args.quick or args.graph):
                common = root / "tests" / "test_common.py"
                jobs.append(
                    ("sklearn.test_common[check_array_api]", [str(common), "-k", "check_array_api"])
                )
    return jobs


def _run(
    label: str,
    extra: list[str],
    results: Path,
    timeout: float,
    pytest_args: list[str],
    namespaces: list[str] | None = None,
) -> tuple[str, bool]:
    env = dict(os.environ)
    if namespaces:
        env["BOXFALL_CLIENTS_NAMESPACES"] = ",".join(namespaces)
    env["SCIPY_ARRAY_API"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env["BOXFALL_CLIENTS_RESULTS"] = str(results)
    env["BOXFALL_CLIENTS_LABEL"] = label
    env.setdefault("BOXFALL_FALLBACK", "allow")
    # SciPy's conftest turns JAX's 64-bit types on for its own jax.numpy runs (its tests ask
    # for float64): boxfall.jax reads the flag at import, before any conftest, so it is set here.
    env.setdefault("JAX_ENABLE_X64", "1")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *extra,
        "-p",
        "boxfall_clients",
        "--boxfall-clients-only",
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        "-rN",
        "--tb=no",
        "-W",
        "ignore::DeprecationWarning",
        *pytest_args,
    ]
    start = time.monotonic()
    # The pytest process's own CPU seconds (os.wait4 gives the child's, alone even when jobs
    # run side by side): a measure of the run's cost that a busy machine's wall time hides.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=tempfile.gettempdir(), stdout=out, stderr=err)
        timer = threading.Timer(timeout, proc.kill) if timeout else None
        if timer is not None:
            timer.start()
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        timed_out = timer is not None and not timer.is_alive() and proc.returncode < 0
        if timer is not None:
            timer.cancel()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if timed_out:
        status, tail, ok = f"timed out after {timeout:.0f}s (counts so far)", "", True
    else:
        status = f"exit {proc.returncode}"
        tail = (stdout.strip().splitlines() or [""])[-1]
        # 0: all passed, 1: some failed, 5: none collected; anything else is pytest (or the
        # plugin) broken, which the table would hide.
        ok = proc.returncode in (0, 1, 5)
        if not ok:
            tail += "\n" + stdout[-3000:] + stderr[-3000:]
    cpu = usage.ru_utime + usage.ru_stime
    return f"{label}: {status}, {time.monotonic() - start:.0f}s (CPU {cpu:.0f}s)  {tail}", ok


def table(rows: list[dict[str, Any]], labels: list[str]) -> str:
    """The per-module table: passed/failed for each namespace, and the totals."""
    counts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    for r in rows:
        counts[r["label"], r["ns"]][r["outcome"]] += 1
    head = ["module"] + [title for _, title in COLUMNS]
    lines = [head]
    totals = {ns: collections.Counter() for ns, _ in COLUMNS}
    for label in labels:
        line = [label]
        for ns, _ in COLUMNS:
            c = counts[label, ns]
            totals[ns] += c
            line.append(f"{c['passed']} / {c['failed']}")
        lines.append(line)
    lines.append(
        ["total"] + [f"{totals[ns]['passed']} / {totals[ns]['failed']}" for ns, _ in COLUMNS]
    )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |"
        for line in lines
    ]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    # A boxfall failure where array_api_strict's own test skipped (SciPy's skip_xp_backends
    # names strict alone, e.g. for NumPy-only code paths): tests only boxfall ran.
    strict = {r["nodeid"]: r["outcome"] for r in rows if r["ns"] == "array_api_strict"}
    for ns, _ in COLUMNS[:-1]:
        only = sum(
            1
            for r in rows
            if r["ns"] == ns
            and r["outcome"] == "failed"
            and strict.get(r["nodeid"].replace(ns, "array_api_strict")) in ("skipped", "xfailed")
        )
        out.append(f"{ns}: {only} of its failures are of tests array_api_strict skipped")
    seconds: collections.Counter[str] = collections.Counter()
    for r in rows:
        seconds[r["ns"]] += r.get("seconds", 0.0)
    out.append(
        "seconds in the tests of each namespace: "
        + ", ".join(f"{ns} {seconds[ns]:.0f}" for ns, _ in COLUMNS)
    )
    skipped = {ns: totals[ns]["skipped"] + totals[ns]["xfailed"] for ns, _ in COLUMNS}
    out.append(
        "cells: passed / failed (errors count as failed); skipped or xfailed: "
        + ", ".join(f"{ns} {n}" for ns, n in skipped.items())
    )
    return "\n".join(out)


def differences(rows: list[dict[str, Any]], base: str, other: str) -> tuple[list[str], list[str]]:
    """The tests whose outcome on ``other`` is not their outcome on ``base`` (the same test:
    its node id with the one namespace's name for the other's), one line each, sorted: those
    unexpected (a test that ran on only one of them is one too, as a run cut short can leave
    it), and the known ones (passed on ``base``, an expected failure on ``other``: the plugin's
    ``GRAPH_KNOWN``), with the reason.

    ``other``'s name must not be a part of ``base``'s (``boxfall_jax_graph`` against
    ``boxfall_jax`` reads ``other``'s ids back to ``base``'s by replacing the longer name)."""
    if other in base:
        raise ValueError(f"compare {base!r} with {other!r}: the second's name is in the first's")
    on_base = {r["nodeid"]: r for r in rows if r["ns"] == base}
    on_other = {r["nodeid"].replace(other, base): r for r in rows if r["ns"] == other}
    unexpected, known = [], []
    missing = {"outcome": "not run"}
    for nodeid in sorted(set(on_base) | set(on_other)):
        a, b = on_base.get(nodeid, missing), on_other.get(nodeid, missing)
        if a["outcome"] == b["outcome"]:
            continue
        line = f"{nodeid}: {base} {a['outcome']}, {other} {b['outcome']}"
        if a["outcome"] == "passed" and b["outcome"] == "xfailed":
            known.append(f"{line} ({b.get('xfail', '')})")
        else:
            unexpected.append(line)
    return unexpected, known


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a subset of a few minutes")
    p.add_argument(
        "--graph",
        action="store_true",
        help="graph mode against eager mode on a subset of about six CPU minutes (boxfall.jax's "
        "namespaces only, --compare boxfall_jax boxfall_jax_graph)",
    )
    p.add_argument(
        "--scipy", nargs="*", default=None, metavar="MODULE", help="SciPy modules (default: all 13)"
    )
    p.add_argument("--no-scipy", action="store_true")
    p.add_argument("--no-sklearn", action="store_true")
    p.add_argument(
        "--timeout", type=float, default=0, help="seconds a module may take (0: no limit)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="pytest runs side by side (default 1; CI runs 2: a module's run is one process, "
        "mostly one core)",
    )
    p.add_argument("--out", type=Path, help="also write the table to this file")
    p.add_argument(
        "--results", type=Path, help="the JSON lines of every test (default: a temporary file)"
    )
    p.add_argument(
        "--namespaces",
        nargs="+",
        choices=[ns for ns, _ in COLUMNS],
        help="run these namespaces only (default: every one)",
    )
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("BASE", "OTHER"),
        choices=[ns for ns, _ in COLUMNS],
        help="fail unless every test has the same outcome on OTHER as on BASE (and list those "
        "that do not); e.g. boxfall_jax boxfall_jax_graph: graph mode against eager mode",
    )
    p.add_argument("pytest_args", nargs="*", help="passed to every pytest run (after --)")
    args = p.parse_args(argv)
    if args.graph:
        args.namespaces = args.namespaces or list(GRAPH_NAMESPACES)
        args.compare = args.compare or list(GRAPH_NAMESPACES)
    elif args.quick:
        args.namespaces = args.namespaces or list(QUICK_NAMESPACES)

    jobs = _jobs(args)
    if not jobs:
        print("nothing to run")
        return 0
    results = args.results or Path(tempfile.mkstemp(prefix="boxfall-clients-", suffix=".jsonl")[1])
    results.write_text("")
    start = time.monotonic()
    broken = []
    # Each pytest run writes its own results file (runs side by side must not interleave
    # their lines), gathered into ``results`` in the jobs' order.
    parts = [results.with_name(f"{results.name}.{i}") for i in range(len(jobs))]

    def run_one(i: int) -> tuple[str, bool]:
        label, extra = jobs[i]
        parts[i].write_text("")
        return _run(label, extra, parts[i], args.timeout, args.pytest_args, args.namespaces)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (label, _), (line, ok) in zip(jobs, pool.map(run_one, range(len(jobs))), strict=True):
            print(line, flush=True)
            if not ok:
                broken.append(label)
    with results.open("w") as gathered:
        for part in parts:
            gathered.write(part.read_text())
            part.unlink()
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    text = table(rows, [label for label, _ in jobs])
    took = time.monotonic() - start
    text += f"\n{len(jobs)} pytest runs in {took:.0f}s; every test's outcome: {results}"
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    failed = 0
    if broken:
        print(f"pytest did not run to the end (an internal or usage error) for: {broken}")
        failed = 1
    if args.compare:
        base, other = args.compare
        diff, known = differences(rows, base, other)
        ran = sum(1 for r in rows if r["ns"] == other)
        if known:
            print(f"{len(known)} tests fail on {other} alone, known (xfail):")
            print("\n".join("  " + line for line in known))
        if diff:
            print(f"{len(diff)} tests do not end on {other} as on {base}:")
            print("\n".join("  " + line for line in diff))
            failed = 1
        elif ran == 0:
            print(f"no test ran on {other}: nothing compared")
            failed = 1
        else:
            print(f"the other {ran - len(known)} tests on {other} end as on {base}")
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
