"""scikit-learn's estimators, kernels and metrics on ``boxfall.jax``'s graph mode: per case,
what the first fit and the second (same shapes, fresh arrays) cost in graph mode's terms:

- compiles (graphs compiled: ``jax.jit`` programs made) and cache hits (syncs that ran a
  program compiled before);
- syncs by reason (``numpy``: a value read to the host, ``graph break``: an operator that
  could not be recorded, ...);
- graph breaks by operator (those operators ran eagerly, the pending graph computed first);
- host callbacks by operator (operators without a JAX kernel, run on the CPU inside the
  program);
- seconds of the fit, the result read to the host included.

A second fit should compile nothing: what it still costs is the syncs and breaks, each a
program run and a wait for the device. On a TPU, run it alone on the chip (one process at a
time holds it)::

    python benches/graph_estimators.py                 # x64 off (a TPU's default), float32
    python benches/graph_estimators.py --x64           # JAX's 64-bit types on
    python benches/graph_estimators.py --precision highest   # float32 matmuls on a TPU
    python benches/graph_estimators.py --samples 100000 --features 64 --json out.json

It runs on JAX's CPU too (``JAX_PLATFORMS=cpu``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

Case = Callable[[dict[str, Any]], Any]


def cases() -> dict[str, Case]:
    """The cases, each a function of a dict of arrays (``X``, ``Y``, ``labels``, ``target``,
    ``predicted``) that fits or computes and returns an array or a score."""
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import Ridge
    from sklearn.metrics import accuracy_score, mean_squared_error, r2_score
    from sklearn.metrics.pairwise import linear_kernel, rbf_kernel
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    return {
        "StandardScaler": lambda d: StandardScaler().fit_transform(d["X"]),
        "MinMaxScaler": lambda d: MinMaxScaler().fit_transform(d["X"]),
        "PCA(full)": lambda d: PCA(n_components=2, svd_solver="full").fit_transform(d["X"]),
        "Ridge(svd)": lambda d: (
            Ridge(alpha=1.0, solver="svd").fit(d["X"], d["target"]).predict(d["X"])
        ),
        "LinearDiscriminantAnalysis": lambda d: (
            LinearDiscriminantAnalysis().fit(d["X"], d["labels"]).predict(d["X"])
        ),
        "rbf_kernel": lambda d: rbf_kernel(d["X"], d["Y"], gamma=0.1),
        "linear_kernel": lambda d: linear_kernel(d["X"], d["Y"]),
        "r2_score": lambda d: r2_score(d["target"], d["predicted"]),
        "mean_squared_error": lambda d: mean_squared_error(d["target"], d["predicted"]),
        "accuracy_score": lambda d: accuracy_score(d["labels"], d["labels"] * 0 + 1),
    }


def make_data(samples: int, features: int, x64: bool) -> dict[str, np.ndarray]:
    """Features of different scales, a few points ``Y``, binary labels, a linear target and a
    prediction near it; float32 (int32 labels) unless ``x64``, float64 (int64) then."""
    f, i = (np.float64, np.int64) if x64 else (np.float32, np.int32)
    rng = np.random.default_rng(3)
    scale = rng.uniform(0.5, 3.0, features)
    x = rng.standard_normal((samples, features)) * scale + rng.uniform(-2, 5, features)
    coef = rng.standard_normal(features)
    target = x @ coef + 0.1 * rng.standard_normal(samples)
    return {
        "X": x.astype(f),
        "Y": rng.standard_normal((min(samples, 64), features)).astype(f),
        "labels": (x[:, 0] > np.median(x[:, 0])).astype(i),
        "target": target.astype(f),
        "predicted": (0.9 * target + 0.05).astype(f),
    }


def measure(case: Case, data: dict[str, np.ndarray]) -> dict[str, Any]:
    """One fit of ``case`` on fresh graph-mode arrays (their upload is not counted), its result
    read to the host, and graph mode's figures of it."""
    import boxfall as bf
    import boxfall.jax as bj
    import sklearn

    gx = bj.namespace(graph=True)
    compiler = bj.graph_compiler()
    on_device = {k: gx.asarray(v) for k, v in data.items()}
    bf.sync()
    bf.metrics.reset()
    callbacks = Counter(compiler.host_callbacks)
    start = time.perf_counter()
    with sklearn.config_context(array_api_dispatch=True):
        got = case(on_device)
        value = got.numpy() if isinstance(got, bf.Tensor) else got
        bf.sync()
    seconds = time.perf_counter() - start
    g = bf.metrics.graphs()
    return {
        "seconds": seconds,
        "compiles": g["compiled"],
        "cache_hits": g["cache_hits"],
        "graphs_run": g["graphs_run"],
        "syncs": dict(g["syncs"]),
        "breaks": dict(g["breaks"]),
        "host_callbacks": dict(Counter(compiler.host_callbacks) - callbacks),
        "value": value,
    }


def _counts(d: dict[str, int]) -> str:
    if not d:
        return "-"
    return ", ".join(f"{k.removeprefix('array_api::')} {v}" for k, v in sorted(d.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--x64",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="JAX's 64-bit types (default: off, a TPU's default; float32 data)",
    )
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--features", type=int, default=16)
    p.add_argument(
        "--precision",
        choices=("default", "high", "highest"),
        help="JAX's default matmul precision (a TPU's default passes float32 through bfloat16)",
    )
    p.add_argument("--only", nargs="*", metavar="CASE", help="these cases only")
    p.add_argument("--json", type=str, help="also write the figures to this file")
    args = p.parse_args(argv)

    # boxfall.jax reads x64 once, at its import: set it first, both ways, so that the
    # environment's JAX_ENABLE_X64 does not decide silently.
    os.environ["JAX_ENABLE_X64"] = "1" if args.x64 else "0"
    import jax

    jax.config.update("jax_enable_x64", args.x64)
    import boxfall.jax as bj

    data = make_data(args.samples, args.features, args.x64)
    print(
        f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
        f"x64 {'on' if bj.X64 else 'off'}, X {data['X'].shape} {data['X'].dtype}"
    )
    if args.precision:
        jax.config.update("jax_default_matmul_precision", args.precision)
    precision = getattr(jax.config, "jax_default_matmul_precision", None)
    print(f"matmul precision: {precision or 'the device default'}")
    rows: dict[str, Any] = {}
    for name, case in cases().items():
        if args.only and name not in args.only:
            continue
        want = np.asarray(case(data))
        fits = [measure(case, data) for _ in range(2)]
        rows[name] = fits
        got = np.asarray(fits[1]["value"])
        # Float32's rtol where x64 is off; a TPU's default matmul precision (bfloat16 passes)
        # can miss it, which the line says rather than hides.
        tol = 1e-9 if args.x64 else 1e-4
        agree = (
            np.allclose(got, want, rtol=tol, atol=tol)
            if want.dtype.kind == "f"
            else np.array_equal(got, want)
        )
        print(f"\n{name}: agrees with NumPy: {'yes' if agree else 'NO'}")
        for label, f in zip(("first fit", "second fit"), fits, strict=True):
            print(
                f"  {label:10} {f['seconds']:8.3f}s  compiles {f['compiles']:3}  "
                f"cache hits {f['cache_hits']:3}  graphs run {f['graphs_run']:3}"
            )
            print(f"  {'':10} syncs: {_counts(f['syncs'])}")
            print(f"  {'':10} graph breaks: {_counts(f['breaks'])}")
            print(f"  {'':10} host callbacks: {_counts(f['host_callbacks'])}")
    if args.json:
        out = {
            name: [{k: v for k, v in f.items() if k != "value"} for f in fits]
            for name, fits in rows.items()
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
