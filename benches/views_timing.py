"""Paired timing of basic indexing and writes through it on Native, for two builds of boxfall.

    python benches/views_timing.py --rounds 7 BEFORE_PYTHONPATH AFTER_PYTHONPATH

Each round runs one process per build, one after the other (the order alternates), each timing
every case (the median of 7 repeats of a timeit loop); a case's figure is the median over the
rounds of the per-round ratio after/before, with the smallest and largest ratio as the spread.
A build is a directory holding the ``boxfall`` package (with its compiled ``_boxfall``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CASES = {
    # name: (setup, statement)
    "x[0, 1:3] (4x8)": ("x = nx.asarray(np.ones((4, 8)))", "x[0, 1:3]"),
    "x[0, 1:3] + 1 (4x8)": ("x = nx.asarray(np.ones((4, 8)))", "x[0, 1:3] + 1.0"),
    "x[0] (1000x1000)": ("x = nx.asarray(np.ones((1000, 1000)))", "x[0]"),
    "v = x[0]; v[1] = 2.0 (4x8)": ("x = nx.asarray(np.ones((4, 8)))", "v = x[0]; v[1] = 2.0"),
    "x[0, 1] = 2.0 (4x8)": ("x = nx.asarray(np.ones((4, 8)))", "x[0, 1] = 2.0"),
    "v[1] = 2.0, v = x[0] kept (4x8)": (
        "x = nx.asarray(np.ones((4, 8))); v = x[0]",
        "v[1] = 2.0",
    ),
    "v += 1.0, v = x[0] kept (4x8)": (
        "x = nx.asarray(np.ones((4, 8))); v = x[0]",
        "v.__iadd__(1.0)",
    ),
    "x[0] += 1.0 (4x8)": ("x = nx.asarray(np.ones((4, 8)))", "x[0] += 1.0"),
    "x[0, 1] = 2.0 (1000x1000)": ("x = nx.asarray(np.ones((1000, 1000)))", "x[0, 1] = 2.0"),
    "v[1] = 2.0, v = x[0] kept (1000x1000)": (
        "x = nx.asarray(np.ones((1000, 1000))); v = x[0]",
        "v[1] = 2.0",
    ),
}

CHILD = """
import json, timeit, numpy as np, boxfall.array_api as xp
nx = xp.namespace("Native")
out = {}
for name, (setup, stmt) in json.loads(CASES).items():
    env = {"np": np, "nx": nx}
    exec(setup, env)
    t = timeit.Timer(stmt, globals=env)
    n, _ = t.autorange()
    out[name] = sorted(x / n for x in t.repeat(7, n))[3]
print(json.dumps(out))
"""


def run(path: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=path)
    code = CHILD.replace("CASES", repr(json.dumps(CASES)))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the timing under {path} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {name: [] for name in CASES}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
    for r in range(args.rounds):
        if r % 2:
            after, before = run(args.after), run(args.before)
        else:
            before, after = run(args.before), run(args.after)
        for name in CASES:
            ratios[name].append(after[name] / before[name])
            times[name].append((before[name], after[name]))
    print(f"{'case':40} {'before us':>10} {'after us':>10} {'after/before':>13} spread")
    for name in CASES:
        b = statistics.median(t[0] for t in times[name]) * 1e6
        a = statistics.median(t[1] for t in times[name]) * 1e6
        q = ratios[name]
        print(
            f"{name:40} {b:10.2f} {a:10.2f} {statistics.median(q):13.2f} {min(q):.2f}-{max(q):.2f}"
        )


if __name__ == "__main__":
    main()
