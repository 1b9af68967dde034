"""The JAX backend's kernels of the standard's statistical and utility reductions and cumulative
functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._kernels_base import (
    Kernel,
    _axes,
    _jit,
    _Kernels,
    _with_extension,
)

_REDUCTIONS: dict[str, tuple[Callable[..., Any], str]] = {
    # name: (jax function of (x, axis, keepdims), kinds); empty inputs go to NumPy
    "max": (jnp.max, "biuf"),
    "min": (jnp.min, "biuf"),
    "all": (jnp.all, "biufc"),
    "any": (jnp.any, "biufc"),
    "mean": (jnp.mean, "fc"),
}

_cumulative_sum = jax.jit(jnp.cumulative_sum, static_argnames=("axis", "dtype", "include_initial"))
_cumulative_prod = jax.jit(
    jnp.cumulative_prod, static_argnames=("axis", "dtype", "include_initial")
)
_diff = jax.jit(
    lambda a, prepend, append, *, n, axis: jnp.diff(a, n, axis, prepend, append),
    static_argnames=("n", "axis"),
)


def _statistics(k: _Kernels) -> None:
    pay = k.payload

    def reduction(fn: Callable[..., Any], kinds: str) -> Kernel:
        def compute(x: Any, *, axis: Any = None, keepdims: bool = False) -> Any:
            a = pay(x)
            if a is None or a.size == 0 or a.dtype.kind not in kinds:
                return None
            return fn(a, axis=_axes(axis), keepdims=keepdims)

        return compute

    for name, (fn, kinds) in _REDUCTIONS.items():
        k.add(name, reduction(_jit(fn, "axis", "keepdims"), _with_extension(kinds)))

    def accumulate(name: str, fn: Callable[..., Any]) -> Kernel:
        def compute(x: Any, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
            a, d = pay(x), k.dtype_here(dtype, name)
            # Integer sums accumulate in the default integer dtype, in JAX as in the standard
            # (int64 with x64, else int32, what the device's narrowing gives NumPy's result).
            if a is None or d is False or a.dtype.kind not in "biufc":
                return None
            return fn(a, axis=_axes(axis), dtype=d, keepdims=keepdims)

        return compute

    k.add("sum", accumulate("sum", _jit(jnp.sum, "axis", "dtype", "keepdims")))
    k.add("prod", accumulate("prod", _jit(jnp.prod, "axis", "dtype", "keepdims")))

    def spread(fn: Callable[..., Any]) -> Kernel:
        def compute(
            x: Any, *, axis: Any = None, correction: Any = 0, keepdims: bool = False
        ) -> Any:
            a = pay(x)
            if a is None or a.size == 0 or a.dtype.kind != "f":
                return None
            return fn(a, axis=_axes(axis), ddof=correction, keepdims=keepdims)

        return compute

    k.add("std", spread(_jit(jnp.std, "axis", "ddof", "keepdims")))
    k.add("var", spread(_jit(jnp.var, "axis", "ddof", "keepdims")))

    def arg(fn: Callable[..., Any]) -> Kernel:
        def compute(x: Any, *, axis: Any = None, keepdims: bool = False) -> Any:
            a = pay(x)
            if a is None or a.size == 0 or a.dtype.kind not in "biuf":
                return None
            return fn(a, axis=axis, keepdims=keepdims)

        return compute

    k.add("argmax", arg(_jit(jnp.argmax, "axis", "keepdims")))
    k.add("argmin", arg(_jit(jnp.argmin, "axis", "keepdims")))

    def cumulative(name: str, fn: Callable[..., Any]) -> Kernel:
        def compute(
            x: Any, *, axis: Any = None, dtype: Any = None, include_initial: bool = False
        ) -> Any:
            a, d = pay(x), k.dtype_here(dtype, name)
            if a is None or d is False or a.dtype.kind not in "fc":
                return None
            if axis is None and a.ndim != 1:
                return None
            return fn(a, axis=axis, dtype=d, include_initial=include_initial)

        return compute

    k.add("cumulative_sum", cumulative("cumulative_sum", _cumulative_sum))
    k.add("cumulative_prod", cumulative("cumulative_prod", _cumulative_prod))

    def diff(x: Any, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Any:
        a = pay(x)
        if a is None or a.dtype.kind not in "iufc" or a.ndim == 0 or n < 0:
            return None
        ends = [None if e is None else pay(e) for e in (prepend, append)]
        for given, e in zip((prepend, append), ends, strict=True):
            if given is not None and (e is None or e.dtype != a.dtype or e.ndim != a.ndim):
                return None
        return _diff(a, *ends, n=n, axis=axis)

    k.add("diff", diff)
