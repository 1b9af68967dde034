"""What boxfall's pytest plugin costs a run that does not ask for it.

    python benches/pytest_plugin_overhead.py              # 1,000 tests, 10 paired rounds
    python benches/pytest_plugin_overhead.py --tests 1000 --rounds 20

Writes a suite of trivial tests (10 files of 100) to a temporary folder, then times, in paired
rounds, ``python -m pytest -q`` on it with the plugin installed but not asked for (A: its entry
point loads, its hooks run, no flag, no marker, no fixture) and with it turned off (B:
``-p no:boxfall``), back to back, A then B, so that drift of the machine lands on both. Prints
each side's median and spread of wall time, and the median of the paired differences A - B.
The tests import nothing: the run measures the plugin, not boxfall's import. It is a benchmark,
not a test: it asserts nothing about the figures.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_suite(root: Path, tests: int, per_file: int = 100) -> None:
    for start in range(0, tests, per_file):
        body = "".join(
            f"def test_{i}():\n    assert {i} == {i}\n\n\n"
            for i in range(start, min(start + per_file, tests))
        )
        (root / f"test_bench_{start // per_file:03d}.py").write_text(body)


def run_once(root: Path, extra: list[str]) -> float:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(root)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return took


def plugins_line(root: Path, extra: list[str]) -> str:
    cmd = [sys.executable, "-m", "pytest", "--co", "-p", "no:cacheprovider", *extra, str(root)]
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True).stdout
    return next((line for line in out.splitlines() if line.startswith("plugins:")), "plugins:")


def spread(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return (
        f"median {statistics.median(xs) * 1e3:7.1f} ms  "
        f"IQR {q[0] * 1e3:7.1f}-{q[2] * 1e3:7.1f} ms  "
        f"min {min(xs) * 1e3:7.1f}  max {max(xs) * 1e3:7.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tests", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args(argv)
    off = ["-p", "no:boxfall"]
    with tempfile.TemporaryDirectory(prefix="boxfall-plugin-bench-") as tmp:
        root = Path(tmp)
        write_suite(root, args.tests)
        line_on, line_off = plugins_line(root, []), plugins_line(root, off)
        if "boxfall" not in line_on or "boxfall" in line_off:
            raise SystemExit(
                f"the plugin must load in A and not in B:\n A {line_on}\n B {line_off}"
            )
        run_once(root, [])  # warm the file cache and the .pyc files
        run_once(root, off)
        a: list[float] = []
        b: list[float] = []
        for _ in range(args.rounds):
            a.append(run_once(root, []))
            b.append(run_once(root, off))
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    print(f"{args.tests} tests, {args.rounds} paired rounds (A then B), wall time of the run:")
    print(f"  A  plugin installed, not asked for : {spread(a)}")
    print(f"  B  -p no:boxfall                   : {spread(b)}")
    print(
        f"  A - B per round: median {statistics.median(diffs) * 1e3:+.1f} ms "
        f"({statistics.median(diffs) / statistics.median(b) * 100:+.1f}% of B), "
        f"min {min(diffs) * 1e3:+.1f}, max {max(diffs) * 1e3:+.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
