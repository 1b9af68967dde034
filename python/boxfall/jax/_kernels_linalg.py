"""The JAX backend's linear algebra kernels: products, the decompositions JAX holds on the
device, norms."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._kernels_base import (
    Kernel,
    _axes,
    _jit,
    _Kernels,
)
from ._kernels_checks import _with_check, checked

_matmul = jax.jit(jnp.matmul)
_tensordot = jax.jit(jnp.tensordot, static_argnames=("axes",))
_vecdot = jax.jit(jnp.vecdot, static_argnames=("axis",))
_vector_norm = jax.jit(jnp.linalg.vector_norm, static_argnames=("axis", "keepdims", "ord"))
_solve = jax.jit(_with_check(jnp.linalg.solve))
_cholesky = jax.jit(_with_check(jnp.linalg.cholesky), static_argnames=("upper",))
_inv = jax.jit(_with_check(jnp.linalg.inv))


def _linear_algebra(k: _Kernels) -> None:
    pay = k.payload

    def same(*tensors: Any) -> list[Any] | None:
        arrays = [pay(t) for t in tensors]
        first = arrays[0]
        if first is None or first.dtype.kind not in "iufc":
            return None
        if any(a is None or a.dtype != first.dtype for a in arrays[1:]):
            return None
        return arrays

    def matmul(x1: Any, x2: Any) -> Any:
        ab = same(x1, x2)
        return None if ab is None else _matmul(ab[0], ab[1])

    def tensordot(x1: Any, x2: Any, *, axes: Any = 2) -> Any:
        ab = same(x1, x2)
        if ab is None:
            return None
        if isinstance(axes, list):
            axes = tuple(tuple(a) for a in axes)
        return _tensordot(ab[0], ab[1], axes=axes)

    def vecdot(x1: Any, x2: Any, *, axis: int = -1) -> Any:
        ab = same(x1, x2)
        return None if ab is None else _vecdot(ab[0], ab[1], axis=axis)

    k.add("matmul", matmul)
    k.add("tensordot", tensordot)
    k.add("tensordot.axes", tensordot)
    k.add("vecdot", vecdot)

    # A singular matrix (one not positive definite) is NumPy's LinAlgError, which JAX's
    # solve, inv and cholesky give as infinities and NaNs: they check (`checked`).
    LinAlgError = np.linalg.LinAlgError  # noqa: N806  (NumPy's class)
    on = k.backend.name

    linalg_kinds = _factorized_dtypes(k)

    def square(x: Any) -> Any:
        a = pay(x)
        if a is None or a.dtype not in linalg_kinds or a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            return None
        if a.size == 0:
            return None
        return a

    def solve(x1: Any, x2: Any) -> Any:
        a, b = square(x1), pay(x2)
        if a is None or b is None or b.dtype != a.dtype or a.ndim != 2 or b.ndim > 2:
            return None
        if b.shape[0] != a.shape[0]:
            return None
        why = f"array_api::linalg_solve on {on}: Singular matrix"
        out, ok, excused = _solve(a, b)
        return checked(out, ok, LinAlgError, why, excused)

    def cholesky(x: Any, *, upper: bool = False) -> Any:
        a = square(x)
        if a is None:
            return None
        out, ok, excused = _cholesky(a, upper=upper)
        why = f"array_api::linalg_cholesky on {on}: Matrix is not positive definite"
        return checked(out, ok, LinAlgError, why, excused)

    def inv(x: Any) -> Any:
        a = square(x)
        if a is None:
            return None
        why = f"array_api::linalg_inv on {on}: Singular matrix"
        out, ok, excused = _inv(a)
        return checked(out, ok, LinAlgError, why, excused)

    def one(fn: Callable[[Any], Any]) -> Kernel:
        def compute(x: Any) -> Any:
            a = square(x)
            return None if a is None else fn(a)

        return compute

    k.add("linalg_solve", solve)
    k.add("linalg_cholesky", cholesky)
    k.add("linalg_inv", inv)
    k.add("linalg_det", one(_jit(jnp.linalg.det)))
    k.add("linalg_slogdet", one(_jit(lambda a: tuple(jnp.linalg.slogdet(a)))))
    k.add("linalg_eigh", one(_jit(lambda a: tuple(jnp.linalg.eigh(a)))))
    k.add("linalg_eigvalsh", one(_jit(jnp.linalg.eigvalsh)))

    def vector_norm(x: Any, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
        a = pay(x)
        if a is None or a.dtype.kind not in "fc" or a.size == 0 or type(ord) not in (int, float):
            return None
        return _vector_norm(a, axis=_axes(axis), keepdims=keepdims, ord=ord)

    k.add("linalg_vector_norm", vector_norm)


def _finite_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (an SVD and what is made of it) returning its result, whether every output is
    finite, and whether its first input is not: JAX's SVD gives NaNs where LAPACK's did not
    converge, NumPy's ``LinAlgError``."""

    def checks(a: Any, *rest: Any, **static: Any) -> Any:
        out = fn(a, *rest, **static)
        outs = out if isinstance(out, tuple) else (out,)
        ok = jnp.all(jnp.stack([jnp.isfinite(o).all() for o in outs]))
        return out, ok, jnp.logical_not(jnp.isfinite(a).all())

    return checks


def _pinv_of(a: Any, rtol: Any) -> Any:
    """NumPy's ``pinv``: the singular values above ``rtol`` times the largest inverted, the
    others zero (``rtol`` an array: one per matrix of the stack)."""
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    cutoff = rtol[..., None] * jnp.max(s, axis=-1, keepdims=True)
    large = s > cutoff
    s_inv = jnp.where(large, 1 / jnp.where(large, s, 1), 0).astype(s.dtype)
    v = jnp.conj(jnp.swapaxes(vh, -1, -2))
    return jnp.matmul(v * s_inv[..., None, :], jnp.conj(jnp.swapaxes(u, -1, -2)))


def _rank_of(a: Any, rtol: Any) -> tuple[Any, Any, Any]:
    """The standard's ``matrix_rank``: how many singular values exceed ``rtol`` times the
    largest; with whether they are finite (a check, as ``_finite_outputs``)."""
    s = jnp.linalg.svdvals(a)
    tol = jnp.max(s, axis=-1, keepdims=True) * rtol[..., None]
    rank = jnp.sum(s > tol, axis=-1)
    return rank, jnp.isfinite(s).all(), jnp.logical_not(jnp.isfinite(a).all())


_svd = jax.jit(
    _finite_outputs(
        lambda a, *, full_matrices: tuple(jnp.linalg.svd(a, full_matrices=full_matrices))
    ),
    static_argnames=("full_matrices",),
)
_svdvals = jax.jit(_finite_outputs(jnp.linalg.svdvals))
_pinv = jax.jit(_finite_outputs(_pinv_of))
_rank = jax.jit(_rank_of)
_qr = jax.jit(lambda a, *, mode: tuple(jnp.linalg.qr(a, mode=mode)), static_argnames=("mode",))
_matrix_norm = jax.jit(jnp.linalg.matrix_norm, static_argnames=("keepdims", "ord"))
_matrix_norm_svd = jax.jit(
    _finite_outputs(jnp.linalg.matrix_norm), static_argnames=("keepdims", "ord")
)
_matrix_power = jax.jit(jnp.linalg.matrix_power, static_argnames=("n",))
_matrix_power_inv = jax.jit(_with_check(jnp.linalg.matrix_power), static_argnames=("n",))
_trace = jax.jit(jnp.linalg.trace, static_argnames=("offset", "dtype"))
_diagonal = jax.jit(jnp.linalg.diagonal, static_argnames=("offset",))
_cross = jax.jit(jnp.linalg.cross, static_argnames=("axis",))
_outer = jax.jit(jnp.linalg.outer)


def _factorized_dtypes(k: _Kernels) -> set[np.dtype[Any]]:
    """The dtypes whose factorizations JAX computes on the device: float32 and complex64
    everywhere; 64-bit ones only off a TPU (there JAX's float64 solve, inv and slogdet raise)."""
    kinds = {np.dtype("float32"), np.dtype("complex64")}
    return kinds if k.on_tpu else kinds | {np.dtype("float64"), np.dtype("complex128")}


_NORM_ORDS = (1, -1, 2, -2, math.inf, -math.inf, "fro", "nuc")


def _decompositions(k: _Kernels) -> None:
    """The SVD, QR and what is made of them, and the rest of the ``linalg`` extension."""
    pay = k.payload
    LinAlgError = np.linalg.LinAlgError  # noqa: N806  (NumPy's class)
    on = k.backend.name
    kinds = _factorized_dtypes(k)

    def matrices(x: Any) -> Any:
        a = pay(x)
        if a is None or a.dtype not in kinds or a.ndim < 2 or a.size == 0:
            return None
        return a

    def svd(x: Any, *, full_matrices: bool = True) -> Any:
        a = matrices(x)
        if a is None:
            return None
        out, ok, excused = _svd(a, full_matrices=bool(full_matrices))
        return checked(
            out, ok, LinAlgError, f"array_api::linalg_svd on {on}: SVD did not converge", excused
        )

    def svdvals(x: Any) -> Any:
        a = matrices(x)
        if a is None:
            return None
        out, ok, excused = _svdvals(a)
        why = f"array_api::linalg_svdvals on {on}: SVD did not converge"
        return checked(out, ok, LinAlgError, why, excused)

    def qr(x: Any, *, mode: str = "reduced") -> Any:
        a = matrices(x)
        return None if a is None or mode not in ("reduced", "complete") else _qr(a, mode=mode)

    def rtol_of(a: Any, rtol: Any) -> Any:
        """The standard's ``rtol`` as an array of ``a``'s real dtype (None where NumPy's
        kernel should say what is wrong with it)."""
        real = np.finfo(a.dtype).dtype
        if rtol is None:
            return np.asarray(max(a.shape[-2:]) * np.finfo(a.dtype).eps, real)
        if type(rtol) in (int, float):
            return np.asarray(rtol, real)
        r = pay(rtol)
        return r if r is not None and r.dtype == real else None

    def pinv(x: Any, *, rtol: Any = None) -> Any:
        a = matrices(x)
        r = None if a is None else rtol_of(a, rtol)
        if r is None:
            return None
        out, ok, excused = _pinv(a, r)
        why = f"array_api::linalg_pinv on {on}: SVD did not converge"
        return checked(out, ok, LinAlgError, why, excused)

    def matrix_rank(x: Any, *, rtol: Any = None) -> Any:
        a = matrices(x)
        r = None if a is None else rtol_of(a, rtol)
        if r is None:
            return None
        out, ok, excused = _rank(a, r)
        why = f"array_api::linalg_matrix_rank on {on}: SVD did not converge"
        return checked(out, ok, LinAlgError, why, excused)

    def matrix_norm(x: Any, *, keepdims: bool = False, ord: Any = "fro") -> Any:  # noqa: A002
        a = matrices(x)
        if a is None or type(ord) not in (int, float, str) or ord not in _NORM_ORDS:
            return None
        if ord not in (2, -2, "nuc"):
            return _matrix_norm(a, keepdims=bool(keepdims), ord=ord)
        out, ok, excused = _matrix_norm_svd(a, keepdims=bool(keepdims), ord=ord)
        why = f"array_api::linalg_matrix_norm on {on}: SVD did not converge"
        return checked(out, ok, LinAlgError, why, excused)

    def matrix_power(x: Any, n: int) -> Any:
        a = pay(x)
        if a is None or a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            return None
        if n >= 0:
            return _matrix_power(a, n=n) if a.dtype.kind in "iufc" else None
        if a.dtype not in kinds or a.size == 0:
            return None
        out, ok, excused = _matrix_power_inv(a, n=n)
        why = f"array_api::linalg_matrix_power on {on}: Singular matrix"
        return checked(out, ok, LinAlgError, why, excused)

    def trace(x: Any, *, offset: int = 0, dtype: Any = None) -> Any:
        a, d = pay(x), k.dtype_here(dtype, "linalg_trace")
        if a is None or d is False or a.ndim < 2 or a.dtype.kind not in "iufc":
            return None
        return _trace(a, offset=offset, dtype=d)

    def diagonal(x: Any, *, offset: int = 0) -> Any:
        a = pay(x)
        return None if a is None or a.ndim < 2 else _diagonal(a, offset=offset)

    def two(x1: Any, x2: Any) -> Any:
        a, b = pay(x1), pay(x2)
        if a is None or b is None or a.dtype != b.dtype or a.dtype.kind not in "iufc":
            return None
        return a, b

    def cross(x1: Any, x2: Any, *, axis: int = -1) -> Any:
        ab = two(x1, x2)
        if ab is None or min(ab[0].ndim, ab[1].ndim) == 0:
            return None
        if ab[0].shape[axis] != 3 or ab[1].shape[axis] != 3:
            return None
        return _cross(*ab, axis=axis)

    def outer(x1: Any, x2: Any) -> Any:
        ab = two(x1, x2)
        return None if ab is None or ab[0].ndim != 1 or ab[1].ndim != 1 else _outer(*ab)

    k.add("linalg_svd", svd)
    k.add("linalg_svdvals", svdvals)
    k.add("linalg_qr", qr)
    k.add("linalg_pinv", pinv)
    k.add("linalg_pinv.Tensor", pinv)
    k.add("linalg_matrix_rank", matrix_rank)
    k.add("linalg_matrix_rank.Tensor", matrix_rank)
    k.add("linalg_matrix_norm", matrix_norm)
    k.add("linalg_matrix_norm.Scalar", matrix_norm)
    k.add("linalg_matrix_power", matrix_power)
    k.add("linalg_trace", trace)
    k.add("linalg_diagonal", diagonal)
    k.add("linalg_cross", cross)
    k.add("linalg_outer", outer)
