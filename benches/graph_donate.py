"""Donation in graph mode (in-place updates donate their input buffers), on
whatever device JAX picks: ``x += y`` on ``bj.namespace(graph=True)``, synced each step, with
the JAX compiler consuming x's old buffer (whatever its size: ``donate_min_bytes = 0``) and
with it keeping every buffer (``bj.graph_compiler().donate = False``), in paired rounds (the
order alternating; medians and quartiles of the rounds' per-step microseconds), at two small
sizes and a large one; then each mode's peak memory over a loop at a larger size, each in a
fresh process (on JAX's CPU the process's peak resident memory; on an accelerator the
device's ``peak_bytes_in_use``).

    python benches/graph_donate.py [--rounds 15] [--steps 200] [--large 16777216]
                                   [--memory 67108864]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

# boxfall.jax and JAX are imported by `_jax()`, not here: the peak-memory children must each
# get the device alone, and one process at a time can hold a TPU (this one would, from then on).
bf: Any = None
bj: Any = None
jax: Any = None


def _jax() -> None:
    global bf, bj, jax
    import boxfall as bf
    import boxfall.jax as bj
    import jax


def _spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"median {statistics.median(values):.1f} (quartiles {q[0]:.1f} to {q[2]:.1f})"


def _loop(n: int, steps: int) -> float:
    """Microseconds a step of ``x += y; bf.sync()`` on float32 vectors of ``n`` elements."""
    gx = bj.namespace(graph=True)
    x = gx.asarray(np.zeros(n, dtype=np.float32))
    y = gx.asarray(np.ones(n, dtype=np.float32))
    x += y  # the first program: XLA's output, not NumPy's memory, from here on
    bf.sync()
    start = time.perf_counter()
    for _ in range(steps):
        x += y
        bf.sync()
    x.payload.block_until_ready()
    return (time.perf_counter() - start) / steps * 1e6


def bench_time(n: int, steps: int, rounds: int) -> None:
    compiler = bj.graph_compiler()
    compiler.donate_min_bytes = 0  # every size donated: what a donation costs or saves
    on: list[float] = []
    off: list[float] = []
    for donate in (True, False):  # each mode's programs compiled before timing
        compiler.donate = donate
        _loop(n, 2)
    for r in range(rounds):
        for donate in (True, False) if r % 2 == 0 else (False, True):
            compiler.donate = donate
            (on if donate else off).append(_loop(n, steps))
    compiler.donate = True
    compiler.donate_min_bytes = bj._graph.DONATE_MIN_BYTES
    ratio = [a / b for a, b in zip(on, off, strict=True)]
    print(f"x += y; bf.sync() at n={n:,} (us a step, {rounds} paired rounds of {steps} steps):")
    print(f"  donating: {_spread(on)}")
    print(f"  keeping:  {_spread(off)}")
    print(f"  donating / keeping, per round: {_spread(ratio)}")


def child(n: int, donate: bool) -> None:
    """One mode's peak memory over a loop, printed as JSON."""
    bj.graph_compiler().donate = donate
    bj.graph_compiler().donate_min_bytes = 0
    gx = bj.namespace(graph=True)
    # Made on the device, so that no NumPy array of their size raises the host's peak.
    x = gx.zeros(n, dtype=gx.float32)
    y = gx.ones(n, dtype=gx.float32)
    bf.sync()
    for _ in range(10):
        x += y
        bf.sync()
    x.payload.block_until_ready()
    stats = jax.devices()[0].memory_stats() or {}
    print(
        json.dumps(
            {
                "donated": bj.graph_compiler().donated,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "peak_device_mb": stats.get("peak_bytes_in_use", 0) / 2**20,
                "value": float(x[0]),
            }
        )
    )


def bench_memory(n: int) -> None:
    print(f"peak memory over 10 steps of x += y at n={n:,} ({n * 4 / 2**20:.0f} MiB a vector):")
    for donate in (True, False):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n), str(int(donate))],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        got = json.loads(out.strip().splitlines()[-1])
        mode = "donating" if donate else "keeping "
        print(
            f"  {mode}: {got['donated']} buffers donated, peak resident {got['peak_rss_mb']:.0f} "
            f"MiB, peak on the device {got['peak_device_mb']:.0f} MiB (x = {got['value']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--large", type=int, default=16 * 2**20)
    parser.add_argument("--memory", type=int, default=64 * 2**20, help="elements, for the peaks")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _jax()
        child(int(args.child[0]), bool(int(args.child[1])))
        return
    # The peaks first, each child alone on the device, before this process imports JAX.
    bench_memory(args.memory)
    _jax()
    print(f"JAX {jax.__version__} on {jax.devices()[0].platform}")
    for n in (1_000, 65_536):
        bench_time(n, args.steps, args.rounds)
    bench_time(args.large, max(args.steps // 20, 5), args.rounds)


if __name__ == "__main__":
    main()
