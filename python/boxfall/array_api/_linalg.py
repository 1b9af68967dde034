"""The ``linalg`` extension of the standard, as data: each function is the operator
``array_api::linalg_<name>`` with a NumPy CPU kernel; the public functions live in
``boxfall.array_api.linalg``. ``matmul``, ``matrix_transpose``, ``tensordot`` and ``vecdot`` are
the main namespace's own (the standard says the extension's are the same functions).

Decompositions return a tuple of arrays from the operator, and the public function gives it as
the standard's named tuple. ``ord`` of ``matrix_norm`` is a string (``"fro"``, ``"nuc"``) or a
number: two overloads, ``linalg_matrix_norm`` and ``linalg_matrix_norm.Scalar``; ``rtol`` of
``pinv`` and ``matrix_rank`` is a number or an array: ``linalg_pinv`` and ``linalg_pinv.Tensor``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._helpers import ARRAY_TYPES
from ._linear_algebra_functions import matmul, matrix_transpose, tensordot, vecdot
from ._registry import CHOSEN, Op, register


class EighResult(NamedTuple):
    """``eigh``'s result."""

    eigenvalues: Any
    eigenvectors: Any


class QRResult(NamedTuple):
    """``qr``'s result."""

    Q: Any
    R: Any


class SlogdetResult(NamedTuple):
    """``slogdet``'s result."""

    sign: Any
    logabsdet: Any


class SVDResult(NamedTuple):
    """``svd``'s result."""

    U: Any
    S: Any
    Vh: Any


def _cholesky(x: Any, /, *, upper: bool = False) -> Any:
    lower = np.linalg.cholesky(x)
    return np.conj(np.swapaxes(lower, -1, -2)) if upper else lower


def _cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    return np.cross(x1, x2, axis=axis)


def _det(x: Any, /) -> Any:
    return np.linalg.det(x)


def _diagonal(x: Any, /, *, offset: int = 0) -> Any:
    return np.diagonal(x, offset=offset, axis1=-2, axis2=-1).copy()


def _eigh(x: Any, /) -> tuple[Any, Any]:
    w, v = np.linalg.eigh(x)
    return w, v


def _eigvalsh(x: Any, /) -> Any:
    return np.linalg.eigvalsh(x)


def _inv(x: Any, /) -> Any:
    return np.linalg.inv(x)


def _matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:  # noqa: A002
    return np.linalg.norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def _matrix_power(x: Any, n: int, /) -> Any:
    return np.linalg.matrix_power(x, n)


def _rtol(x: Any, rtol: Any) -> Any:
    # The standard's default: machine epsilon of x's dtype times the larger matrix dimension.
    if rtol is None:
        return max(x.shape[-2:]) * np.finfo(x.dtype).eps
    return rtol


def _matrix_rank(x: Any, /, *, rtol: Any = None) -> Any:
    s = np.linalg.svd(x, compute_uv=False)
    tol = np.max(s, axis=-1, keepdims=True) * np.asarray(_rtol(x, rtol))[..., None]
    return np.count_nonzero(s > tol, axis=-1)


def _outer(x1: Any, x2: Any, /) -> Any:
    return np.outer(x1, x2)


def _pinv(x: Any, /, *, rtol: Any = None) -> Any:
    return np.linalg.pinv(x, rcond=_rtol(x, rtol))


def _qr(x: Any, /, *, mode: Any = "reduced") -> tuple[Any, Any]:
    q, r = np.linalg.qr(x, mode=mode)
    return q, r


def _slogdet(x: Any, /) -> tuple[Any, Any]:
    sign, logabsdet = np.linalg.slogdet(x)
    return sign, logabsdet


def _solve(x1: Any, x2: Any, /) -> Any:
    # The standard: a 1-D x2 is a vector (NumPy 1.x would read it as a stack of matrices).
    if np.ndim(x2) == 1:
        return np.linalg.solve(x1, x2[:, None])[..., 0]
    return np.linalg.solve(x1, x2)


def _svd(x: Any, /, *, full_matrices: bool = True) -> tuple[Any, Any, Any]:
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return u, s, vh


def _svdvals(x: Any, /) -> Any:
    return np.linalg.svd(x, compute_uv=False)


def _trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    if dtype is None and np.issubdtype(x.dtype, np.integer):
        # The standard keeps the input's kind and widens to the default integer.
        dtype = np.uint64 if np.issubdtype(x.dtype, np.unsignedinteger) else np.int64
    return np.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)


def _vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:  # noqa: A002
    x = np.asarray(x)
    if axis is None:
        # Over every element: NumPy's norm of the flattened array (keepdims: all ones).
        out = np.linalg.norm(x.reshape(-1), ord=ord)
        return np.reshape(out, (1,) * x.ndim) if keepdims else out
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if len(axes) == 1:
        return np.linalg.norm(x, ord=ord, axis=axes[0], keepdims=keepdims)
    # NumPy's norm takes two axes as a matrix norm: move them to the end and flatten them.
    axes = tuple(a % x.ndim for a in axes)
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, (*rest, *axes)).reshape(*(x.shape[a] for a in rest), -1)
    out = np.linalg.norm(moved, ord=ord, axis=-1)
    return np.expand_dims(out, axes) if keepdims else out


_P = "linalg_"
OPS, _ = register(
    [
        Op(f"{_P}cholesky(Tensor x, *, bool upper=False) -> Tensor", _cholesky, False),
        Op(f"{_P}cross(Tensor x1, Tensor x2, *, int axis=-1) -> Tensor", _cross, False),
        Op(f"{_P}det(Tensor x) -> Tensor", _det, False),
        Op(f"{_P}diagonal(Tensor x, *, int offset=0) -> Tensor", _diagonal, False),
        Op(f"{_P}eigh(Tensor x) -> (Tensor eigenvalues, Tensor eigenvectors)", _eigh, False),
        Op(f"{_P}eigvalsh(Tensor x) -> Tensor", _eigvalsh, False),
        Op(f"{_P}inv(Tensor x) -> Tensor", _inv, False),
        Op(
            f'{_P}matrix_norm(Tensor x, *, bool keepdims=False, str ord="fro") -> Tensor',
            _matrix_norm,
            False,
        ),
        Op(
            f"{_P}matrix_norm.Scalar(Tensor x, *, bool keepdims=False, Scalar ord) -> Tensor",
            _matrix_norm,
            False,
        ),
        Op(f"{_P}matrix_power(Tensor x, int n) -> Tensor", _matrix_power, False),
        # The rank's dtype is the default integer dtype: the library's (int32 on a device
        # without int64).
        Op(
            f"{_P}matrix_rank(Tensor x, *, Scalar? rtol=None) -> Tensor",
            _matrix_rank,
            False,
            CHOSEN,
        ),
        Op(
            f"{_P}matrix_rank.Tensor(Tensor x, *, Tensor rtol) -> Tensor",
            _matrix_rank,
            False,
            CHOSEN,
        ),
        Op(f"{_P}outer(Tensor x1, Tensor x2) -> Tensor", _outer, False),
        Op(f"{_P}pinv(Tensor x, *, Scalar? rtol=None) -> Tensor", _pinv, False),
        Op(f"{_P}pinv.Tensor(Tensor x, *, Tensor rtol) -> Tensor", _pinv, False),
        Op(f'{_P}qr(Tensor x, *, str mode="reduced") -> (Tensor Q, Tensor R)', _qr, False),
        Op(f"{_P}slogdet(Tensor x) -> (Tensor sign, Tensor logabsdet)", _slogdet, False),
        Op(f"{_P}solve(Tensor x1, Tensor x2) -> Tensor", _solve, False),
        Op(
            f"{_P}svd(Tensor x, *, bool full_matrices=True) -> (Tensor U, Tensor S, Tensor Vh)",
            _svd,
            False,
        ),
        Op(f"{_P}svdvals(Tensor x) -> Tensor", _svdvals, False),
        Op(
            f"{_P}trace(Tensor x, *, int offset=0, str? dtype=None) -> Tensor",
            _trace,
            False,
        ),
        Op(
            f"{_P}vector_norm(Tensor x, *, int[1]? axis=None, bool keepdims=False, "
            "Scalar ord=2) -> Tensor",
            _vector_norm,
            False,
        ),
    ]
)


def _op(name: str) -> Any:
    return OPS[f"{_P}{name}"]


def cholesky(x: Any, /, *, upper: bool = False) -> Any:
    """The operator ``array_api::linalg_cholesky``: the Cholesky factor (lower, or ``upper``)."""
    return _op("cholesky")(x, upper=upper)


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """The operator ``array_api::linalg_cross``: the cross product of 3-vectors along ``axis``."""
    return _op("cross")(x1, x2, axis=axis)


def det(x: Any, /) -> Any:
    """The operator ``array_api::linalg_det``: the determinant of each matrix."""
    return _op("det")(x)


def diagonal(x: Any, /, *, offset: int = 0) -> Any:
    """The operator ``array_api::linalg_diagonal``: the diagonal ``offset`` of each matrix."""
    return _op("diagonal")(x, offset=offset)


def eigh(x: Any, /) -> EighResult:
    """The operator ``array_api::linalg_eigh``: eigenvalues (ascending) and eigenvectors of
    each symmetric (Hermitian) matrix."""
    return EighResult(*_op("eigh")(x))


def eigvalsh(x: Any, /) -> Any:
    """The operator ``array_api::linalg_eigvalsh``: the eigenvalues of each symmetric matrix."""
    return _op("eigvalsh")(x)


def inv(x: Any, /) -> Any:
    """The operator ``array_api::linalg_inv``: the inverse of each matrix."""
    return _op("inv")(x)


def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:  # noqa: A002
    """The operator ``array_api::linalg_matrix_norm`` (``.Scalar`` for a numeric ``ord``)."""
    if isinstance(ord, str):
        return _op("matrix_norm")(x, keepdims=keepdims, ord=ord)
    return _op("matrix_norm.Scalar")(x, keepdims=keepdims, ord=ord)


def matrix_power(x: Any, n: int, /) -> Any:
    """The operator ``array_api::linalg_matrix_power``: each matrix to the integer power ``n``."""
    return _op("matrix_power")(x, n)


def matrix_rank(x: Any, /, *, rtol: Any = None) -> Any:
    """The operator ``array_api::linalg_matrix_rank``: singular values above ``rtol`` times the
    largest (``.Tensor`` for an array ``rtol``, one per matrix of the stack)."""
    if isinstance(rtol, ARRAY_TYPES):
        return _op("matrix_rank.Tensor")(x, rtol=rtol)
    return _op("matrix_rank")(x, rtol=rtol)


def outer(x1: Any, x2: Any, /) -> Any:
    """The operator ``array_api::linalg_outer``: the outer product of two vectors."""
    return _op("outer")(x1, x2)


def pinv(x: Any, /, *, rtol: Any = None) -> Any:
    """The operator ``array_api::linalg_pinv``: the Moore-Penrose pseudo-inverse (``.Tensor``
    for an array ``rtol``)."""
    if isinstance(rtol, ARRAY_TYPES):
        return _op("pinv.Tensor")(x, rtol=rtol)
    return _op("pinv")(x, rtol=rtol)


def qr(x: Any, /, *, mode: str = "reduced") -> QRResult:
    """The operator ``array_api::linalg_qr``: ``Q`` and ``R`` of each matrix."""
    return QRResult(*_op("qr")(x, mode=mode))


def slogdet(x: Any, /) -> SlogdetResult:
    """The operator ``array_api::linalg_slogdet``: sign and log of the absolute determinant."""
    return SlogdetResult(*_op("slogdet")(x))


def solve(x1: Any, x2: Any, /) -> Any:
    """The operator ``array_api::linalg_solve``: ``x`` with ``x1 @ x = x2`` (a 1-D ``x2`` is a
    vector)."""
    return _op("solve")(x1, x2)


def svd(x: Any, /, *, full_matrices: bool = True) -> SVDResult:
    """The operator ``array_api::linalg_svd``: ``U``, ``S`` and ``Vh`` with
    ``x == U @ diag(S) @ Vh``."""
    return SVDResult(*_op("svd")(x, full_matrices=full_matrices))


def svdvals(x: Any, /) -> Any:
    """The operator ``array_api::linalg_svdvals``: the singular values, descending."""
    return _op("svdvals")(x)


def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    """The operator ``array_api::linalg_trace``: the sum of diagonal ``offset`` of each matrix."""
    from ._registry import dtype_name

    return _op("trace")(x, offset=offset, dtype=dtype_name(dtype))


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:  # noqa: A002
    """The operator ``array_api::linalg_vector_norm``: the ``ord``-norm over ``axis`` (every
    element when None)."""
    return _op("vector_norm")(x, axis=axis, keepdims=keepdims, ord=ord)


__all__ = [
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]
