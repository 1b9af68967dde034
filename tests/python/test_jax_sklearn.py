"""scikit-learn on ``boxfall.jax``: with ``array_api_dispatch=True`` its estimators, pairwise
functions and metrics run on a JAX device and agree with NumPy. Without x64 (a TPU's usual
state, and this pytest run's) they run in float32, as scikit-learn does on a device without
float64: the data are float32, and NumPy computes the same in float32 (rtol 1e-4). With x64
(.ci/run's ``JAX_ENABLE_X64=1`` step) the data stay float64.
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
from sklearn_cases import ARRAY_FUNCTIONS, ESTIMATORS, SCORES, Case  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

FLOAT = np.float64 if bj.X64 else np.float32
RTOL = 1e-9 if bj.X64 else 1e-4


def _data() -> dict[str, np.ndarray]:
    return {k: v.astype(FLOAT) if v.dtype.kind == "f" else v for k, v in sklearn_data().items()}


def _run(case: Case) -> tuple[Any, Any]:
    ns = bj.namespace()
    on_device = {k: ns.asarray(v) for k, v in _data().items()}
    with sklearn.config_context(array_api_dispatch=True):
        got = case(on_device)
    return got, case(_data())


@pytest.mark.parametrize("case", [*ESTIMATORS, *ARRAY_FUNCTIONS])
def test_array_result_matches_numpy_on_the_jax_device(case):
    got, want = _run(case)
    assert isinstance(got, bf.Tensor)
    assert got.device == "JAX:0"
    want = np.asarray(want)
    if want.dtype.kind == "f":
        assert np.dtype(got.dtype) == FLOAT
        np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=RTOL)
    else:
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("case", SCORES)
def test_score_matches_numpy(case):
    got, want = _run(case)
    assert float(got) == pytest.approx(float(want), rel=RTOL, abs=RTOL)
