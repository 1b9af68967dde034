"""Linear algebra functions (the standard's chapter of that name; the ``linalg`` extension is
``_linalg``), as data."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _boxfall
from . import _views
from ._registry import Op, register


def matmul(x1: Any, x2: Any, /) -> Any:
    """The matrix product (NumPy's ``matmul``); the array object's ``@``."""
    return np.matmul(x1, x2)


def _matrix_transpose(x: Any, /) -> Any:
    """``x`` with its last two axes swapped; the array object's ``mT``."""
    return np.swapaxes(x, -1, -2)


def _tensordot_int(x1: Any, x2: Any, /, *, axes: int = 2) -> Any:
    """The tensor contraction over ``axes`` (an int, or two lists of axes)."""
    return np.tensordot(x1, x2, axes=axes)


def _tensordot_axes(x1: Any, x2: Any, /, *, axes: Any) -> Any:
    return np.tensordot(x1, x2, axes=(tuple(axes[0]), tuple(axes[1])))


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """The dot product of vectors along ``axis`` (conjugating ``x1``), in the dtype of
    ``x1 * x2``; the two sizes along ``axis`` must be equal (that axis does not broadcast)."""
    x1, x2 = np.asarray(x1), np.asarray(x2)
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(
            f"vecdot: the sizes along axis {axis} differ ({x1.shape[axis]} and {x2.shape[axis]})"
        )
    x1, x2 = np.broadcast_arrays(x1, x2)
    product = np.conj(x1) * x2
    return np.sum(product, axis=axis, dtype=product.dtype)


OPS, _public = register(
    [
        Op("matmul(Tensor x1, Tensor x2) -> Tensor", matmul),
        Op("matrix_transpose(Tensor x) -> Tensor", _matrix_transpose, False),
        Op("tensordot(Tensor x1, Tensor x2, *, int axes=2) -> Tensor", _tensordot_int, False),
        Op(
            "tensordot.axes(Tensor x1, Tensor x2, *, int[][] axes) -> Tensor",
            _tensordot_axes,
            False,
        ),
        Op("vecdot(Tensor x1, Tensor x2, *, int axis=-1) -> Tensor", vecdot),
    ]
)
globals().update(_public)


def _matrix_transpose_view(x: Any, /) -> Any:
    """``x`` with its last two axes swapped (the array object's ``mT``): a view of a
    ``bf.Tensor`` (``_views``), as NumPy's ``swapaxes`` gives; else the operator
    ``array_api::matrix_transpose``."""
    v = _views.view(x, "matrix_transpose", None) if getattr(x, "ndim", 0) >= 2 else None
    return OPS["matrix_transpose"](x) if v is None else v


_matrix_transpose_view.__name__ = _matrix_transpose_view.__qualname__ = "matrix_transpose"
# A view whose layout is known is made in Rust (`view_function`), with no Python frame.
matrix_transpose = _boxfall.view_function(_matrix_transpose_view)


def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> Any:
    """The operator ``array_api::tensordot`` (``tensordot.axes`` for two lists of axes)."""
    if isinstance(axes, int):
        return OPS["tensordot"](x1, x2, axes=axes)
    return OPS["tensordot.axes"](x1, x2, axes=[list(axes[0]), list(axes[1])])


__all__ = ["matmul", "matrix_transpose", "tensordot", "vecdot"]
