"""The JAX backend's kernels of the standard's manipulation functions (joins, reshapes, the view
functions' operators, ``take``) and ``astype``."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from ._kernels_base import (
    _Kernels,
)
from ._kernels_checks import checked


def _take_in_range(a: Any, i: Any, *, axis: Any) -> Any:
    """``jnp.take`` (which fills an index out of range with NaN, or clamps) and whether every
    index is one NumPy takes: ``-n <= i < n``."""
    n = a.shape[0 if axis is None else axis]
    return jnp.take(a, i, axis=axis), jnp.all((i >= -n) & (i < n))


_concat = jax.jit(
    lambda *arrays, axis: jnp.concatenate(arrays, axis=axis), static_argnames=("axis",)
)
_stack = jax.jit(lambda *arrays, axis: jnp.stack(arrays, axis=axis), static_argnames=("axis",))
_reshape = jax.jit(jnp.reshape, static_argnames=("shape",))
_take = jax.jit(_take_in_range, static_argnames=("axis",))
# The view functions' operators: eager mode makes views of tensors (the view hook), and reaches
# these only where no view is made; a graph's program (graph mode) runs them on the device.
_matrix_transpose = jax.jit(jnp.matrix_transpose)
_expand_dims = jax.jit(jnp.expand_dims, static_argnames=("axis",))
_permute_dims = jax.jit(jnp.permute_dims, static_argnames=("axes",))
_squeeze = jax.jit(jnp.squeeze, static_argnames=("axis",))
_astype = jax.jit(lambda a, dtype: a.astype(dtype), static_argnames=("dtype",))
_flip = jax.jit(jnp.flip, static_argnames=("axis",))
_roll = jax.jit(jnp.roll, static_argnames=("shift", "axis"))
_repeat = jax.jit(jnp.repeat, static_argnames=("repeats", "axis"))
_tile = jax.jit(jnp.tile, static_argnames=("reps",))
_broadcast_to = jax.jit(jnp.broadcast_to, static_argnames=("shape",))
_broadcast_arrays = jax.jit(lambda *arrays: tuple(jnp.broadcast_arrays(*arrays)))
_moveaxis = jax.jit(jnp.moveaxis, static_argnames=("source", "destination"))
_unstack = jax.jit(lambda a, *, axis: tuple(jnp.unstack(a, axis=axis)), static_argnames=("axis",))


@functools.partial(jax.jit, static_argnames=("axis",))
def _take_along_axis(a: Any, i: Any, *, axis: int) -> Any:
    """``jnp.take_along_axis`` and whether every index is one NumPy takes (``-n <= i < n``)."""
    n = a.shape[axis]
    return jnp.take_along_axis(a, i, axis=axis), jnp.all((i >= -n) & (i < n))


def _manipulation(k: _Kernels) -> None:
    pay = k.payload

    def arrays_of(tensors: Any) -> list[Any] | None:
        arrays = [pay(t) for t in tensors]
        if not arrays or any(a is None or a.dtype != arrays[0].dtype for a in arrays):
            return None
        return arrays

    def concat(arrays: Any, *, axis: Any = 0) -> Any:
        found = arrays_of(arrays)
        return None if found is None else _concat(*found, axis=axis)

    def stack(arrays: Any, *, axis: int = 0) -> Any:
        found = arrays_of(arrays)
        return None if found is None else _stack(*found, axis=axis)

    def reshape(x: Any, shape: Any, *, copy: Any = None) -> Any:
        a = pay(x)
        return None if a is None else _reshape(a, shape=tuple(shape))

    def take(x: Any, indices: Any, *, axis: Any = None) -> Any:
        a, i = pay(x), pay(indices)
        if a is None or i is None or i.dtype.kind not in "iu" or i.ndim != 1:
            return None
        if axis is None and a.ndim != 1:
            return None
        if not -a.ndim <= (axis or 0) < a.ndim:
            return None
        out, ok = _take(a, i, axis=axis)
        why = f"array_api::take on {k.backend.name}: an index is out of bounds for axis {axis}"
        return checked(out, ok, IndexError, why)

    def astype(x: Any, dtype: str, *, copy: bool = True, device: Any = None) -> Any:
        a, d = pay(x), k.dtype_here(dtype, "astype")
        if a is None or d is None or d is False or not k.on_device(device):
            return None
        if d == a.dtype and not copy:
            return a
        return _astype(a, dtype=d)

    def matrix_transpose(x: Any) -> Any:
        a = pay(x)
        return None if a is None or a.ndim < 2 else _matrix_transpose(a)

    def expand_dims(x: Any, axis: int = 0) -> Any:
        a = pay(x)
        return None if a is None or not -a.ndim - 1 <= axis <= a.ndim else _expand_dims(a, axis)

    def permute_dims(x: Any, axes: Any) -> Any:
        a = pay(x)
        if a is None or sorted(int(i) % max(a.ndim, 1) for i in axes) != list(range(a.ndim)):
            return None
        return _permute_dims(a, tuple(int(i) for i in axes))

    def squeeze(x: Any, axis: Any) -> Any:
        a = pay(x)
        axes = tuple(int(i) for i in axis)
        if a is None or any(not -a.ndim <= i < a.ndim or a.shape[i] != 1 for i in axes):
            return None
        return _squeeze(a, axes)

    k.add("matrix_transpose", matrix_transpose)
    k.add("expand_dims", expand_dims)
    k.add("permute_dims", permute_dims)
    k.add("squeeze", squeeze)
    k.add("concat", concat)
    k.add("stack", stack)
    k.add("reshape", reshape)
    k.add("take", take)
    k.add("astype", astype)

    def ints(values: Any) -> tuple[int, ...]:
        return tuple(int(v) for v in values)

    def flip(x: Any, *, axis: Any = None) -> Any:
        a = pay(x)
        if a is None:
            return None
        axes = None if axis is None else ints(axis)
        if axes is not None and any(not -a.ndim <= i < a.ndim for i in axes):
            return None
        return _flip(a, axis=axes)

    def roll(x: Any, shift: Any, *, axis: Any = None) -> Any:
        a = pay(x)
        shifts = ints(shift)
        if a is None or (axis is None and len(shifts) != 1):
            return None
        if axis is None:
            return _roll(a, shift=shifts[0], axis=None)
        axes = ints(axis)
        if len(axes) != len(shifts) or any(not -a.ndim <= i < a.ndim for i in axes):
            return None
        return _roll(a, shift=shifts, axis=axes)

    def repeat(x: Any, repeats: int, *, axis: Any = None) -> Any:
        a = pay(x)
        if a is None or repeats < 0 or (axis is not None and not -a.ndim <= axis < a.ndim):
            return None
        return _repeat(a, repeats=int(repeats), axis=axis)

    def tile(x: Any, repetitions: Any) -> Any:
        a, reps = pay(x), ints(repetitions)
        return None if a is None or any(r < 0 for r in reps) else _tile(a, reps=reps)

    def broadcast_to(x: Any, shape: Any) -> Any:
        a, to = pay(x), ints(shape)
        return None if a is None or any(n < 0 for n in to) else _broadcast_to(a, shape=to)

    def broadcast_arrays(arrays: Any) -> Any:
        found = [pay(t) for t in arrays]
        if not found or any(a is None for a in found):
            return None
        return _broadcast_arrays(*found)

    def moveaxis(x: Any, source: Any, destination: Any) -> Any:
        a, src, dst = pay(x), ints(source), ints(destination)
        if a is None or len(src) != len(dst):
            return None
        if any(not -a.ndim <= i < a.ndim for i in src + dst):
            return None
        if len({i % a.ndim for i in src}) != len(src) or len({i % a.ndim for i in dst}) != len(dst):
            return None
        return _moveaxis(a, source=src, destination=dst)

    def unstack(x: Any, *, axis: int = 0) -> Any:
        a = pay(x)
        if a is None or not -a.ndim <= axis < a.ndim or a.shape[axis] == 0:
            return None
        return _unstack(a, axis=axis)

    def take_along_axis(x: Any, indices: Any, *, axis: int = -1) -> Any:
        a, i = pay(x), pay(indices)
        if a is None or i is None or i.dtype.kind not in "iu" or i.ndim != a.ndim:
            return None
        if a.ndim == 0 or not -a.ndim <= axis < a.ndim:
            return None
        out, ok = _take_along_axis(a, i, axis=axis % a.ndim)
        why = (
            f"array_api::take_along_axis on {k.backend.name}: an index is out of bounds for "
            f"axis {axis}"
        )
        return checked(out, ok, IndexError, why)

    k.add("flip", flip)
    k.add("roll", roll)
    k.add("repeat", repeat)
    k.add("tile", tile)
    k.add("broadcast_to", broadcast_to)
    k.add("broadcast_arrays", broadcast_arrays)
    k.add("moveaxis", moveaxis)
    k.add("unstack", unstack)
    k.add("take_along_axis", take_along_axis)
