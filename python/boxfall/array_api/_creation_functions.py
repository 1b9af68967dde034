"""Creation functions (the standard's chapter of that name), as data.

A function that takes no array argument dispatches on its ``Device? device`` argument (c10's
BackendSelect): the device's own kernel if its backend registered one
(``lib.impl("zeros", accel_zeros, "Accel")``), else the CPU kernel through the device's CPU
fallback, which rewrites ``device`` to the CPU for the kernel and moves the result onto the
device. ``device=None`` is the CPU here; ``namespace(device)`` makes it that device.

The ``_like`` functions dispatch on their array (and land on its device); with a ``device``
other than the array's they are the plain creation function on that device (``zeros_like(x,
device=d)`` is ``zeros(x.shape, dtype=x.dtype, device=d)``), since the dispatcher reads a
``Device`` argument only when no array is given.

``fill_value`` is ``Any`` rather than PyTorch's ``Scalar``: the standard allows complex fill
values, which a ``Scalar`` does not hold yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .._boxfall import Tensor, backends_version, host_data_target
from . import _dtypes
from ._helpers import canonical_device, device_of, same_device
from ._registry import Op, dtype_name, register


def _shape(shape: Any) -> tuple[int, ...]:
    return tuple(shape)


def _asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
    if isinstance(obj, (list, tuple)) and dtype is None:
        # The standard's defaults (NumPy would make a list of ints and floats float64 too; a
        # list of Python bools stays bool).
        out = np.array(obj, copy=True)
    elif copy is True:
        out = np.array(obj, dtype=dtype, copy=True)
    elif copy is False:
        out = np.asarray(obj, dtype=dtype, copy=False)
    else:
        out = np.asarray(obj, dtype=dtype)
    if out.dtype.kind in _NOT_STANDARD and not _is_extension(out.dtype):
        raise TypeError(
            f"asarray: {out.dtype} (of strings, objects, ...) is no dtype of the standard"
        )
    return out


_NOT_STANDARD = frozenset("OSUVMm")
"""NumPy's dtype kinds outside the standard: objects, strings, void, dates and times."""


def _is_extension(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a number type registered with NumPy (``ml_dtypes.bfloat16``: kind
    ``V`` but no ``numpy.void``), which a backend may declare in ``dtypes=``."""
    return dtype.kind == "V" and not issubclass(dtype.type, np.void)


def _zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return np.zeros(_shape(shape), dtype=dtype)


def _ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return np.ones(_shape(shape), dtype=dtype)


def _empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return np.empty(_shape(shape), dtype=dtype)


def _full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return np.full(_shape(shape), fill_value, dtype=dtype)


def _arange(
    start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None
) -> Any:
    return np.arange(start, stop, step, dtype=dtype)


def _linspace(
    start: Any,
    stop: Any,
    /,
    num: int,
    *,
    dtype: Any = None,
    device: Any = None,
    endpoint: bool = True,
) -> Any:
    return np.linspace(start, stop, num, dtype=dtype, endpoint=endpoint)


def _eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: Any = None,
    device: Any = None,
) -> Any:
    return np.eye(n_rows, n_cols, k=k, dtype=dtype)


def _zeros_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
    return np.zeros_like(x, dtype=dtype)


def _ones_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
    return np.ones_like(x, dtype=dtype)


def _empty_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
    return np.empty_like(x, dtype=dtype)


def _full_like(x: Any, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    return np.full_like(x, fill_value, dtype=dtype)


def _tril(x: Any, /, *, k: int = 0) -> Any:
    return np.tril(x, k=k)


def _triu(x: Any, /, *, k: int = 0) -> Any:
    return np.triu(x, k=k)


def _from_dlpack(x: Any, /, *, device: Any = None, copy: Any = None) -> Any:
    try:
        return np.from_dlpack(x, copy=copy)
    except TypeError:  # NumPy < 2.1 has no copy=: it always shares
        shared = np.from_dlpack(x)
        return np.array(shared, copy=True) if copy else shared


def _meshgrid(arrays: Any, *, indexing: str = "xy") -> Any:
    return [np.array(a) for a in np.meshgrid(*arrays, indexing=cast(Any, indexing))]


_DEVICE = "str? dtype=None, Device? device=None"
OPS, _ = register(
    [
        Op(f"asarray(Any obj, *, {_DEVICE}, bool? copy=None) -> Tensor", _asarray, False),
        Op(f"zeros(int[1] shape, *, {_DEVICE}) -> Tensor", _zeros, False),
        Op(f"ones(int[1] shape, *, {_DEVICE}) -> Tensor", _ones, False),
        Op(f"empty(int[1] shape, *, {_DEVICE}) -> Tensor", _empty, False),
        Op(f"full(int[1] shape, Any fill_value, *, {_DEVICE}) -> Tensor", _full, False),
        Op(
            f"arange(Scalar start, Scalar? stop=None, Scalar step=1, *, {_DEVICE}) -> Tensor",
            _arange,
            False,
        ),
        Op(
            f"linspace(Scalar start, Scalar stop, int num, *, {_DEVICE}, bool endpoint=True)"
            " -> Tensor",
            _linspace,
            False,
        ),
        Op(f"eye(int n_rows, int? n_cols=None, *, int k=0, {_DEVICE}) -> Tensor", _eye, False),
        Op(f"zeros_like(Tensor x, *, {_DEVICE}) -> Tensor", _zeros_like, False),
        Op(f"ones_like(Tensor x, *, {_DEVICE}) -> Tensor", _ones_like, False),
        Op(f"empty_like(Tensor x, *, {_DEVICE}) -> Tensor", _empty_like, False),
        Op(f"full_like(Tensor x, Any fill_value, *, {_DEVICE}) -> Tensor", _full_like, False),
        Op("tril(Tensor x, *, int k=0) -> Tensor", _tril, False),
        Op("triu(Tensor x, *, int k=0) -> Tensor", _triu, False),
        Op(
            "from_dlpack(Any x, *, Device? device=None, bool? copy=None) -> Tensor",
            _from_dlpack,
            False,
        ),
        Op('meshgrid(Tensor[] arrays, *, str indexing="xy") -> Tensor[]', _meshgrid, False),
    ]
)


def _device(device: Any) -> Any:
    # The standard's device objects are the strings bf.Tensor.device prints ("cpu" for NumPy);
    # "Native" is "Native:0", and a device that does not exist is a ValueError here.
    if device is None:
        return None
    device = canonical_device(device)
    return None if device == "cpu" else device


def _python_scalar(x: Any) -> Any:
    """A 0-d array where the standard allows a scalar, as the Python scalar of its dtype's kind
    (NumPy's scalars too); anything else as it is."""
    if isinstance(x, (Tensor, np.ndarray, np.generic)) and x.ndim == 0:
        kind = np.dtype(x.dtype).kind
        convert = {"b": bool, "i": int, "u": int, "f": float}.get(kind, complex)
        return convert(x)
    return x


_PLAIN = frozenset({int, float, type(None)})
"""The types ``_python_scalar`` returns as they are (bool is not one of them: ``arange``'s
kind check skips it)."""

_CALLED: dict[tuple[Any, Any, str | None], tuple[str | None, Any]] = {}
_called_version = -1


def _called_with(dtype: Any, device: Any, kind: str | None) -> tuple[str | None, Any]:
    """The ``dtype`` name and ``device`` a creation operator is called with for a function
    asked for ``dtype`` on ``device`` making a result of ``kind`` (``_default``, ``dtype_name``,
    ``_device``). Kept per asked triple until a backend is registered again, as ``_dtypes``
    keeps what devices hold: a loop's ``arange(k)`` and ``eye(d, dtype=x.dtype)`` asked these
    three at every call, about a microsecond of Python, a third of the call in graph mode."""
    global _called_version
    version = backends_version()
    if version != _called_version:
        _CALLED.clear()
        _called_version = version
    key = (dtype, device, kind)
    try:
        return _CALLED[key]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like, decided afresh
        pass
    found = (dtype_name(_default(dtype, device, kind)), _device(device))
    try:
        if len(_CALLED) < 1024:  # the asked triples are few; the bound keeps odd callers harmless
            _CALLED[key] = found
    except TypeError:
        pass
    return found


def _default(dtype: Any, device: Any, kind: str | None) -> Any:
    """The dtype to ask for: ``dtype`` if given; else, for a result of ``kind`` (``"real
    floating"``, ``"complex floating"``, ``"integral"``; None: bool or the input's own), the
    device's default where it differs from the standard's (a device without float64 makes
    float32), and None (the kernel's own default) everywhere else."""
    if dtype is not None or kind is None or _device(device) is None:
        return dtype
    defaults = _dtypes.defaults_of(device)
    if defaults is _dtypes.DEFAULT:
        return None
    return defaults[kind]


def _kind_of_scalars(*values: Any) -> str | None:
    """What a creation function makes of Python numbers: complex, real floating, integral."""
    # One loop, not a generator per kind: arange asks at every call.
    found = None
    for v in values:
        if isinstance(v, complex):
            return "complex floating"
        if isinstance(v, float):
            found = "real floating"
        elif found is None and isinstance(v, int) and not isinstance(v, bool):
            found = "integral"
    return found


def _kind_of_object(obj: Any) -> str | None:
    """What ``asarray`` makes of Python scalars and (nested) lists of them; None for arrays
    and anything else, which keep their own dtype."""
    if not isinstance(obj, (bool, int, float, complex, list, tuple)):
        return None
    kind = np.asarray(obj).dtype.kind
    return {"f": "real floating", "c": "complex floating", "i": "integral"}.get(kind)


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Any:
    """The operator ``array_api::asarray``. An array keeps its device unless ``device`` names
    another; one on another device is copied there through the host."""
    if isinstance(obj, Tensor):
        if device is None or same_device(device, obj.device):
            same_dtype = dtype is None or np.dtype(dtype) == obj.dtype
            if same_dtype and copy is not True:
                return obj
            device = obj.device
        obj = obj.__array__()
    elif isinstance(obj, np.ndarray) and copy is False and _device(device) is not None:
        raise ValueError(f"asarray(copy=False) cannot move an array to {device}")
    elif isinstance(obj, (str, bytes)):
        raise TypeError(f"asarray: a {type(obj).__name__} is no array of the standard")
    elif isinstance(obj, (list, tuple)) and _holds_numpy_scalar(obj):
        # NumPy's scalars keep their dtypes in NumPy's conversion (a float64 NaN cast to uint8
        # is NumPy's cast, where a Python float NaN is a ValueError): NumPy converts the list,
        # as the reference does, before the operator binds its elements as Python scalars.
        obj = np.asarray(obj, dtype=None if dtype is None else np.dtype(dtype_name(dtype)))
    elif dtype is None and _device(device) is not None:
        dtype = _default(None, device, _kind_of_object(obj))
    target = (
        None if _device(device) is None else host_data_target(OPS["asarray"], str(_device(device)))
    )
    if target is not None:
        # Host data put on a device whose backend serves asarray with the CPU fallback: the
        # CPU kernel makes the array and the backend's from_cpu puts it there, a transfer the
        # user asked for (bf.metrics.transfers()), not a fallback a kernel could avoid.
        backend, index = target
        host = OPS["asarray"](obj, dtype=dtype_name(dtype), device=None, copy=copy)
        return backend.tensor(host, index, op=OPS["asarray"])
    return OPS["asarray"](obj, dtype=dtype_name(dtype), device=_device(device), copy=copy)


def _holds_numpy_scalar(obj: Any) -> bool:
    """Whether a nested list or tuple holds a NumPy scalar (``np.float64(nan)``). The types
    of a level are gathered at C speed (``map(type, ...)``): a per-element check in Python
    cost a third of ``asarray`` of a list of a million floats."""
    types = set(map(type, obj))
    if any(issubclass(t, np.generic) for t in types):
        return True
    if not any(issubclass(t, (list, tuple)) for t in types):
        return False
    return any(_holds_numpy_scalar(v) for v in obj if isinstance(v, (list, tuple)))


def scalar_array(value: Any, like: Any) -> Any:
    """``value`` as a 0-d array of ``like``'s dtype on ``like``'s device (the standard's rule
    for a Python scalar beside an array)."""
    return asarray(value, dtype=like.dtype, device=device_of(like))


DEVICE_MOVES: dict[str, Callable[[Tensor, str], Any]] = {}
"""Direct moves between devices, by the backend a tensor is on: ``move(x, device)`` (``device``
canonical, another device) returns the tensor on ``device`` made without the host, or None
where it cannot. ``boxfall.jax`` gives its backends one (a ``jax.device_put`` between JAX
devices, eager or graph mode's)."""


def to_device(x: Any, device: Any, /, *, stream: Any = None) -> Any:
    """The array on ``device``: itself if it is there already, else a copy (``x.to_device``,
    ``astype(x, dtype, device=device)``). A copy moves directly where the source backend has a
    move to that device (``DEVICE_MOVES``), else through the host: ``asarray`` of the host copy
    with ``device=``, so it runs the device's own ``asarray`` kernel, or the CPU kernel through
    its fallback."""
    if stream is not None:
        raise ValueError("boxfall's devices have no streams")
    here = getattr(x, "device", "cpu")
    if same_device(device, here):
        return x
    device = canonical_device(device)
    if isinstance(x, Tensor) and device != "cpu":
        move = DEVICE_MOVES.get(here.partition(":")[0])
        moved = None if move is None else move(x, device)
        if moved is not None:
            return moved
    host = x if isinstance(x, np.ndarray) else np.array(x.numpy(), copy=True)
    if device == "cpu":
        return host
    return OPS["asarray"](host, device=device, copy=True)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::zeros``."""
    name, device = _called_with(dtype, device, "real floating")
    return OPS["zeros"](shape, dtype=name, device=device)


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::ones``."""
    name, device = _called_with(dtype, device, "real floating")
    return OPS["ones"](shape, dtype=name, device=device)


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::empty``."""
    name, device = _called_with(dtype, device, "real floating")
    return OPS["empty"](shape, dtype=name, device=device)


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::full``."""
    name, device = _called_with(dtype, device, _kind_of_scalars(fill_value))
    return OPS["full"](shape, fill_value, dtype=name, device=device)


def arange(
    start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None
) -> Any:
    """The operator ``array_api::arange``; its bounds and step may be 0-d arrays."""
    if not (type(start) in _PLAIN and type(stop) in _PLAIN and type(step) in _PLAIN):
        start, stop, step = _python_scalar(start), _python_scalar(stop), _python_scalar(step)
    name, device = _called_with(dtype, device, _kind_of_scalars(start, stop, step))
    return OPS["arange"](start, stop, step, dtype=name, device=device)


def linspace(
    start: Any,
    stop: Any,
    /,
    num: int,
    *,
    dtype: Any = None,
    device: Any = None,
    endpoint: bool = True,
) -> Any:
    """The operator ``array_api::linspace``; ``start`` and ``stop`` may be 0-d arrays."""
    start, stop = _python_scalar(start), _python_scalar(stop)
    kind = "complex floating" if _kind_of_scalars(start, stop) == "complex floating" else None
    dtype = _default(dtype, device, kind or "real floating")
    return OPS["linspace"](
        start, stop, num, dtype=dtype_name(dtype), device=_device(device), endpoint=endpoint
    )


def logspace(
    start: Any,
    stop: Any,
    /,
    num: int = 50,
    *,
    endpoint: bool = True,
    base: float = 10.0,
    dtype: Any = None,
    device: Any = None,
) -> Any:
    """NumPy's ``logspace`` (not the standard's; NumPy, CuPy and PyTorch have it): ``base``
    raised to ``linspace(start, stop, num)``, the operators ``array_api::linspace`` and
    ``array_api::pow``."""
    exponents = linspace(start, stop, num, dtype=dtype, device=device, endpoint=endpoint)
    return base**exponents  # the tensor's __rpow__: array_api::pow.Scalar_Tensor


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: Any = None,
    device: Any = None,
) -> Any:
    """The operator ``array_api::eye``. A diagonal ``k`` past the matrix (all zeros) is
    passed as the first one past it, so that any Python int fits the operator's ``int k``."""
    if k:
        past = max(n_rows, n_rows if n_cols is None else n_cols)
        k = max(-past, min(k, past))
    name, device = _called_with(dtype, device, "real floating")
    return OPS["eye"](n_rows, n_cols, k=k, dtype=name, device=device)


def _like(name: str, x: Any, fill: tuple[Any, ...], dtype: Any, device: Any) -> Any:
    if device is not None and not same_device(device, device_of(x)):
        make = globals()[name.removesuffix("_like")]
        return make(tuple(x.shape), *fill, dtype=dtype or x.dtype, device=device)
    if dtype is None:  # the operator's defaults, with no keyword (a keyword costs the call)
        return OPS[name](x, *fill)
    return OPS[name](x, *fill, dtype=dtype_name(dtype), device=None)


def zeros_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::zeros_like``."""
    return _like("zeros_like", x, (), dtype, device)


def ones_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::ones_like``."""
    return _like("ones_like", x, (), dtype, device)


def empty_like(x: Any, /, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::empty_like``."""
    return _like("empty_like", x, (), dtype, device)


def full_like(x: Any, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Any:
    """The operator ``array_api::full_like``."""
    return _like("full_like", x, (fill_value,), dtype, device)


def tril(x: Any, /, *, k: int = 0) -> Any:
    """The operator ``array_api::tril``."""
    return OPS["tril"](x, k=k)


def triu(x: Any, /, *, k: int = 0) -> Any:
    """The operator ``array_api::triu``."""
    return OPS["triu"](x, k=k)


def diag(v: Any, /, k: int = 0) -> Any:
    """NumPy's ``diag`` (not the standard's; NumPy, CuPy and PyTorch have it): of a 1-d
    array, the square matrix with ``v`` on its diagonal ``k`` (``zeros`` and
    ``array_api::setitem`` of integer indices); of a 2-d array, its diagonal ``k``
    (``linalg.diagonal``). On ``v``'s device."""
    if v.ndim == 2:
        from ._linalg import diagonal

        return diagonal(v, offset=k)
    if v.ndim != 1:
        raise ValueError(f"diag takes a 1-d or 2-d array, not a {v.ndim}-d one")
    n = int(v.shape[0])
    m = n + abs(k)
    device = device_of(v)
    out = zeros((m, m), dtype=v.dtype, device=None if device == "cpu" else device)
    i = arange(n, device=None if device == "cpu" else device)
    out[i + max(-k, 0), i + max(k, 0)] = v
    return out


def from_dlpack(x: object, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """The operator ``array_api::from_dlpack``: the array of ``x``, an object with
    ``__dlpack__``, on ``device``.

    A ``bf.Tensor`` is the namespace's own array: it is ``asarray(x, device=device,
    copy=copy)`` (without ``device``, on ``x``'s device), with no DLPack round trip. Anything
    else is read with ``numpy.from_dlpack`` (sharing its memory unless ``copy=True``; an
    object on a device NumPy cannot read raises NumPy's ``BufferError``) and, for a device other
    than the CPU, moved there by the operator (the device's kernel or the CPU kernel through its
    fallback), a copy: ``copy=False`` with such a ``device`` is a ``ValueError``, as the
    standard says. ``namespace(device).from_dlpack`` creates on ``device`` by default.
    """
    if isinstance(x, Tensor):
        if device is not None and not same_device(device, x.device) and copy is False:
            raise ValueError(
                f"from_dlpack(copy=False) cannot move an array from {x.device} to {device}"
            )
        if device is not None and canonical_device(device) == "cpu":
            return x.to_device("cpu")
        return asarray(x, device=device, copy=copy)
    if copy is False and _device(device) is not None:
        raise ValueError(
            f"from_dlpack(copy=False) cannot put an array on {device}: that needs a copy"
        )
    target = (
        None
        if _device(device) is None
        else host_data_target(OPS["from_dlpack"], str(_device(device)))
    )
    if target is not None:
        # As asarray's host data: a transfer the user asked for, not a fallback.
        backend, index = target
        return backend.tensor(OPS["from_dlpack"](x, device=None, copy=copy), index)
    return OPS["from_dlpack"](x, device=_device(device), copy=copy)


def meshgrid(*arrays: Any, indexing: str = "xy") -> list[Any]:
    """The operator ``array_api::meshgrid``."""
    return OPS["meshgrid"](list(arrays), indexing=indexing)


DEVICE_DEFAULTED = (
    "asarray",
    "zeros",
    "ones",
    "empty",
    "full",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "from_dlpack",
)
"""The functions whose ``device=None`` means the namespace's device (``namespace(device)``)."""

__all__ = [
    "arange",
    "asarray",
    "diag",
    "empty",
    "empty_like",
    "eye",
    "full",
    "from_dlpack",
    "full_like",
    "linspace",
    "logspace",
    "meshgrid",
    "ones",
    "ones_like",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]
