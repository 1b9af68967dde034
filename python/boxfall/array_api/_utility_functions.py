"""Utility functions (the standard's chapter of that name), as data."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._registry import Op, register


def _axis(axis: Any) -> Any:
    return None if axis is None else tuple(axis)


def all(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether every element along ``axis`` is true."""
    return np.all(x, axis=_axis(axis), keepdims=keepdims)


def any(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether some element along ``axis`` is true."""
    return np.any(x, axis=_axis(axis), keepdims=keepdims)


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Any:
    """The ``n``-th differences along ``axis``, of ``x`` with ``prepend`` before it and
    ``append`` after it along ``axis`` when given."""
    kwargs = {k: v for k, v in (("prepend", prepend), ("append", append)) if v is not None}
    return np.diff(x, n=n, axis=axis, **kwargs)


OPS, _public = register(
    [
        Op("all(Tensor x, *, int[1]? axis=None, bool keepdims=False) -> Tensor", all),
        Op("any(Tensor x, *, int[1]? axis=None, bool keepdims=False) -> Tensor", any),
        Op(
            "diff(Tensor x, *, int axis=-1, int n=1, Tensor? prepend=None, Tensor? append=None)"
            " -> Tensor",
            diff,
        ),
    ]
)
all = _public["all"]  # noqa: A001
any = _public["any"]  # noqa: A001
diff = _public["diff"]

__all__ = ["all", "any", "diff"]
