"""Statistical functions (the standard's chapter of that name), as data.

``axis`` is ``int[1]?``: an int, a tuple of ints, or None for every axis. ``dtype`` is the
dtype's name (``str?``; the public functions take dtype objects). The standard's accumulation
dtypes: ``sum``, ``prod`` and ``cumulative_*`` of a signed integer or bool array are ``int64``,
of an unsigned one ``uint64``, unless ``dtype`` says otherwise (NumPy's own rule on the
platforms boxfall builds for, pinned here for every platform). The accumulator is the default
integer dtype, so on a device without int64 it is int32 (uint32): the operators are tagged
``default_dtypes``, and a backend fits the kernel's result to its device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._registry import CHOSEN, Op, register


def _axis(axis: Any) -> Any:
    return None if axis is None else tuple(axis)


def _accumulation_dtype(x: Any, dtype: Any) -> Any:
    if dtype is not None:
        return dtype
    kind = x.dtype.kind
    if kind in "bi":
        return np.int64
    if kind == "u":
        return np.uint64
    return None


def _sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    return np.sum(x, axis=_axis(axis), dtype=_accumulation_dtype(x, dtype), keepdims=keepdims)


def _prod(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    return np.prod(x, axis=_axis(axis), dtype=_accumulation_dtype(x, dtype), keepdims=keepdims)


def _mean(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return np.mean(x, axis=_axis(axis), keepdims=keepdims)


def _max(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return np.max(x, axis=_axis(axis), keepdims=keepdims)


def _min(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return np.min(x, axis=_axis(axis), keepdims=keepdims)


def _std(x: Any, /, *, axis: Any = None, correction: Any = 0.0, keepdims: bool = False) -> Any:
    return np.std(x, axis=_axis(axis), ddof=correction, keepdims=keepdims)


def _var(x: Any, /, *, axis: Any = None, correction: Any = 0.0, keepdims: bool = False) -> Any:
    return np.var(x, axis=_axis(axis), ddof=correction, keepdims=keepdims)


def _cumulative(f: Any, initial: int) -> Any:
    def kernel(
        x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
    ) -> Any:
        if axis is None:
            if x.ndim > 1:
                raise ValueError("axis must be given for an array of more than one dimension")
            axis = 0
        out = f(x, axis=axis, dtype=_accumulation_dtype(x, dtype))
        if include_initial:
            shape = list(out.shape)
            shape[axis] = 1
            out = np.concatenate([np.full(shape, initial, dtype=out.dtype), out], axis=axis)
        return out

    return kernel


def cumulative_sum(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> Any:
    """Cumulative sums along ``axis`` (optional for a 1-D array), with a leading 0 if
    ``include_initial``."""
    return _cumulative(np.cumsum, 0)(x, axis=axis, dtype=dtype, include_initial=include_initial)


def cumulative_prod(
    x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
) -> Any:
    """Cumulative products along ``axis`` (optional for a 1-D array), with a leading 1 if
    ``include_initial``."""
    return _cumulative(np.cumprod, 1)(x, axis=axis, dtype=dtype, include_initial=include_initial)


def _named(f: Any, name: str, doc: str) -> Any:
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


_AXIS = "int[1]? axis=None"
OPS, _public = register(
    [
        Op(
            f"sum(Tensor x, *, {_AXIS}, str? dtype=None, bool keepdims=False) -> Tensor",
            _named(_sum, "sum", "The sum over ``axis``."),
            tags=CHOSEN,
        ),
        Op(
            f"prod(Tensor x, *, {_AXIS}, str? dtype=None, bool keepdims=False) -> Tensor",
            _named(_prod, "prod", "The product over ``axis``."),
            tags=CHOSEN,
        ),
        Op(
            f"mean(Tensor x, *, {_AXIS}, bool keepdims=False) -> Tensor",
            _named(_mean, "mean", "The arithmetic mean over ``axis``."),
        ),
        Op(
            f"max(Tensor x, *, {_AXIS}, bool keepdims=False) -> Tensor",
            _named(_max, "max", "The maximum over ``axis``."),
        ),
        Op(
            f"min(Tensor x, *, {_AXIS}, bool keepdims=False) -> Tensor",
            _named(_min, "min", "The minimum over ``axis``."),
        ),
        Op(
            f"std(Tensor x, *, {_AXIS}, Scalar correction=0, bool keepdims=False) -> Tensor",
            _named(_std, "std", "The standard deviation over ``axis`` (``correction``: ddof)."),
        ),
        Op(
            f"var(Tensor x, *, {_AXIS}, Scalar correction=0, bool keepdims=False) -> Tensor",
            _named(_var, "var", "The variance over ``axis`` (``correction``: ddof)."),
        ),
        Op(
            "cumulative_sum(Tensor x, *, int? axis=None, str? dtype=None, "
            "bool include_initial=False) -> Tensor",
            cumulative_sum,
            tags=CHOSEN,
        ),
        Op(
            "cumulative_prod(Tensor x, *, int? axis=None, str? dtype=None, "
            "bool include_initial=False) -> Tensor",
            cumulative_prod,
            tags=CHOSEN,
        ),
    ]
)

sum = _public["sum"]  # noqa: A001  (the standard's names)
prod = _public["prod"]
mean = _public["mean"]
max = _public["max"]  # noqa: A001
min = _public["min"]  # noqa: A001
std = _public["std"]
var = _public["var"]
cumulative_sum = _public["cumulative_sum"]
cumulative_prod = _public["cumulative_prod"]

__all__ = [
    "cumulative_prod",
    "cumulative_sum",
    "max",
    "mean",
    "min",
    "prod",
    "std",
    "sum",
    "var",
]
