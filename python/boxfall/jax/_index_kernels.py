"""The JAX backend's kernels of basic indexing: ``array_api::getitem`` (``x[key]`` where no view
is made: graph mode records it for a pending tensor) and ``array_api::setitem_functional``
(graph mode's form of ``x[key] = value``: ``x.at[key].set(value)``), and graph mode's reads and
writes of views (``array_api::_strided_view``, ``_strided_view_write``: a reshape, transpose or
gather, and a scatter, in the compiled program). Each takes a key of ints,
slices, ``None`` and ``...`` on traced arrays too; a key with arrays, or one NumPy refuses (an
int out of range, which JAX would clamp), goes to the CPU fallback, which raises NumPy's
error or computes NumPy's result."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _hooks

if TYPE_CHECKING:
    from ._kernels_base import _Kernels


def _basic(shape: tuple[int, ...], key: Any, arrays: Any) -> bool:
    """Whether ``key`` (no arrays) is a basic index NumPy takes for an array of ``shape``:
    tried on a stand-in of that shape over one element, whose values are never read."""
    if arrays:
        return False
    parts = key if isinstance(key, tuple) else (key,)
    for p in parts:
        if isinstance(p, (bool, np.bool_)) or not (
            p is None or p is Ellipsis or isinstance(p, (slice, int, np.integer))
        ):
            return False
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.bool_), shape, (0,) * len(shape))
    try:
        stand_in[key]
    except (IndexError, TypeError, ValueError):
        return False
    return True


def indexing(k: _Kernels) -> None:
    pay = k.payload

    def getitem(x: Any, key: Any, arrays: Any) -> Any:
        a = pay(x)
        if a is None or not _basic(a.shape, key, arrays):
            return None
        return a[key]

    def setitem_functional(x: Any, key: Any, arrays: Any, value: Any) -> Any:
        a = pay(x)
        if a is None or not _basic(a.shape, key, arrays):
            return None
        v = pay(value)
        if v is None:
            return None
        return a.at[key].set(v.astype(a.dtype))

    def setitem_functional_scalar(x: Any, key: Any, arrays: Any, value: Any) -> Any:
        a = pay(x)
        if a is None or not _basic(a.shape, key, arrays):
            return None
        return a.at[key].set(np.asarray(value).astype(a.dtype))

    def strided_view(x: Any, shape: Any, strides: Any, offset: int) -> Any:
        a = pay(x)
        return None if a is None else _hooks.strided_view(a, shape, strides, offset)

    def strided_view_write(x: Any, values: Any, shape: Any, strides: Any, offset: int) -> Any:
        a, v = pay(x), pay(values)
        if a is None or v is None or v.dtype != a.dtype:
            return None
        return _hooks.strided_view_write(a, v, shape, strides, offset)

    k.add("getitem", getitem)
    k.add("_strided_view", strided_view)
    k.add("_strided_view_write", strided_view_write)
    k.add("setitem_functional", setitem_functional)
    k.add("setitem_functional.Scalar", setitem_functional_scalar)
