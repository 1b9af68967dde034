"""The JAX backend's kernels: ``jax.numpy`` for the ``array_api`` operators a workload spends its
time in, registered as a user would (``bf.Library("array_api", "IMPL").impl(...)``).

Each kernel takes the cases whose result JAX computes as NumPy's kernel does (the same dtype
rule, the same values within floating rounding) and hands every other case to the CPU fallback
(``bf.call_fallback``), which then raises NumPy's error or computes NumPy's result: mixed
dtypes (NumPy's promotion), integer division, the standard's special cases that
``boxfall.array_api``'s own kernels handle, shapes that do not fit. A case JAX refuses (a shape
error at trace time) goes the same way, so an error always reads as NumPy's.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import boxfall as bf

from ._hooks import device_of
from ._index_kernels import indexing

Kernel = Callable[..., Any]

_ARRAY_TYPE = type(jnp.zeros(()))
# A graph's program (graph mode, ``bj.namespace(graph=True)``) runs the kernels under
# ``jax.jit`` on traced arrays: each check below takes one after the concrete type's, so that an
# eager call pays nothing for it.
_TRACER = jax.core.Tracer


class _Checks(threading.local):
    """The checks a graph's program collects while JAX traces it in this thread (None outside
    such a trace): per check, a traced bool (True: the node's values are what NumPy computes)
    and the error NumPy raises where it is False."""

    found: list[tuple[Any, type[Exception], str]] | None = None


CHECKS = _Checks()


@contextlib.contextmanager
def collecting_checks() -> Iterator[list[tuple[Any, type[Exception], str]]]:
    """Collects the checks of the kernels traced in the block (a graph's program)."""
    saved, CHECKS.found = CHECKS.found, []
    try:
        yield CHECKS.found
    finally:
        CHECKS.found = saved


def checked(out: Any, ok: Any, error: type[Exception], message: str, excused: Any = None) -> Any:
    """``out``, a kernel's result whose JAX function gives numbers where NumPy raises (a
    singular ``solve``, an index out of range), and ``ok``, whether it is surely NumPy's.

    Eager: the flag is read, which waits for the device (a sync on each call of these few
    kernels: the price of NumPy's error), and a False hands the call to the CPU fallback
    (None), which raises NumPy's error or computes NumPy's result. Traced by a graph's
    program: the flag joins the program's checks, read when the sync commits the run's
    results, and a False fails the run with ``error`` (the sync then finds the node that
    failed); ``excused`` (a NaN or an infinity in: NumPy's numbers are NaNs too, mostly)
    passes there, as a failed run with every node computed would be the program's fault."""
    if isinstance(ok, _TRACER):
        found = CHECKS.found
        if found is not None:
            found.append((ok if excused is None else ok | excused, error, message))
        return out
    return out if bool(ok) else None


def _with_check(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a solve, an inverse, a factorization) returning its result, whether that is
    finite, and whether some input is not: LAPACK's refusals (a singular matrix, one not
    positive definite) are infinities and NaNs in JAX's results; a NaN in gives NaNs out,
    where NumPy computes or raises. One compiled program."""

    def checks(*arrays: Any, **static: Any) -> Any:
        out = fn(*arrays, **static)
        finite_in = jnp.all(jnp.stack([jnp.isfinite(a).all() for a in arrays]))
        return out, jnp.isfinite(out).all(), jnp.logical_not(finite_in)

    return checks


def _take_in_range(a: Any, i: Any, *, axis: Any) -> Any:
    """``jnp.take`` (which fills an index out of range with NaN, or clamps) and whether every
    index is one NumPy takes: ``-n <= i < n``."""
    n = a.shape[0 if axis is None else axis]
    return jnp.take(a, i, axis=axis), jnp.all((i >= -n) & (i < n))


_NARROWED = ("int64", "uint64", "float64", "complex128")

_EXTENSION = {"bfloat16": jnp.bfloat16}
"""Extension dtypes a JAX device holds, by name (NumPy knows them through ml_dtypes)."""

_INT_RANGE = {
    np.dtype(name): (int(np.iinfo(name).min), int(np.iinfo(name).max))
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
}

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

_REDUCTIONS: dict[str, tuple[Callable[..., Any], str]] = {
    # name: (jax function of (x, axis, keepdims), kinds); empty inputs go to NumPy
    "max": (jnp.max, "biuf"),
    "min": (jnp.min, "biuf"),
    "all": (jnp.all, "biufc"),
    "any": (jnp.any, "biufc"),
    "mean": (jnp.mean, "fc"),
}


_where = jax.jit(jnp.where)
_cumulative_sum = jax.jit(jnp.cumulative_sum, static_argnames=("axis", "dtype", "include_initial"))
_matmul = jax.jit(jnp.matmul)
_tensordot = jax.jit(jnp.tensordot, static_argnames=("axes",))
_vecdot = jax.jit(jnp.vecdot, static_argnames=("axis",))
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
_vector_norm = jax.jit(jnp.linalg.vector_norm, static_argnames=("axis", "keepdims", "ord"))
_solve = jax.jit(_with_check(jnp.linalg.solve))
_cholesky = jax.jit(_with_check(jnp.linalg.cholesky), static_argnames=("upper",))
_inv = jax.jit(_with_check(jnp.linalg.inv))
_astype = jax.jit(lambda a, dtype: a.astype(dtype), static_argnames=("dtype",))
# An array of `a`'s shape holding one bool (a comparison with an int outside `a`'s dtype).
_filled_like = jax.jit(lambda a, value: jnp.full(a.shape, value, dtype=jnp.bool_))
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


def _statistics(k: _Kernels) -> None:
    pay = k.payload

    def reduction(fn: Callable[..., Any], kinds: str) -> Kernel:
        def compute(x: Any, *, axis: Any = None, keepdims: bool = False) -> Any:
            a = pay(x)
            if a is None or a.size == 0 or a.dtype.kind not in kinds:
                return None
            return fn(a, axis=_axes(axis), keepdims=keepdims)

        return compute

    for name, (fn, kinds) in _REDUCTIONS.items():
        k.add(name, reduction(_jit(fn, "axis", "keepdims"), _with_extension(kinds)))

    def accumulate(name: str, fn: Callable[..., Any]) -> Kernel:
        def compute(x: Any, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
            a, d = pay(x), k.dtype_here(dtype, name)
            # Integer sums accumulate in the default integer dtype, in JAX as in the standard
            # (int64 with x64, else int32, what the device's narrowing gives NumPy's result).
            if a is None or d is False or a.dtype.kind not in "biufc":
                return None
            return fn(a, axis=_axes(axis), dtype=d, keepdims=keepdims)

        return compute

    k.add("sum", accumulate("sum", _jit(jnp.sum, "axis", "dtype", "keepdims")))
    k.add("prod", accumulate("prod", _jit(jnp.prod, "axis", "dtype", "keepdims")))

    def spread(fn: Callable[..., Any]) -> Kernel:
        def compute(
            x: Any, *, axis: Any = None, correction: Any = 0, keepdims: bool = False
        ) -> Any:
            a = pay(x)
            if a is None or a.size == 0 or a.dtype.kind != "f":
                return None
            return fn(a, axis=_axes(axis), ddof=correction, keepdims=keepdims)

        return compute

    k.add("std", spread(_jit(jnp.std, "axis", "ddof", "keepdims")))
    k.add("var", spread(_jit(jnp.var, "axis", "ddof", "keepdims")))

    def arg(fn: Callable[..., Any]) -> Kernel:
        def compute(x: Any, *, axis: Any = None, keepdims: bool = False) -> Any:
            a = pay(x)
            if a is None or a.size == 0 or a.dtype.kind not in "biuf":
                return None
            return fn(a, axis=axis, keepdims=keepdims)

        return compute

    k.add("argmax", arg(_jit(jnp.argmax, "axis", "keepdims")))
    k.add("argmin", arg(_jit(jnp.argmin, "axis", "keepdims")))

    def cumulative_sum(
        x: Any, *, axis: Any = None, dtype: Any = None, include_initial: bool = False
    ) -> Any:
        a, d = pay(x), k.dtype_here(dtype, "cumulative_sum")
        if a is None or d is False or a.dtype.kind not in "fc" or (axis is None and a.ndim != 1):
            return None
        return _cumulative_sum(a, axis=axis, dtype=d, include_initial=include_initial)

    k.add("cumulative_sum", cumulative_sum)


def _linear_algebra(k: _Kernels) -> None:
    pay = k.payload

    def same(*tensors: Any) -> list[Any] | None:
        arrays = [pay(t) for t in tensors]
        first = arrays[0]
        if first is None or first.dtype.kind not in "iufc":
            return None
        if any(a is None or a.dtype != first.dtype for a in arrays[1:]):
            return None
        return arrays

    def matmul(x1: Any, x2: Any) -> Any:
        ab = same(x1, x2)
        return None if ab is None else _matmul(ab[0], ab[1])

    def tensordot(x1: Any, x2: Any, *, axes: Any = 2) -> Any:
        ab = same(x1, x2)
        if ab is None:
            return None
        if isinstance(axes, list):
            axes = tuple(tuple(a) for a in axes)
        return _tensordot(ab[0], ab[1], axes=axes)

    def vecdot(x1: Any, x2: Any, *, axis: int = -1) -> Any:
        ab = same(x1, x2)
        return None if ab is None else _vecdot(ab[0], ab[1], axis=axis)

    k.add("matmul", matmul)
    k.add("tensordot", tensordot)
    k.add("tensordot.axes", tensordot)
    k.add("vecdot", vecdot)

    # A singular matrix (one not positive definite) is NumPy's LinAlgError, which JAX's
    # solve, inv and cholesky give as infinities and NaNs: they check (`checked`).
    LinAlgError = np.linalg.LinAlgError  # noqa: N806  (NumPy's class)
    on = k.backend.name

    # The decompositions JAX holds on the device: float32 and complex64 everywhere; 64-bit
    # ones only off a TPU (there JAX's float64 solve, inv and slogdet raise).
    linalg_kinds: set[np.dtype[Any]] = {np.dtype("float32"), np.dtype("complex64")}
    if not k.on_tpu:
        linalg_kinds |= {np.dtype("float64"), np.dtype("complex128")}

    def square(x: Any) -> Any:
        a = pay(x)
        if a is None or a.dtype not in linalg_kinds or a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            return None
        if a.size == 0:
            return None
        return a

    def solve(x1: Any, x2: Any) -> Any:
        a, b = square(x1), pay(x2)
        if a is None or b is None or b.dtype != a.dtype or a.ndim != 2 or b.ndim > 2:
            return None
        if b.shape[0] != a.shape[0]:
            return None
        why = f"array_api::linalg_solve on {on}: Singular matrix"
        out, ok, excused = _solve(a, b)
        return checked(out, ok, LinAlgError, why, excused)

    def cholesky(x: Any, *, upper: bool = False) -> Any:
        a = square(x)
        if a is None:
            return None
        out, ok, excused = _cholesky(a, upper=upper)
        why = f"array_api::linalg_cholesky on {on}: Matrix is not positive definite"
        return checked(out, ok, LinAlgError, why, excused)

    def inv(x: Any) -> Any:
        a = square(x)
        if a is None:
            return None
        why = f"array_api::linalg_inv on {on}: Singular matrix"
        out, ok, excused = _inv(a)
        return checked(out, ok, LinAlgError, why, excused)

    def one(fn: Callable[[Any], Any]) -> Kernel:
        def compute(x: Any) -> Any:
            a = square(x)
            return None if a is None else fn(a)

        return compute

    k.add("linalg_solve", solve)
    k.add("linalg_cholesky", cholesky)
    k.add("linalg_inv", inv)
    k.add("linalg_det", one(_jit(jnp.linalg.det)))
    k.add("linalg_slogdet", one(_jit(lambda a: tuple(jnp.linalg.slogdet(a)))))
    k.add("linalg_eigh", one(_jit(lambda a: tuple(jnp.linalg.eigh(a)))))
    k.add("linalg_eigvalsh", one(_jit(jnp.linalg.eigvalsh)))

    def vector_norm(x: Any, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
        a = pay(x)
        if a is None or a.dtype.kind not in "fc" or a.size == 0 or type(ord) not in (int, float):
            return None
        return _vector_norm(a, axis=_axes(axis), keepdims=keepdims, ord=ord)

    k.add("linalg_vector_norm", vector_norm)


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
        d = kern.dtype_here(dtype)
        if d is False or (d is not None and d != obj.dtype):
            return None
        if obj.devices() != {at}:
            return jax.device_put(obj, at)
        return obj

    kern.add("asarray", asarray)


def register(
    backend: bf.Backend,
    device: jax.Device,
    in_place: bool = True,
    devices: Sequence[jax.Device] = (),
) -> tuple[bf.Library, list[str]]:
    """Registers the kernels for ``backend`` (new payloads on ``device``, or on the device of
    ``devices`` a creation operator names) in a new
    ``array_api`` library, which the caller keeps for as long as the kernels should serve, and
    returns it with the operators it serves. ``in_place=False`` leaves the in-place operators
    (``x += y``) to the CPU fallback."""
    kern = _Kernels(backend, device, devices)
    _elementwise(kern)
    _statistics(kern)
    _linear_algebra(kern)
    _manipulation(kern)
    _creation(kern)
    indexing(kern)
    lib = bf.Library("array_api", "IMPL")
    names = []
    for key, kernel in kern.table.items():
        if in_place or not key.partition(".")[0].endswith("_"):
            lib.impl(key, kernel, backend.name)
            names.append(key)
    return lib, sorted(names)
