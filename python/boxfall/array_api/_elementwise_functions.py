"""Element-wise functions (the standard's chapter of that name), as data.

Each unary function is one operator ``array_api::<name>(Tensor x) -> Tensor``. Each binary
function is three overloads, so that a Python scalar on either side binds (the standard's
2024.12 signatures take ``array | int | float | complex | bool`` there):

- ``array_api::<name>(Tensor x1, Tensor x2) -> Tensor``
- ``array_api::<name>.Tensor_Scalar(Tensor x1, Scalar x2) -> Tensor``
- ``array_api::<name>.Scalar_Tensor(Scalar x1, Tensor x2) -> Tensor``

A kernel computes with NumPy's weak Python scalars (NEP 50), so ``x + 1`` keeps ``x.dtype`` as
the standard says. A complex Python scalar is no ``Scalar``: it becomes a 0-d array of the
array argument's dtype on its device. The functions the array object's in-place operators use
are ``array_api::<name>_(Tensor(a!) x1, Tensor x2) -> Tensor(a!)`` and
``<name>_.Scalar(Tensor(a!) x1, Scalar x2) -> Tensor(a!)``: the result is written into ``x1``,
in ``x1``'s dtype (NumPy's ``same_kind`` casting refuses ``int_array /= 2``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

import numpy as np

from .. import _boxfall
from ._creation_functions import asarray, full_like, scalar_array
from ._helpers import ARRAY_TYPES, SCALAR_TYPES, device_of
from ._registry import Op, register


def _expm1(x: Any, /) -> Any:
    """NumPy's ``expm1``; for complex ``x``, ``exp(x) - 1`` where ``x`` is not finite and
    ``+0`` real parts at zero (the standard's special cases, where NumPy gives NaN, -0)."""
    if not np.iscomplexobj(x):
        return np.expm1(x)
    x = np.asarray(x)
    with np.errstate(invalid="ignore", over="ignore"):
        result = np.array(np.expm1(x))
        infinite = ~np.isfinite(x)
        if np.any(infinite):
            result[infinite] = np.exp(x[infinite]) - 1
    result.real[x == 0] = 0.0
    return result


def _tanh(x: Any, /) -> Any:
    """NumPy's ``tanh``; for complex ``x`` with an infinite real part and a finite imaginary
    one, ``±1 + 0j`` with the imaginary zero's sign that of ``imag(x)`` (the standard's special
    case, where NumPy gives the sign of ``sin(2 imag(x))``)."""
    if not np.iscomplexobj(x):
        return np.tanh(x)
    x = np.asarray(x)
    result = np.array(np.tanh(x))
    edge = np.isinf(x.real) & np.isfinite(x.imag)
    result.imag[edge] = np.copysign(0.0, x.imag[edge])
    return result


def _floor_divide(x1: Any, x2: Any, /, out: Any = None) -> Any:
    """NumPy's ``floor_divide``, but ``floor(x1 / x2)`` where one of two floats is infinite and
    the other finite (the standard's special cases: ``inf // 2`` is ``inf``, not NumPy's NaN,
    ``1 // -inf`` is ``-0``, not ``-1``)."""
    floats = np.result_type(x1, x2).kind == "f"
    one_infinite = floats and ((np.isinf(x1) & np.isfinite(x2)) | (np.isfinite(x1) & np.isinf(x2)))
    if not np.any(one_infinite):
        return np.floor_divide(x1, x2, out=out)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.where(one_infinite, np.floor(np.divide(x1, x2)), np.floor_divide(x1, x2))
    if out is None:
        return result
    np.copyto(out, result, casting="same_kind")
    return out


UNARY: dict[str, Callable[[Any], Any]] = {
    "abs": np.abs,
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "bitwise_invert": np.invert,
    "ceil": np.ceil,
    "conj": np.conj,
    "cos": np.cos,
    "cosh": np.cosh,
    "exp": np.exp,
    "expm1": _expm1,
    "floor": np.floor,
    "imag": np.imag,
    "isfinite": np.isfinite,
    "isinf": np.isinf,
    "isnan": np.isnan,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": np.log10,
    "logical_not": np.logical_not,
    "negative": np.negative,
    "positive": np.positive,
    "real": np.real,
    "reciprocal": np.reciprocal,
    "round": np.round,
    "sign": np.sign,
    "signbit": np.signbit,
    "sin": np.sin,
    "sinh": np.sinh,
    "square": np.square,
    "sqrt": np.sqrt,
    "tan": np.tan,
    "tanh": _tanh,
    "trunc": np.trunc,
}
"""Unary functions: the standard's name -> the NumPy function that computes it."""

BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "atan2": np.arctan2,
    "bitwise_and": np.bitwise_and,
    "bitwise_left_shift": np.left_shift,
    "bitwise_or": np.bitwise_or,
    "bitwise_right_shift": np.right_shift,
    "bitwise_xor": np.bitwise_xor,
    "copysign": np.copysign,
    "divide": np.divide,
    "equal": np.equal,
    "floor_divide": _floor_divide,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "hypot": np.hypot,
    "less": np.less,
    "less_equal": np.less_equal,
    "logaddexp": np.logaddexp,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "multiply": np.multiply,
    "nextafter": np.nextafter,
    "not_equal": np.not_equal,
    "pow": np.power,
    "remainder": np.remainder,
    "subtract": np.subtract,
}
"""Binary functions: the standard's name -> the NumPy ufunc that computes it."""

IN_PLACE = (
    "add",
    "subtract",
    "multiply",
    "divide",
    "floor_divide",
    "pow",
    "remainder",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
)
"""The binary functions with an in-place operator on the array object (``x += y``)."""


def _unary_kernel(f: Callable[[Any], Any], name: str) -> Callable[..., Any]:
    def kernel(x: Any, /) -> Any:
        return f(x)

    kernel.__name__ = name
    kernel.__doc__ = f"NumPy's ``{f.__name__}``." if isinstance(f, np.ufunc) else f.__doc__
    return kernel


def _in_place_kernel(f: Any) -> Callable[..., Any]:
    def kernel(x1: Any, x2: Any, /) -> Any:
        f(x1, x2, out=x1)
        return x1

    return kernel


def _clip(x: Any, /, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    if min is None and max is None:
        return np.array(x, copy=True)
    return np.clip(x, min, max).astype(x.dtype, copy=False)


def _rows() -> list[Op]:
    rows = [Op(f"{n}(Tensor x) -> Tensor", _unary_kernel(f, n)) for n, f in UNARY.items()]
    for n, f in BINARY.items():
        # The ufunc itself: boxfall calls a kernel with the schema's two positional arguments,
        # as a Python function around it did, one Python frame a call sooner.
        k = f
        rows += [
            Op(f"{n}(Tensor x1, Tensor x2) -> Tensor", k, public=False),
            Op(f"{n}.Tensor_Scalar(Tensor x1, Scalar x2) -> Tensor", k, public=False),
            Op(f"{n}.Scalar_Tensor(Scalar x1, Tensor x2) -> Tensor", k, public=False),
        ]
    for n in IN_PLACE:
        k = _in_place_kernel(BINARY[n])
        rows += [
            Op(f"{n}_(Tensor(a!) x1, Tensor x2) -> Tensor(a!)", k, public=False),
            Op(f"{n}_.Scalar(Tensor(a!) x1, Scalar x2) -> Tensor(a!)", k, public=False),
        ]
    rows += [
        Op("clip(Tensor x, Tensor? min=None, Tensor? max=None) -> Tensor", _clip, public=False),
        Op(
            "clip.Scalar(Tensor x, Scalar? min=None, Scalar? max=None) -> Tensor",
            _clip,
            public=False,
        ),
    ]
    return rows


OPS, _public = register(_rows())


_INT64 = (-(1 << 63), (1 << 63) - 1)

COMPARISONS = {
    # name: (x < every value of the dtype, x > every value) -> the result, for `array op x`
    "equal": (False, False),
    "not_equal": (True, True),
    "less": (False, True),
    "less_equal": (False, True),
    "greater": (True, False),
    "greater_equal": (True, False),
}
"""The comparisons, with their constant result against an int outside the array's dtype."""

_REFLECTED = {"less": "greater", "less_equal": "greater_equal", "greater": "less"}
_REFLECTED |= {"greater_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}


_FLOAT_LOOPS_ONLY = frozenset(("divide", "atan2", "hypot", "copysign", "logaddexp"))
"""The binary functions NumPy computes in floating point for any operands: an int of any
magnitude beside an integer array is a float to them (``int32 / 2**64`` is float64), never an
``OverflowError``."""


def wide_int(name: str, array: Any, value: int, reflected: bool = False) -> tuple[str, Any]:
    """How ``array <name> value`` (``value <name> array`` if ``reflected``) computes with a
    Python int that fits no ``Scalar`` (64-bit signed), as NumPy 2 does: ``("scalar", v)``, a
    float array, or a function of floating loops only, takes it as a float; ``("array", a)``,
    an int the array's dtype holds (``2**63`` for uint64) as a 0-d array of that dtype;
    ``("result", r)``, a comparison with an int outside the array's dtype, whose result is the
    same for every element. Otherwise the int fits no dtype of the operation: an
    ``OverflowError``, as in NumPy."""
    dtype = np.dtype(array.dtype)
    if dtype.kind in "fc" or name in _FLOAT_LOOPS_ONLY:
        return ("scalar", float(value))
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    if info is not None and info.min <= value <= info.max:
        return ("array", scalar_array(value, array))
    if name in COMPARISONS:
        op = _REFLECTED[name] if reflected else name
        below = value < (info.min if info is not None else 0)
        result = COMPARISONS[op][0 if below else 1]
        return ("result", full_like(array, result, dtype=np.dtype(bool)))
    what = np.result_type(dtype, 0)
    raise OverflowError(f"Python integer {value} out of bounds for {what} (array_api::{name})")


def _is_wide(value: Any) -> TypeGuard[int]:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not (_INT64[0] <= value <= _INT64[1])
    )


def complex_array(value: complex, like: Any) -> Any:
    """A complex Python scalar beside an array: a 0-d array of NumPy 2's result dtype
    (``complex128`` beside bool, integer and float64 arrays, ``complex64`` beside float32)."""
    dtype = np.result_type(np.dtype(like.dtype), value)
    return asarray(value, dtype=dtype, device=device_of(like))


def _binary_function(name: str) -> Callable[..., Any]:
    both, right, left = OPS[name], OPS[f"{name}.Tensor_Scalar"], OPS[f"{name}.Scalar_Tensor"]

    def fn(x1: Any, x2: Any, /) -> Any:
        # NumPy's scalars (a 0-d array's items, `a[()]`) are 0-d arrays here, as in NumPy.
        if isinstance(x1, np.generic):
            x1 = np.asarray(x1)
        if isinstance(x2, np.generic):
            x2 = np.asarray(x2)
        if isinstance(x1, ARRAY_TYPES):
            if isinstance(x2, ARRAY_TYPES):
                return both(x1, x2)
            if isinstance(x2, SCALAR_TYPES):
                if _is_wide(x2):
                    how, v = wide_int(name, x1, x2)
                    return (
                        right(x1, v) if how == "scalar" else v if how == "result" else both(x1, v)
                    )
                return right(x1, x2)
            if isinstance(x2, complex):
                return both(x1, complex_array(x2, x1))
        elif isinstance(x2, ARRAY_TYPES):
            if isinstance(x1, SCALAR_TYPES):
                if _is_wide(x1):
                    how, v = wide_int(name, x2, x1, reflected=True)
                    return left(v, x2) if how == "scalar" else v if how == "result" else both(v, x2)
                return left(x1, x2)
            if isinstance(x1, complex):
                return both(complex_array(x1, x2), x2)
        raise TypeError(
            f"{name}() takes arrays or an array and a Python scalar, "
            f"not {type(x1).__name__} and {type(x2).__name__}"
        )

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "boxfall.array_api"
    fn.__doc__ = (
        f"The operator ``{both.name}`` (``{both.schema}``), or its ``Tensor_Scalar`` and "
        f"``Scalar_Tensor`` overloads for a Python scalar; NumPy's "
        f"``{BINARY[name].__name__.lstrip('_')}``."
    )
    # Two arrays, or an array and a plain scalar, go to the overload from Rust (no Python
    # frame); `fn` serves the rest.
    return _boxfall.binary_function(both, right, left, fn)


def clip(x: Any, /, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    """The operator ``array_api::clip`` (``clip.Scalar`` when the bounds are Python scalars);
    the result keeps ``x``'s dtype."""
    bounds_are_scalars = all(b is None or isinstance(b, SCALAR_TYPES) for b in (min, max))
    if bounds_are_scalars:
        return OPS["clip.Scalar"](x, min, max)
    lo = scalar_array(min, x) if isinstance(min, (*SCALAR_TYPES, complex)) else min
    hi = scalar_array(max, x) if isinstance(max, (*SCALAR_TYPES, complex)) else max
    return OPS["clip"](x, lo, hi)


globals().update(_public)
globals().update({n: _binary_function(n) for n in BINARY})

__all__ = sorted([*UNARY, *BINARY, "clip"])
