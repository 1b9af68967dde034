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
from typing import Any

import numpy as np

from . import _elementwise_functions as _ew
from . import _indexing
from . import _linear_algebra_functions as _la
from ._helpers import ARRAY_TYPES, SCALAR_TYPES, canonical_device, same_device


def _operand(other: Any) -> bool:
    return isinstance(other, (*ARRAY_TYPES, *SCALAR_TYPES, complex))


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
    """The rows (``x[0]``, ``x[1]``, ...), as NumPy iterates an array. A tensor of host memory
    (Native) gives ``x[i]``; any other is copied to the host once, each row then put on the
    tensor's device (not the whole tensor copied again for every row)."""
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    n = self.shape[0]
    if self.residency is None:  # host memory (reading .payload would put a result on the device)
        return (self[i] for i in range(n))
    host = __array__(self)
    make = _creation().OPS["asarray"]
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
    from ._creation_functions import OPS

    return OPS["asarray"](host, device=device, copy=True)


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


def to_device(self: Any, device: Any, /, *, stream: Any = None) -> Any:
    """The array on ``device``: itself if it is there already, else a copy."""
    if stream is not None:
        raise ValueError("boxfall's devices have no streams")
    here = getattr(self, "device", "cpu")
    if same_device(device, here):
        return self
    host = __array__(self) if not isinstance(self, np.ndarray) else self
    device = canonical_device(device)
    if device == "cpu":
        return host
    return _creation().OPS["asarray"](host, device=device, copy=True)


def _creation() -> Any:
    from . import _creation_functions

    return _creation_functions


def T(self: Any) -> Any:  # noqa: N802  (the standard's name)
    if self.ndim != 2:
        raise ValueError(f"x.T is for 2-d arrays (use x.mT or permute_dims), not {self.ndim}-d")
    from ._manipulation_functions import permute_dims

    return permute_dims(self, [1, 0])


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
# every other backend exports a host copy, and ``copy=False`` there is the standard's
# ``BufferError``.


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
                raise
    elif copy is False:
        raise BufferError(
            f"a tensor on {self.device} has no host memory to share: __dlpack__(copy=False) "
            "would need a copy"
        )
    return np.asarray(self.numpy()).__dlpack__(copy=True, **kwargs)
