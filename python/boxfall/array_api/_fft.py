"""The ``fft`` extension of the standard, as data: each function is the operator
``array_api::fft_<name>`` with NumPy's ``numpy.fft`` function as its CPU kernel; the public
functions live in ``boxfall.array_api.fft`` (``xp.fft``).

- ``fft``, ``ifft``, ``rfft``, ``irfft``, ``hfft``, ``ihfft``:
  ``fft_<name>(Tensor x, *, int? n=None, int axis=-1, str norm="backward") -> Tensor``;
- ``fftn``, ``ifftn``, ``rfftn``, ``irfftn``:
  ``fft_<name>(Tensor x, *, int[]? s=None, int[]? axes=None, str norm="backward") -> Tensor``;
- ``fftshift``, ``ifftshift``: ``fft_<name>(Tensor x, *, int[1]? axes=None) -> Tensor``;
- ``fftfreq``, ``rfftfreq``: ``fft_<name>(int n, *, float d=1.0, str? dtype=None,
  Device? device=None) -> Tensor``, which dispatch on ``device`` as the creation functions do
  (``namespace(device).fft`` defaults it to the namespace's device).

NumPy keeps single precision (``complex64`` in, ``complex64`` out; ``float32`` to
``complex64``), as the standard asks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._registry import Op, dtype_name, register


def _one(f: Any) -> Any:
    def kernel(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
        return f(x, n=n, axis=axis, norm=norm)

    kernel.__name__ = f.__name__
    kernel.__doc__ = f"NumPy's ``numpy.fft.{f.__name__}`` along ``axis``."
    return kernel


def _many(f: Any) -> Any:
    def kernel(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
        s = None if s is None else tuple(s)
        if axes is None and s is not None:
            axes = range(-len(s), 0)  # the standard's (and NumPy's) last len(s) axes
        axes = None if axes is None else tuple(axes)
        return f(x, s=s, axes=axes, norm=norm)

    kernel.__name__ = f.__name__
    kernel.__doc__ = f"NumPy's ``numpy.fft.{f.__name__}`` over ``axes``."
    return kernel


def _shift(f: Any) -> Any:
    def kernel(x: Any, /, *, axes: Any = None) -> Any:
        return f(x, axes=None if axes is None else tuple(axes))

    kernel.__name__ = f.__name__
    kernel.__doc__ = f"NumPy's ``numpy.fft.{f.__name__}``."
    return kernel


def _freq(f: Any) -> Any:
    def kernel(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
        return f(n, d=d).astype(dtype or np.float64, copy=False)

    kernel.__name__ = f.__name__
    kernel.__doc__ = f"NumPy's ``numpy.fft.{f.__name__}``, in ``dtype`` (float64 by default)."
    return kernel


ONE = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
MANY = ("fftn", "ifftn", "rfftn", "irfftn")
SHIFT = ("fftshift", "ifftshift")
FREQ = ("fftfreq", "rfftfreq")

_P = "fft_"

OPS, _ = register(
    [
        *(
            Op(
                f'{_P}{n}(Tensor x, *, int? n=None, int axis=-1, str norm="backward") -> Tensor',
                _one(getattr(np.fft, n)),
                False,
            )
            for n in ONE
        ),
        *(
            Op(
                f"{_P}{n}(Tensor x, *, int[]? s=None, int[]? axes=None, "
                f'str norm="backward") -> Tensor',
                _many(getattr(np.fft, n)),
                False,
            )
            for n in MANY
        ),
        *(
            Op(
                f"{_P}{n}(Tensor x, *, int[1]? axes=None) -> Tensor",
                _shift(getattr(np.fft, n)),
                False,
            )
            for n in SHIFT
        ),
        *(
            Op(
                f"{_P}{n}(int n, *, float d=1.0, str? dtype=None, Device? device=None) -> Tensor",
                _freq(getattr(np.fft, n)),
                False,
            )
            for n in FREQ
        ),
    ]
)


def _public(name: str) -> Any:
    from ._registry import with_arrays

    op = with_arrays(OPS[f"{_P}{name}"])
    if name in ONE:

        def fn(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
            return op(x, n=n, axis=axis, norm=norm)

    elif name in MANY:

        def fn(  # type: ignore[misc]
            x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward"
        ) -> Any:
            return op(
                x,
                s=None if s is None else list(s),
                axes=None if axes is None else list(axes),
                norm=norm,
            )

    elif name in SHIFT:

        def fn(x: Any, /, *, axes: Any = None) -> Any:  # type: ignore[misc]
            return op(x, axes=axes)

    else:
        from ._creation_functions import _device

        def fn(  # type: ignore[misc]
            n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None
        ) -> Any:
            return op(n, d=d, dtype=dtype_name(dtype), device=_device(device))

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "boxfall.array_api.fft"
    fn.__doc__ = f"The operator ``array_api::{_P}{name}``: {OPS[_P + name].schema}."
    return fn


globals().update({n: _public(n) for n in (*ONE, *MANY, *SHIFT, *FREQ)})

DEVICE_DEFAULTED = FREQ
"""The functions whose ``device=None`` means the namespace's device."""

__all__ = sorted([*ONE, *MANY, *SHIFT, *FREQ])
