"""Indexing (the standard's ``indexing`` page): ``x[key]`` and ``x[key] = value``, as data.

Two operators, functional like every other one of ``boxfall.array_api``:

- ``array_api::getitem(Tensor x, Any key, Tensor?[] arrays) -> Tensor``: a new array, never a
  view (the CPU fallback refuses view operators). ``x[key]`` of a ``bf.Tensor`` with a basic
  index (ints, slices, ``...``, ``None``) is no call of it but a view that boxfall serves
  itself (``_views``), as NumPy's basic indexing gives a view;
- ``array_api::setitem(Tensor(a!) x, Any key, Tensor?[] arrays, Tensor value) -> ()`` and
  ``array_api::setitem.Scalar(Tensor(a!) x, Any key, Tensor?[] arrays, Scalar value) -> ()``:
  ``value`` (broadcast, cast to ``x.dtype`` as NumPy casts) written into ``x``; through the CPU
  fallback the write-back of the ``Tensor(a!)`` argument makes it all or nothing;
- ``array_api::setitem_functional(Tensor x, Any key, Tensor?[] arrays, Tensor value) -> Tensor``
  and ``setitem_functional.Scalar(...)``: a copy of ``x`` with ``value`` written at ``key``.
  Graph mode records a ``setitem`` of a tensor as this, whose result then becomes the
  tensor's data; on JAX it is ``x.at[key].set(value)``;
- ``array_api::_strided_view(Tensor x, int[] shape, int[] strides, int offset) -> Tensor`` and
  ``array_api::_strided_view_write(Tensor x, Tensor values, int[] shape, int[] strides, int
  offset) -> Tensor``: graph mode's read of a view of ``x`` (its elements at ``offset`` and
  ``strides`` among ``x``'s in C order, as a new array) and write through one (a copy of ``x``
  with them set to ``values``), recorded where a view is read or written (``_views``).

``key`` is the index as Python writes it (an int, a slice, ``...``, ``None``, or a tuple of
these) with the string :data:`SLOT` in place of each array in it; ``arrays`` holds those arrays
in order (integer arrays and boolean masks, ``bf.Tensor`` or NumPy; a list in an index is
NumPy's reading of it, an array). The arrays are so tensor arguments the dispatcher sees: a
device's CPU fallback moves them with ``x``, and arrays of two devices are a ``FallbackError``.
``Any`` keeps ints, bools, ``None`` and strings as values and slices, ``...`` and NumPy scalars
as the Python objects themselves, tuples as tuples. A backend's own kernel takes the same
arguments (``bf.Library("array_api", "IMPL").impl("getitem", fn, "Accel")``) and can rebuild
the index with :func:`join_key`.

The kernels are NumPy's indexing, so every index the standard defines (and NumPy's others)
works, and a bad one raises NumPy's ``IndexError`` (out of range, a float, too many indices) or
``TypeError``, with a note naming the operator. A string in an index is refused before the call
with NumPy's ``IndexError``: a string is the array slot's mark.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _views
from ._creation_functions import scalar_array
from ._helpers import ARRAY_TYPES, SCALAR_TYPES
from ._registry import NAMESPACE, Op, register

SLOT = "array"
"""The mark in ``key`` of the next array of ``arrays`` (no index component is a string)."""

_BAD_INDEX = (
    "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
    "boolean arrays are valid indices"
)


def split_key(key: Any, op: str = "getitem") -> tuple[Any, list[Any]]:
    """``key`` with :data:`SLOT` where each array was, and the arrays: the arguments ``key``
    and ``arrays`` of ``array_api::getitem``/``setitem`` (``op``, named by an error)."""
    arrays: list[Any] = []

    def component(k: Any) -> Any:
        if isinstance(k, ARRAY_TYPES):
            arrays.append(k)
            return SLOT
        if isinstance(k, list):  # NumPy reads a list in an index as an array
            arrays.append(np.asarray(k) if k else np.asarray(k, dtype=np.intp))
            return SLOT
        if isinstance(k, str):
            error = IndexError(_BAD_INDEX)
            error.add_note(f"while making the index {k!r} an argument of '{NAMESPACE}::{op}'")
            raise error
        return k

    if isinstance(key, tuple):
        return tuple(component(k) for k in key), arrays
    return component(key), arrays


def join_key(key: Any, arrays: Any) -> Any:
    """The index ``split_key`` split: each :data:`SLOT` of ``key`` replaced by the next of
    ``arrays`` (for a kernel of ``array_api::getitem``/``setitem``)."""
    rest = iter(arrays)

    def component(k: Any) -> Any:
        if isinstance(k, str) and k == SLOT:
            try:
                return next(rest)
            except StopIteration:
                raise IndexError(f"the index has more slots {SLOT!r} than arrays") from None
        if isinstance(k, str):
            raise IndexError(_BAD_INDEX)
        return k

    joined = tuple(component(k) for k in key) if isinstance(key, tuple) else component(key)
    if next(rest, rest) is not rest:
        raise IndexError(f"the index has fewer slots {SLOT!r} than arrays")
    return joined


def _getitem(x: Any, key: Any, arrays: Any) -> Any:
    """``x[key]`` with the arrays in their slots, as a new array."""
    result = np.asarray(x)[join_key(key, arrays)]
    if isinstance(result, np.ndarray) and np.may_share_memory(result, x):
        result = result.copy()  # basic indexing makes a view; the operator is functional
    return result


def _setitem(x: Any, key: Any, arrays: Any, value: Any) -> None:
    """``x[key] = value`` with the arrays in their slots, written into ``x``."""
    x[join_key(key, arrays)] = value


def _setitem_functional(x: Any, key: Any, arrays: Any, value: Any) -> Any:
    """A copy of ``x`` with ``value`` written at ``key`` (the arrays in their slots)."""
    out = np.array(x, copy=True)
    out[join_key(key, arrays)] = value
    return out


def _flat_index(shape: Any, strides: Any, offset: int) -> np.ndarray:
    """The index among a base's elements (in C order) of each element of the view of this
    layout, in the view's C order."""
    index = np.full((), offset, dtype=np.intp)
    for axis, (n, s) in enumerate(zip(shape, strides, strict=True)):
        along = np.arange(n, dtype=np.intp) * s
        index = index + along.reshape((n,) + (1,) * (len(shape) - axis - 1))
    return np.broadcast_to(index, tuple(shape))


def _strided_view(x: Any, shape: Any, strides: Any, offset: int) -> Any:
    """The values of the view of ``x`` with this layout (in elements), as a new array."""
    return np.ascontiguousarray(x).reshape(-1)[_flat_index(shape, strides, offset)]


def _strided_view_write(x: Any, values: Any, shape: Any, strides: Any, offset: int) -> Any:
    """A copy of ``x`` with the view of this layout set to ``values``."""
    out = np.array(x, order="C", copy=True)
    out.reshape(-1)[_flat_index(shape, strides, offset)] = values
    return out


OPS, _ = register(
    [
        Op("getitem(Tensor x, Any key, Tensor?[] arrays) -> Tensor", _getitem, public=False),
        Op(
            "setitem(Tensor(a!) x, Any key, Tensor?[] arrays, Tensor value) -> ()",
            _setitem,
            public=False,
        ),
        Op(
            "setitem.Scalar(Tensor(a!) x, Any key, Tensor?[] arrays, Scalar value) -> ()",
            _setitem,
            public=False,
        ),
        Op(
            "setitem_functional(Tensor x, Any key, Tensor?[] arrays, Tensor value) -> Tensor",
            _setitem_functional,
            public=False,
        ),
        Op(
            "setitem_functional.Scalar(Tensor x, Any key, Tensor?[] arrays, Scalar value) "
            "-> Tensor",
            _setitem_functional,
            public=False,
        ),
        Op(
            "_strided_view(Tensor x, int[] shape, int[] strides, int offset) -> Tensor",
            _strided_view,
            public=False,
        ),
        Op(
            "_strided_view_write(Tensor x, Tensor values, int[] shape, int[] strides, "
            "int offset) -> Tensor",
            _strided_view_write,
            public=False,
        ),
    ]
)


def getitem(x: Any, key: Any) -> Any:
    """``x[key]``: a view of a ``bf.Tensor`` for a basic index (``_views``), else
    ``array_api::getitem`` of the split ``key`` (``bf.Tensor.__getitem__``)."""
    if _views.is_basic(key):  # no arrays: nothing to split
        v = _views.view(x, "getitem", key)
        if v is not None:
            return v
    key, arrays = split_key(key)
    return OPS["getitem"](x, key, arrays)


def setitem(x: Any, key: Any, value: Any) -> None:
    """``x[key] = value``: ``array_api::setitem`` (an array ``value``) or ``setitem.Scalar``
    (a Python bool, int or float; a complex one becomes a 0-d array of ``x.dtype``)
    (``bf.Tensor.__setitem__``). An int beyond a ``Scalar`` (64-bit signed) that ``x``'s
    dtype holds (``2**64 - 1`` in a uint64 array) is a 0-d array of that dtype, a float in a
    floating array; one that ``x``'s dtype cannot hold is an ``OverflowError``, as NumPy's."""
    key, arrays = split_key(key, "setitem")
    if isinstance(value, np.generic):
        # NumPy's rules for storing a NumPy scalar are its own (int8 ``x[0] = np.int64(300)``
        # raises OverflowError, uint8 wraps to 44, a 0-d array casts): NumPy stores it in one
        # element of ``x``'s dtype, and that element (or NumPy's error) is what is stored.
        probe = np.empty(1, dtype=np.dtype(x.dtype))
        probe[0] = value
        value = probe.reshape(())
    if type(value) is int and not -(2**63) <= value < 2**63:
        from ._elementwise_functions import wide_int

        if np.dtype(x.dtype).kind == "b":
            value = True  # NumPy stores any int's truth in a bool array, 2**64 included
        else:
            _, value = wide_int("setitem", x, value)
    if isinstance(value, SCALAR_TYPES):
        OPS["setitem.Scalar"](x, key, arrays, value)
        return
    if isinstance(value, complex):
        value = scalar_array(value, x)
    elif not isinstance(value, ARRAY_TYPES):
        value = np.asarray(value)
    OPS["setitem"](x, key, arrays, value)


__all__: list[str] = []
