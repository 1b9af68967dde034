"""Graph mode's host callbacks on whatever device JAX picks (a TPU where there is one; on JAX's
CPU a callback is no round trip, so say which when quoting): the bench's k-means + ridge
workload (``boxfall.workload``, float32) in graph mode on a backend whose programs run some
operators on the host although JAX kernels exist (``bj._graph_mode_without``), against the same
function on graph mode with every kernel, in paired rounds (the order alternating; each call
synced and waited for; medians and quartiles of the per-round ratios):

- ``no maximum``: the workload as it is, ``maximum`` on the host: one host node a k-means step,
  whose value the device reads at once (one callback a step);
- ``three in a row``: a step whose ``counts = maximum(counts, ones_like(counts))`` is followed
  by ``abs`` (values unchanged), with ``ones_like``, ``maximum`` and ``abs`` on the host: three
  host nodes in a row a step, which graph mode runs as one host callback.

Each row also gives one call's host callbacks (``bf.metrics.graphs()``: per program, the nodes
each callback serves; the callbacks run).

    python benches/jax_host_callbacks.py [--rounds 21] [--sizes 4000,250000]

One process at a time can hold a TPU: run nothing else on the chip meanwhile.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import boxfall as bf
import boxfall.jax as bj
import jax
import numpy as np
from boxfall import workload


def _step_abs(xp: Any, x: Any, x_sq: Any, ids: Any, centers: Any) -> tuple[Any, Any]:
    """``workload._lloyd_step`` with ``abs`` after ``maximum`` (the counts are positive)."""
    c_sq = xp.expand_dims(xp.sum(xp.multiply(centers, centers), axis=1), axis=0)
    cross = xp.matmul(x, xp.matrix_transpose(centers))
    dist = xp.add(xp.subtract(x_sq, xp.multiply(cross, 2.0)), c_sq)
    labels = xp.argmin(dist, axis=1, keepdims=True)
    onehot = xp.astype(xp.equal(labels, ids), x.dtype)
    counts = xp.sum(onehot, axis=0)
    sums = xp.matmul(xp.matrix_transpose(onehot), x)
    counts = xp.abs(xp.maximum(counts, xp.ones_like(counts)))
    return xp.divide(sums, xp.expand_dims(counts, axis=1)), labels


def three_in_a_row(xp: Any, x: Any, y: Any, p: workload.Problem) -> tuple[Any, Any, Any]:
    """The workload with `_step_abs` for its k-means steps."""
    centers, x_sq, ids = workload._kmeans_start(xp, x, p)
    labels = None
    for _ in range(p.iterations):
        centers, labels = _step_abs(xp, x, x_sq, ids, centers)
    return centers, labels, workload._ridge(xp, x, y, p)


def _synced(fn: Callable[..., Any], xp: Any, x: Any, y: Any, p: Any) -> Callable[[], Any]:
    def call() -> Any:
        out = fn(xp, x, y, p)
        bf.sync()
        return jax.block_until_ready([t.payload for t in out])

    return call


def _paired(a: Callable[[], Any], b: Callable[[], Any], rounds: int) -> list[float]:
    """Per round, the ratio of one call of ``a`` to one of ``b`` (the order alternating)."""
    ratios = []
    for r in range(rounds):
        times = {}
        for name, fn in (("a", a), ("b", b)) if r % 2 == 0 else (("b", b), ("a", a)):
            start = time.perf_counter()
            fn()
            times[name] = time.perf_counter() - start
        ratios.append(times["a"] / times["b"])
    return ratios


def _spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):.2f}x (quartiles {q[0]:.2f} to {q[2]:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--sizes", default="4000,250000")
    args = parser.parse_args()
    gx = bj.namespace(graph=True)
    _, nx = bj._graph_mode_without("JAXGraphBenchNoMaximum", frozenset({"maximum"}))
    three = frozenset({"maximum", "ones_like", "abs"})
    _, tx = bj._graph_mode_without("JAXGraphBenchThreeHost", three)
    print(f"JAX {jax.__version__} on {jax.devices()[0].platform}; {args.rounds} paired rounds")
    for n in (int(s) for s in args.sizes.split(",")):
        p = workload.Problem(n=n)
        x, y = (a.astype(np.float32) for a in workload.make_data(p))
        cases = [
            ("no maximum", workload.kmeans_ridge, nx),
            ("three in a row", three_in_a_row, tx),
        ]
        for label, fn, xp in cases:
            hosted = _synced(fn, xp, xp.asarray(x), xp.asarray(y), p)
            full = _synced(fn, gx, gx.asarray(x), gx.asarray(y), p)
            for got, want in zip(hosted(), full(), strict=True):
                if not np.allclose(np.asarray(got), np.asarray(want), rtol=2e-3, atol=2e-3):
                    print(f"  n={n:,}, {label}: the values differ from every kernel's")
            full()
            bf.metrics.reset()
            hosted()
            g = bf.metrics.graphs()
            ms = []
            for _ in range(5):
                start = time.perf_counter()
                hosted()
                ms.append((time.perf_counter() - start) * 1e3)
            print(
                f"  n={n:,}, {label}: {statistics.median(ms):.2f} ms a call; against every "
                f"kernel {_spread(_paired(hosted, full, args.rounds))}; one call: "
                f"{g['callbacks_run']} host callbacks serving {g['callback_nodes_run']} nodes, "
                f"graphs run {g['graphs_run']}"
            )


if __name__ == "__main__":
    main()
