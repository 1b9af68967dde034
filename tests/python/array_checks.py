"""What the array API tests share: an array is on its namespace's device, and a result agrees
with NumPy's."""

from __future__ import annotations

from typing import Any

import boxfall as bf
import numpy as np


def on_device(xp: Any, x: Any) -> None:
    """``x`` is an array of ``xp``'s device: a NumPy array on the CPU, else a
    ``bf.Tensor`` there."""
    device = xp.__array_namespace_info__().default_device()
    if device == "cpu":
        assert isinstance(x, np.ndarray)
    else:
        assert isinstance(x, bf.Tensor) and x.device == device


def check(
    xp: Any,
    got: Any,
    want: Any,
    dtype: Any = None,
    *,
    rtol: float = 1e-7,
    atol: float = 0.0,
    equal_nan: bool = False,
    exact: bool = False,
) -> None:
    """``got`` is an array of ``xp``'s device, of ``dtype`` (``want``'s when None), and
    agrees with ``want``: of its shape and equal element for element with ``exact``, else close
    to it (``rtol``, ``atol``; NaN where it has NaN with ``equal_nan``)."""
    on_device(xp, got)
    want = np.asarray(want)
    assert np.dtype(got.dtype) == np.dtype(want.dtype if dtype is None else dtype)
    if exact:
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), want)
    else:
        np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol, equal_nan=equal_nan)
