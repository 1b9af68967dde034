"""scikit-learn as a client of ``boxfall.array_api``: with ``array_api_dispatch=True`` its
estimators and functions that support the standard run on ``bf.Tensor`` arrays of Native and of
a backend written in Python (three copy hooks, native ``add``/``multiply`` kernels, the CPU
fallback for the rest), and give NumPy's results on the same device.

scipy reads ``SCIPY_ARRAY_API=1`` at import: conftest.py sets it before any test imports scipy
(and .ci/run exports it).

Most cases index arrays (``y[0]``, ``s[idx][:, None]``, ``scale[mask] = 1.0``): through
``bf.Tensor.__getitem__``/``__setitem__``, the operators ``array_api::getitem``/``setitem``.
"""

from __future__ import annotations

import os
from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from sample_data import sklearn_data

sklearn = pytest.importorskip("sklearn")

from sklearn_cases import ARRAY_FUNCTIONS, ESTIMATORS, SCORES, Case  # noqa: E402


@pytest.fixture(scope="module")
def kernel_accel(backend_factory):
    """A Python backend with native ``array_api::add``/``multiply`` and the CPU fallback."""
    backend = backend_factory("SklearnAccel")

    def add(x1, x2):
        return backend.tensor(np.add(x1.payload.data, x2.payload.data))

    def multiply(x1, x2):
        return backend.tensor(np.multiply(x1.payload.data, x2.payload.data))

    with bf.Library("_", "IMPL") as fb, bf.Library("array_api", "IMPL") as lib:
        fb.fallback(bf.cpu_fallback, backend.name)
        lib.impl("add", add, backend.name)
        lib.impl("multiply", multiply, backend.name)
        yield backend


@pytest.fixture(params=["Native", "accel"])
def client_xp(request, kernel_accel):
    """The namespace of Native, and of ``kernel_accel``."""
    return xp.namespace("Native" if request.param == "Native" else kernel_accel.device)


@pytest.fixture(autouse=True)
def _scipy_array_api():
    assert os.environ.get("SCIPY_ARRAY_API") == "1", "conftest.py sets SCIPY_ARRAY_API=1"


def _data() -> dict[str, Any]:
    return sklearn_data()


def _run(client_xp, case: Case) -> tuple[Any, Any]:
    """``case`` on ``client_xp``'s arrays with array API dispatch, and on NumPy's without."""
    on_device = {k: client_xp.asarray(v) for k, v in _data().items()}
    bf.metrics.reset()
    with sklearn.config_context(array_api_dispatch=True):
        got = case(on_device)
    # scikit-learn's work ran as boxfall operators (counted where they fell back).
    assert any(name.startswith("array_api::") for name in bf.metrics.counters())
    return got, case(_data())


@pytest.mark.parametrize("case", [*ESTIMATORS, *ARRAY_FUNCTIONS])
def test_array_result_matches_numpy_on_the_device(client_xp, case):
    got, want = _run(client_xp, case)
    assert isinstance(got, bf.Tensor)
    assert got.device == client_xp.__array_namespace_info__().default_device()
    assert np.dtype(got.dtype) == np.asarray(want).dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", SCORES)
def test_score_matches_numpy(client_xp, case):
    got, want = _run(client_xp, case)
    assert isinstance(got, float)
    assert got == pytest.approx(float(want), rel=1e-12, abs=1e-15)
