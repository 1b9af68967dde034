"""The JAX backend's elementwise kernels: the standard's unary and binary functions (with their
scalar forms and in-place operators) and ``where``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._kernels_base import (
    _Kernels,
)

_UNARY: dict[str, tuple[Callable[[Any], Any], str]] = {
    # name: (jax function, the dtype kinds it serves)
    "abs": (jnp.abs, "iuf"),
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
    "sign": (jnp.sign, "if"),
    "signbit": (jnp.signbit, "f"),
    "sin": (jnp.sin, "f"),
    "sinh": (jnp.sinh, "f"),
    "sqrt": (jnp.sqrt, "f"),
    "square": (jnp.square, "iuf"),
    "tan": (jnp.tan, "f"),
    "tanh": (jnp.tanh, "f"),
    "trunc": (jnp.trunc, "f"),
    "bitwise_invert": (jnp.invert, "iub"),
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
}

_IN_PLACE = ("add", "subtract", "multiply", "divide", "pow", "bitwise_and", "bitwise_or",
             "bitwise_xor")  # fmt: skip
"""The binary functions whose in-place operators (``x += y``: ``array_api::add_``) run here."""

_where = jax.jit(jnp.where)


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
