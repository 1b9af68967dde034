"""Views of device arrays, as NumPy makes them: basic indexing (ints, slices, ``...``,
``None``), ``reshape`` (where the data allow it), ``permute_dims``, ``matrix_transpose``
(``.mT``, ``.T``), ``expand_dims``, ``squeeze`` and ``broadcast_to`` of a ``bf.Tensor`` return a
view of its base on every backend: a write through the view (``v[k] = ...``, ``v += 1``, an
in-place or ``out=`` operator reached through the CPU fallback) changes the base and every view
of it, and a write to the base is seen through its views. Integer-array and boolean-mask
indexing return copies, as in NumPy.

No backend kernel runs and nothing moves to make a view: a view is its base and the chain of
steps that made it (``("getitem", key)``, ``("reshape", shape)``, ...), with its offset and
strides among the base's elements. Its values are made when they are read (again after the base
was written): on a lazy backend (residency), by :func:`view_of_host`, a read-only NumPy view of
the base's host copy (no copy: a transposed view reaches ``matmul`` as NumPy's own), else by
:func:`materialize`, a copy; a write through it is
:func:`write`: the steps applied to a copy of the base's host values, written there, and the
copy written into the base by its backend's hook, all or nothing. A Native base's views are
read and written in Rust from their offset and strides instead, with no Python call.
A view of a view is described from the first base. Whether a step makes a view, and the view's
shape and dtype, are decided on a stand-in: an array of the base's shape, dtype and strides over
one element of memory, which the steps never read (basic indexing, reshaping and transposing
only compute strides), so a step NumPy cannot take without a copy (``reshape`` of a transposed
view) is found before anything is made, and the operator then runs instead.

In graph mode (a pending base, or any base on a graph backend) a view is made the same way,
without computing anything, and a recorded call that reads it reads
``array_api::_strided_view(base, shape, strides, offset)`` of the base's data as it is then (a
node of the graph, not the backend's ``view`` hook); a write through it records the write, then
``array_api::_strided_view_write``, whose result becomes the base's data, so the base and its
other views see it, as in eager mode.

A backend's own kernels (``lib.impl(..., "Accel")``) see a view as a tensor of its values. A
backend registered with a ``view=`` hook makes it on the device from the base's payload
(``view(payload, shape, strides, offset)``, sharing the base's device memory: nothing crosses,
and a kernel that writes it writes the base); without one, or where the hook returns None, the
view's values are made from the base's host copy and moved by ``from_cpu``, and a backend kernel
that writes that payload in place writes that copy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._boxfall import Tensor, _make_view, _view_info

_STEPS: dict[str, Any] = {
    "getitem": lambda a, key: a[key],
    "permute_dims": lambda a, axes: np.transpose(a, axes),
    "matrix_transpose": lambda a, _: np.swapaxes(a, -1, -2),
    "expand_dims": lambda a, axis: np.expand_dims(a, axis),
    "squeeze": lambda a, axis: np.squeeze(a, axis=axis),
    "broadcast_to": lambda a, shape: np.broadcast_to(a, shape),
}


def _reshape(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    # A new shape on a view of the same memory: NumPy refuses (AttributeError) where the data
    # do not allow it, rather than copying.
    view = a.view()
    view.shape = shape
    return view


_STEPS["reshape"] = _reshape


def _apply(a: np.ndarray, chain: Any) -> Any:
    for name, arg in chain:
        a = _STEPS[name](a, arg)
    return a


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


_STAND_INS: dict[tuple[Any, Any], tuple[np.ndarray, int]] = {}
"""Stand-ins by shape and dtype (a view keeps its own layout and origin, so they may go)."""


def _stand_in(shape: Any, dtype: Any) -> tuple[np.ndarray, int]:
    """A read-only array of ``shape`` and ``dtype`` with C-ordered strides over one element of
    memory (only strides are computed on it, its elements are never read), and the address of
    its first element."""
    key = (shape, dtype)
    found = _STAND_INS.get(key)
    if found is None:
        dt = np.dtype(dtype)
        shape = tuple(shape)
        a = np.lib.stride_tricks.as_strided(
            np.zeros(1, dt), shape, _c_strides(shape, dt.itemsize), writeable=False
        )
        found = (a, a.__array_interface__["data"][0])
        if len(_STAND_INS) >= 256:
            _STAND_INS.clear()
        _STAND_INS[key] = found
    return found


def _host_base(values: Any) -> np.ndarray:
    """The base's host values laid out as its stand-in is (C order)."""
    a = np.asarray(values)
    if a.strides != _c_strides(a.shape, a.dtype.itemsize):
        a = np.array(a, order="C")
    return a


def materialize(values: Any, chain: Any) -> np.ndarray:
    """The values of the view ``chain`` of a base whose host values are ``values``: a new
    C-ordered array."""
    return np.array(_apply(_host_base(values), chain), order="C", copy=True)


def view_of_host(values: Any, chain: Any) -> np.ndarray:
    """The values of the view ``chain`` of a base whose host values are ``values`` (which
    nobody writes in place), as a read-only NumPy view of them where NumPy makes one: no copy,
    and a transposed view stays transposed (``matmul`` reads it as it is)."""
    out = np.asarray(_apply(_host_base(values), chain))
    out = out.view()
    out.flags.writeable = False
    return out


def write(values: Any, chain: Any, src: Any) -> np.ndarray:
    """A copy of the base's host ``values`` with ``src`` written through the view ``chain`` (a
    view NumPy makes read-only, ``broadcast_to``'s, raises its ``ValueError``)."""
    base = np.array(values, order="C", copy=True)
    view = _apply(base, chain)
    view[...] = src
    return base


def is_basic(key: Any) -> bool:
    """Whether an index (as ``_indexing.split_key`` leaves it, without arrays) is basic: ints,
    slices, ``...`` and ``None`` (a bool is a mask, as in NumPy)."""
    parts = key if isinstance(key, tuple) else (key,)
    for k in parts:
        if k is None or k is Ellipsis or isinstance(k, slice):
            continue
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            return False
    return True


_MADE: dict[tuple[int, str, type, Any], tuple[np.ndarray, Any]] = {}
"""Steps already taken, by their layout (a stand-in or a view's own) and step: the same views
of arrays of the same shape recur (a loop's ``expand_dims`` of its sums), and NumPy's step is
most of a view's cost (``np.expand_dims`` is microseconds of Python). The entry holds its
layout, so no other array can take the layout's ``id`` while the entry lives."""


def _step(layout: np.ndarray, name: str, arg: Any) -> Any:
    """``_STEPS[name](layout, arg)``, kept for the steps of a view function. A basic index is
    taken afresh: NumPy's own indexing is quick, and a key holding a slice is no dict key
    before Python 3.12 (the raised ``TypeError`` would cost more than the step)."""
    if name == "getitem":
        return _STEPS[name](layout, arg)
    key = (id(layout), name, type(arg), arg)
    try:
        kept = _MADE.get(key)
    except TypeError:
        return _STEPS[name](layout, arg)
    if kept is not None and kept[0] is layout:
        return kept[1]
    out = _STEPS[name](layout, arg)
    if len(_MADE) >= 4096:  # ever new layouts (views of views of ...) start it again
        _MADE.clear()
    _MADE[key] = (layout, out)
    return out


_FIRST: dict[tuple[Any, Any, str, type, Any], tuple[np.ndarray, int]] = {}
"""The first step of a view of a tensor that is no view, by the tensor's shape and dtype and
the step: the step's layout on the stand-in and the stand-in's origin, found by one look-up
where the stand-in and the step are two (a loop makes the same views of arrays of the same
shapes at every iteration: ``matrix_transpose``, ``expand_dims``). The layout holds its
stand-in's memory, so the origin stays its address."""


def is_view(x: Any) -> bool:
    """Whether ``x`` is a view made here."""
    return _view_info(x) is not None


def view(x: Any, name: str, arg: Any) -> Any:
    """The view of ``x`` (a ``bf.Tensor``) through the step ``name(arg)``; None where ``x`` is
    no ``bf.Tensor``, or the step makes no view (NumPy would give a scalar or a copy) or fails
    (the operator then runs, and raises its own error). A pending ``x`` (graph mode) gets a
    view too, made without computing it: graph mode records each read of the view, and each
    write through it, as a node on its base's data (``_strided_view``, ``_strided_view_write``)."""
    if not isinstance(x, Tensor):
        return None
    info = _view_info(x)
    first = None
    if info is None:
        try:
            shape, dtype = x.shape, x.dtype
        except (TypeError, ValueError):
            return None
        if name != "getitem":  # a key holding a slice is no dict key before Python 3.12
            first = (shape, dtype, name, type(arg), arg)
            try:
                found = _FIRST.get(first)
            except TypeError:
                found = first = None
            if found is not None:
                return _make_view(x, ((name, arg),), found[0], found[1], name != "broadcast_to")
        try:
            layout, origin = _stand_in(shape, dtype)
        except (TypeError, ValueError):
            return None
        base, chain, writable = x, (), True
    else:
        base, chain, layout, origin, writable = info
    try:
        out = _step(layout, name, arg)
    except Exception:
        return None
    if not isinstance(out, np.ndarray):
        return None
    if first is not None:
        if len(_FIRST) >= 4096:
            _FIRST.clear()
        _FIRST[first] = (out, origin)
    writable = writable and name != "broadcast_to"
    return _make_view(base, (*chain, (name, arg)), out, origin, writable)


__all__: list[str] = []
