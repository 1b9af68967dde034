"""Manipulation functions (the standard's chapter of that name), as data.

They are functional operators; on the CPU NumPy may return a view, as the standard allows.
``reshape`` (where the data allow it), ``permute_dims``, ``expand_dims``, ``squeeze`` and
``broadcast_to`` of a ``bf.Tensor`` return a view of it, as NumPy's do (``_views``), without
calling their operator.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

try:
    from numpy.lib.array_utils import normalize_axis_tuple
except ImportError:  # NumPy 1.x
    from numpy.core.numeric import normalize_axis_tuple  # type: ignore[no-redef]

from .. import _boxfall
from .._boxfall import Tensor
from . import _views
from ._registry import Op, register


def _axis(axis: Any) -> Any:
    return None if axis is None else tuple(axis)


def broadcast_to(x: Any, /, shape: Any) -> Any:
    """``x`` broadcast to ``shape``."""
    return np.broadcast_to(x, tuple(shape))


def concat(arrays: Any, /, *, axis: int | None = 0) -> Any:
    """The arrays joined along ``axis`` (flattened first if ``axis`` is None)."""
    return np.concatenate(arrays, axis=axis)


def expand_dims(x: Any, /, axis: int = 0) -> Any:
    """``x`` with a new axis of size 1 at ``axis``."""
    return np.expand_dims(x, axis)


def flip(x: Any, /, *, axis: Any = None) -> Any:
    """``x`` reversed along ``axis`` (every axis if None)."""
    return np.flip(x, axis=_axis(axis))


def _moveaxis(x: Any, source: Any, destination: Any, /) -> Any:
    """``x`` with the axes ``source`` moved to ``destination``."""
    return np.moveaxis(x, tuple(source), tuple(destination))


def permute_dims(x: Any, /, axes: Any) -> Any:
    """``x`` with its axes permuted."""
    return np.transpose(x, tuple(axes))


def _repeat_int(x: Any, repeats: int, /, *, axis: int | None = None) -> Any:
    """Each element repeated ``repeats`` times along ``axis`` (flattened if None)."""
    return np.repeat(x, repeats, axis=axis)


def _repeat_tensor(x: Any, repeats: Any, /, *, axis: int | None = None) -> Any:
    return np.repeat(x, repeats, axis=axis)


def _reshape(x: Any, /, shape: Any, *, copy: bool | None = None) -> Any:
    """``x`` in the given shape."""
    if copy is False:
        y = x.view()
        y.shape = tuple(shape)
        return y
    out = np.reshape(x, tuple(shape))
    return out.copy() if copy else out


def roll(x: Any, /, shift: Any, *, axis: Any = None) -> Any:
    """``x`` rolled by ``shift`` along ``axis``."""
    shift = shift[0] if len(shift) == 1 and axis is None else tuple(shift)
    return np.roll(x, shift, axis=_axis(axis))


def squeeze(x: Any, /, axis: Any) -> Any:
    """``x`` without the axes of size 1 named by ``axis``."""
    return np.squeeze(x, axis=tuple(axis))


def stack(arrays: Any, /, *, axis: int = 0) -> Any:
    """The arrays stacked along a new axis."""
    return np.stack(arrays, axis=axis)


def tile(x: Any, repetitions: Any, /) -> Any:
    """``x`` repeated ``repetitions`` times along each axis."""
    return np.tile(x, tuple(repetitions))


def _unstack(x: Any, /, *, axis: int = 0) -> Any:
    """The slices of ``x`` along ``axis``."""
    return [np.array(s) for s in np.moveaxis(x, axis, 0)]


def _broadcast_arrays(arrays: Any) -> Any:
    return [np.array(a) for a in np.broadcast_arrays(*arrays)]


OPS, _public = register(
    [
        Op("broadcast_arrays(Tensor[] arrays) -> Tensor[]", _broadcast_arrays, False),
        Op("broadcast_to(Tensor x, int[] shape) -> Tensor", broadcast_to),
        Op("concat(Tensor[] arrays, *, int? axis=0) -> Tensor", concat),
        Op("expand_dims(Tensor x, int axis=0) -> Tensor", expand_dims),
        Op("flip(Tensor x, *, int[1]? axis=None) -> Tensor", flip),
        Op("moveaxis(Tensor x, int[1] source, int[1] destination) -> Tensor", _moveaxis),
        Op("permute_dims(Tensor x, int[] axes) -> Tensor", permute_dims),
        Op("repeat(Tensor x, int repeats, *, int? axis=None) -> Tensor", _repeat_int, False),
        Op(
            "repeat.Tensor(Tensor x, Tensor repeats, *, int? axis=None) -> Tensor",
            _repeat_tensor,
            False,
        ),
        Op("reshape(Tensor x, int[] shape, *, bool? copy=None) -> Tensor", _reshape),
        Op("roll(Tensor x, int[1] shift, *, int[1]? axis=None) -> Tensor", roll),
        Op("squeeze(Tensor x, int[1] axis) -> Tensor", squeeze),
        Op("stack(Tensor[] arrays, *, int axis=0) -> Tensor", stack),
        Op("tile(Tensor x, int[] repetitions) -> Tensor", tile),
        Op("unstack(Tensor x, *, int axis=0) -> Tensor[]", _unstack, False),
    ]
)
globals().update(_public)


def _views_first(name: str, step: Any) -> Any:
    """The public function ``name``, which gives a view of a ``bf.Tensor`` (``_views``) where
    NumPy's function gives one, and calls the operator otherwise. ``step(*args, **kwargs)`` is
    the view's step argument, or None where the call makes no view."""
    op_fn = _public[name]

    @functools.wraps(op_fn)
    def fn(x: Any, /, *args: Any, **kwargs: Any) -> Any:
        if isinstance(x, Tensor):
            try:
                arg = step(*args, **kwargs)
            except (TypeError, ValueError):
                arg = None
            v = None if arg is None else _views.view(x, name, arg)
            if v is not None:
                return v
        return op_fn(x, *args, **kwargs)

    return fn


def _shape_step(shape: Any, *, copy: bool | None = None) -> Any:
    return None if copy else tuple(int(n) for n in shape)


def _axis_step(axis: Any = 0) -> Any:
    return axis if isinstance(axis, int) else tuple(int(a) for a in axis)


_reshape_or_copy = _views_first("reshape", _shape_step)


@functools.wraps(_public["reshape"])
def reshape(x: Any, /, shape: Any, *, copy: bool | None = None) -> Any:
    out = _reshape_or_copy(x, shape, copy=copy)
    if copy is False and _views.is_view(x) and not _views.is_view(out):
        # The operator reshapes the values it is given, a copy of a view's: whether the data
        # allow a view is the stand-in's answer.
        raise ValueError(
            f"reshape(copy=False): a {x.shape} array cannot take the shape "
            f"{tuple(shape)} without a copy"
        )
    return out


permute_dims = _views_first("permute_dims", lambda axes: tuple(int(a) for a in axes))
# A view whose layout is known is made in Rust (`view_function`), with no Python frame.
expand_dims = _boxfall.view_function(_views_first("expand_dims", _axis_step))
squeeze = _views_first("squeeze", _axis_step)
broadcast_to = _views_first("broadcast_to", lambda shape: tuple(int(n) for n in shape))
_moveaxis_copy = _public["moveaxis"]


def moveaxis(x: Any, source: Any, destination: Any, /) -> Any:
    """``x`` with the axes ``source`` moved to ``destination``: a view of a ``bf.Tensor``, as
    NumPy's is of an array (the operator ``array_api::moveaxis`` for anything else)."""
    # A view, as NumPy's: SciPy's ndimage hands `moveaxis(output, ...)` on as the array its C
    # code writes into, and those writes must reach `output`.
    if isinstance(x, Tensor):
        src = (source,) if isinstance(source, int) else tuple(source)
        dst = (destination,) if isinstance(destination, int) else tuple(destination)
        try:
            src = normalize_axis_tuple(src, x.ndim, "source")
            dst = normalize_axis_tuple(dst, x.ndim, "destination")
        except (TypeError, ValueError):
            return _moveaxis_copy(x, source, destination)  # the operator's error
        if len(src) == len(dst):
            order = [n for n in range(x.ndim) if n not in src]
            for d, s in sorted(zip(dst, src, strict=True)):
                order.insert(d, s)
            return permute_dims(x, order)
    return _moveaxis_copy(x, source, destination)


def broadcast_arrays(*arrays: Any) -> list[Any]:
    """The operator ``array_api::broadcast_arrays``: the arrays broadcast against each other."""
    return OPS["broadcast_arrays"](list(arrays))


def repeat(x: Any, repeats: Any, /, *, axis: int | None = None) -> Any:
    """The operator ``array_api::repeat`` (``repeat.Tensor`` for an array of repeats)."""
    if isinstance(repeats, int):
        return OPS["repeat"](x, repeats, axis=axis)
    return OPS["repeat.Tensor"](x, repeats, axis=axis)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Any, ...]:
    """The operator ``array_api::unstack``: the slices of ``x`` along ``axis``, as a tuple."""
    return tuple(OPS["unstack"](x, axis=axis))


__all__ = [
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "moveaxis",
    "permute_dims",
    "repeat",
    "reshape",
    "roll",
    "squeeze",
    "stack",
    "tile",
    "unstack",
]
