"""The JAX backend's elementwise kernels: the standard's unary and binary functions (with their
scalar forms and in-place operators) and ``where``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import boxfall as bf

from ._kernels_base import _Kernels, exact, scalar_fits


def _negative(v: Any) -> Any:
    """Whether ``v`` (no NaN) has its sign bit set, ``-0.0`` included: without ``signbit``,
    whose float64 form a TPU does not compile (x64 on)."""
    return (v < 0) | ((v == 0) & (1 / v < 0))


def _zero(negative: Any, like: Any) -> Any:
    """A zero of ``like``'s dtype, negative where ``negative``."""
    zero = jnp.zeros_like(like)
    return jnp.where(negative, -zero, zero)


def _divmod(a: Any, b: Any) -> tuple[Any, Any]:
    """NumPy's floating ``divmod`` (``npy_divmod``): the floor quotient and the remainder with
    the divisor's sign, each zero signed as NumPy signs it (``-0.0 // 1`` is ``-0``; ``1 % -1``
    is ``-0``), where JAX's ``floor_divide`` and ``remainder`` give ``+0``. A zero divisor is
    the caller's (NumPy's own rule there)."""
    mod = jnp.fmod(a, b)
    div = (a - mod) / b
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    moved = jnp.where(fix, mod + b, mod)
    div = jnp.where(fix, div - 1, div)
    # mod is 0 only for a finite, nonzero b: the zero takes b's sign
    moved = jnp.where(mod == 0, _zero(b < 0, mod), moved)
    floor = jnp.floor(div)
    floor = jnp.where(div - floor > 0.5, floor + 1, floor)
    # a zero quotient takes the sign of a / b: a sign of its own where a is a zero or b infinite
    ratio = a / b
    negative = (ratio < 0) | ((ratio == 0) & (_negative(a) != _negative(b)))
    quotient = jnp.where(div != 0, floor, _zero(negative, div))
    return quotient, moved


def _abs(x: Any) -> Any:
    """``|x|``; of a complex ``x`` with an infinite part, ``inf`` where the other is NaN too
    (NumPy's ``hypot`` and the standard's special case; XLA's gives NaN)."""
    out = jnp.abs(x)
    if jnp.iscomplexobj(x):
        out = jnp.where(jnp.isinf(x.real) | jnp.isinf(x.imag), jnp.inf, out).astype(out.dtype)
    return out


def _sign(x: Any) -> Any:
    """NumPy's ``sign``: ``+0`` for either zero (XLA's keeps ``-0``)."""
    return jnp.where(x == 0, jnp.zeros_like(x), jnp.sign(x))


def _floor_divide(x1: Any, x2: Any) -> Any:
    """``x1 // x2`` as boxfall's CPU kernel computes it: NumPy's, so an integer division by
    zero is 0 (XLA's is -1), and ``floor(x1 / x2)`` where one of two floats is infinite and
    the other finite (the standard's special cases: ``inf // 2`` is ``inf``, not NaN)."""
    dtype = jnp.result_type(x1, x2)
    if not jnp.issubdtype(dtype, jnp.floating):
        return jnp.where(x2 == 0, jnp.zeros((), dtype), jnp.floor_divide(x1, x2))
    a, b = jnp.asarray(x1, dtype), jnp.asarray(x2, dtype)
    ratio = a / b
    one_infinite = (jnp.isinf(a) & jnp.isfinite(b)) | (jnp.isfinite(a) & jnp.isinf(b))
    quotient = jnp.where(one_infinite, jnp.floor(ratio), _divmod(a, b)[0])
    return jnp.where(b == 0, ratio, quotient)


def _remainder(x1: Any, x2: Any) -> Any:
    """NumPy's ``x1 % x2``: for floats the remainder of ``npy_divmod`` (a zero signed as the
    divisor), ``fmod`` where ``x2`` is zero (NaN); for integers JAX's, which is NumPy's (0 for
    a division by zero)."""
    dtype = jnp.result_type(x1, x2)
    if not jnp.issubdtype(dtype, jnp.floating):
        return jnp.remainder(x1, x2)
    a, b = jnp.asarray(x1, dtype), jnp.asarray(x2, dtype)
    return jnp.where(b == 0, jnp.fmod(a, b), _divmod(a, b)[1])


# A TPU's floating remainder is no IEEE fmod (there 1 // 0.1 is 10 where NumPy's is 9, and
# x % inf is NaN): its floating floor_divide and remainder stay with the CPU fallback (the
# process's JAX backend decides, as a graph's program runs on it too).
_DIVMOD_KINDS = "iu" if jax.default_backend() == "tpu" else "iuf"

_UNARY: dict[str, tuple[Callable[[Any], Any], str]] = {
    # name: (jax function, the dtype kinds it serves)
    "abs": (_abs, "iufc"),
    "acos": (jnp.arccos, "f"),
    "acosh": (jnp.arccosh, "f"),
    "asin": (jnp.arcsin, "f"),
    "asinh": (jnp.arcsinh, "f"),
    "atan": (jnp.arctan, "f"),
    "atanh": (jnp.arctanh, "f"),
    "ceil": (jnp.ceil, "f"),
    "cos": (jnp.cos, "f"),
    "cosh": (jnp.cosh, "f"),
    "exp": (jnp.exp, "f"),
    "expm1": (jnp.expm1, "f"),
    "floor": (jnp.floor, "f"),
    "isfinite": (jnp.isfinite, "f"),
    "isinf": (jnp.isinf, "f"),
    "isnan": (jnp.isnan, "f"),
    "log": (jnp.log, "f"),
    "log1p": (jnp.log1p, "f"),
    "log2": (jnp.log2, "f"),
    "log10": (jnp.log10, "f"),
    "logical_not": (jnp.logical_not, "b"),
    "negative": (jnp.negative, "iuf"),
    "positive": (jnp.positive, "iuf"),
    "round": (jnp.round, "f"),
    "sign": (_sign, "if"),
    "signbit": (jnp.signbit, "f"),
    "sin": (jnp.sin, "f"),
    "sinh": (jnp.sinh, "f"),
    "sqrt": (jnp.sqrt, "f"),
    "square": (jnp.square, "iuf"),
    "tan": (jnp.tan, "f"),
    "tanh": (jnp.tanh, "f"),
    "trunc": (jnp.trunc, "f"),
    "bitwise_invert": (jnp.invert, "iub"),
    "reciprocal": (jnp.reciprocal, "f"),
    "conj": (jnp.conj, "iufc"),
    "real": (jnp.real, "fc"),
    "imag": (jnp.imag, "fc"),
}

BINARY: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "add": (jnp.add, "iufc"),
    "subtract": (jnp.subtract, "iufc"),
    "multiply": (jnp.multiply, "iufc"),
    "divide": (jnp.divide, "fc"),
    "pow": (jnp.power, "fc"),
    "maximum": (jnp.maximum, "iuf"),
    "minimum": (jnp.minimum, "iuf"),
    "atan2": (jnp.arctan2, "f"),
    "hypot": (jnp.hypot, "f"),
    "copysign": (jnp.copysign, "f"),
    "logaddexp": (jnp.logaddexp, "f"),
    "equal": (jnp.equal, "biufc"),
    "not_equal": (jnp.not_equal, "biufc"),
    "less": (jnp.less, "iuf"),
    "less_equal": (jnp.less_equal, "iuf"),
    "greater": (jnp.greater, "iuf"),
    "greater_equal": (jnp.greater_equal, "iuf"),
    "logical_and": (jnp.logical_and, "b"),
    "logical_or": (jnp.logical_or, "b"),
    "logical_xor": (jnp.logical_xor, "b"),
    "bitwise_and": (jnp.bitwise_and, "iub"),
    "bitwise_or": (jnp.bitwise_or, "iub"),
    "bitwise_xor": (jnp.bitwise_xor, "iub"),
    "floor_divide": (_floor_divide, _DIVMOD_KINDS),
    "remainder": (_remainder, _DIVMOD_KINDS),
    # A shift by the width or more (or a negative one) is 0, or -1 for a negative x1 shifted
    # right: XLA's rule and NumPy's alike.
    "bitwise_left_shift": (jnp.left_shift, "iu"),
    "bitwise_right_shift": (jnp.right_shift, "iu"),
    "nextafter": (jnp.nextafter, "f"),
}

_IN_PLACE = ("add", "subtract", "multiply", "divide", "pow", "bitwise_and", "bitwise_or",
             "bitwise_xor", "floor_divide", "remainder", "bitwise_left_shift",
             "bitwise_right_shift")  # fmt: skip
"""The binary functions whose in-place operators (``x += y``: ``array_api::add_``) run here."""

_where = jax.jit(jnp.where)
_clip = jax.jit(jnp.clip)

SCALAR_STEPS: dict[str, tuple[Callable[..., Any], str, int]] = {
    # operator: (its JAX function, the kinds of the tensor its traced scalars meet, that
    # tensor's position): scalar overloads beside BINARY's that a graph's program computes with
    # the scalar a traced input (floating tensors only: an int's range is not known there)
    "array_api::where.Tensor_Scalar": (jnp.where, "fV", 1),
    "array_api::where.Scalar_Tensor": (jnp.where, "fV", 2),
    "array_api::clip.Scalar": (jnp.clip, "fV", 0),
}


def _elementwise(k: _Kernels) -> None:
    for name, (one, kinds) in _UNARY.items():
        k.unary(name, one, kinds)
    for name, (two, kinds) in BINARY.items():
        k.binary(name, two, kinds)
    for name in _IN_PLACE:
        two, kinds = BINARY[name]
        k.in_place(name, two, kinds)

    pay = k.payload

    def where(condition: Any, x1: Any, x2: Any) -> Any:
        c, a, b = pay(condition), pay(x1), pay(x2)
        if c is None or a is None or b is None or c.dtype != bool or a.dtype != b.dtype:
            return None
        return _where(c, a, b)

    k.add("where", where)

    def where_scalar(condition: Any, x1: Any, x2: Any) -> Any:
        # NumPy's weak scalar: the array's dtype where the scalar fits it (exact: a 0-d
        # array of that dtype, so a new value compiles nothing)
        c = pay(condition)
        array, scalar = (x1, x2) if type(x2) is not bf.Tensor else (x2, x1)
        a = pay(array)
        if c is None or a is None or c.dtype != bool or not scalar_fits(a.dtype, scalar, "biufV"):
            return None
        s = exact(scalar, a.dtype)
        return _where(c, a, s) if array is x1 else _where(c, s, a)

    k.add("where.Tensor_Scalar", where_scalar)
    k.add("where.Scalar_Tensor", where_scalar)

    def clip(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
        a = pay(x)
        if a is None or a.dtype.kind not in "iufV":
            return None
        bounds = [None if v is None else pay(v) for v in (min, max)]
        if any(
            v is not None and (b is None or b.dtype != a.dtype)
            for v, b in zip((min, max), bounds, strict=True)
        ):
            return None
        if min is None and max is None:
            return a  # a copy: a jax.Array is immutable
        out = _clip(a, *bounds)
        # NumPy broadcasts the bounds with x; the standard keeps x's shape: NumPy's to say
        return out if out.shape == a.shape else None

    def clip_scalar(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
        a = pay(x)
        if a is None or a.dtype.kind not in "iufV":
            return None
        if any(v is not None and not scalar_fits(a.dtype, v, "iufV") for v in (min, max)):
            return None
        if min is None and max is None:
            return a
        return _clip(a, *(None if v is None else exact(v, a.dtype) for v in (min, max)))

    k.add("clip", clip)
    k.add("clip.Scalar", clip_scalar)
