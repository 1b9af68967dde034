"""Data type functions (the standard's chapter of that name). Only ``astype`` touches array data
and is an operator (``array_api::astype``); the others answer from dtypes alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._boxfall import Tensor
from . import _dtypes
from ._creation_functions import to_device
from ._helpers import ARRAY_TYPES, device_of, same_device
from ._registry import Op, dtype_name, register, requested


def _astype(x: Any, dtype: str, /, *, copy: bool = True, device: Any = None) -> Any:
    return x.astype(dtype, copy=copy)


OPS, _ = register(
    [
        Op(
            "astype(Tensor x, str dtype, *, bool copy=True, Device? device=None) -> Tensor",
            _astype,
            False,
        )
    ]
)


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """The operator ``array_api::astype``; with a ``device`` other than ``x``'s, ``x`` is
    first moved there (so the dtype is the one that device holds). A dtype the device lacks is
    a ``bf.DTypeError`` before ``x``'s values move (narrowed instead on a backend registered
    with ``narrow=True``)."""
    if device is None and isinstance(x, Tensor):
        name = _dtypes.held_name(x.device, dtype)
        if name is not None:
            # `copy` by keyword only where it is not the default: a keyword costs the call.
            if copy is True:
                return OPS["astype"](x, name)
            return OPS["astype"](x, name, copy=copy)
    if device is not None and not same_device(device, device_of(x)):
        x = to_device(x, device)
    return OPS["astype"](x, dtype_name(requested(x, dtype, "astype")), copy=copy)


def _dtype(x: Any) -> np.dtype:
    return x.dtype if isinstance(x, ARRAY_TYPES) else np.dtype(x)


def can_cast(from_: Any, to: Any, /) -> bool:
    """Whether the standard's promotion rules cast ``from_`` (a dtype or array) to ``to``."""
    return bool(np.can_cast(_dtype(from_), np.dtype(to), casting="safe"))


@dataclass(frozen=True)
class finfo_object:  # noqa: N801  (the standard's name)
    """``finfo``'s result: the standard's fields as Python numbers (NumPy's are NumPy
    scalars, which would make ``eps * x`` a 0-d CPU array beside a device array)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: Any


@dataclass(frozen=True)
class iinfo_object:  # noqa: N801
    """``iinfo``'s result: the standard's fields as Python ints."""

    bits: int
    max: int
    min: int
    dtype: Any


def finfo(type: Any, /) -> finfo_object:  # noqa: A002
    """Machine limits of a floating-point dtype (of its real part for a complex one)."""
    f = np.finfo(_dtype(type))
    return finfo_object(
        int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), f.dtype
    )


def iinfo(type: Any, /) -> iinfo_object:  # noqa: A002
    """Machine limits of an integer dtype."""
    i = np.iinfo(_dtype(type))
    return iinfo_object(int(i.bits), int(i.max), int(i.min), i.dtype)


_KINDS = {
    "bool": lambda d: d == _dtypes.bool,
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": lambda d: d.kind == "f",
    "complex floating": lambda d: d.kind == "c",
    "numeric": lambda d: d.kind in "iufc",
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind`` (a dtype, a kind name, or a tuple of them)."""
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; the kinds are {sorted(_KINDS)}")
        return bool(_KINDS[kind](np.dtype(dtype)))
    return np.dtype(dtype) == np.dtype(kind)


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype the standard's promotion gives the arguments (arrays, dtypes, Python scalars)."""
    args = [a.dtype if isinstance(a, ARRAY_TYPES) else a for a in arrays_and_dtypes]
    if not args:
        raise ValueError("result_type() needs at least one array or dtype")
    return np.result_type(*args)


__all__ = ["astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type"]
