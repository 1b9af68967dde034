"""scikit-learn on ``boxfall.jax``'s graph mode (``bj.namespace(graph=True)``): estimators,
pairwise kernels and metrics in float32 agree with scikit-learn on NumPy, and a second fit of
the same shapes compiles nothing (every graph it runs is a cache hit), as graph mode
promises for a training loop. On JAX's CPU here; ``benches/graph_estimators.py`` prints the
same figures (compiles, cache hits, syncs, breaks, host callbacks) for a TPU.
"""

from __future__ import annotations

from typing import Any

import boxfall as bf
import numpy as np
import pytest
from sample_data import sklearn_data

jax = pytest.importorskip("jax")
sklearn = pytest.importorskip("sklearn")

import boxfall.jax as bj  # noqa: E402
from sklearn.metrics.pairwise import rbf_kernel  # noqa: E402
from sklearn_cases import ARRAY_FUNCTIONS, ESTIMATORS, SCORES, Case  # noqa: E402

RTOL = 1e-4
"""float32's: scikit-learn on NumPy computes in float32 too, in another order."""


def _picked(params: list[Any], ids: set[str]) -> list[Any]:
    return [p for p in params if p.id in ids]


CASES = [
    *ESTIMATORS,  # StandardScaler, MinMaxScaler, PCA, LinearDiscriminantAnalysis, Ridge
    *_picked(ARRAY_FUNCTIONS, {"linear_kernel"}),
    pytest.param(lambda d: rbf_kernel(d["X"], d["Y"], gamma=0.1), id="rbf_kernel"),
    *_picked(SCORES, {"accuracy_score", "r2_score", "mse"}),
]


def _data() -> dict[str, np.ndarray]:
    """sample_data's arrays in float32, and the labels in the device's default integer (int32
    without JAX's 64-bit types: int64 would be narrowed, with a warning, on the way in)."""
    label = np.int64 if bj.X64 else np.int32
    return {
        k: v.astype(np.float32) if v.dtype.kind == "f" else v.astype(label)
        for k, v in sklearn_data().items()
    }


def _fit(case: Case) -> tuple[Any, dict[str, Any]]:
    """One run of ``case`` on fresh graph-mode arrays, its result read to the host (which
    computes whatever is pending), and graph mode's figures after it."""
    gx = bj.namespace(graph=True)
    on_device = {k: gx.asarray(v) for k, v in _data().items()}
    # Highest: JAX's CPU computes float32 products in float32 anyway; a TPU would not.
    with sklearn.config_context(array_api_dispatch=True), jax.default_matmul_precision("highest"):
        got = case(on_device)
        if isinstance(got, bf.Tensor):
            assert got.device == f"{bj.GRAPH_BACKEND_NAME}:0"
            got = got.numpy()
        bf.sync()
    return got, bf.metrics.graphs()


@pytest.mark.parametrize("case", CASES)
def test_agrees_with_numpy_and_a_second_fit_compiles_nothing(case: Case) -> None:
    want = case(_data())
    compiler = bj.graph_compiler()
    bf.sync()
    start = bf.metrics.graphs()

    first, after_first = _fit(case)
    # The run went through graph mode: programs were compiled and run for it.
    assert after_first["graphs_run"] > start["graphs_run"]
    compiles = compiler.compiles

    second, after_second = _fit(case)
    assert after_second["compiled"] == after_first["compiled"]
    assert compiler.compiles == compiles  # no jax.jit program made either
    hits = after_second["cache_hits"] - after_first["cache_hits"]
    runs = after_second["graphs_run"] - after_first["graphs_run"]
    assert hits > 0
    assert hits == runs  # every graph of the second fit was the cached program

    w = np.asarray(want)
    for got in (first, second):
        if isinstance(got, np.ndarray) and got.dtype.kind == "f":
            assert got.dtype == np.float32  # float32 in, float32 out, as on NumPy
        if w.dtype.kind == "f":
            np.testing.assert_allclose(np.asarray(got), w, rtol=RTOL, atol=RTOL)
        else:
            np.testing.assert_array_equal(np.asarray(got), w)
