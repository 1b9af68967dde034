"""Residency on a device without native kernels: the bench's k-means + ridge workload
(``boxfall.workload.kmeans_ridge``, float64) on a lazy Python backend (a payload over a private
NumPy array, copying ``to_cpu``/``from_cpu``, ``lazy=True``: the CPU fallback keeps the host
copy of what it read and leaves its results on the host until a kernel of the backend needs
them), in two placements:

- ``no kernels``: every operator through ``bf.cpu_fallback`` (``boxfall.workload``'s
  ``fallback`` setup);
- ``three kernels``: the backend's own kernels (NumPy on the payloads) for ``add``,
  ``multiply`` (tensor-tensor and tensor-scalar) and ``sum``, the rest through the fallback.

Each row gives the time against NumPy's (paired rounds: the workload on the backend and on
NumPy back to back, on the same data; the median of the rounds' ratios and their quartiles)
and the bytes moved (``bf.metrics``: the fallback's bytes each way, the user's reads of device
results and what was materialized for a kernel) against the least the placement needs
(``workload.least_needed``: each array that an operator of the other side reads crosses once).
With ``--profile``, a cProfile of one run of each placement (the 15 costliest functions).

    python benches/lazy_backend_workload.py [--rounds 15] [--n 20000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
from typing import Any

import boxfall as bf
import boxfall.array_api as bxp
from boxfall import workload

THREE = "WorkloadThreeKernels"
THREE_KERNELS = frozenset({"add", "add.Tensor_Scalar", "multiply", "multiply.Tensor_Scalar", "sum"})
"""The overloads the ``three kernels`` backend serves (as ``workload.least_needed`` names them)."""

_kept: list[Any] = []  # the libraries, kept for the process's life as the backend is


def _register_three() -> workload.Setup:
    """The lazy backend with kernels for ``add``, ``multiply`` and ``sum`` (float tensors of
    the backend; anything else goes to the CPU fallback), with the workload backends' hooks."""
    to_cpu, from_cpu, copy_from_cpu = workload._hooks(THREE)
    backend = bf.register_backend(
        THREE,
        to_cpu=to_cpu,
        from_cpu=from_cpu,
        copy_from_cpu=copy_from_cpu,
        view=workload._view,
        lazy=True,
    )
    fallback = bf.Library("_", "IMPL")
    fallback._for_process_life()
    fallback.fallback(bf.cpu_fallback, THREE)
    lib = workload._register_kernels(backend, ("add", "multiply", "sum"))
    _kept.extend([fallback, lib])
    return workload.Setup("three kernels", bxp.namespace(THREE), THREE, THREE_KERNELS)


def _quartiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):.2f}x (quartiles {q[0]:.2f} to {q[2]:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n", type=int, default=workload.Problem().n)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    bf.set_fallback_policy("allow")
    p = workload.Problem(n=args.n)
    none = next(s for s in workload.setups() if s.name == "fallback")
    none = workload.Setup("no kernels", none.xp, none.backend, none.native)
    placements = [none, _register_three()]
    print(
        f"the workload (k-means, {p.iterations} steps, k={p.k}, then ridge), {p.n:,} x {p.d} "
        f"float64, on a lazy Python backend; medians of {args.rounds} paired rounds"
    )
    for s in placements:
        workload.run(s, p)  # warm: the first call of each operator registers its caches
        r = workload.run(s, p)
        need = workload.least_needed(p, s.native)
        times = workload.timed(s, p, args.rounds)
        ratios = [m / b for m, b in times]
        ms = statistics.median(m for m, _ in times) * 1e3
        base = statistics.median(b for _, b in times) * 1e3
        print(f"  {s.name:<14} {ms:7.1f} ms against NumPy's {base:6.1f} ms: {_quartiles(ratios)}")
        print(
            f"  {'':<14} bytes moved {r.moved / 1e6:.3f} MB / least needed "
            f"{need.least / 1e6:.3f} MB = {r.moved / need.least:.3f}x (the hooks "
            f"{r.hook_bytes / 1e6:.3f} MB; without residency {need.eager / 1e6:.2f} MB)"
        )
        if r.moved != need.least:
            by_op = ", ".join(f"{k} {v / 1e6:.3f}" for k, v in sorted(r.by_op.items()))
            print(
                f"  {'':<14} by operator (MB): {by_op}; the user's reads "
                f"{r.user_bytes / 1e6:.3f}, materialized {r.materialized_bytes / 1e6:.3f}"
            )
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            workload.run(s, p)
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
