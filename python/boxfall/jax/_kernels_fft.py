"""The JAX backend's kernels of the standard's ``fft`` extension: ``jax.numpy.fft``, whose
dtypes are the standard's (float32 and complex64 stay single precision, as boxfall's CPU kernel
keeps them). A TPU transforms single precision only: there a 64-bit input (x64 on) goes to the
CPU fallback."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._kernels_base import _Kernels

_NORMS = ("backward", "ortho", "forward")

_ONE: dict[str, tuple[Any, str]] = {
    # name: (jax function of (x, n, axis, norm), the input kinds it takes)
    "fft": (jnp.fft.fft, "fc"),
    "ifft": (jnp.fft.ifft, "fc"),
    "rfft": (jnp.fft.rfft, "f"),
    "irfft": (jnp.fft.irfft, "fc"),
    "hfft": (jnp.fft.hfft, "fc"),
    "ihfft": (jnp.fft.ihfft, "f"),
}
_MANY: dict[str, tuple[Any, str]] = {
    "fftn": (jnp.fft.fftn, "fc"),
    "ifftn": (jnp.fft.ifftn, "fc"),
    "rfftn": (jnp.fft.rfftn, "f"),
    "irfftn": (jnp.fft.irfftn, "fc"),
}
_shift = {
    name: jax.jit(fn, static_argnames=("axes",))
    for name, fn in (("fftshift", jnp.fft.fftshift), ("ifftshift", jnp.fft.ifftshift))
}


@functools.partial(jax.jit, static_argnames=("n", "real", "work", "dtype"))
def _freq(d: Any, *, n: int, real: bool, work: Any, dtype: Any) -> Any:
    """NumPy's ``fftfreq``/``rfftfreq``, computed in ``work`` (float64 where the device holds
    it, as NumPy computes) and cast to ``dtype``; ``d`` an argument: a new spacing compiles
    nothing."""
    fn = jnp.fft.rfftfreq if real else jnp.fft.fftfreq
    return fn(n, d=jnp.asarray(d, work), dtype=work).astype(dtype)


def _fft(k: _Kernels) -> None:
    pay = k.payload
    # a TPU's FFT is of single precision only
    single = {np.dtype("float32"), np.dtype("complex64")}

    def takes(x: Any, kinds: str, norm: str) -> Any:
        a = pay(x)
        if a is None or a.ndim == 0 or a.dtype.kind not in kinds or norm not in _NORMS:
            return None
        if k.on_tpu and a.dtype not in single:
            return None
        return a

    def one(fn: Any, kinds: str) -> Any:
        jitted = jax.jit(fn, static_argnames=("n", "axis", "norm"))

        def compute(x: Any, *, n: Any = None, axis: int = -1, norm: str = "backward") -> Any:
            a = takes(x, kinds, norm)
            if a is None or (n is not None and n < 1) or not -a.ndim <= axis < a.ndim:
                return None
            return jitted(a, n=n, axis=axis, norm=norm)

        return compute

    def many(fn: Any, kinds: str) -> Any:
        jitted = jax.jit(fn, static_argnames=("s", "axes", "norm"))

        def compute(x: Any, *, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
            a = takes(x, kinds, norm)
            if a is None:
                return None
            shape = None if s is None else tuple(int(v) for v in s)
            dims = None if axes is None else tuple(int(v) for v in axes)
            if shape is not None and (any(v < 1 for v in shape) or dims is None):
                return None  # NumPy 2's rule for s without axes: its own kernel says it
            if dims is not None and (
                any(not -a.ndim <= v < a.ndim for v in dims)
                or len({v % a.ndim for v in dims}) != len(dims)
            ):
                return None
            return jitted(a, s=shape, axes=dims, norm=norm)

        return compute

    for name, (fn, kinds) in _ONE.items():
        k.add(f"fft_{name}", one(fn, kinds))
    for name, (fn, kinds) in _MANY.items():
        k.add(f"fft_{name}", many(fn, kinds))

    def shift(name: str) -> Any:
        jitted = _shift[name]

        def compute(x: Any, *, axes: Any = None) -> Any:
            a = pay(x)
            if a is None:
                return None
            dims = None if axes is None else tuple(int(v) for v in axes)
            if dims is not None and any(not -a.ndim <= v < a.ndim for v in dims):
                return None
            return jitted(a, axes=dims)

        return compute

    k.add("fft_fftshift", shift("fftshift"))
    k.add("fft_ifftshift", shift("ifftshift"))

    work = np.dtype("float64") if np.dtype("float64") in k.held else np.dtype("float32")

    def freq(name: str, real: bool) -> Any:
        def compute(n: int, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
            at = k.target(device)
            if at is None or type(n) is not int or n < 1 or type(d) not in (int, float):
                return None
            out = k.dtype_here(dtype, name) if dtype is not None else work
            if out is False or out is None or out.kind != "f":
                return None
            if d == 0:
                return None  # NumPy's division by zero
            return k.placed(_freq(float(d), n=n, real=real, work=work, dtype=out), at)

        return compute

    k.add("fft_fftfreq", freq("fft_fftfreq", False))
    k.add("fft_rfftfreq", freq("fft_rfftfreq", True))
