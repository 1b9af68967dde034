"""The table that registers itself: every chapter of ``boxfall.array_api`` lists its functions
as :class:`Op` rows (a schema in PyTorch's language beside its NumPy CPU kernel), and
:func:`register` defines each as the operator ``array_api::<name>``, registers the kernel for
``CPU`` and builds the public function of the namespace.

One ``bf.Library("array_api", "DEF")`` holds every registration, kept for the life of the
process, so dispatch tables, counters, the fallback policy and ``lib.impl(..., "Accel")`` of
another library apply to these operators as to any other.

Conventions of the schemas (the standard's types in PyTorch's language):

- arrays are ``Tensor``; Python scalars are ``Scalar`` (int, float or bool; complex scalars
  become 0-d arrays of the other argument's dtype, see ``_elementwise_functions``);
- ``axis`` is ``int[1]?`` (an int or a tuple of ints, or None), ``shape`` is ``int[1]`` (an int or
  a tuple);
- ``dtype`` is ``str?``: the operator takes the dtype's name (``"float32"``), which every NumPy
  kernel reads as a dtype and which names every dtype of the standard (as the core's
  ``ScalarType`` and Native's host memory do); the public functions take dtype objects and
  pass their names;
- ``device`` is ``Device?``: a call with no array argument dispatches on it (c10's
  BackendSelect), and a backend's CPU fallback rewrites it to the CPU for the kernel;
- every operator is functional (no ``Tensor(a)`` view annotation: the standard leaves aliasing
  unspecified, and ``cpu_fallback`` refuses view operators); the in-place forms that the array
  object's ``x += y`` uses are ``array_api::<name>_`` with a ``Tensor(a!)`` first argument.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _boxfall
from .._boxfall import Library, OpOverload, Tensor, get_backend
from . import _dtypes

NAMESPACE = "array_api"

CHOSEN = ("default_dtypes",)
"""The tags of an operator whose results' dtypes are the library's choice where the standard
lets it choose (the indices of ``argmax``, ``argsort``, ``nonzero``, ``searchsorted``,
``unique_*``; ``count_nonzero``; the accumulator of ``sum`` given no dtype): on a device that
lacks the 64-bit dtype the NumPy kernel made (int64), the result comes in the device's default
of its kind (int32), as the standard's default dtypes there are."""

_library = Library(NAMESPACE, "DEF")
_library._for_process_life()  # the operators live as long as the process: no ResourceWarning


@dataclass(frozen=True)
class Op:
    """One row of a chapter's table: the schema (without the namespace) and the NumPy kernel.

    The kernel takes the schema's positional arguments by position and its keyword-only ones by
    keyword (as boxfall calls every CPU kernel). With ``public`` the namespace exports a
    function of the kernel's own signature that calls the operator (dtype objects passed as
    their names); a row with a hand-written public function, or none, says ``public=False``.
    """

    schema: str
    kernel: Callable[..., Any]
    public: bool = True
    tags: tuple[str, ...] = ()
    """``Library.define``'s tags: ``CHOSEN`` where the standard lets the library choose the
    dtype of its results (indices, counts, an accumulator's default)."""

    @property
    def name(self) -> str:
        """``name`` or ``name.overload``, as the schema says."""
        return self.schema.split("(", 1)[0]


def _as_arrays(result: Any) -> Any:
    # NumPy's functions return NumPy scalars for 0-d results; an operator returns arrays.
    if isinstance(result, np.generic):
        return np.asarray(result)
    if isinstance(result, (tuple, list)):
        return type(result)(_as_arrays(r) for r in result)
    return result


def _cpu_kernel(kernel: Callable[..., Any]) -> Callable[..., Any]:
    # `_as_arrays(kernel(*args, **kwargs))`, in Rust: a Python function here was two more
    # Python frames on every call of every operator (its NumPy-array results skip `_as_arrays`).
    return _boxfall.array_kernel(kernel, _as_arrays)


_NAMES: dict[Any, str] = {}
"""``dtype_name``'s answers by the object asked: ``np.dtype(d).name`` is microseconds of Python
(NumPy builds the name at each ask), asked at every call that names a dtype."""


def dtype_name(dtype: Any) -> str | None:
    """A dtype object (or anything ``np.dtype`` takes) as the name the operators take."""
    if dtype is None:
        return None
    try:
        return _NAMES[dtype]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like, named afresh
        pass
    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"{dtype!r} is no dtype of the array API standard") from None
    try:
        if len(_NAMES) < 1024:
            _NAMES[dtype] = name
    except TypeError:
        pass
    return name


def public_function(op: OpOverload, kernel: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The namespace's function for ``op``: the kernel's signature, dtype objects as names.
    A ``dtype`` asked for with an array on a device that lacks it is refused (or narrowed)
    before the call, as :func:`requested` says."""
    sig = inspect.signature(kernel)
    params = list(sig.parameters)
    dtype_at = params.index("dtype") if "dtype" in params else None
    if dtype_at is None:

        def fn(*args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], np.generic):
                args = (np.asarray(args[0]), *args[1:])
            return op(*args, **kwargs)

    else:

        def fn(*args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], np.generic):
                # NumPy's 0-d results (`a == b` of 0-d arrays) are NumPy scalars: arrays here.
                args = (np.asarray(args[0]), *args[1:])
            if len(args) > dtype_at:
                asked = requested(args[0], args[dtype_at], name)
                args = (*args[:dtype_at], dtype_name(asked), *args[dtype_at + 1 :])
            elif kwargs.get("dtype") is not None:
                x = args[0] if args else None
                kwargs["dtype"] = dtype_name(requested(x, kwargs["dtype"], name))
            return op(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__signature__ = sig  # type: ignore[attr-defined]
    fn.__doc__ = f"The operator ``{op.name}``: ``{op.schema}``.\n\n{kernel.__doc__ or ''}"
    fn.__module__ = "boxfall.array_api"
    # A call with an array first and no dtype asked goes to the operator from Rust (no Python
    # frame); `fn` serves the rest.
    return _boxfall.operator_function(op, fn, dtype_at)


def register(rows: Iterable[Op]) -> tuple[dict[str, OpOverload], dict[str, Callable[..., Any]]]:
    """Defines each row's operator with its CPU kernel; returns the operators by ``name`` or
    ``name.overload`` and the public functions by name."""
    ops: dict[str, OpOverload] = {}
    public: dict[str, Callable[..., Any]] = {}
    for row in rows:
        _library.define(row.schema, tags=row.tags)
        _library.impl(row.name, _cpu_kernel(row.kernel), "CPU")
        op = _boxfall.find_op(f"{NAMESPACE}::{row.name}")
        ops[row.name] = op
        if row.public:
            public[row.name] = public_function(op, row.kernel, row.name)
    return ops, public


def operator(name: str) -> OpOverload:
    """The operator ``array_api::<name>`` (with an overload: ``add.Tensor_Scalar``)."""
    return _boxfall.find_op(f"{NAMESPACE}::{name}")


def requested(x: object, dtype: Any, op: str) -> Any:
    """The dtype a function of ``x`` (``astype``, ``sum``, ...) asks its operator ``op`` for
    when the caller asked for ``dtype``: ``dtype`` itself on the CPU and on a device holding
    it; on a device without it, the 32-bit dtype of its kind where the backend narrows
    (``register_backend(narrow=True)``: warned once per operator, counted), else a
    ``bf.DTypeError`` raised here, before anything moves (``bf.Backend.dtype_for``)."""
    if dtype is None or not isinstance(x, Tensor):
        return dtype
    device = x.device
    if _dtypes.holds(device, dtype):
        return dtype
    return get_backend(device.split(":", 1)[0]).dtype_for(dtype, op=operator(op))
