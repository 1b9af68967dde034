"""boxfall.jax on a mesh of 8 devices against JAX's own calls on the same sharded arrays, in
paired rounds (boxfall's call and the baseline back to back, medians and quartiles of the
rounds):

1. eager ``xp.add(x, y)`` of two row-sharded tensors against ``jnp.add`` of their payloads
   (microseconds a call, waiting for the last call of a round only);
2. the k-means + ridge workload (``boxfall.workload.kmeans_ridge``) in graph mode against
   ``jax.jit`` of the same function on the same sharded arrays (ms a call);
3. the CPU fallback of an element-wise operator with a CPU kernel only (a ``bf.custom_op``,
   declared element-wise) on 8 shards of 1M float32 each, per shard, against the same fallback
   on one unsharded array of 8M float32 on one device; and what each moved.

Without 8 JAX devices it runs with JAX's CPU shown as 8
(it sets ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX starts; with
``JAX_PLATFORMS=cpu`` where an accelerator is there): the 8 "devices" then share this
machine's cores, so the figures say what boxfall adds to JAX's own calls, not what 8 chips
gain over one.

4. with ``--one-device`` only: the workload on a mesh of one device (a TPU's chip, where JAX
   has one) against the same device's own namespace, in graph mode and eagerly.

    python benches/jax_mesh.py [--rounds 15] [--quick] [--one-device]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

FLAG = "--xla_force_host_platform_device_count=8"

if (
    "jax" not in sys.modules
    and "--one-device" not in sys.argv
    and FLAG not in os.environ.get("XLA_FLAGS", "")
):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + FLAG).strip()

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from boxfall import workload  # noqa: E402
from jax.sharding import AxisType  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def _spread(values: list[float], digits: int = 2) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    f = f"{{:.{digits}f}}"
    return (
        f"median {f.format(statistics.median(values))} "
        f"(quartiles {f.format(q[0])} to {f.format(q[2])})"
    )


def _wait(v: Any) -> None:
    if isinstance(v, (list, tuple)):
        for x in v:
            _wait(x)
        return
    jax.block_until_ready(v.payload if isinstance(v, bf.Tensor) else v)


def _paired(
    ours: Callable[[], Any], base: Callable[[], Any], calls: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Per-call microseconds of ``ours`` and ``base``: each round ``calls`` calls of one then of
    the other (the order alternating), waiting for the last result of each."""
    a: list[float] = []
    b: list[float] = []
    for r in range(rounds):
        pair = [(ours, a), (base, b)] if r % 2 == 0 else [(base, b), (ours, a)]
        for fn, out in pair:
            _wait(fn())
            start = time.perf_counter()
            last = None
            for _ in range(calls):
                last = fn()
            _wait(last)
            out.append((time.perf_counter() - start) / calls * 1e6)
    return a, b


def _mesh() -> Any:
    return jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))


def bench_add(rounds: int, sizes: tuple[int, ...]) -> None:
    xp = bj.namespace(mesh=_mesh())
    print("eager xp.add of two row-sharded tensors against jnp.add of their payloads (us a call):")
    for n in sizes:
        x = xp.asarray(np.ones((n, 4), np.float32), device=P("data", None))
        y = xp.asarray(np.ones((n, 4), np.float32), device=P("data", None))
        jx, jy = x.payload, y.payload
        calls = 500 if n < 10_000 else 50
        a, b = _paired(
            lambda x=x, y=y: xp.add(x, y), lambda jx=jx, jy=jy: jnp.add(jx, jy), calls, rounds
        )
        added = [p - q for p, q in zip(a, b, strict=True)]
        print(
            f"  n={n:>9,} x 4: boxfall {statistics.median(a):.1f}, jnp.add "
            f"{statistics.median(b):.1f}; added {_spread(added)}"
        )


def bench_workload(rounds: int, sizes: tuple[int, ...]) -> None:
    gx = bj.namespace(mesh=_mesh(), graph=True)
    jax.config.update("jax_default_matmul_precision", "highest")
    print("k-means + ridge (float32, rows sharded) in graph mode against jax.jit (ms a call):")
    for n in sizes:
        p = workload.Problem(n=n)
        x, y = (a.astype(np.float32) for a in workload.make_data(p))
        gxx, gxy = gx.asarray(x, device=P("data", None)), gx.asarray(y, device=P("data", None))
        jx, jy = gxx.payload, gxy.payload
        jitted = jax.jit(lambda a, b, p=p: workload.kmeans_ridge(jnp, a, b, p))

        def graph(gxx: Any = gxx, gxy: Any = gxy, p: Any = p) -> Any:
            out = workload.kmeans_ridge(gx, gxx, gxy, p)
            bf.sync()
            return [t.payload for t in out]

        def compiled(jx: Any = jx, jy: Any = jy, jitted: Any = jitted) -> Any:
            return jitted(jx, jy)

        want = [np.asarray(r) for r in compiled()]
        for got, w in zip(graph(), want, strict=True):
            np.testing.assert_allclose(np.asarray(got), w, rtol=2e-3, atol=2e-3)
        g, j = _paired(graph, compiled, 1, rounds)
        ratio = [a / b for a, b in zip(g, j, strict=True)]
        print(
            f"  n={n:>9,}: graph mode {statistics.median(g) / 1e3:.2f} ms, jax.jit "
            f"{statistics.median(j) / 1e3:.2f} ms; graph mode over jax.jit {_spread(ratio)}"
        )


@bf.custom_op("meshbench::halve", mutates_args=())
def halve(x: np.ndarray) -> np.ndarray:
    """An operator with a CPU kernel only."""
    return x * np.float32(0.5)


bj.register_sharding_rule(halve, "elementwise")


def bench_fallback(rounds: int, per_shard: int) -> None:
    xp = bj.namespace(mesh=_mesh())
    one = bj.namespace()
    host = np.random.default_rng(0).random(8 * per_shard, dtype=np.float32)
    sharded = xp.asarray(host, device=P("data"))
    whole = one.asarray(host)
    print(
        f"the CPU fallback of an element-wise operator: 8 shards of {per_shard:,} float32 each, "
        f"per shard, against one array of {8 * per_shard:,} on one device (ms a call):"
    )
    np.testing.assert_array_equal(halve(sharded).numpy(), halve(whole).numpy())
    bj.reset_mesh_stats()
    halve(sharded)
    moved = bj.mesh_stats()[halve.name]
    a, b = _paired(lambda: halve(sharded), lambda: halve(whole), 1, rounds)
    ratio = [p / q for p, q in zip(a, b, strict=True)]
    print(
        f"  per shard {statistics.median(a) / 1e3:.2f} ms, one array "
        f"{statistics.median(b) / 1e3:.2f} ms; per shard over one array {_spread(ratio)}"
    )
    to = moved["bytes_to_cpu"]
    print(
        f"  one call moved to the host {sum(to.values()):,} bytes ({len(to)} devices, "
        f"{min(to.values()):,} to {max(to.values()):,} each; the input shards: "
        f"{sharded.payload.addressable_shards[0].data.nbytes:,} each), back "
        f"{sum(moved['bytes_from_cpu'].values()):,}, gathered {moved['gathered_bytes']} "
        f"({moved['gathers']} gathers), {moved['shard_runs']} CPU kernel runs"
    )


def bench_one_device_mesh(rounds: int, sizes: tuple[int, ...]) -> None:
    """The workload on a mesh of one device against the same device's own namespace, in
    graph mode and eagerly: a mesh of one should cost nothing."""
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:1])
    jax.config.update("jax_default_matmul_precision", "highest")
    print(
        f"k-means + ridge (float32) on a mesh of one {jax.devices()[0].platform} device against "
        "the device's own namespace (ms a call):"
    )
    for graph in (True, False):
        on_mesh, alone = bj.namespace(mesh=mesh, graph=graph), bj.namespace(graph=graph)
        for n in sizes:
            p = workload.Problem(n=n)
            x, y = (a.astype(np.float32) for a in workload.make_data(p))
            mx, my = (
                on_mesh.asarray(x, device=P("data", None)),
                on_mesh.asarray(y, device=P("data", None)),
            )
            ax, ay = alone.asarray(x), alone.asarray(y)

            def run(xp: Any, a: Any, b: Any, p: Any = p) -> Any:
                out = workload.kmeans_ridge(xp, a, b, p)
                bf.sync()
                return [t.payload for t in out]

            for got, want in zip(run(on_mesh, mx, my), run(alone, ax, ay), strict=True):
                np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
            a, b = _paired(
                functools.partial(run, on_mesh, mx, my),
                functools.partial(run, alone, ax, ay),
                1,
                rounds,
            )
            ratio = [u / v for u, v in zip(a, b, strict=True)]
            print(
                f"  {'graph' if graph else 'eager'} n={n:>9,}: mesh of one "
                f"{statistics.median(a) / 1e3:.2f} ms, the device alone "
                f"{statistics.median(b) / 1e3:.2f} ms; ratio {_spread(ratio)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, smaller sizes")
    parser.add_argument(
        "--one-device",
        action="store_true",
        help="only the workload on a mesh of one device (a TPU's chip) against the device alone",
    )
    args = parser.parse_args()
    rounds = 5 if args.quick else args.rounds
    if args.one_device:
        bench_one_device_mesh(rounds, (4_000,) if args.quick else (4_000, 248_000))
        return
    if len(jax.devices()) < 8:
        sys.exit(f"needs 8 JAX devices; JAX shows {len(jax.devices())} ({FLAG} before JAX starts)")
    print(f"JAX {jax.__version__} on {jax.devices()[0].platform}, a mesh of 8 devices\n")
    bench_add(rounds, (1_024,) if args.quick else (1_024, 1_048_576))
    bench_workload(rounds, (4_000,) if args.quick else (4_000, 248_000))
    bench_fallback(rounds, 125_000 if args.quick else 1_048_576)


if __name__ == "__main__":
    main()
