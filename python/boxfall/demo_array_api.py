"""The demo's array-API workload: k-means and a ridge least-squares fit written only with calls
of the array API standard, run on the ``Accel`` device through ``boxfall.array_api``.

``python -m boxfall demo --workload array-api`` registers the demo's Python backend ``Accel``
(see :mod:`boxfall.demo_device`), gives it native kernels for three operators of
``boxfall.array_api`` (:data:`NATIVE_OPS`: ``add``, ``multiply`` and ``sum``) and
``bf.cpu_fallback`` for every other one, runs :func:`workload` on ``xp.namespace("Accel:0")``,
runs the same function on NumPy itself (the ``numpy`` module as the namespace), prints which
operators fell back (calls, time, bytes; ``bf.metrics``) and the largest difference between
the two runs.

Exit code: 0 when every result agrees to 1e-9 (and the cluster labels exactly), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import boxfall as bf
import boxfall.array_api as bxp
from boxfall.demo_device import BACKEND, accel_backend, device_data

TOLERANCE = 1e-9
"""The largest absolute difference from NumPy that the float64 run accepts."""

NATIVE_OPS = ("add", "multiply", "sum")
"""The operators of ``array_api`` that ``Accel`` runs itself; every other one falls back."""

CLUSTERS = 3
"""k of k-means."""

RIDGE = 0.5
"""The ridge penalty of the least-squares fit."""


# --------------------------------------------------------------------------------------------
# The workload: the standard's functions only, so any conforming namespace runs it


def kmeans(xp: Any, x: Any, centroids: Any, iterations: int) -> tuple[Any, Any, Any]:
    """Lloyd's k-means from ``centroids`` (k, d) on the points ``x`` (n, d): returns the
    final centroids, each point's cluster and the inertia (sum of squared distances)."""
    k = centroids.shape[0]
    ids = xp.expand_dims(xp.arange(k), axis=0)  # (1, k)
    for _ in range(iterations):
        diff = xp.expand_dims(x, axis=1) - xp.expand_dims(centroids, axis=0)  # (n, k, d)
        dist2 = xp.sum(diff * diff, axis=-1)  # (n, k)
        labels = xp.argmin(dist2, axis=1)
        member = xp.expand_dims(labels, axis=1) == ids  # (n, k)
        onehot = xp.where(member, xp.ones_like(dist2), xp.zeros_like(dist2))
        counts = xp.sum(onehot, axis=0)
        centroids = (onehot.T @ x) / xp.expand_dims(counts, axis=1)
    inertia = xp.sum(xp.min(dist2, axis=1))
    return centroids, labels, inertia


def ridge_fit(xp: Any, a: Any, b: Any, penalty: float) -> tuple[Any, Any]:
    """The ridge least-squares solution ``w`` of ``a @ w ~ b`` (normal equations, solved by
    ``xp.linalg.solve``) and the root mean squared residual."""
    gram = a.T @ a + penalty * xp.eye(a.shape[1])
    w = xp.linalg.solve(gram, a.T @ b)
    resid = a @ w - b
    return w, xp.sqrt(xp.mean(resid * resid))


def workload(xp: Any, data: dict[str, Any], iterations: int) -> dict[str, Any]:
    """k-means of ``data["points"]`` from ``data["start"]``, then a ridge fit of
    ``data["targets"]`` on the points."""
    x = data["points"]
    centroids, labels, inertia = kmeans(xp, x, data["start"], iterations)
    w, rmse = ridge_fit(xp, x, data["targets"], RIDGE)
    return {"centroids": centroids, "labels": labels, "inertia": inertia, "w": w, "rmse": rmse}


def make_data(seed: int, points: int, dim: int) -> dict[str, np.ndarray]:
    """Three well-separated blobs of ``points`` points in ``dim`` dimensions, a start of one
    point per blob, and linear targets with noise (all float64)."""
    rng = np.random.default_rng(seed)
    centres = 6.0 * rng.standard_normal((CLUSTERS, dim))
    member = np.arange(points) % CLUSTERS
    x = centres[member] + rng.standard_normal((points, dim))
    start = x[[0, 1, 2]] + 0.5 * rng.standard_normal((CLUSTERS, dim))
    targets = x @ rng.standard_normal((dim, 1)) + 0.1 * rng.standard_normal((points, 1))
    return {"points": x, "start": start, "targets": targets}


# --------------------------------------------------------------------------------------------
# Accel's own kernels for three operators of array_api


def register_accel_kernels(lib: bf.Library, backend: Any) -> None:
    """Give ``Accel`` native kernels for :data:`NATIVE_OPS` (the Tensor-Tensor overloads)."""
    data = device_data

    def add(x1, x2):
        """``array_api::add`` computed on the device."""
        return backend.tensor(np.add(data(x1), data(x2)))

    def multiply(x1, x2):
        """``array_api::multiply`` computed on the device."""
        return backend.tensor(np.multiply(data(x1), data(x2)))

    def sum_(x, *, axis=None, dtype=None, keepdims=False):
        """``array_api::sum`` computed on the device."""
        axis = tuple(axis) if isinstance(axis, list) else axis
        return backend.tensor(
            np.asarray(np.sum(data(x), axis=axis, dtype=dtype, keepdims=keepdims))
        )

    for name, kernel in (("add", add), ("multiply", multiply), ("sum", sum_)):
        lib.impl(name, kernel, BACKEND)


# --------------------------------------------------------------------------------------------
# Running it


def _difference(got: Any, expected: Any) -> float:
    """The largest absolute difference of a device result from NumPy's; labels must agree."""
    host = np.asarray(got)
    expected = np.asarray(expected)
    if host.shape != expected.shape:
        return float("inf")
    if host.size == 0:
        return 0.0
    return float(np.max(np.abs(host.astype(np.float64) - expected.astype(np.float64))))


def run(args: argparse.Namespace) -> int:
    """The ``demo --workload array-api`` subcommand; returns the exit code (0 ok, 1 wrong
    results, 2 an option this workload does not take)."""
    if args.backend != "accel":
        print("boxfall demo: --workload array-api runs on --backend accel only", file=sys.stderr)
        return 2
    backend = accel_backend()
    device = f"{BACKEND}:0"
    data = make_data(args.seed, 40 * args.batch, max(2, args.hidden // 8))
    with bf.Library("array_api", "IMPL") as lib, bf.Library("_", "IMPL") as fb:
        register_accel_kernels(lib, backend)
        fb.fallback(bf.cpu_fallback, BACKEND)
        ax = bxp.namespace(device)
        n, d = data["points"].shape
        print(
            f"boxfall demo: array-api workload (k-means k={CLUSTERS}, {args.steps} iterations, "
            f"then a ridge fit), {n} points of {d} dims, float64, on {BACKEND}"
        )
        print(
            f"{BACKEND} runs natively: {', '.join(f'array_api::{o}' for o in NATIVE_OPS)}; "
            "every other operator of boxfall.array_api reaches the CPU fallback"
        )
        bf.metrics.reset()
        start = time.perf_counter()
        on_device = {k: ax.asarray(v) for k, v in data.items()}
        results = workload(ax, on_device, args.steps)
        elapsed = time.perf_counter() - start
        expected = workload(np, data, args.steps)
        print(f"wall time: {elapsed * 1e3:.1f} ms on {BACKEND}")
        print(bf.metrics.report())
        elsewhere = [k for k, v in results.items() if getattr(v, "device", None) != device]
        worst = 0.0
        for key, value in results.items():
            err = _difference(value, expected[key])
            print(f"  {key:<9} max abs difference from NumPy {err:.3e}")
            worst = max(worst, err)
        if args.plot:
            bf.metrics.plot(args.plot)
            print(f"fallback time per operator plotted to {args.plot}")
    labels_ok = np.array_equal(np.asarray(results["labels"]), expected["labels"])
    ok = worst <= TOLERANCE and labels_ok and not elsewhere
    if elsewhere:
        print(f"results not on {device}: {', '.join(elsewhere)}")
    print(f"max abs error: {worst:.3e} (tolerance {TOLERANCE:g}) {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1
