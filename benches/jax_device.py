"""boxfall.jax against jax.numpy on whatever device JAX picks (a TPU where there is one), in
paired rounds (boxfall's call and the baseline back to back, medians and spread of the rounds):

1. ``xp.add(x, y)`` through boxfall.jax against ``jnp.add`` at 1 and 1M elements, not waiting
   for the device (the microseconds boxfall adds to each call), and waiting for each result
   at 1M (the ratio);
2. the bench's k-means + ridge workload (``boxfall.workload.kmeans_ridge``) on
   ``bj.namespace()`` against the same function with ``jax.numpy`` as its namespace, op by op,
   at n=4,000 and n=250,000, float32; and the bytes boxfall moved against the least the data
   flow needs (``workload.least_needed`` with boxfall.jax's kernels).

3. with ``--costs`` only: where ``xp.add``'s microseconds go (JAX's compiled add, the kernel,
   the operator, the namespace's function) and what each of the workload's operators adds.
4. with ``--graph`` only: the workload in graph mode against ``jax.jit`` and ``jax.numpy`` op
   by op, where the time goes (recording, sync, wait; jit's launch, wait), and graph mode's
   variants (a convergence check, a host callback, a graph break), and the workload written
   with views and transposes (``views_workload``) against ``jax.jit``; with ``--limits 52,26``
   also under those graph size limits (``bf.graph.set_limit``), without the variants;
   with ``--inplace MIB`` only: ``x += y`` in graph mode against ``jax.jit`` with its input
   donated and kept (time a step, the device's peak memory).

    python benches/jax_device.py [--rounds 15] [--quick | --costs | --graph [--limits N,..] |
                                 --inplace MIB]

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
import jax.numpy as jnp
import numpy as np
from boxfall import workload


def _spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"median {statistics.median(values):.2f} (quartiles {q[0]:.2f} to {q[2]:.2f})"


def _paired(
    ours: Callable[[], Any], base: Callable[[], Any], calls: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Per-call microseconds of ``ours`` and ``base``, each round ``calls`` calls of one then
    ``calls`` of the other (the order alternating), each round ending in a wait for the last
    result so that no round's queue spills into the next."""
    a, b = [], []
    for r in range(rounds):
        pair = [(ours, a), (base, b)] if r % 2 == 0 else [(base, b), (ours, a)]
        for fn, out in pair:
            last = fn()
            _wait(last)
            start = time.perf_counter()
            for _ in range(calls):
                last = fn()
            _wait(last)
            out.append((time.perf_counter() - start) / calls * 1e6)
    return a, b


def _wait(v: Any) -> None:
    payload = v.payload if isinstance(v, bf.Tensor) else v
    jax.block_until_ready(payload)


def bench_add(rounds: int, sizes: tuple[int, ...]) -> None:
    xp = bj.namespace()
    print("xp.add(x, y) through boxfall.jax against jnp.add (per call, us):")
    for n in sizes:
        x = xp.asarray(np.ones(n, dtype=np.float32))
        y = xp.asarray(np.ones(n, dtype=np.float32))
        jx, jy = x.payload, y.payload
        calls = 2000 if n < 1000 else 200
        ours, base = _paired(
            lambda x=x, y=y: xp.add(x, y), lambda jx=jx, jy=jy: jnp.add(jx, jy), calls, rounds
        )
        added = [o - b for o, b in zip(ours, base, strict=True)]
        print(f"  n={n:>9,}, not waiting: boxfall {_spread(ours)}; jnp {_spread(base)}")
        print(f"  {'':12} boxfall adds {_spread(added)} us a call")
        if n >= 1_000_000:
            ours, base = _paired(
                lambda x=x, y=y: _wait(xp.add(x, y)) or x,
                lambda jx=jx, jy=jy: jax.block_until_ready(jnp.add(jx, jy)),
                20,
                rounds,
            )
            ratio = [o / b for o, b in zip(ours, base, strict=True)]
            print(f"  n={n:>9,}, waiting for each: ratio {_spread(ratio)}")


def bench_stages(rounds: int) -> None:
    """Where ``xp.add``'s microseconds go at n=1, each stage against ``jnp.add`` in paired
    rounds: JAX's compiled add alone (what boxfall.jax's payload kernel calls), the Python
    kernel that serves the calls the payload kernel does not (its checks and the result's
    wrap: a Python frame), the operator (``bf.ops.array_api.add``:
    boxfall's dispatch and its residency steps), the namespace's ``xp.add``."""
    from boxfall.jax import _kernels

    xp = bj.namespace()
    x = xp.asarray(np.ones(1, dtype=np.float32))
    jx = x.payload
    kernels = _kernels._Kernels(bj.backend, bj.device_hooks.device)
    kernels.binary("add", jnp.add, "iufc")
    compiled, op = jax.jit(jnp.add), bf.ops.array_api.add.default
    # The Python kernel that a bf.PayloadKernel hands every call it does not serve: what each
    # call ran before the payload kernel (its checks, the payload reads, the result's wrap).
    registered = kernels.table["add"]
    kernel = registered.otherwise if isinstance(registered, bf.PayloadKernel) else registered
    stages = {
        "jax.jit(jnp.add)": lambda: compiled(jx, jx),
        "the Python kernel": lambda: kernel(x, x),
        "bf.ops.array_api.add": lambda: op(x, x),
        "xp.add": lambda: xp.add(x, x),
    }
    print("xp.add(x, x) at n=1 by stage, each against jnp.add (us a call, minus jnp.add's):")
    for name, call in stages.items():
        ours, base = _paired(call, lambda: jnp.add(jx, jx), 2000, rounds)
        added = [o - b for o, b in zip(ours, base, strict=True)]
        print(f"  {name:24} {_spread(added)} (jnp.add {statistics.median(base):.2f})")


def bench_ops(rounds: int, n: int = 4_000) -> None:
    """The k-means + ridge workload's operators one by one (n points, 8 features, 8 centers),
    each through boxfall.jax against jax.numpy's, paired: the microseconds each adds."""
    xp = bj.namespace()
    rng = np.random.default_rng(0)
    host = rng.standard_normal((n, 8)).astype(np.float32)
    x, c = xp.asarray(host), xp.asarray(host[:8])
    counts = xp.sum(c, axis=0)
    labels = xp.argmin(xp.matmul(x, xp.matrix_transpose(c)), axis=1, keepdims=True)
    ids = xp.expand_dims(xp.arange(8), axis=0)
    jx, jc, jcounts, jlabels, jids = (t.payload for t in (x, c, counts, labels, ids))
    f32 = np.dtype("float32")
    cases: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "multiply(x, 2.0)": (lambda: xp.multiply(x, 2.0), lambda: jnp.multiply(jx, 2.0)),
        "sum(x, axis=1)": (
            lambda: xp.sum(x, axis=1, keepdims=True),
            lambda: jnp.sum(jx, axis=1, keepdims=True),
        ),
        "matmul(x, c.T)": (
            lambda: xp.matmul(x, xp.matrix_transpose(c)),
            lambda: jnp.matmul(jx, jnp.matrix_transpose(jc)),
        ),
        "argmin(d, axis=1)": (
            lambda: xp.argmin(x, axis=1, keepdims=True),
            lambda: jnp.argmin(jx, axis=1, keepdims=True),
        ),
        "equal(labels, ids)": (lambda: xp.equal(labels, ids), lambda: jnp.equal(jlabels, jids)),
        "astype(x, int32)": (lambda: xp.astype(x, xp.int32), lambda: jx.astype(jnp.int32)),
        "maximum(s, s)": (
            lambda: xp.maximum(counts, counts),
            lambda: jnp.maximum(jcounts, jcounts),
        ),
        "ones_like(s)": (lambda: xp.ones_like(counts), lambda: jnp.ones_like(jcounts)),
        "divide(c, s[:, None])": (
            lambda: xp.divide(c, xp.expand_dims(counts, axis=1)),
            lambda: jnp.divide(jc, jnp.expand_dims(jcounts, axis=1)),
        ),
        "arange(8)": (lambda: xp.arange(8), lambda: jnp.arange(8)),
        "take(x, ids, axis=0)": (
            lambda: xp.take(x, ids[0], axis=0),
            lambda: jnp.take(jx, jids[0], axis=0),
        ),
        "eye(8)": (lambda: xp.eye(8, dtype=f32), lambda: jnp.eye(8, dtype=f32)),
        "linalg.solve": (
            lambda: xp.linalg.solve(xp.eye(8, dtype=f32), c),
            lambda: jnp.linalg.solve(jnp.eye(8, dtype=f32), jc),
        ),
    }
    print(f"the workload's operators at n={n:,} (us a call, boxfall.jax minus jax.numpy):")
    for name, (ours_fn, base_fn) in cases.items():
        ours, base = _paired(ours_fn, base_fn, 200, rounds)
        added = [o - b for o, b in zip(ours, base, strict=True)]
        print(f"  {name:24} {_spread(added)} (jax.numpy {statistics.median(base):.1f})")


def _jnp_namespace() -> Any:
    """jax.numpy as the workload's namespace (it is the array API's since JAX 0.4.32)."""
    return jnp


def bench_workload(rounds: int, sizes: tuple[int, ...]) -> None:
    xp = bj.namespace()
    setup = workload.Setup("jax", xp, bj.BACKEND_NAME, frozenset(bj.NATIVE_KERNELS))
    print("k-means + ridge (float32), boxfall.jax against jax.numpy op by op (ms a call):")
    for n in sizes:
        p = workload.Problem(n=n)
        x, y = (a.astype(np.float32) for a in workload.make_data(p))
        run = workload.run(setup, p, (x, y))
        need = workload.least_needed(p, setup.native)
        # the inputs on the device once, as a user's code would hold them
        dx, dy = xp.asarray(x), xp.asarray(y)
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        want = [np.asarray(r) for r in workload.kmeans_ridge(jnp, jx, jy, p)]
        for got, w in zip(run.results, want, strict=True):
            np.testing.assert_allclose(got, w, rtol=2e-3, atol=2e-3)

        def ours(dx: Any = dx, dy: Any = dy, p: Any = p) -> Any:
            return [np.asarray(r) for r in workload.kmeans_ridge(xp, dx, dy, p)]

        def base(jx: Any = jx, jy: Any = jy, p: Any = p) -> Any:
            return [np.asarray(r) for r in workload.kmeans_ridge(_jnp_namespace(), jx, jy, p)]

        a, b = _paired(ours, base, 1, rounds)
        ratio = [o / s for o, s in zip(a, b, strict=True)]
        print(
            f"  n={n:>7,}: boxfall {statistics.median(a) / 1e3:.2f} ms, jnp "
            f"{statistics.median(b) / 1e3:.2f} ms, ratio {_spread(ratio)}"
        )
        # asarray leaves host data on the host until a kernel reads it (residency): the inputs'
        # first placement is then counted as materialized within the run, where least_needed
        # has the user's inputs on the device already.
        inputs = x.nbytes + y.nbytes
        moved = run.moved - min(inputs, run.materialized_bytes)
        print(
            f"  {'':9} bytes moved {moved:,} against {need.least:,} needed "
            f"({moved / max(need.least, 1):.2f}x), besides the inputs' first placement "
            f"({inputs:,}); by operator: {run.by_op or 'none fell back'}"
        )


def bench_graph(rounds: int, sizes: tuple[int, ...], limits: tuple[int, ...] = ()) -> None:
    """The workload in graph mode (``bj.namespace(graph=True)``) against the same function
    under ``jax.jit`` and op by op on ``jax.numpy``, side by side in paired rounds, each call
    waiting for its results; then graph mode's figures of one call. With ``limits``, once for
    each size limit of the graph backend (``bf.graph.set_limit``), the default's last."""
    gx = bj.namespace(graph=True)
    compiler = bj.graph_compiler()
    default = bf.graph.limit(bj.GRAPH_BACKEND_NAME)
    for limit in limits:
        bf.graph.set_limit(bj.GRAPH_BACKEND_NAME, limit)
        print(f"graph size limit {limit}:")
        bench_graph(rounds, sizes)
    bf.graph.set_limit(bj.GRAPH_BACKEND_NAME, default)
    print(
        "k-means + ridge (float32) in graph mode, against jax.jit and jax.numpy (ms a call), "
        f"graphs of at most {default} nodes:"
    )
    for n in sizes:
        p = workload.Problem(n=n)
        x, y = (a.astype(np.float32) for a in workload.make_data(p))
        gxx, gxy = gx.asarray(x), gx.asarray(y)
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        jitted = jax.jit(lambda a, b, p=p: workload.kmeans_ridge(_jnp_namespace(), a, b, p))

        def graph(gxx: Any = gxx, gxy: Any = gxy, p: Any = p) -> Any:
            out = workload.kmeans_ridge(gx, gxx, gxy, p)
            bf.sync()
            return jax.block_until_ready([t.payload for t in out])

        def compiled(jx: Any = jx, jy: Any = jy, jitted: Any = jitted) -> Any:
            return jax.block_until_ready(jitted(jx, jy))

        def op_by_op(jx: Any = jx, jy: Any = jy, p: Any = p) -> Any:
            return jax.block_until_ready(workload.kmeans_ridge(_jnp_namespace(), jx, jy, p))

        want = [np.asarray(r) for r in compiled()]
        for got, w in zip(graph(), want, strict=True):
            np.testing.assert_allclose(np.asarray(got), w, rtol=2e-3, atol=2e-3)
        compiles = compiler.compiles
        graph()  # the second call: the next repeats it, and runs ahead
        bf.metrics.reset()
        graph()
        figures = bf.metrics.graphs()
        g, j = _paired(graph, compiled, 1, rounds)
        _, e = _paired(graph, op_by_op, 1, rounds)
        ratio = [a / b for a, b in zip(g, j, strict=True)]
        print(
            f"  n={n:>7,}: graph mode {statistics.median(g) / 1e3:.2f} ms, jax.jit "
            f"{statistics.median(j) / 1e3:.2f} ms, jax.numpy op by op "
            f"{statistics.median(e) / 1e3:.2f} ms; graph mode over jax.jit {_spread(ratio)}"
        )
        print(f"  {'':9} {_split(gx, gxx, gxy, p, jitted, jx, jy, rounds)}")
        print(
            f"  {'':9} one call: {figures['graphs_run']} graph(s) of {figures['max_nodes']} "
            f"nodes at most, compiled {figures['compiled']}, cache hits {figures['cache_hits']}, "
            f"run ahead {figures['ran_ahead']} (missed {figures['ahead_missed']}), "
            f"syncs {dict(figures['syncs'])}, breaks {dict(figures['breaks']) or 'none'}; "
            f"compiles after the first call: {compiler.compiles - compiles}"
        )


def views_workload(xp: Any, x: Any, y: Any, p: workload.Problem) -> tuple[Any, Any, Any]:
    """The workload written with views, as array code often is: the first centers a slice
    (``x[:k]``), transposes as ``.mT``, new axes by ``[:, None]``, the ridge on the last
    half of the rows (``x[n // 2:]``) with a reversed copy of the target's rows. Graph mode
    records each view as a layout of its base; jit lowers the same as slices and transposes."""
    centers = x[: p.k]
    x_sq = xp.sum(x * x, axis=1)[:, None]
    ids = xp.arange(p.k)[None, :]
    labels = None
    for _ in range(p.iterations):
        c_sq = xp.sum(centers * centers, axis=1)[None, :]
        dist = x_sq - (x @ centers.mT) * 2.0 + c_sq
        labels = xp.argmin(dist, axis=1)[:, None]
        onehot = xp.astype(labels == ids, x.dtype)
        counts = xp.maximum(xp.sum(onehot, axis=0), 1.0)
        centers = (onehot.mT @ x) / counts[:, None]
    half, target = x[x.shape[0] // 2 :], y[::-1][: x.shape[0] - x.shape[0] // 2]
    gram = half.mT @ half + xp.eye(x.shape[1], dtype=x.dtype) * p.alpha
    return centers, labels, xp.linalg.solve(gram, half.mT @ target)


def bench_graph_views(rounds: int, sizes: tuple[int, ...]) -> None:
    """``views_workload`` in graph mode against ``jax.jit`` of the same function, paired."""
    gx = bj.namespace(graph=True)
    print("the workload written with views and transposes, graph mode against jax.jit (ms):")
    for n in sizes:
        p = workload.Problem(n=n)
        x, y = (a.astype(np.float32) for a in workload.make_data(p))
        gxx, gxy = gx.asarray(x), gx.asarray(y)
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        jitted = jax.jit(lambda a, b, p=p: views_workload(_jnp_namespace(), a, b, p))

        def graph(gxx: Any = gxx, gxy: Any = gxy, p: Any = p) -> Any:
            out = views_workload(gx, gxx, gxy, p)
            bf.sync()
            return jax.block_until_ready([t.payload for t in out])

        def compiled(jx: Any = jx, jy: Any = jy, jitted: Any = jitted) -> Any:
            return jax.block_until_ready(jitted(jx, jy))

        for got, w in zip(graph(), compiled(), strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(w), rtol=2e-3, atol=2e-3)
        graph()
        g, j = _paired(graph, compiled, 1, rounds)
        ratio = [a / b for a, b in zip(g, j, strict=True)]
        gathers = bj.graph_compiler().lowered_text().count("stablehlo.gather")
        jit_gathers = jitted.lower(jx, jy).as_text().count("stablehlo.gather")
        print(
            f"  n={n:>7,}: graph mode {statistics.median(g) / 1e3:.2f} ms, jax.jit "
            f"{statistics.median(j) / 1e3:.2f} ms; graph mode over jax.jit {_spread(ratio)}; "
            f"gathers in the program {gathers} (jax.jit's {jit_gathers}: the solve's)"
        )


def _split(
    gx: Any, gxx: Any, gxy: Any, p: workload.Problem, jitted: Any, jx: Any, jy: Any, rounds: int
) -> str:
    """Where a call's time goes (medians of ``rounds``): graph mode's recording, its sync (the
    program's launch included) and the wait for the device, against ``jax.jit``'s launch and
    wait; and the recording again at once, its caches warm (no wait between)."""
    parts: list[list[float]] = [[], [], [], [], [], []]
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = workload.kmeans_ridge(gx, gxx, gxy, p)
        t1 = time.perf_counter()
        bf.sync()
        t2 = time.perf_counter()
        jax.block_until_ready([t.payload for t in out])
        t3 = time.perf_counter()
        launched = jitted(jx, jy)
        t4 = time.perf_counter()
        jax.block_until_ready(launched)
        t5 = time.perf_counter()
        first = workload.kmeans_ridge(gx, gxx, gxy, p)
        bf.sync()
        t6 = time.perf_counter()
        again = workload.kmeans_ridge(gx, gxx, gxy, p)
        t7 = time.perf_counter()
        bf.sync()
        jax.block_until_ready([t.payload for t in first + again])
        times = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t7 - t6)
        for part, v in zip(parts, times, strict=True):
            part.append(v * 1e3)
    m = [statistics.median(v) for v in parts]
    return (
        f"split (ms): graph mode records {m[0]:.2f} (its program's launch, run ahead, "
        f"included), syncs {m[1]:.2f}, waits {m[2]:.2f}; "
        f"jax.jit launches {m[3]:.2f}, waits {m[4]:.2f}; graph mode records again at once "
        f"(no wait before: caches warm) {m[5]:.2f}"
    )


def bench_graph_variants(rounds: int, n: int) -> None:
    """Graph mode's three variants of the workload (issue #40): a convergence check that reads
    a value every k-means step; ``maximum`` without its JAX kernel (a host callback inside the
    program); a data-dependent operator (``unique_values``) between k-means and ridge."""
    gx = bj.namespace(graph=True)
    compiler = bj.graph_compiler()
    p = workload.Problem(n=n)
    x, y = (a.astype(np.float32) for a in workload.make_data(p))
    gxx, gxy = gx.asarray(x), gx.asarray(y)
    jx = jnp.asarray(x)
    print(f"graph mode's variants of the workload, n={n:,} (ms a call):")

    want = workload.kmeans_converging(np, x, p)
    for call in (1, 2, 3):
        bf.metrics.reset()
        before = compiler.compiles
        got = workload.kmeans_converging(gx, gxx, p)
        figures = bf.metrics.graphs()
        if got[2] == want[2]:  # a TPU's default matmul precision may take other steps
            np.testing.assert_allclose(got[0].numpy(), want[0], rtol=2e-3, atol=2e-3)
        print(
            f"  converging, call {call}: {got[2]} steps (NumPy: {want[2]}), compiles "
            f"{compiler.compiles - before}, cache hits {figures['cache_hits']}, syncs "
            f"{dict(figures['syncs'])}"
        )

    def converging() -> Any:
        return workload.kmeans_converging(gx, gxx, p)[2]

    def converging_jnp() -> Any:
        return workload.kmeans_converging(_jnp_namespace(), jx, p)[2]

    g, e = _paired(converging, converging_jnp, 1, rounds)
    ratio = [a / b for a, b in zip(g, e, strict=True)]
    print(
        f"  converging: graph mode {statistics.median(g) / 1e3:.2f} ms, jax.numpy op by op "
        f"{statistics.median(e) / 1e3:.2f} ms, ratio {_spread(ratio)}"
    )

    no_max, nx = bj._graph_mode_without("JAXGraphNoMaximum", frozenset({"maximum"}))
    nxx, nxy = nx.asarray(x), nx.asarray(y)

    def with_kernel() -> Any:
        out = workload.kmeans_ridge(gx, gxx, gxy, p)
        bf.sync()
        return jax.block_until_ready([t.payload for t in out])

    def without_kernel() -> Any:
        out = workload.kmeans_ridge(nx, nxx, nxy, p)
        bf.sync()
        return jax.block_until_ready([t.payload for t in out])

    for got, w in zip(without_kernel(), with_kernel(), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(w), rtol=2e-3, atol=2e-3)
    bf.metrics.reset()
    no_max.host_callbacks.clear()
    without_kernel()
    figures = bf.metrics.graphs()
    callbacks = dict(no_max.host_callbacks)
    a, b = _paired(without_kernel, with_kernel, 1, rounds)
    ratio = [u / v for u, v in zip(a, b, strict=True)]
    print(
        f"  without maximum's JAX kernel: {statistics.median(a) / 1e3:.2f} ms, with it "
        f"{statistics.median(b) / 1e3:.2f} ms, ratio {_spread(ratio)}; one call: "
        f"{figures['graphs_run']} graph(s), host callbacks {callbacks}, "
        f"run ahead {figures['ran_ahead']}, "
        f"breaks {dict(figures['breaks']) or 'none'}"
    )

    def clusters_used() -> Any:
        out = workload.kmeans_ridge_clusters_used(gx, gxx, gxy, p)
        bf.sync()
        return jax.block_until_ready([t.payload for t in out])

    clusters_used()
    bf.metrics.reset()
    clusters_used()
    figures = bf.metrics.graphs()
    a, b = _paired(clusters_used, with_kernel, 1, rounds)
    ratio = [u / v for u, v in zip(a, b, strict=True)]
    print(
        f"  with unique_values: {statistics.median(a) / 1e3:.2f} ms, without "
        f"{statistics.median(b) / 1e3:.2f} ms, ratio {_spread(ratio)}; one call: "
        f"{figures['graphs_run']} graph(s), breaks {dict(figures['breaks']) or 'none'}, "
        f"compiled {figures['compiled']}"
    )


def bench_inplace(rounds: int, mib: int) -> None:
    """An in-place update in graph mode (``x += y`` then ``bf.sync()``, a step) of a ``mib`` MiB
    float32 array, against ``jax.jit`` of the add with the input donated and without: the time
    a step (paired rounds of 5 steps each) and the device's peak memory over 5 steps above what
    it held before them, in arrays of the size (where the device reports memory: a TPU does,
    JAX's CPU does not). A donated input's buffer becomes the output's, so a step needs no
    second array; without donation the old and the new array both live while it runs."""
    gx = bj.namespace(graph=True)
    n = mib * (1 << 20) // 4
    dev = jax.devices()[0]
    size = n * 4

    def peak_over(step: Callable[[], None]) -> str:
        stats = dev.memory_stats()
        if not stats or "peak_bytes_in_use" not in stats:
            return "memory not reported"
        held = stats["bytes_in_use"]
        if hasattr(dev, "reset_peak_memory_stats"):
            dev.reset_peak_memory_stats()
        for _ in range(5):
            step()
        peak = dev.memory_stats()["peak_bytes_in_use"]
        return f"peak {max(peak - held, 0) / size:.2f} arrays above what was held"

    x, y = gx.zeros(n, dtype=gx.float32), gx.ones(n, dtype=gx.float32)
    bf.sync()

    def graph() -> Any:
        nonlocal x
        x += y
        bf.sync()
        return x

    jy = jnp.ones(n, dtype=jnp.float32)
    donating = jax.jit(jnp.add, donate_argnums=0)
    keeping = jax.jit(jnp.add)
    state = {"d": jnp.zeros(n, dtype=jnp.float32), "k": jnp.zeros(n, dtype=jnp.float32)}

    def donated() -> Any:
        state["d"] = donating(state["d"], jy)
        return state["d"]

    def kept() -> Any:
        state["k"] = keeping(state["k"], jy)
        return state["k"]

    print(f"x += y, {mib} MiB float32, in graph mode against jax.jit (us a step):")
    for label, fn in (("graph mode", graph), ("jit, donated", donated), ("jit, kept", kept)):
        _wait(fn())
        print(f"  {label:<13} {peak_over(fn)}")
    g, d = _paired(graph, donated, 5, rounds)
    _, k = _paired(graph, kept, 5, rounds)
    print(
        f"  graph mode {statistics.median(g):.0f}, jit donated {statistics.median(d):.0f}, "
        f"jit kept {statistics.median(k):.0f}; graph over donated "
        f"{_spread([a / b for a, b in zip(g, d, strict=True)])}"
    )
    figures = bf.metrics.graphs()
    print(f"  graph mode: compiled {figures['compiled']}, cache hits {figures['cache_hits']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument(
        "--costs", action="store_true", help="only where the microseconds go (stages, operators)"
    )
    parser.add_argument(
        "--graph", action="store_true", help="only the workload in graph mode, and its variants"
    )
    parser.add_argument(
        "--inplace",
        type=int,
        metavar="MIB",
        help="only an in-place update of an array of MIB MiB: graph mode against jax.jit, "
        "its input donated and not (time and peak device memory)",
    )
    parser.add_argument(
        "--limits",
        default="",
        help="with --graph: the workload also under these graph size limits (comma-separated)",
    )
    args = parser.parse_args()
    limits = tuple(int(v) for v in args.limits.split(",") if v)
    dev = jax.devices()[0]
    print(f"JAX {jax.__version__} on {dev.platform} ({dev.device_kind}), x64={bj.X64}")
    if args.costs:
        bench_stages(args.rounds)
        bench_ops(args.rounds)
        return
    if args.inplace:
        bench_inplace(args.rounds, args.inplace)
        return
    if args.graph:
        bench_graph(args.rounds, (2_000,) if args.quick else (4_000, 250_000), limits)
        if not limits:
            bench_graph_views(args.rounds, (2_000,) if args.quick else (4_000, 250_000))
        if limits:
            return
        bench_graph_variants(args.rounds, 2_000 if args.quick else 4_000)
        return
    if args.quick:
        bench_add(3, (1, 100_000))
        bench_workload(3, (2_000,))
        return
    bench_add(args.rounds, (1, 1_000_000))
    bench_workload(args.rounds, (4_000, 250_000))


if __name__ == "__main__":
    main()
