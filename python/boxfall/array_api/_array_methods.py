"""The array object's methods for ``bf.Tensor`` (the standard's ``array_object`` chapter).

``bf.Tensor`` is a Rust class; its dunder methods are one-line calls of the functions here of
the same name, so each operator method is the operator of its function (``x + y`` is
``array_api::add``, ``1 + x`` is ``array_api::add.Scalar_Tensor``, ``x @ y`` is
``array_api::matmul``) and goes through the dispatcher, where a backend can take it natively.
For the operands whose type alone decides the operator (a ``bf.Tensor``, a NumPy array, a plain
``bool``, ``int`` or ``float``) the binary methods call that operator from Rust directly
(``src/python/array_ops.rs``), as the functions here would; every other operand comes here.
The in-place operators are the operators ``array_api::<name>_`` (``x += y`` is
``array_api::add_``, ``x += 1`` is ``array_api::add_.Scalar``), whose ``Tensor(a!)`` argument
the CPU fallback writes back into the device tensor.

Transfers are no operators: ``__array__`` (and so ``__bool__``, ``__int__``, ``__float__``,
``__complex__``, ``__index__`` and ``repr``) copies to the host through the backend's
``to_cpu`` hook, and ``to_device`` to another device is ``array_api::asarray`` of that host
copy with ``device=`` (so it runs the device's own ``asarray`` kernel, or the CPU kernel through
its fallback). ``x[key]`` is ``array_api::getitem`` and ``x[key] = value`` is
``array_api::setitem`` (``_indexing``). DLPack is at the end.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _creation_functions as _creation
from . import _data_type_functions as _data_types
from . import _elementwise_functions as _ew
from . import _indexing, _views
from . import _linear_algebra_functions as _la
from . import _manipulation_functions as _manipulation
from . import _statistical_functions as _stats
from . import _utility_functions as _utility
from ._creation_functions import to_device as to_device  # bf.Tensor.to_device calls it here
from ._helpers import ARRAY_TYPES, SCALAR_TYPES


def _operand(other: Any) -> bool:
    # A NumPy scalar too: the function takes it as a 0-d array of its dtype, as NumPy 2 does.
    return isinstance(other, (*ARRAY_TYPES, *SCALAR_TYPES, complex, np.generic))


def _typed(other: Any) -> Any:
    """A NumPy scalar as NumPy 2 takes it, a 0-d array of its dtype (NEP 50: its dtype counts,
    unlike a Python scalar's); any other operand as it is. (The binary functions do this
    themselves; the in-place operators call no function.)"""
    return np.asarray(other) if isinstance(other, np.generic) else other


def _binary(name: str) -> tuple[Any, Any]:
    fn = getattr(_ew, name)

    def forward(self: Any, other: Any) -> Any:
        return fn(self, other) if _operand(other) else NotImplemented

    def reflected(self: Any, other: Any) -> Any:
        return fn(other, self) if _operand(other) else NotImplemented

    return forward, reflected


def _in_place(name: str) -> Any:
    both, scalar = _ew.OPS[f"{name}_"], _ew.OPS[f"{name}_.Scalar"]

    def method(self: Any, other: Any) -> None:
        other = _typed(other)
        if isinstance(other, ARRAY_TYPES):
            both(self, other)
        elif isinstance(other, SCALAR_TYPES):
            if _ew._is_wide(other):
                how, v = _ew.wide_int(name, self, other)
                scalar(self, v) if how == "scalar" else both(self, v)
            else:
                scalar(self, other)
        elif isinstance(other, complex):
            both(self, _ew.complex_array(other, self))
        else:
            raise TypeError(
                f"unsupported operand type for the in-place {name}: {type(other).__name__}"
            )

    return method


__add__, __radd__ = _binary("add")
__sub__, __rsub__ = _binary("subtract")
__mul__, __rmul__ = _binary("multiply")
__truediv__, __rtruediv__ = _binary("divide")
__floordiv__, __rfloordiv__ = _binary("floor_divide")
__mod__, __rmod__ = _binary("remainder")
__pow__, __rpow__ = _binary("pow")
__and__, __rand__ = _binary("bitwise_and")
__or__, __ror__ = _binary("bitwise_or")
__xor__, __rxor__ = _binary("bitwise_xor")
__lshift__, __rlshift__ = _binary("bitwise_left_shift")
__rshift__, __rrshift__ = _binary("bitwise_right_shift")
__eq__, _ = _binary("equal")
__ne__, _ = _binary("not_equal")
__lt__, _ = _binary("less")
__le__, _ = _binary("less_equal")
__gt__, _ = _binary("greater")
__ge__, _ = _binary("greater_equal")

__iadd__ = _in_place("add")
__isub__ = _in_place("subtract")
__imul__ = _in_place("multiply")
__itruediv__ = _in_place("divide")
__ifloordiv__ = _in_place("floor_divide")
__imod__ = _in_place("remainder")
__ipow__ = _in_place("pow")
__iand__ = _in_place("bitwise_and")
__ior__ = _in_place("bitwise_or")
__ixor__ = _in_place("bitwise_xor")
__ilshift__ = _in_place("bitwise_left_shift")
__irshift__ = _in_place("bitwise_right_shift")


__getitem__ = _indexing.getitem
__setitem__ = _indexing.setitem


def __matmul__(self: Any, other: Any) -> Any:
    return _la.OPS["matmul"](self, other) if isinstance(other, ARRAY_TYPES) else NotImplemented


def __rmatmul__(self: Any, other: Any) -> Any:
    return _la.OPS["matmul"](other, self) if isinstance(other, ARRAY_TYPES) else NotImplemented


def __neg__(self: Any) -> Any:
    return _ew.OPS["negative"](self)


def __pos__(self: Any) -> Any:
    return _ew.OPS["positive"](self)


def __invert__(self: Any) -> Any:
    return _ew.OPS["bitwise_invert"](self)


def __abs__(self: Any) -> Any:
    return _ew.OPS["abs"](self)


def __array__(self: Any, dtype: Any = None, copy: Any = None) -> np.ndarray:
    """A host copy (through the backend's ``to_cpu``), in ``dtype`` if given."""
    if copy is False:
        raise ValueError(f"a tensor on {self.device} has no host memory to share (copy=False)")
    return np.array(self.numpy(), dtype=dtype, copy=True)


def __array_ufunc__(self: Any, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """NumPy's ufunc given tensors: NumPy's values, arrays on the tensors' device
    (``_numpy_interop``)."""
    from ._numpy_interop import array_ufunc

    return array_ufunc(self, ufunc, method, *inputs, **kwargs)


def __array_function__(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    """NumPy's function given tensors: NumPy's values, arrays on the tensors' device
    (``_numpy_interop``)."""
    from ._numpy_interop import array_function

    return array_function(self, func, types, args, kwargs)


def __iter__(self: Any) -> Any:
    """The rows (``x[0]``, ``x[1]``, ...), as NumPy iterates an array. The rows of a tensor of
    two or more dimensions are views, as NumPy's, on every backend (``a, b = x`` then
    ``a[mask] = 0`` writes ``x``). The elements of a 1-d tensor are 0-d values: a tensor of host
    memory (Native) gives ``x[i]``; any other is copied to the host once, each element then put
    on the tensor's device (not the whole tensor copied again for every element)."""
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    n = self.shape[0]
    # `residency`, not `payload`: reading `.payload` would put a host-side result on the device.
    if self.residency is None or self.ndim > 1:
        return (self[i] for i in range(n))
    host = __array__(self)
    make = _creation.OPS["asarray"]
    return (make(host[i], device=self.device, copy=True) for i in range(n))


def __len__(self: Any) -> int:
    if self.ndim == 0:
        raise TypeError("len() of a 0-d array")
    return int(self.shape[0])


def __format__(self: Any, spec: str) -> str:
    if self.ndim == 0:
        return format(__array__(self)[()].item(), spec)
    if spec:
        raise TypeError(f"only a 0-d array formats with a spec ({spec!r}), not one of {self.shape}")
    return str(self)


def _unpickle(host: np.ndarray, device: str) -> Any:
    """A pickled tensor made again: ``host``'s values on ``device``."""
    return _creation.OPS["asarray"](host, device=device, copy=True)


def __reduce__(self: Any) -> Any:
    return (_unpickle, (__array__(self), str(self.device)))


def _scalar(self: Any, convert: Any, what: str) -> Any:
    if self.ndim != 0:
        raise TypeError(f"only a 0-d array converts to {what}, not one of shape {self.shape}")
    return convert(__array__(self)[()])


def __bool__(self: Any) -> bool:
    if self.ndim != 0 and self.size == 1:  # NumPy's truth of a one-element array
        return bool(__array__(self).reshape(())[()])
    return _scalar(self, bool, "bool")


def __int__(self: Any) -> int:
    return _scalar(self, int, "int")


def __float__(self: Any) -> float:
    return _scalar(self, float, "float")


def __complex__(self: Any) -> complex:
    return _scalar(self, complex, "complex")


def __index__(self: Any) -> int:
    if np.dtype(self.dtype).kind not in "iu":
        raise TypeError(f"only an integer array is an index, not one of {self.dtype}")
    return _scalar(self, int, "an index")


def T(self: Any) -> Any:  # noqa: N802  (the standard's name)
    if self.ndim != 2:
        raise ValueError(f"x.T is for 2-d arrays (use x.mT or permute_dims), not {self.ndim}-d")
    return _manipulation.permute_dims(self, [1, 0])


def mT(self: Any) -> Any:  # noqa: N802
    return _la.matrix_transpose(self)


def __array_namespace__(self: Any, /, *, api_version: str | None = None) -> Any:
    if api_version not in (None, "2024.12", "2023.12", "2022.12", "2021.12"):
        raise ValueError(f"boxfall.array_api implements the 2024.12 standard, not {api_version}")
    from . import namespace

    # The namespace of the tensor's device: its creation functions make tensors there, so a
    # client's `xp.asarray(numpy_result)` brings a result back where its arguments live.
    return namespace(self.device)


def __repr__(self: Any) -> str:
    try:
        body = np.array2string(__array__(self), separator=", ", prefix="bf.Tensor(")
    except Exception as e:  # a repr must not fail: say what the host copy said
        body = f"<no host copy: {type(e).__name__}: {e}>"
    return f"bf.Tensor({body}, dtype={self.dtype}, device='{self.device}')"


# DLPack (the standard's data interchange). A device's memory is nothing DLPack can name (no
# kDL device type for a boxfall backend), so a tensor exports a host array and says so:
# ``__dlpack_device__`` is kDLCPU. Native's memory is host memory, so a Native tensor shares it
# (read-only, which needs a versioned capsule, ``max_version >= (1, 0)``) unless ``copy=True``;
# with an older capsule it is a copy, or with ``copy=False`` the writable memory itself. Every
# other backend exports a host copy, and ``copy=False`` there is the standard's ``BufferError``.


class DLDeviceType(enum.IntEnum):
    """DLPack's device types that boxfall exports (an ``int``, as DLPack's enum)."""

    kDLCPU = 1  # noqa: N815  (DLPack's name)


def __dlpack_device__(self: Any) -> tuple[DLDeviceType, int]:
    """``(kDLCPU, 0)``: the device of the capsule ``__dlpack__`` exports."""
    return (DLDeviceType.kDLCPU, 0)


def __dlpack__(
    self: Any,
    *,
    stream: Any = None,
    max_version: Any = None,
    dl_device: Any = None,
    copy: Any = None,
) -> Any:
    """A DLPack capsule of the tensor's values on the CPU (NumPy's exporter)."""
    if copy is not None and not isinstance(copy, bool):
        raise ValueError(f"__dlpack__(copy=...) takes True, False or None, not {copy!r}")
    if dl_device is not None and tuple(dl_device) != (DLDeviceType.kDLCPU, 0):
        raise BufferError(f"a tensor on {self.device} exports to the CPU (1, 0), not {dl_device}")
    kwargs = {"stream": stream, "max_version": max_version, "dl_device": dl_device}
    if copy is not True and self.device.split(":", 1)[0] == "Native":
        try:
            return self.numpy().__dlpack__(copy=False, **kwargs)  # read-only, shared
        except BufferError:
            if copy is False:
                # A capsule older than DLPack 1.0 cannot say read-only, and copy=False forbids
                # the copy: the tensor's memory itself, writable, as ``np.asarray(t)`` shares it
                # (a write through the capsule is the tensor's). A read-only view still refuses.
                return np.asarray(self).__dlpack__(copy=False, **kwargs)
    elif copy is False:
        raise BufferError(
            f"a tensor on {self.device} has no host memory to share: __dlpack__(copy=False) "
            "would need a copy"
        )
    return np.asarray(self.numpy()).__dlpack__(copy=True, **kwargs)


# NumPy's (and PyTorch's) methods that client code written for those libraries calls on arrays
# beyond the standard's (SciPy's and scikit-learn's code paths for NumPy, CuPy and PyTorch:
# `x.sum(axis=-1)`, `x.reshape(shape)`, `x.astype(float)`, `d.view(float)`). Each is the
# function of the namespace, so it is that operator and runs on the tensor's device. They are
# Python functions put on `bf.Tensor` when `boxfall.array_api` is imported (`install`), as the
# operators they call are defined then; a name the Rust class has is never replaced.


def astype(self: Any, dtype: Any, /, *, copy: bool = True) -> Any:
    """NumPy's ``x.astype(dtype)``: ``astype(x, dtype, copy=copy)`` of the standard, ``dtype``
    as NumPy reads it (``float`` is float64, ``"f4"`` float32)."""
    return _data_types.astype(self, np.dtype(dtype), copy=copy)


def _sum(self: Any, axis: Any = None, dtype: Any = None, *, keepdims: bool = False) -> Any:
    """NumPy's ``x.sum(axis=None, dtype=None, keepdims=False)``: the standard's ``sum``."""
    return _stats.sum(
        self, axis=axis, dtype=None if dtype is None else np.dtype(dtype), keepdims=keepdims
    )


def _max(self: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
    """NumPy's ``x.max(axis=None, keepdims=False)``: the standard's ``max``."""
    return _stats.max(self, axis=axis, keepdims=keepdims)


def _min(self: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
    """NumPy's ``x.min(axis=None, keepdims=False)``: the standard's ``min``."""
    return _stats.min(self, axis=axis, keepdims=keepdims)


def _all(self: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
    """NumPy's ``x.all(axis=None, keepdims=False)``: the standard's ``all``."""
    return _utility.all(self, axis=axis, keepdims=keepdims)


def _any(self: Any, axis: Any = None, *, keepdims: bool = False) -> Any:
    """NumPy's ``x.any(axis=None, keepdims=False)``: the standard's ``any``."""
    return _utility.any(self, axis=axis, keepdims=keepdims)


def ravel(self: Any) -> Any:
    """NumPy's ``x.ravel()``: the elements in one dimension (C order), a view of ``x`` where
    the data allow it, as in NumPy (``reshape(x, (-1,))``)."""
    return _manipulation.reshape(self, (-1,))


def _real(self: Any) -> Any:
    """NumPy's ``x.real``: the standard's ``real`` (of a real array, its values)."""
    return _ew.OPS["real"](self)


def _imag(self: Any) -> Any:
    """NumPy's ``x.imag``: the standard's ``imag`` (of a real array, zeros of its dtype)."""
    if np.dtype(self.dtype).kind != "c":
        return _creation.zeros_like(self)
    return _ew.OPS["imag"](self)


def _shape_of(shape: tuple[Any, ...]) -> Any:
    # NumPy takes x.reshape(2, 3) and x.reshape((2, 3)) alike.
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        return tuple(shape[0])
    return shape


def reshape(self: Any, *shape: Any, copy: bool | None = None) -> Any:
    """NumPy's ``x.reshape(shape)`` (or ``x.reshape(*shape)``): the standard's ``reshape``, a
    view of ``x`` where the data allow it, as in NumPy."""
    return _manipulation.reshape(self, _shape_of(shape), copy=copy)


def view(self: Any, dtype: Any = None, /) -> Any:
    """NumPy's ``x.view()`` and ``x.view(dtype)``.

    Without a dtype, or with ``x``'s own, a view of ``x`` (``x[...]``): writes through it reach
    ``x``. With another dtype, ``x``'s bytes read as ``dtype`` (the last axis rescaled by the
    ratio of the item sizes, as NumPy's: a complex128 ``(n, m)`` array viewed as float64 is
    ``(n, 2m)``), made by NumPy through the CPU fallback (the operator ``numpy::ndarray_view``)
    as a new tensor on ``x``'s device that shares nothing with ``x`` (as JAX's ``view``): it is
    read-only, so that a write meant for ``x`` raises instead of being lost."""
    if dtype is None or np.dtype(dtype) == self.dtype:
        return self[...]
    from . import _numpy_interop

    values = _numpy_interop._run("ndarray_view", np.ndarray.view, (self, np.dtype(dtype)), {}, ())
    # Read-only as broadcast_to's views are: a write through it raises NumPy's ValueError.
    return _views.view(values, "broadcast_to", tuple(values.shape))


_EXTRA: dict[str, Callable[..., Any]] = {
    "all": _all,
    "any": _any,
    "astype": astype,
    "max": _max,
    "min": _min,
    "ravel": ravel,
    "reshape": reshape,
    "sum": _sum,
    "view": view,
}
"""The methods ``install`` puts on ``bf.Tensor``, by name."""

_PROPERTIES: dict[str, Callable[[Any], Any]] = {"real": _real, "imag": _imag}
"""The properties ``install`` puts on ``bf.Tensor``, by name."""


def install(cls: Any) -> None:
    """Put the methods of ``_EXTRA`` and the properties of ``_PROPERTIES`` on ``cls``
    (``bf.Tensor``), each under its name, unless the class has that name already."""
    for table, wrap in ((_EXTRA, None), (_PROPERTIES, property)):
        for name, fn in table.items():
            if name in cls.__dict__:
                continue
            fn.__name__ = name
            fn.__qualname__ = f"{cls.__name__}.{name}"
            setattr(cls, name, fn if wrap is None else wrap(fn))
