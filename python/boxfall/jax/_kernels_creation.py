"""The JAX backend's creation kernels: arrays made on the device (``zeros``, ``full``,
``arange``, ``linspace``, the ``_like`` forms, ``asarray``), compiled per shape and dtype."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import boxfall as bf

from ._kernels_base import (
    _ARRAY_TYPE,
    _INT_RANGE,
    Kernel,
    _Kernels,
    exact,
)
from ._kernels_manipulation import _astype

# Creation, compiled per shape and dtype (as JAX's eager creation compiles per shape too); the
# fill value is an argument, so a new value compiles nothing.
_zeros = jax.jit(jnp.zeros, static_argnames=("shape", "dtype"))
_ones = jax.jit(jnp.ones, static_argnames=("shape", "dtype"))
_full = jax.jit(
    lambda fill_value, shape, dtype: jnp.full(shape, fill_value, dtype=dtype),
    static_argnames=("shape", "dtype"),
)
_arange = jax.jit(jnp.arange, static_argnames=("start", "stop", "step", "dtype"))
_eye = jax.jit(jnp.eye, static_argnames=("N", "M", "k", "dtype"))
_tril = jax.jit(jnp.tril, static_argnames=("k",))
_triu = jax.jit(jnp.triu, static_argnames=("k",))
_meshgrid = jax.jit(
    lambda *arrays, indexing: tuple(jnp.meshgrid(*arrays, indexing=indexing)),
    static_argnames=("indexing",),
)


@functools.partial(jax.jit, static_argnames=("num", "endpoint", "dtype"))
def _linspace(start: Any, step: Any, stop: Any, *, num: int, endpoint: bool, dtype: Any) -> Any:
    """NumPy's ``linspace``: ``start + i * step`` (``step`` worked out on the host in double
    precision, as NumPy does), the last value ``stop`` itself where ``endpoint``. The bounds
    are arguments: new bounds compile nothing."""
    y = jnp.arange(num, dtype=dtype) * jnp.asarray(step, dtype) + jnp.asarray(start, dtype)
    if endpoint and num > 1:
        y = y.at[-1].set(jnp.asarray(stop, dtype))
    return y


@functools.partial(jax.jit, static_argnames=("num", "dtype"))
def _float_arange(first: Any, delta: Any, *, num: int, dtype: Any) -> Any:
    """NumPy's floating ``arange``: ``first + i * delta``, ``first`` and ``delta`` the first
    value and the difference of the first two in ``dtype`` (NumPy's fill rule)."""
    return jnp.asarray(first, dtype) + jnp.arange(num, dtype=dtype) * jnp.asarray(delta, dtype)


def _creation(kern: _Kernels) -> None:
    pay, placed, target = kern.payload, kern.placed, kern.target

    def filled(name: str, fn: Callable[..., Any]) -> Kernel:
        def compute(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
            d, at = kern.dtype_here(dtype, name), target(device)
            if d is False or at is None:
                return None
            return placed(fn(shape=tuple(shape), dtype=d), at)

        return compute

    kern.add("zeros", filled("zeros", _zeros))
    kern.add("ones", filled("ones", _ones))
    kern.add("empty", filled("empty", _zeros))

    def scalar_fill(value: Any, d: Any) -> bool:
        t = type(value)
        if t is bool:
            return True
        if t is float:
            # a float into an integer dtype is NumPy's cast (1e10 as int64, then narrowed)
            return d is None or np.dtype(d).kind not in "iu"
        if t is not int:
            return False
        bounds = _INT_RANGE.get(np.dtype(d if d is not None else jnp.int_))
        return bounds is None or bounds[0] <= value <= bounds[1]

    def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
        d, at = kern.dtype_here(dtype, "full"), target(device)
        if d is False or at is None or not scalar_fill(fill_value, d):
            return None
        try:
            made = _full(fill_value, shape=tuple(shape), dtype=d)
        except OverflowError:
            # an int beyond JAX's weak int that the dtype holds (uint32 2**31); without a
            # dtype, NumPy's int64, which the device's narrowing checks
            if d is None:
                return None
            made = _full(exact(fill_value, d), shape=tuple(shape), dtype=d)
        return placed(made, at)

    kern.add("full", full)

    def eye(
        n_rows: int, n_cols: Any = None, *, k: int = 0, dtype: Any = None, device: Any = None
    ) -> Any:
        d, at = kern.dtype_here(dtype, "eye"), target(device)
        if d is False or at is None:
            return None
        return placed(_eye(n_rows, n_cols, k=k, dtype=d), at)

    def floating(dtype: Any, op: str, complex_: bool) -> Any:
        """The dtype a floating creation makes: ``dtype`` where given (False where the device
        lacks it or it is no floating dtype), else NumPy's default of the kind (float64,
        complex128) where the device holds it, else the 32-bit one."""
        if dtype is not None:
            d = kern.dtype_here(dtype, op)
            return d if d is not False and d.kind in "fc" else False
        wide, narrow = ("complex128", "complex64") if complex_ else ("float64", "float32")
        return np.dtype(wide) if np.dtype(wide) in kern.held else np.dtype(narrow)

    def float_arange(start: Any, stop: Any, step: Any, dtype: Any, at: Any) -> Any:
        # NumPy's floating arange: ceil((stop - start) / step) values (in double precision),
        # the first two made in the dtype, each next one `first + i * (second - first)`.
        if stop is None:
            start, stop = 0, start
        if not all(type(v) in (int, float) for v in (start, stop, step)) or step == 0:
            return None
        d = floating(dtype, "arange", False)
        if d is False or d.kind != "f":
            return None
        try:
            num = max(0, math.ceil((stop - start) / step))
        except (OverflowError, ValueError):  # an infinite or NaN bound: NumPy's error
            return None
        first = np.asarray(start, dtype=d)
        delta = np.asarray(start + step, dtype=d) - first
        return placed(_float_arange(float(first), float(delta), num=num, dtype=d), at)

    def arange(
        start: Any, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None
    ) -> Any:
        d, at = kern.dtype_here(dtype, "arange"), target(device)
        ints = type(start) is int and type(step) is int and type(stop) in (int, type(None))
        if d is False or at is None:
            return None
        if not ints or (d is not None and d.kind != "i"):
            return float_arange(start, stop, step, dtype, at)
        # JAX wraps a value its int type cannot hold (x64 off: `arange(2**40, 2**40 + 2)`
        # gave [0, 1]); NumPy's result, whose narrowing then raises OverflowError, is due.
        low, high = _INT_RANGE[
            d if d is not None else np.dtype("int32" if kern.narrow else "int64")
        ]
        first, end = (0, start) if stop is None else (start, stop)
        if step == 0 or not (low <= first <= high and low <= end <= high):
            return None
        return placed(_arange(start, stop, step, dtype=d), at)

    def linspace(
        start: Any,
        stop: Any,
        num: int,
        *,
        dtype: Any = None,
        device: Any = None,
        endpoint: bool = True,
    ) -> Any:
        # NumPy computes in float64 (complex128) and casts; so does this where the device
        # holds those, and in the 32-bit type, within its rounding, where it does not.
        at = target(device)
        kinds = (int, float, complex)
        if at is None or type(start) not in kinds or type(stop) not in kinds or num < 0:
            return None
        complex_ = complex in (type(start), type(stop))
        d = floating(dtype, "linspace", complex_)
        if d is False or (complex_ and d.kind != "c"):
            return None
        work = floating(None, "linspace", d.kind == "c")
        div = num - 1 if endpoint else num
        step = (stop - start) / div if div > 0 else 0.0
        y = _linspace(start, step, stop, num=num, endpoint=bool(endpoint), dtype=work)
        return placed(y if work == d else _astype(y, dtype=d), at)

    kern.add("arange", arange)
    kern.add("eye", eye)
    kern.add("linspace", linspace)

    def tri(fn: Callable[..., Any]) -> Kernel:
        def compute(x: Any, *, k: int = 0) -> Any:
            a = pay(x)
            return None if a is None or a.ndim < 2 else fn(a, k=k)

        return compute

    kern.add("tril", tri(_tril))
    kern.add("triu", tri(_triu))

    def meshgrid(arrays: Any, *, indexing: str = "xy") -> Any:
        found = [pay(t) for t in arrays]
        if not found or indexing not in ("xy", "ij"):
            return None
        if any(a is None or a.ndim != 1 for a in found):
            return None
        return _meshgrid(*found, indexing=indexing)

    kern.add("meshgrid", meshgrid)

    def like(name: str, fn: Callable[..., Any]) -> Kernel:
        def compute(x: Any, *, dtype: Any = None, device: Any = None) -> Any:
            a, d = pay(x), kern.dtype_here(dtype, name)
            if a is None or d is False or not kern.on_device(device):
                return None
            return kern.placed_like(fn(shape=a.shape, dtype=a.dtype if d is None else d), a)

        return compute

    def fill_fits(value: Any, d: Any) -> bool:
        """Whether ``full(..., value, dtype=d)`` is the same in JAX as in NumPy: a bool in
        any dtype, an int the integer dtype holds or any floating one, a float in a floating
        dtype, a complex in a complex one (NumPy's own rule, or its error, for the rest)."""
        t, kind = type(value), d.kind
        if t is bool:
            return True
        if t is int:
            bounds = _INT_RANGE.get(d)
            return kind in "fcV" or (bounds is not None and bounds[0] <= value <= bounds[1])
        if t is float:
            return kind in "fcV"
        return t is complex and kind == "c"

    def full_like(x: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
        a, d = pay(x), kern.dtype_here(dtype, "full_like")
        if a is None or d is False or not kern.on_device(device):
            return None
        d = a.dtype if d is None else d
        if not fill_fits(fill_value, d):
            return None
        return kern.placed_like(_full(fill_value, shape=a.shape, dtype=d), a)

    kern.add("full_like", full_like)
    kern.add("zeros_like", like("zeros_like", _zeros))
    kern.add("ones_like", like("ones_like", _ones))
    kern.add("empty_like", like("empty_like", _zeros))

    asarray_op = bf.ops.array_api.asarray.default
    host_asarray = asarray_op  # called with device=None: the CPU kernel, on host data

    def asarray(obj: Any, *, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
        # A jax.Array is wrapped as it is (immutable: sharing it is a copy's semantics), put on
        # this backend's device if it is elsewhere. Host data (a NumPy array, a list) is made
        # by the CPU kernel and put on the device by the backend's from_cpu: a transfer the
        # user asked for (`bf.metrics.transfers()`, with its bytes), not a CPU fallback, which
        # no kernel of the device could avoid. A tensor takes the CPU fallback's way.
        at = target(device)
        if at is None or isinstance(obj, bf.Tensor):
            return None
        if type(obj) is not _ARRAY_TYPE:
            host = host_asarray(obj, dtype=dtype, device=None, copy=copy)
            index = kern.devices.index(at) if at in kern.devices else 0
            return kern.backend.tensor(host, index, op=asarray_op).payload
        d = kern.dtype_here(dtype, "asarray")  # warned once for the operator, not a call
        if d is False or (d is not None and d != obj.dtype):
            return None
        if obj.devices() != {at}:
            return jax.device_put(obj, at)
        return obj

    kern.add("asarray", asarray)

    dlpack_op = bf.ops.array_api.from_dlpack.default

    def from_dlpack(x: Any, *, device: Any = None, copy: Any = None) -> Any:
        # As asarray: a jax.Array is wrapped (put on the device named), host memory is read
        # by the CPU kernel and put on the device by from_cpu, a transfer.
        at = target(device)
        if at is None or isinstance(x, bf.Tensor):
            return None
        if type(x) is not _ARRAY_TYPE:
            host = dlpack_op(x, device=None, copy=copy)
            index = kern.devices.index(at) if at in kern.devices else 0
            return kern.backend.tensor(host, index, op=dlpack_op).payload
        return x if x.devices() == {at} else jax.device_put(x, at)

    kern.add("from_dlpack", from_dlpack)
