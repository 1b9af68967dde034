"""boxfall.jax against jax.numpy on whatever device JAX picks (a TPU where there is one), in
paired rounds (boxfall's call and the baseline back to back, medians and spread of the rounds):

1. ``xp.add(x, y)`` through boxfall.jax against ``jnp.add`` at 1 and 1M elements, not waiting
   for the device (the microseconds boxfall adds to each call), and waiting for each result
   at 1M (the ratio);
2. the bench's k-means + ridge workload (``boxfall.workload.kmeans_ridge``) on
   ``bj.namespace()`` against the same function with ``jax.numpy`` as its namespace, op by op,
   at n=4,000 and n=250,000, float32; and the bytes boxfall moved against the least the data
   flow needs (``workload.least_needed`` with boxfall.jax's kernels).

    python benches/jax_device.py [--rounds 15] [--quick]

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    args = parser.parse_args()
    dev = jax.devices()[0]
    print(f"JAX {jax.__version__} on {dev.platform} ({dev.device_kind}), x64={bj.X64}")
    if args.quick:
        bench_add(3, (1, 100_000))
        bench_workload(3, (2_000,))
        return
    bench_add(args.rounds, (1, 1_000_000))
    bench_workload(args.rounds, (4_000, 250_000))


if __name__ == "__main__":
    main()
