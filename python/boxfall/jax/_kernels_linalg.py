"""The JAX backend's linear algebra kernels: products, the decompositions JAX holds on the
device, norms."""

from __future__ import annotations

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

    # The decompositions JAX holds on the device: float32 and complex64 everywhere; 64-bit
    # ones only off a TPU (there JAX's float64 solve, inv and slogdet raise).
    linalg_kinds: set[np.dtype[Any]] = {np.dtype("float32"), np.dtype("complex64")}
    if not k.on_tpu:
        linalg_kinds |= {np.dtype("float64"), np.dtype("complex128")}

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
