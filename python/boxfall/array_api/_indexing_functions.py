"""Indexing functions (the standard's chapter of that name), as data."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._registry import Op, register


def take(x: Any, indices: Any, /, *, axis: int | None = None) -> Any:
    """The elements of ``x`` at ``indices`` along ``axis`` (``x`` must be 1-d without one)."""
    if axis is None and np.ndim(x) != 1:
        raise ValueError("take: axis is required for an array of more than one dimension")
    return np.take(x, indices, axis=axis)


def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> Any:
    """The elements of ``x`` at ``indices``, an array of ``x``'s rank, along ``axis``."""
    return np.take_along_axis(x, indices, axis=axis)


OPS, _public = register(
    [
        Op("take(Tensor x, Tensor indices, *, int? axis=None) -> Tensor", take),
        Op("take_along_axis(Tensor x, Tensor indices, *, int axis=-1) -> Tensor", take_along_axis),
    ]
)
take = _public["take"]
take_along_axis = _public["take_along_axis"]

__all__ = ["take", "take_along_axis"]
