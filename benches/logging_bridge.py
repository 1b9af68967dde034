"""What the logging bridge's level cache (src/python/logging.rs, `LevelCache`) saves a fallback:
a one-element Native fallback timed with two builds of the extension, in paired rounds, each
round one fresh process per build, in alternating order.

    python benches/logging_bridge.py DIR_A DIR_B [ROUNDS]

DIR_A and DIR_B are each a folder holding a `boxfall` package with its built extension (the
project's `python/` folder, or a copy of it with the other build's `_boxfall*.so`). For the
figure in logging.rs, B was built with `let tracked = false` in `install` (no `LevelCache`: the
bridge then asks the logger's `_cache` on every call, as it does for any other logger).
Prints each build's median ns per call and interquartile range, and the median per-round
difference B - A with its range.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

CHILD = r"""
import timeit, numpy as np, boxfall as bf, uuid
ns = "logfig" + uuid.uuid4().hex[:8]
with bf.Library(ns, "DEF") as lib:
    lib.define("add(Tensor self, Tensor other) -> Tensor")
    lib.impl("add", np.add, "CPU")
    op = getattr(bf.ops, ns).add.default
    x, y = bf.native.tensor(np.ones(1)), bf.native.tensor(np.ones(1))
    n = 20000
    op(x, y)
    print(min(timeit.repeat(lambda: op(x, y), number=n, repeat=7)) / n * 1e9)
"""


def one(path: str) -> float:
    env = dict(os.environ, PYTHONPATH=path)
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def main() -> None:
    a, b = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    ta, tb = [], []
    for r in range(rounds):
        if r % 2:
            tb.append(one(b))
            ta.append(one(a))
        else:
            ta.append(one(a))
            tb.append(one(b))
    diffs = [y - x for x, y in zip(ta, tb, strict=True)]

    def iqr(v: list[float]) -> str:
        q = statistics.quantiles(v, n=4)
        return f"[{q[0]:.0f}, {q[2]:.0f}]"

    print(f"A {statistics.median(ta):.0f} ns/call IQR {iqr(ta)}")
    print(f"B {statistics.median(tb):.0f} ns/call IQR {iqr(tb)}")
    spread = f"[{min(diffs):.0f}, {max(diffs):.0f}]"
    print(f"B - A median {statistics.median(diffs):.0f} ns, range {spread}")


if __name__ == "__main__":
    main()
