"""Searching functions (the standard's chapter of that name), as data."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._registry import CHOSEN, Op, register


def _axis(axis: Any) -> Any:
    return None if axis is None else tuple(axis)


def argmax(x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> Any:
    """The index of the first maximum along ``axis`` (of the flattened array without one)."""
    return np.argmax(x, axis=axis, keepdims=keepdims)


def argmin(x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> Any:
    """The index of the first minimum along ``axis`` (of the flattened array without one)."""
    return np.argmin(x, axis=axis, keepdims=keepdims)


def count_nonzero(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    """How many elements along ``axis`` are not zero."""
    return np.asarray(np.count_nonzero(x, axis=_axis(axis), keepdims=keepdims), dtype=np.int64)


def _nonzero(x: Any, /) -> Any:
    if np.ndim(x) == 0:
        raise ValueError("nonzero is not defined for 0-d arrays (the standard leaves it out)")
    return list(np.nonzero(x))


def searchsorted(x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> Any:
    """Where the elements of ``x2`` go in the sorted ``x1`` (``sorter`` sorts it)."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    return np.searchsorted(x1, x2, side="left" if side == "left" else "right", sorter=sorter)


def _where(condition: Any, x1: Any, x2: Any, /) -> Any:
    return np.where(condition, x1, x2)


OPS, _public = register(
    [
        Op(
            "argmax(Tensor x, *, int? axis=None, bool keepdims=False) -> Tensor",
            argmax,
            tags=CHOSEN,
        ),
        Op(
            "argmin(Tensor x, *, int? axis=None, bool keepdims=False) -> Tensor",
            argmin,
            tags=CHOSEN,
        ),
        Op(
            "count_nonzero(Tensor x, *, int[1]? axis=None, bool keepdims=False) -> Tensor",
            count_nonzero,
            tags=CHOSEN,
        ),
        Op("nonzero(Tensor x) -> Tensor[]", _nonzero, public=False, tags=CHOSEN),
        Op(
            'searchsorted(Tensor x1, Tensor x2, *, str side="left", Tensor? sorter=None) -> Tensor',
            searchsorted,
            tags=CHOSEN,
        ),
        # A Python scalar on either side keeps the other array's dtype (NumPy's weak scalars).
        Op("where(Tensor condition, Tensor x1, Tensor x2) -> Tensor", _where, public=False),
        Op(
            "where.Tensor_Scalar(Tensor condition, Tensor x1, Scalar x2) -> Tensor",
            _where,
            public=False,
        ),
        Op(
            "where.Scalar_Tensor(Tensor condition, Scalar x1, Tensor x2) -> Tensor",
            _where,
            public=False,
        ),
    ]
)
argmax = _public["argmax"]
argmin = _public["argmin"]
count_nonzero = _public["count_nonzero"]
searchsorted = _public["searchsorted"]


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float))


def _is_py_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float, complex))


def _scalars_dtype(x1: Any, x2: Any, defaults: Any) -> Any:
    """The dtype of two Python scalars together: bool for two bools, else the default dtype of
    the widest kind (integral, real floating, complex floating)."""
    kinds = {type(x1), type(x2)}
    if complex in kinds:
        return defaults["complex floating"]
    if float in kinds:
        return defaults["real floating"]
    if kinds == {bool}:
        return np.dtype(bool)
    return defaults["integral"]


def nonzero(x: Any, /) -> tuple[Any, ...]:
    """The operator ``array_api::nonzero``: the indices of the elements that are not zero, an
    array per dimension."""
    return tuple(OPS["nonzero"](x))


def where(condition: Any, x1: Any, x2: Any, /) -> Any:
    """The operators ``array_api::where`` (arrays) and ``where.Tensor_Scalar`` /
    ``where.Scalar_Tensor`` (a Python scalar on one side, which takes the other's dtype):
    ``x1`` where ``condition`` is true, else ``x2``.

    Two Python scalars (the standard asks for an array on one side; NumPy, CuPy and PyTorch
    take two) are arrays on ``condition``'s device of the default dtype of their kind: a float
    and an int make the default real floating dtype, as NumPy's ``where(c, 0.5, 0)``."""
    if _is_py_scalar(x1) and _is_py_scalar(x2):
        from ._creation_functions import asarray
        from ._dtypes import defaults_of
        from ._helpers import device_of

        device = device_of(condition)
        dtype = _scalars_dtype(x1, x2, defaults_of(device))
        x1 = asarray(x1, dtype=dtype, device=device)
        x2 = asarray(x2, dtype=dtype, device=device)
    if _is_scalar(x2) and not _is_scalar(x1):
        return OPS["where.Tensor_Scalar"](condition, x1, x2)
    if _is_scalar(x1) and not _is_scalar(x2):
        return OPS["where.Scalar_Tensor"](condition, x1, x2)
    return OPS["where"](condition, x1, x2)


__all__ = ["argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where"]
