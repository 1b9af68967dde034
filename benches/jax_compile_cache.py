"""What a fresh process pays for its first graph-mode call with JAX's persistent compilation
cache (``bj.enable_compilation_cache``), on whatever device JAX picks (on a machine without an
accelerator, JAX's CPU: say so when quoting the figures).

Each round runs three fresh processes, one after the other, each making the bench's workload
(``boxfall.workload.kmeans_ridge``, float32, ``n`` points) in graph mode and reading its results
once (the first call: recording, JAX's trace, lowering and compile, the run, the read):

- ``no cache``: the cache off (JAX's default state);
- ``cold``: the cache on in a new, empty directory (the compile, plus writing the cache);
- ``warm``: the cache on in the directory the ``cold`` process of the round just filled.

Each process counts its XLA compiles from JAX's monitoring events (a request to the compile
step that the persistent cache did not answer: ``/jax/core/compile/backend_compile_duration``
events less ``/jax/compilation_cache/cache_hits``) and splits the first call's time by JAX's
own duration events: trace (``jaxpr_trace_duration``), lower (``jaxpr_to_mlir_module_duration``),
compile or cache load (``backend_compile_duration``; of it, ``cache_retrieval_time_sec`` the
load), and the rest (boxfall's recording, the program's run and the read of the results). A
second call in the same process (compiled already) is the steady state. Figures are medians of
the rounds with their quartiles; the warm process against the cold one is a per-round ratio.

    python benches/jax_compile_cache.py [--rounds 7] [--n 4000]

One process at a time can hold a TPU: run nothing else on the chip meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
    "/jax/compilation_cache/cache_retrieval_time_sec": "load",
}
"""JAX's duration events, by the part of the first call each measures."""


def child(n: int, cache: str | None) -> dict[str, Any]:
    """One fresh process's first and second call of the workload in graph mode: its figures."""
    start = time.perf_counter()
    import boxfall as bf
    import boxfall.jax as bj
    import jax
    import numpy as np
    from boxfall import workload

    imported = time.perf_counter() - start
    if cache is not None:
        bj.enable_compilation_cache(cache)
    seconds: Counter[str] = Counter()
    counts: Counter[str] = Counter()

    def on_duration(event: str, duration: float, **_: Any) -> None:
        part = EVENTS.get(event)
        if part is not None:
            seconds[part] += duration
            counts[part] += 1

    def on_event(event: str, **_: Any) -> None:
        counts[event.rsplit("/", 1)[-1]] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)

    p = workload.Problem(n=n)
    x, y = (a.astype(np.float32) for a in workload.make_data(p))
    gx = bj.namespace(graph=True)
    dx, dy = gx.asarray(x), gx.asarray(y)
    bf.sync()
    seconds.clear()
    counts.clear()
    bf.metrics.reset()

    def call() -> float:
        t = time.perf_counter()
        for r in workload.kmeans_ridge(gx, dx, dy, p):
            np.asarray(r)
        return time.perf_counter() - t

    first = call()
    figures = dict(seconds)
    compiles = counts["compile"] - counts["cache_hits"]
    graphs = bf.metrics.graphs()
    second = call()
    return {
        "device": str(jax.devices()[0].platform),
        "jax": jax.__version__,
        "import_s": imported,
        "first_s": first,
        "second_s": second,
        "trace_s": figures.get("trace", 0.0),
        "lower_s": figures.get("lower", 0.0),
        "compile_s": figures.get("compile", 0.0),
        "load_s": figures.get("load", 0.0),
        "xla_compiles": compiles,
        "cache_hits": counts["cache_hits"],
        "cache_writes": counts["cache_misses"],
        "programs": graphs["compiled"],
        "nodes": graphs["nodes"],
    }


def _spawn(n: int, cache: str | None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", str(n)]
    if cache is not None:
        argv += ["--cache", cache]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _spread(values: list[float], scale: float = 1e3, unit: str = "ms", digits: int = 1) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    m, low, high = (f"{v * scale:.{digits}f}" for v in (statistics.median(values), q[0], q[2]))
    return f"{m} {unit} ({low} to {high})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=4_000)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.cache)))
        return
    runs: dict[str, list[dict[str, Any]]] = {"no cache": [], "cold": [], "warm": []}
    for _ in range(args.rounds):
        runs["no cache"].append(_spawn(args.n, None))
        with tempfile.TemporaryDirectory(prefix="boxfall-jax-cache-") as folder:
            runs["cold"].append(_spawn(args.n, folder))
            runs["warm"].append(_spawn(args.n, folder))
    some = runs["warm"][0]
    print(
        f"the workload in graph mode, {args.n:,} x 16 float32, a fresh process's first call; "
        f"JAX {some['jax']} on {some['device']}; medians of {args.rounds} rounds (quartiles)"
    )
    print(f"  {some['programs']} programs, {some['nodes']} nodes")
    for rs in runs.values():
        for r in rs:
            r["rest_s"] = r["first_s"] - r["trace_s"] - r["lower_s"] - r["compile_s"]
    parts = (
        "first_s",
        "trace_s",
        "lower_s",
        "compile_s",
        "load_s",
        "rest_s",
        "second_s",
        "import_s",
    )
    names = {
        "first_s": "first call",
        "trace_s": "  trace",
        "lower_s": "  lower",
        "compile_s": "  compile or load",
        "load_s": "    of it, cache load",
        "rest_s": "  rest (record, run, read)",
        "second_s": "second call",
        "import_s": "import boxfall.jax",
    }
    print(f"  {'':<26}" + "".join(f"{k:>30}" for k in runs))
    for part in parts:
        print(
            f"  {names[part]:<26}"
            + "".join(f"{_spread([r[part] for r in rs]):>30}" for rs in runs.values())
        )
    for key in ("xla_compiles", "cache_hits", "cache_writes"):
        print(
            f"  {key.replace('_', ' '):<26}"
            + "".join(f"{statistics.median(r[key] for r in rs):>30}" for rs in runs.values())
        )
    warm = [w["first_s"] for w in runs["warm"]]
    ratios = [w / c["first_s"] for w, c in zip(warm, runs["cold"], strict=True)]
    plain = [w / c["first_s"] for w, c in zip(warm, runs["no cache"], strict=True)]
    print(f"  warm first call / cold first call: {_spread(ratios, 1, 'x', 2)}")
    print(f"  warm first call / no-cache first call: {_spread(plain, 1, 'x', 2)}")


if __name__ == "__main__":
    main()
