"""Two builds of boxfall, paired: the time per call of the bindings' fast path in each, in
processes that alternate, so that the machine's drift (30% here) moves both builds alike.

    python benches/builds_paired.py BUILD_A BUILD_B [--rounds 20]

Each build is a directory holding the ``boxfall`` package with its compiled ``_boxfall`` (a
release wheel's, unzipped beside the Python files). Each round runs one process of each build
(A then B, B then A the next round); a process times ``op(a)`` (a trivial Python CPU kernel on a
1-element NumPy array), ``add(x, y)`` (Native tensors through the CPU fallback, ``np.add`` the
kernel) and ``np.add(a, b)`` (the baseline, which no build changes), 9 runs of 20,000 calls
each, and keeps each call's best run. Printed: each build's median of those bests over the
rounds, and the median and quartiles of the per-round ratio B / A.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CALLS = ("op(a)", "add(x, y) fallback", "np.add(a, b)")


def _measure(number: int, repeat: int) -> None:
    """The measured process: one line a call, its name and its best time in ns."""
    import timeit
    import uuid

    import boxfall as bf
    import numpy as np

    bf.set_fallback_policy("allow")
    ns = f"paired{uuid.uuid4().hex[:8]}"
    lib = bf.Library(ns, "DEF")
    lib.define("ident(Tensor self) -> Tensor")
    lib.define("add_ufunc(Tensor self, Tensor other) -> Tensor")
    lib.impl("ident", lambda x: x, "CPU")
    lib.impl("add_ufunc", np.add, "CPU")
    op = getattr(bf.ops, ns).ident.default
    add = getattr(bf.ops, ns).add_ufunc.default
    a, b = np.ones(1), np.ones(1)
    x, y = bf.native.tensor(a), bf.native.tensor(b)
    calls = (lambda: op(a), lambda: add(x, y), lambda: np.add(a, b))
    for name, f in zip(CALLS, calls, strict=True):
        best = min(timeit.timeit(f, number=number) / number * 1e9 for _ in range(repeat))
        print(f"{name}\t{best:.1f}")


def _run(build: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=build)
    out = subprocess.run(
        [sys.executable, __file__, "--measure"], env=env, capture_output=True, text=True, check=True
    ).stdout
    return {name: float(t) for name, t in (line.split("\t") for line in out.splitlines())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("builds", nargs="*", help="BUILD_A BUILD_B")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        _measure(20000, 9)
        return 0
    if len(args.builds) != 2:
        parser.error("two builds: BUILD_A BUILD_B")
    times: list[list[dict[str, float]]] = [[], []]
    for r in range(args.rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            times[i].append(_run(args.builds[i]))
    for name in CALLS:
        a = [t[name] for t in times[0]]
        b = [t[name] for t in times[1]]
        ratios = [y / x for x, y in zip(a, b, strict=True)]
        low, _, high = statistics.quantiles(ratios, n=4)
        print(
            f"{name}: A {statistics.median(a):.0f} ns, B {statistics.median(b):.0f} ns; "
            f"B / A {statistics.median(ratios):.3f} (quartiles {low:.3f}-{high:.3f}, "
            f"{args.rounds} rounds)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
