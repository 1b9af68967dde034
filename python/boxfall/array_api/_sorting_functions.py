"""Sorting functions (the standard's chapter of that name), as data."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._registry import CHOSEN, Op, register


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    """The values sorted along ``axis``, ascending or ``descending``."""
    out = np.sort(x, axis=axis, kind="stable")
    return np.flip(out, axis=axis) if descending else out


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    """The indices that sort ``x`` along ``axis`` (stable; equal elements in their order, also
    when ``descending``)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    flipped = np.flip(x, axis=axis)
    order = np.argsort(flipped, axis=axis, kind="stable")
    return np.flip(n - 1 - order, axis=axis)


OPS, _public = register(
    [
        Op(
            "sort(Tensor x, *, int axis=-1, bool descending=False, bool stable=True) -> Tensor",
            sort,
        ),
        Op(
            "argsort(Tensor x, *, int axis=-1, bool descending=False, bool stable=True) -> Tensor",
            argsort,
            tags=CHOSEN,
        ),
    ]
)
sort = _public["sort"]
argsort = _public["argsort"]

__all__ = ["argsort", "sort"]
