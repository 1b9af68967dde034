"""The JAX backend's kernels of the standard's sorting and searching functions whose results
have a shape the inputs give (``nonzero`` and the set functions, whose shapes depend on the
values, stay with the CPU fallback)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._kernels_base import _Kernels

# JAX's sort is stable and puts NaNs last, as NumPy's stable sort does; descending, NaNs come
# first and equal elements keep their order, as boxfall's CPU kernel (a flip of the ascending
# sort of the flipped array) gives them.
_sort = jax.jit(jnp.sort, static_argnames=("axis", "descending"))
_argsort = jax.jit(
    lambda a, *, axis, descending: jnp.argsort(a, axis=axis, stable=True, descending=descending),
    static_argnames=("axis", "descending"),
)
# jnp.searchsorted gives int32 always; NumPy's index dtype is the default int (int64 with x64).
_searchsorted = jax.jit(
    lambda a, v, *, side: jnp.searchsorted(a, v, side=side).astype(
        jax.dtypes.canonicalize_dtype(np.int64)
    ),
    static_argnames=("side",),
)
_count_nonzero = jax.jit(jnp.count_nonzero, static_argnames=("axis", "keepdims"))


def _searching(k: _Kernels) -> None:
    pay = k.payload

    def sort(x: Any, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
        a = pay(x)
        if a is None or a.ndim == 0 or a.dtype.kind not in "biufV":
            return None
        return _sort(a, axis=axis, descending=bool(descending))

    def argsort(x: Any, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
        a = pay(x)
        if a is None or a.ndim == 0 or a.dtype.kind not in "biufV":
            return None
        return _argsort(a, axis=axis, descending=bool(descending))

    def searchsorted(x1: Any, x2: Any, *, side: str = "left", sorter: Any = None) -> Any:
        a, v = pay(x1), pay(x2)
        if a is None or v is None or sorter is not None or side not in ("left", "right"):
            return None
        if a.ndim != 1 or a.dtype != v.dtype or a.dtype.kind not in "iufV":
            return None
        return _searchsorted(a, v, side=side)

    def count_nonzero(x: Any, *, axis: Any = None, keepdims: bool = False) -> Any:
        a = pay(x)
        if a is None or a.dtype.kind not in "biufcV":
            return None
        axes = None if axis is None else tuple(int(i) for i in axis)
        if axes is not None and len({i % max(a.ndim, 1) for i in axes}) != len(axes):
            return None  # a repeated axis: NumPy's error
        return _count_nonzero(a, axis=axes, keepdims=bool(keepdims))

    k.add("sort", sort)
    k.add("argsort", argsort)
    k.add("searchsorted", searchsorted)
    k.add("count_nonzero", count_nonzero)
