"""Values several test modules share: the names of the standard's dtypes, and the small data
set that scikit-learn's estimators fit in the client tests."""

from __future__ import annotations

import numpy as np

ALL_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
"""Every dtype of the array API standard (and of a Native tensor), by name."""


def sklearn_data() -> dict[str, np.ndarray]:
    """Forty samples of four features of different scales (``X``), six points (``Y``), binary
    ``labels``, a regression ``target`` and a ``predicted`` close to it: the same each call."""
    rng = np.random.default_rng(3)
    scale, shift = np.array([1.0, 3.0, 0.5, 2.0]), np.array([0.0, 1.0, -2.0, 5.0])
    x = rng.standard_normal((40, 4)) * scale + shift
    y = rng.standard_normal((6, 4))
    labels = (x[:, 0] + 0.3 * x[:, 1] > 0.2).astype(np.int64)
    target = x @ np.array([1.0, -2.0, 0.5, 0.25]) + 0.1 * rng.standard_normal(40)
    return {"X": x, "Y": y, "labels": labels, "target": target, "predicted": 0.9 * target + 0.05}
