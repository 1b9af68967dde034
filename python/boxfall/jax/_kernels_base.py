"""The machinery of the JAX backend's kernels: ``_Kernels`` (one backend's kernel table, how a
kernel reads payloads, registers itself and wraps its result, the lean hot-path kernels of the
elementwise functions) and the dtype and Python-scalar rules they share."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import boxfall as bf

from ._hooks import device_of

Kernel = Callable[..., Any]

_ARRAY_TYPE = type(jnp.zeros(()))
# A graph's program (graph mode, ``bj.namespace(graph=True)``) runs the kernels under
# ``jax.jit`` on traced arrays: each check below takes one after the concrete type's, so that an
# eager call pays nothing for it.
_TRACER = jax.core.Tracer

_NARROWED = ("int64", "uint64", "float64", "complex128")

_EXTENSION = {"bfloat16": jnp.bfloat16}
"""Extension dtypes a JAX device holds, by name (NumPy knows them through ml_dtypes)."""

_INT_RANGE = {
    np.dtype(name): (int(np.iinfo(name).min), int(np.iinfo(name).max))
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
}

# An array of `a`'s shape holding one bool (a comparison with an int outside `a`'s dtype).
_filled_like = jax.jit(lambda a, value: jnp.full(a.shape, value, dtype=jnp.bool_))


class NoDevice(ValueError):
    """A creation operator's ``device`` names an index that none of the backend's devices has
    (``"JAX:3"`` on a host of one): raised at the call, never handed to the CPU fallback."""


def _with_extension(kinds: str) -> str:
    """``kinds`` with NumPy's kind of bfloat16 (``'V'``) where it takes floating dtypes: JAX
    computes bfloat16 as a float, with the promotion ml_dtypes gives NumPy."""
    return kinds + "V" if "f" in kinds else kinds


def scalar_fits(dtype: np.dtype, value: Any, kinds: str) -> bool:
    """Whether ``array op value`` computes in ``dtype`` with JAX as with NumPy: a float with a
    floating array, an int that the integer dtype holds (NumPy raises for others), a bool with
    a bool array."""
    kind = dtype.kind
    if kind not in kinds:
        return False
    t = type(value)
    if t is float:
        return kind in "fcV"
    if t is int:
        if kind in "fcV":
            return True
        bounds = _INT_RANGE.get(dtype)
        return bounds is not None and bounds[0] <= value <= bounds[1]
    return t is bool and kind == "b"


def exact(value: Any, dtype: np.dtype) -> Any:
    """``value``, a Python scalar that ``scalar_fits`` a ``dtype`` array, as a 0-d NumPy array
    of that dtype: what NumPy converts it to (NEP 50). A jitted function takes a Python int as a
    weakly typed int of JAX's default width (int32 without x64) and raises ``OverflowError``
    for one beyond it (``uint32 + 2**31``, ``float32 * 2**40``), which the array's dtype holds;
    the kernels pass such an int so (rare: the usual scalar stays a Python scalar)."""
    return np.asarray(value, dtype=dtype)


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
}
"""The comparisons, as Python's operators: NumPy compares an integer array with a Python int
outside its dtype's range exactly (int8 ``x < 200`` is all True), so every element compares
as any one value of the dtype does."""


def _axes(axis: Any) -> Any:
    return tuple(axis) if isinstance(axis, list) else axis


class _Kernels:
    """The kernels of one backend, and the few facts each needs (its wrap, its device)."""

    def __init__(
        self, backend: bf.Backend, device: jax.Device, devices: Sequence[jax.Device] = ()
    ) -> None:
        self.backend = backend
        self.prefix = backend.name + ":"
        self.device = device
        # The backend's devices, by index ("JAX:1" is devices[1]); `device` is the first.
        self.devices = list(devices) or [device]
        self.wrap = self._wrap(backend.tensor_from_payload)
        self._targets: dict[str, jax.Device | None] = {}
        self.on_tpu = device.platform == "tpu"
        self.held = {np.dtype(d) for d in backend.dtypes if d in np.sctypeDict or d in _EXTENSION}
        self.narrow = backend.narrow
        self.table: dict[str, Kernel | bf.PayloadKernel] = {}
        # A compiled creation function (no array argument) makes its array on JAX's default
        # device: where that is this backend's, no `device_put` follows (a device_put of an
        # array already in place still costs an eager call).
        made = jax.jit(lambda: jnp.zeros(()))()
        self.creates_here = made.devices() == {device}

    def _wrap(self, tensor_from_payload: Callable[..., Any]) -> Callable[[Any], Any]:
        """How a kernel's result payload becomes a tensor: of device 0 where the backend has
        one device (the hot path's case: no lookup), else of the device the array is on (a
        traced one, in a graph's program, is placed by the recording: 0 here)."""
        if len(self.devices) == 1:
            return tensor_from_payload
        index = {d: i for i, d in enumerate(self.devices)}

        first = self.devices[0]

        def wrap(payload: Any) -> Any:
            if isinstance(payload, _TRACER):
                return tensor_from_payload(payload)
            return tensor_from_payload(payload, index.get(device_of(payload, first), 0))

        return wrap

    def target(self, device: Any) -> jax.Device | None:
        """The JAX device a creation operator's ``device`` argument names: this backend's
        device of that index (its first for None or a name without one), None for another
        backend's; an index that none of its devices has is a ``NoDevice`` error."""
        text = "" if device is None else str(device)
        try:
            return self._targets[text]
        except KeyError:
            pass
        found: jax.Device | None = None
        if not text or text in (self.prefix[:-1], "JAX"):
            found = self.devices[0]
        elif text.startswith(self.prefix) and text[len(self.prefix) :].isdigit():
            at = int(text[len(self.prefix) :])
            if at >= len(self.devices):
                raise NoDevice(
                    f"no device {text!r}: {self.prefix[:-1]} has no device of index {at}; it has "
                    f"{len(self.devices)} ({self.devices})"
                )
            found = self.devices[at]
        if len(self._targets) < 64:
            self._targets[text] = found
        return found

    def placed(self, array: Any, target: jax.Device | None = None) -> Any:
        """``array``, made by a compiled creation function, on ``target`` (this backend's
        first device by default)."""
        if target is None or target == self.device:
            return array if self.creates_here else jax.device_put(array, self.device)
        return jax.device_put(array, target)

    def placed_like(self, array: Any, like: Any) -> Any:
        """``array`` on the device of ``like``, a payload of this backend."""
        if len(self.devices) == 1 or isinstance(like, _TRACER):
            return self.placed(array)
        return jax.device_put(array, device_of(like, self.device))

    # -- payloads ------------------------------------------------------------------------------

    def payload(self, t: Any) -> Any:
        """The ``jax.Array`` of a tensor of this backend; None for anything else."""
        if type(t) is bf.Tensor and t.device.startswith(self.prefix):
            p = t.payload
            if type(p) is _ARRAY_TYPE or isinstance(p, _TRACER):
                return p
        return None

    def on_device(self, device: Any) -> bool:
        return device is None or str(device).startswith(self.prefix) or str(device) == "JAX"

    def dtype_here(self, dtype: Any, op: str | None = None) -> Any:
        """``dtype`` (a name, or None) as JAX's where the device holds it; on a narrowing
        device the 32-bit one of a 64-bit dtype's kind (``Backend.dtype_for``: warned once
        for ``array_api::<op>`` and counted, as the fallback would); else False."""
        if dtype is None:
            return None
        d = np.dtype(dtype)
        if d in self.held:
            return d
        if not self.narrow or d.name not in _NARROWED:
            return False
        overload = getattr(bf.ops.array_api, op).default if op else None
        return np.dtype(self.backend.dtype_for(d, op=overload))

    # -- building kernels ----------------------------------------------------------------------

    def add(self, key: str, compute: Kernel) -> None:
        """``compute(*args, **kwargs)`` returns the result's payloads (an array, or a tuple of
        them), or None to hand the call to the CPU fallback."""
        name, _, overload = key.partition(".")
        op = getattr(getattr(bf.ops.array_api, name), overload or "default")
        wrap, fallback, cpu = self.wrap, bf.call_fallback, bf.cpu_fallback

        def kernel(*args: Any, **kwargs: Any) -> Any:
            try:
                out = compute(*args, **kwargs)
            except NoDevice:
                raise
            except (TypeError, ValueError, IndexError):
                out = None  # a case JAX refuses: NumPy's kernel says what was wrong
            if out is None:
                return fallback(cpu, op, *args, **kwargs)
            if type(out) is tuple:
                return tuple(wrap(o) for o in out)
            return wrap(out)

        kernel.__name__ = kernel.__qualname__ = f"jax_{key.replace('.', '_')}"
        self.table[key] = kernel

    def lean(self, key: str, kernel: Kernel) -> None:
        """Registers ``kernel`` as it is: a hot kernel that does its own payload checks and
        hands the call to the CPU fallback itself (no wrapper between dispatch and JAX)."""
        kernel.__name__ = kernel.__qualname__ = f"jax_{key.replace('.', '_')}"
        self.table[key] = kernel

    def on_payloads(self, key: str, jitted: Callable[..., Any], kinds: str, kernel: Kernel) -> None:
        """Registers ``jitted`` as a ``bf.PayloadKernel``: boxfall hands it the payloads of a
        call whose tensors are all of one dtype of ``kinds`` and wraps its result, with no
        Python frame between dispatch and JAX (on a TPU's host each frame after a launch runs
        with cold caches); ``kernel``, a lean kernel, serves every other call."""
        self.lean(key, kernel)
        self.table[key] = bf.PayloadKernel(
            jitted, dtypes=sorted(self.kinds_held(kinds), key=str), otherwise=kernel
        )

    def lean_parts(self) -> tuple[Any, Any, Any, str, Any]:
        """What a lean kernel binds as locals (its hot path looks up no global): the wrap of
        a result, ``bf.call_fallback``, ``bf.cpu_fallback``, the device prefix, ``bf.Tensor``."""
        return self.wrap, bf.call_fallback, bf.cpu_fallback, self.prefix, bf.Tensor

    def unary(self, name: str, fn: Callable[[Any], Any], kinds: str) -> None:
        kinds = _with_extension(kinds)
        op = getattr(bf.ops.array_api, name).default
        wrap, fallback, cpu, prefix, tensor = self.lean_parts()
        jitted = jax.jit(fn)

        def kernel(x: Any) -> Any:
            if type(x) is tensor and x.device.startswith(prefix):
                a = x.payload
                if (type(a) is _ARRAY_TYPE or isinstance(a, _TRACER)) and a.dtype.kind in kinds:
                    return wrap(jitted(a))
            return fallback(cpu, op, x)

        self.on_payloads(name, jitted, kinds, kernel)

    def kinds_held(self, kinds: str) -> frozenset[np.dtype[Any]]:
        """The dtypes of ``kinds`` that the device declares: a set lookup answers a hot
        path's usual case, where ``a.dtype.kind in kinds`` is two attribute reads and a
        string search (kept for the rest)."""
        return frozenset(d for d in self.held if d.kind in kinds)

    def binary(self, name: str, fn: Callable[[Any, Any], Any], kinds: str) -> None:
        kinds = _with_extension(kinds)
        held = self.kinds_held(kinds)
        packet = getattr(bf.ops.array_api, name)
        ops = (packet.default, packet.Tensor_Scalar, packet.Scalar_Tensor)
        wrap, fallback, cpu, prefix, tensor = self.lean_parts()
        jitted = jax.jit(fn)

        def tensors(x1: Any, x2: Any) -> Any:
            # Both tensors of this backend, one dtype that JAX computes as NumPy does; anything
            # else (NumPy's promotion, a CPU array, a broadcast JAX refuses) is NumPy's to do.
            if type(x1) is tensor and type(x2) is tensor:
                a, b = x1.payload, x2.payload
                if (type(a) is _ARRAY_TYPE or isinstance(a, _TRACER)) and (
                    type(b) is _ARRAY_TYPE or isinstance(b, _TRACER)
                ):
                    d = a.dtype
                    if (
                        (d is b.dtype or d == b.dtype)
                        and (d in held or d.kind in kinds)
                        and x1.device.startswith(prefix)
                        and x2.device.startswith(prefix)
                    ):
                        try:
                            return wrap(jitted(a, b))
                        except (TypeError, ValueError):
                            pass
            return fallback(cpu, ops[0], x1, x2)

        compare = _COMPARE.get(name)

        def tensor_scalar(x1: Any, x2: Any) -> Any:
            if type(x1) is tensor and x1.device.startswith(prefix):
                a = x1.payload
                if type(a) is _ARRAY_TYPE or isinstance(a, _TRACER):
                    if scalar_fits(a.dtype, x2, kinds):
                        try:
                            return wrap(jitted(a, x2))
                        except OverflowError:
                            return wrap(jitted(a, exact(x2, a.dtype)))
                    bounds = _INT_RANGE.get(a.dtype)
                    if compare is not None and bounds is not None and type(x2) is int:
                        # an int outside the dtype's range (one inside it fits): every element
                        # compares as the dtype's least value does
                        return wrap(_filled_like(a, compare(bounds[0], x2)))
            return fallback(cpu, ops[1], x1, x2)

        def scalar_tensor(x1: Any, x2: Any) -> Any:
            if type(x2) is tensor and x2.device.startswith(prefix):
                b = x2.payload
                if type(b) is _ARRAY_TYPE or isinstance(b, _TRACER):
                    if scalar_fits(b.dtype, x1, kinds):
                        try:
                            return wrap(jitted(x1, b))
                        except OverflowError:
                            return wrap(jitted(exact(x1, b.dtype), b))
                    bounds = _INT_RANGE.get(b.dtype)
                    if compare is not None and bounds is not None and type(x1) is int:
                        return wrap(_filled_like(b, compare(x1, bounds[0])))
            return fallback(cpu, ops[2], x1, x2)

        self.on_payloads(name, jitted, kinds, tensors)
        self.lean(f"{name}.Tensor_Scalar", tensor_scalar)
        self.lean(f"{name}.Scalar_Tensor", scalar_tensor)

    def in_place(self, name: str, fn: Callable[[Any, Any], Any], kinds: str) -> None:
        """``x1 op= x2``: the new values are a new array (JAX's are immutable), which boxfall
        puts in ``x1``'s place; NumPy's rule that the result keeps ``x1``'s shape and dtype
        decides which cases run here."""
        kinds = _with_extension(kinds)
        pay, jitted = self.payload, jax.jit(fn)

        def fits(a: Any, out: Any) -> Any:
            return out if out.shape == a.shape and out.dtype == a.dtype else None

        def tensors(x1: Any, x2: Any) -> Any:
            a, b = pay(x1), pay(x2)
            if a is None or b is None or a.dtype != b.dtype or a.dtype.kind not in kinds:
                return None
            return fits(a, jitted(a, b))

        def scalar(x1: Any, x2: Any) -> Any:
            a = pay(x1)
            if a is None or not scalar_fits(a.dtype, x2, kinds):
                return None
            try:
                return fits(a, jitted(a, x2))
            except OverflowError:
                return fits(a, jitted(a, exact(x2, a.dtype)))

        self.add(f"{name}_", tensors)
        self.add(f"{name}_.Scalar", scalar)


def _jit(fn: Callable[..., Any], *static: str) -> Callable[..., Any]:
    """``fn`` compiled by ``jax.jit`` (its C++ dispatch is a third quicker than an eager
    ``jax.numpy`` call), the keywords ``static`` taken as compile-time constants."""
    return jax.jit(fn, static_argnames=static)
