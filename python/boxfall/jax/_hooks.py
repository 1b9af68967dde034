"""The JAX backend's hooks: moving ``jax.Array`` payloads to and from NumPy, and views of them.

A ``jax.Array`` is immutable, so every hook that "writes" returns a new array, which boxfall
puts in the tensor's place (``copy_from_cpu``, ``view_write``), and every view made on the
device is a copy (``view`` returns ``(payload, False)``): boxfall writes what a kernel wrote into
such a view back into its base through ``view_write``, a scatter on the device.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import boxfall as bf

from . import _slicing

STANDARD_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128",
)  # fmt: skip
"""The dtypes of the array API standard."""

WIDE = ("int64", "uint64", "float64", "complex128")
"""The 64-bit dtypes, which a JAX device holds only with ``jax_enable_x64``."""

EXTENSION_DTYPES = ("bfloat16",)
"""Dtypes beyond the standard's that JAX holds on every device (``ml_dtypes``' own)."""


def held_dtypes(x64: bool) -> tuple[str, ...]:
    """The standard's dtypes a JAX device holds: all of them with x64, else the 32-bit ones."""
    return STANDARD_DTYPES if x64 else tuple(d for d in STANDARD_DTYPES if d not in WIDE)


def _flat_index(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> jax.Array:
    """The flat index into the base of each element of a view, in C order, made on the device
    inside the compiled gather or scatter (nothing crosses from the host for it)."""
    index = jnp.full((), offset, dtype=jnp.int32)
    for axis, (n, s) in enumerate(zip(shape, strides, strict=True)):
        along = jnp.arange(n, dtype=jnp.int32) * s
        index = index + along.reshape((n,) + (1,) * (len(shape) - axis - 1))
    return jnp.broadcast_to(index, shape)


# Compiled once per layout (the layouts of a program recur: `x[:, 1]`, `x[::2]`), by jax.jit.
@functools.partial(jax.jit, static_argnames=("shape", "strides", "offset"))
def _gather(base: jax.Array, shape: Any, strides: Any, offset: int) -> jax.Array:
    return base.reshape(-1)[_flat_index(shape, strides, offset)]


@functools.partial(jax.jit, static_argnames=("shape", "strides", "offset"))
def _scatter(base: jax.Array, values: jax.Array, shape: Any, strides: Any, offset: int) -> Any:
    flat = base.reshape(-1).at[_flat_index(shape, strides, offset)].set(values.reshape(shape))
    return flat.reshape(base.shape)


# A slicing's read and write, compiled once per layout as the gather and scatter are.
_sliced_read = jax.jit(_slicing.read, static_argnames=("plan", "shape"))
_sliced_write = jax.jit(_slicing.write, static_argnames=("plan",))
_reshape = jax.jit(jnp.reshape, static_argnames=("shape",))


def _in_c_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a view of ``shape`` with these element strides is its elements in C order (an
    axis of length 1 may have any stride: ``expand_dims``)."""
    step = 1
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def strided_view(payload: Any, shape: Any, strides: Any, offset: int) -> Any:
    """The values of the view of ``payload`` of this layout (in elements), on arrays and traced
    arrays alike (graph mode's ``array_api::_strided_view``, in the compiled program): a
    reshape where the view is the whole base in C order, a slice, reversal and transpose of it
    (``_slicing``: basic indexing as jit lowers it) where the layout is one, else a gather."""
    shape, strides, offset = tuple(shape), tuple(strides), int(offset)
    size = math.prod(shape)
    if size == 0:
        return jnp.zeros(shape, payload.dtype)
    if offset == 0 and size == math.prod(payload.shape) and _in_c_order(shape, strides):
        return jnp.reshape(payload, shape)
    plan = _slicing.slicing(tuple(payload.shape), shape, strides, offset)
    if plan is not None:
        return _sliced_read(payload, plan=plan, shape=shape)
    return _gather(payload, shape=shape, strides=strides, offset=offset)


def strided_view_write(base: Any, values: Any, shape: Any, strides: Any, offset: int) -> Any:
    """``base`` with the view of this layout set to ``values`` (graph mode's
    ``array_api::_strided_view_write``): an update of a slice where the layout is one
    (``_slicing``), else a scatter."""
    shape, strides = tuple(shape), tuple(strides)
    if math.prod(shape) == 0:
        return base
    plan = _slicing.slicing(tuple(base.shape), shape, strides, int(offset))
    if plan is not None:
        return _sliced_write(base, values, plan=plan)
    return _scatter(base, values, shape=shape, strides=strides, offset=int(offset))


_LAYOUTS_KEPT = 4096
"""How many view layouts a backend remembers how to make (a program that takes ever new
layouts, ``x[i]`` for every ``i``, starts again past it rather than growing)."""


class JaxHooks:
    """The hooks of one JAX backend: a tensor on device ``i`` of the backend ("JAX:1") has
    its payload on ``devices[i]``."""

    def __init__(self, devices: Sequence[jax.Device]) -> None:
        self.devices = list(devices)
        self.device = self.devices[0]
        # How each view layout is made, by (base shape, shape, strides, offset): a few
        # layouts recur, and deciding one is Python work that a lookup replaces.
        self._views: dict[tuple[Any, ...], Any] = {}

    def to_cpu(self, payload: jax.Array) -> np.ndarray:
        # np.asarray waits for the array's pending computation: boxfall's rule for to_cpu. On
        # JAX's CPU it may be the payload's own (read-only) memory: `shares_memory=True`.
        return np.asarray(payload)

    def to_cpu_many(self, payloads: list[jax.Array]) -> list[np.ndarray]:
        # One device_get starts every copy before waiting on any (a TPU's copies overlap).
        return [np.asarray(a) for a in jax.device_get(payloads)]

    def from_cpu(self, array: np.ndarray, *, device: int = 0) -> jax.Array:
        # `device`: the index of the tensor's device, which boxfall passes (the registration
        # says the hook takes it: `optional_registration`).
        try:
            target = self.devices[device]
        except IndexError:  # a device string no device has, named past the namespace's checks
            raise ValueError(self.no_device(device)) from None
        return put(array, target)

    def no_device(self, index: Any) -> str:
        """What is wrong with a device index that none of JAX's devices here has."""
        return f"JAX has no device of index {index}: it has {len(self.devices)} ({self.devices})"

    def copy_from_cpu(self, payload: jax.Array, array: np.ndarray) -> jax.Array:
        # Immutable: the new values are a new array, which boxfall puts in the tensor's place,
        # on the device the old one was on.
        return put(array, device_of(payload, self.device))

    def view(
        self,
        payload: jax.Array,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        offset: int,
    ) -> tuple[jax.Array, bool]:
        """The view's values gathered on the device: a copy (``False``), as every view of an
        immutable array is."""
        layout = (payload.shape, tuple(shape), tuple(strides), int(offset))
        make = self._views.get(layout)
        if make is None:
            if len(self._views) >= _LAYOUTS_KEPT:
                self._views.clear()
            make = self._views.setdefault(layout, self._view_maker(*layout))
        return make(payload), False

    def _view_maker(
        self,
        base_shape: tuple[int, ...],
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        offset: int,
    ) -> Any:
        """How a view of this layout is made from its base: decided once per layout (a loop
        takes the same views of arrays of the same shape again and again)."""
        size = math.prod(shape)
        if offset == 0 and size == math.prod(base_shape) and _in_c_order(shape, strides):
            return functools.partial(_reshape, shape=shape)
        if size == 0:
            return lambda payload: jax.device_put(
                jnp.zeros(shape, payload.dtype), device_of(payload, self.device)
            )
        plan = _slicing.slicing(base_shape, shape, strides, offset)
        if plan is not None:
            return functools.partial(_sliced_read, plan=plan, shape=shape)
        return functools.partial(_gather, shape=shape, strides=strides, offset=offset)

    def view_write(
        self,
        base: jax.Array,
        values: jax.Array,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        offset: int,
    ) -> jax.Array:
        """The base with a view's elements set to ``values``, on the device: an update of a
        slice, or a scatter (``strided_view_write``)."""
        return strided_view_write(base, values, shape, strides, offset)


def put(array: np.ndarray, device: jax.Device) -> jax.Array:
    """``array``'s values as a ``jax.Array`` on ``device`` that no later write to ``array`` can
    change. On JAX's CPU a ``device_put`` of a NumPy array keeps sharing its memory, even with
    ``may_alias=False`` and after ``block_until_ready`` (JAX 0.10.2): a host write made after the
    call (the user's array, or boxfall's host copy of a resident tensor) would show through an
    "immutable" array, and through every computation still reading it. So there the values are
    copied first, into memory only the new array holds; a device with memory of its own gets
    them by the transfer itself."""
    if device.platform == "cpu":
        array = np.array(array, copy=True, order="C")
    return jax.device_put(array, device, may_alias=False)


def device_of(payload: jax.Array, default: jax.Device) -> jax.Device:
    """The device a payload is on (``default`` for one on several, which boxfall never makes):
    the hooks' and the kernels' one rule."""
    devices = payload.devices()
    return next(iter(devices)) if len(devices) == 1 else default


def takes(keyword: str) -> bool:
    try:
        return keyword in inspect.signature(bf.register_backend).parameters
    except (TypeError, ValueError):
        return keyword in (getattr(bf.register_backend, "__text_signature__", "") or "")


def optional_registration(hooks: JaxHooks, x64: bool) -> dict[str, Any]:
    """``register_backend``'s keywords beyond the transfer hooks: the dtypes JAX holds (the
    extension dtypes where boxfall takes them), ``narrow`` exactly when JAX narrows (x64 off)
    and the scatter that writes a view into its base."""
    held = held_dtypes(x64)
    options: dict[str, Any] = {"shares_memory": True, "dtypes": held}
    if takes("narrow"):
        options["narrow"] = not x64
        options["dtypes"] = held + EXTENSION_DTYPES
    if takes("view_write"):
        options["view_write"] = hooks.view_write
    if takes("from_cpu_takes_device"):
        options["from_cpu_takes_device"] = True  # `from_cpu(array, device=i)`
    return options
