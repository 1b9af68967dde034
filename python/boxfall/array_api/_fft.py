"""The ``fft`` extension of the standard, as data: each function is the operator
``array_api::fft_<name>`` with a NumPy CPU kernel (``numpy.fft``); the public functions live in
``boxfall.array_api.fft`` (and ``namespace(device).fft``, whose ``fftfreq``/``rfftfreq``
default to the namespace's device).

Schemas: the one-dimensional transforms are ``fft_<name>(Tensor x, *, int? n=None, int
axis=-1, str norm="backward")``, the n-dimensional ones ``fft_<name>(Tensor x, *, int[]?
s=None, int[]? axes=None, str norm="backward")``, the shifts take ``int[1]? axes`` (an int or
a sequence), and ``fft_fftfreq``/``fft_rfftfreq`` are creation functions: ``(int n, *, float
d=1.0, str? dtype=None, Device? device=None)``, dispatched on ``device`` (c10's BackendSelect),
as ``_creation_functions`` explains.

Dtypes, as the standard says: ``fft``/``ifft``/``fftn``/``ifftn`` keep a complex input's dtype
(a real one becomes the complex dtype of its precision); ``rfft``/``rfftn``/``ihfft`` give the
complex dtype of the input's precision, ``irfft``/``irfftn``/``hfft`` the real one; so float32
and complex64 stay single precision (NumPy < 2 computes in double precision: the kernels cast
back). ``fftfreq``/``rfftfreq`` are the default real floating dtype (float64) unless ``dtype``
is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._registry import Op, dtype_name, register

_SINGLE = (np.dtype("float32"), np.dtype("complex64"))


def _complex_of(x: Any) -> np.dtype:
    """The complex dtype of ``x``'s precision (complex128 for anything not single)."""
    return np.dtype("complex64") if x.dtype in _SINGLE else np.dtype("complex128")


def _real_of(x: Any) -> np.dtype:
    """The real floating dtype of ``x``'s precision (float64 for anything not single)."""
    return np.dtype("float32") if x.dtype in _SINGLE else np.dtype("float64")


def _seq(v: Any) -> Any:
    return None if v is None else tuple(v)


def _fft(x: Any, /, *, n: Any = None, axis: int = -1, norm: Any = "backward") -> Any:
    return np.fft.fft(x, n=n, axis=axis, norm=norm).astype(_complex_of(x), copy=False)


def _ifft(x: Any, /, *, n: Any = None, axis: int = -1, norm: Any = "backward") -> Any:
    return np.fft.ifft(x, n=n, axis=axis, norm=norm).astype(_complex_of(x), copy=False)


def _fftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: Any = "backward") -> Any:
    out = np.fft.fftn(x, s=_seq(s), axes=_seq(axes), norm=norm)
    return out.astype(_complex_of(x), copy=False)


def _ifftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: Any = "backward") -> Any:
    out = np.fft.ifftn(x, s=_seq(s), axes=_seq(axes), norm=norm)
    return out.astype(_complex_of(x), copy=False)


def _rfft(x: Any, /, *, n: Any = None, axis: int = -1, norm: Any = "backward") -> Any:
    return np.fft.rfft(x, n=n, axis=axis, norm=norm).astype(_complex_of(x), copy=False)


def _irfft(x: Any, /, *, n: Any = None, axis: int = -1, norm: Any = "backward") -> Any:
    return np.fft.irfft(x, n=n, axis=axis, norm=norm).astype(_real_of(x), copy=False)


def _rfftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: Any = "backward") -> Any:
    out = np.fft.rfftn(x, s=_seq(s), axes=_seq(axes), norm=norm)
    return out.astype(_complex_of(x), copy=False)


def _irfftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: Any = "backward") -> Any:
    out = np.fft.irfftn(x, s=_seq(s), axes=_seq(axes), norm=norm)
    return out.astype(_real_of(x), copy=False)


def _hfft(x: Any, /, *, n: Any = None, axis: int = -1, norm: Any = "backward") -> Any:
    return np.fft.hfft(x, n=n, axis=axis, norm=norm).astype(_real_of(x), copy=False)


def _ihfft(x: Any, /, *, n: Any = None, axis: int = -1, norm: Any = "backward") -> Any:
    return np.fft.ihfft(x, n=n, axis=axis, norm=norm).astype(_complex_of(x), copy=False)


def _freq_dtype(dtype: Any) -> np.dtype:
    out = np.dtype("float64") if dtype is None else np.dtype(dtype)
    if out.kind != "f":
        raise ValueError(f"fftfreq/rfftfreq give a real floating dtype, not {out}")
    return out


def _fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
    return np.fft.fftfreq(n, d=d).astype(_freq_dtype(dtype), copy=False)


def _rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
    return np.fft.rfftfreq(n, d=d).astype(_freq_dtype(dtype), copy=False)


def _axes(axes: Any) -> Any:
    if axes is None:
        return None
    return tuple(axes) if isinstance(axes, (list, tuple)) else axes


def _fftshift(x: Any, /, *, axes: Any = None) -> Any:
    return np.fft.fftshift(x, axes=_axes(axes))


def _ifftshift(x: Any, /, *, axes: Any = None) -> Any:
    return np.fft.ifftshift(x, axes=_axes(axes))


_P = "fft_"
_ONE = 'Tensor x, *, int? n=None, int axis=-1, str norm="backward"'
_MANY = 'Tensor x, *, int[]? s=None, int[]? axes=None, str norm="backward"'
_FREQ = "int n, *, float d=1.0, str? dtype=None, Device? device=None"
OPS, _ = register(
    [
        Op(f"{_P}fft({_ONE}) -> Tensor", _fft, False),
        Op(f"{_P}ifft({_ONE}) -> Tensor", _ifft, False),
        Op(f"{_P}fftn({_MANY}) -> Tensor", _fftn, False),
        Op(f"{_P}ifftn({_MANY}) -> Tensor", _ifftn, False),
        Op(f"{_P}rfft({_ONE}) -> Tensor", _rfft, False),
        Op(f"{_P}irfft({_ONE}) -> Tensor", _irfft, False),
        Op(f"{_P}rfftn({_MANY}) -> Tensor", _rfftn, False),
        Op(f"{_P}irfftn({_MANY}) -> Tensor", _irfftn, False),
        Op(f"{_P}hfft({_ONE}) -> Tensor", _hfft, False),
        Op(f"{_P}ihfft({_ONE}) -> Tensor", _ihfft, False),
        Op(f"{_P}fftfreq({_FREQ}) -> Tensor", _fftfreq, False),
        Op(f"{_P}rfftfreq({_FREQ}) -> Tensor", _rfftfreq, False),
        Op(f"{_P}fftshift(Tensor x, *, int[1]? axes=None) -> Tensor", _fftshift, False),
        Op(f"{_P}ifftshift(Tensor x, *, int[1]? axes=None) -> Tensor", _ifftshift, False),
    ]
)


def _op(name: str) -> Any:
    return OPS[f"{_P}{name}"]


def _list(v: Any) -> Any:
    # A single int where the standard says a sequence is a caller's slip: say so clearly.
    if v is None:
        return None
    if isinstance(v, int):
        raise TypeError(f"s and axes are sequences of ints, not {v!r}")
    return [int(i) for i in v]


def fft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_fft``: the one-dimensional discrete Fourier transform
    along ``axis`` (zero-padded or trimmed to ``n``); ``x``'s complex dtype."""
    return _op("fft")(x, n=n, axis=axis, norm=norm)


def ifft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_ifft``: the inverse of ``fft``."""
    return _op("ifft")(x, n=n, axis=axis, norm=norm)


def fftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_fftn``: the n-dimensional transform over ``axes`` (every
    axis when None), each padded or trimmed to ``s``."""
    return _op("fftn")(x, s=_list(s), axes=_list(axes), norm=norm)


def ifftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_ifftn``: the inverse of ``fftn``."""
    return _op("ifftn")(x, s=_list(s), axes=_list(axes), norm=norm)


def rfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_rfft``: the transform of a real input, ``n//2 + 1``
    frequencies along ``axis``, the complex dtype of ``x``'s precision."""
    return _op("rfft")(x, n=n, axis=axis, norm=norm)


def irfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_irfft``: the inverse of ``rfft``, ``n`` (default
    ``2*(M-1)``) real values along ``axis``."""
    return _op("irfft")(x, n=n, axis=axis, norm=norm)


def rfftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_rfftn``: the n-dimensional transform of a real input (the
    last axis halved, as ``rfft``)."""
    return _op("rfftn")(x, s=_list(s), axes=_list(axes), norm=norm)


def irfftn(x: Any, /, *, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_irfftn``: the inverse of ``rfftn``."""
    return _op("irfftn")(x, s=_list(s), axes=_list(axes), norm=norm)


def hfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_hfft``: the transform of a Hermitian-symmetric signal, ``n``
    (default ``2*(M-1)``) real values along ``axis``."""
    return _op("hfft")(x, n=n, axis=axis, norm=norm)


def ihfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The operator ``array_api::fft_ihfft``: the inverse of ``hfft``, ``n//2 + 1`` complex
    values along ``axis``."""
    return _op("ihfft")(x, n=n, axis=axis, norm=norm)


def _default_dtype(dtype: Any, device: Any) -> Any:
    """``dtype``, else the default real floating dtype of ``device`` where it is not the
    standard's (float32 on a device without float64)."""
    from ._creation_functions import _default

    return _default(dtype, device, "real floating")


def _device(device: Any) -> Any:
    from ._creation_functions import _device as device_argument

    return device_argument(device)


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::fft_fftfreq``: the ``n`` sample frequencies of a transform
    of length ``n`` and spacing ``d``, created on ``device`` (the namespace's by default), of
    that device's default real floating dtype unless ``dtype`` says otherwise."""
    dtype = _default_dtype(dtype, device)
    return _op("fftfreq")(n, d=float(d), dtype=dtype_name(dtype), device=_device(device))


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::fft_rfftfreq``: the ``n//2 + 1`` non-negative sample
    frequencies (for ``rfft``), created on ``device`` (the namespace's by default), of that
    device's default real floating dtype unless ``dtype`` says otherwise."""
    dtype = _default_dtype(dtype, device)
    return _op("rfftfreq")(n, d=float(d), dtype=dtype_name(dtype), device=_device(device))


def fftshift(x: Any, /, *, axes: Any = None) -> Any:
    """The operator ``array_api::fft_fftshift``: the zero frequency moved to the centre of
    ``axes`` (an int or a sequence; every axis when None)."""
    return _op("fftshift")(x, axes=axes)


def ifftshift(x: Any, /, *, axes: Any = None) -> Any:
    """The operator ``array_api::fft_ifftshift``: the inverse of ``fftshift``."""
    return _op("ifftshift")(x, axes=axes)


DEVICE_DEFAULTED = ("fftfreq", "rfftfreq")
"""The functions whose ``device=None`` means the namespace's device (``namespace(device).fft``)."""

__all__ = [
    "fft",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfftn",
    "rfft",
    "rfftfreq",
    "rfftn",
]
