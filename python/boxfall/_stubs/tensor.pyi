"""The tensor: ``Tensor``.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Iterator
from typing import Any, final

import numpy as np

@final
class Tensor:
    """A boxfall tensor on a device: ``.device``, ``.dtype``, ``.shape``, ``.payload``,
    ``.numpy()``."""

    @property
    def device(self) -> str:
        """``"<Backend>:<index>"``, e.g. ``"Accel:0"``: a ``str`` equal to every spelling of
        the device (``t.device == "Native"`` for ``"Native:0"``)."""
    @property
    def backend(self) -> str:
        """The backend's name."""
    @property
    def index(self) -> int:
        """The device index."""
    @property
    def payload(self) -> Any:
        """The backend payload (None for host memory). A result whose values are on the host
        only (residency) gets its payload from the backend's ``from_cpu`` first; a tensor whose
        host memory NumPy holds (``np.asarray(t)`` on a lazy backend) gives a payload made of
        that memory now, which the tensor does not keep."""
    @property
    def residency(self) -> str | None:
        """Where the values are: ``"device"`` (the payload only), ``"host"`` (a result kept on
        the host, no payload yet), ``"both"`` (the payload and a current host copy), or None
        for a tensor of host memory (Native)."""
    def materialize(self) -> Tensor:
        """Puts a result kept on the host (residency) on its device now, through the backend's
        ``from_cpu``, and returns the tensor; nothing for a tensor that has its payload, or
        whose host memory NumPy holds (``np.asarray(t)``: its payload is made for each kernel)."""
    @property
    def dtype(self) -> np.dtype[Any]:
        """The payload's ``.dtype``, or the host memory's NumPy dtype."""
    @property
    def shape(self) -> tuple[int, ...]:
        """The payload's ``.shape``, or the host memory's shape."""
    def numpy(self) -> np.ndarray:
        """The values as a NumPy array: the backend's ``to_cpu(payload)``; for Native, a
        read-only array sharing the tensor's memory; for a tensor with a current host copy
        (residency), that copy, read-only, and nothing crosses."""
    @property
    def ndim(self) -> int:
        """The number of dimensions."""
    @property
    def size(self) -> int:
        """The number of elements."""
    @property
    def T(self) -> Tensor:  # noqa: N802
        """The transpose of a 2-d tensor."""
    @property
    def mT(self) -> Tensor:  # noqa: N802
        """The transpose of the last two dimensions (a stack of matrices)."""
    # The array object of the array API standard (boxfall.array_api._array_methods).
    def __add__(self, other: Any, /) -> Tensor: ...
    def __radd__(self, other: Any, /) -> Tensor: ...
    def __sub__(self, other: Any, /) -> Tensor: ...
    def __rsub__(self, other: Any, /) -> Tensor: ...
    def __mul__(self, other: Any, /) -> Tensor: ...
    def __rmul__(self, other: Any, /) -> Tensor: ...
    def __truediv__(self, other: Any, /) -> Tensor: ...
    def __rtruediv__(self, other: Any, /) -> Tensor: ...
    def __floordiv__(self, other: Any, /) -> Tensor: ...
    def __rfloordiv__(self, other: Any, /) -> Tensor: ...
    def __mod__(self, other: Any, /) -> Tensor: ...
    def __rmod__(self, other: Any, /) -> Tensor: ...
    def __pow__(self, other: Any, modulo: Any = None, /) -> Tensor: ...
    def __rpow__(self, other: Any, modulo: Any = None, /) -> Tensor: ...
    def __matmul__(self, other: Any, /) -> Tensor: ...
    def __rmatmul__(self, other: Any, /) -> Tensor: ...
    def __and__(self, other: Any, /) -> Tensor: ...
    def __rand__(self, other: Any, /) -> Tensor: ...
    def __or__(self, other: Any, /) -> Tensor: ...
    def __ror__(self, other: Any, /) -> Tensor: ...
    def __xor__(self, other: Any, /) -> Tensor: ...
    def __rxor__(self, other: Any, /) -> Tensor: ...
    def __lshift__(self, other: Any, /) -> Tensor: ...
    def __rlshift__(self, other: Any, /) -> Tensor: ...
    def __rshift__(self, other: Any, /) -> Tensor: ...
    def __rrshift__(self, other: Any, /) -> Tensor: ...
    def __iadd__(self, other: Any, /) -> Tensor: ...
    def __isub__(self, other: Any, /) -> Tensor: ...
    def __imul__(self, other: Any, /) -> Tensor: ...
    def __itruediv__(self, other: Any, /) -> Tensor: ...
    def __ifloordiv__(self, other: Any, /) -> Tensor: ...
    def __imod__(self, other: Any, /) -> Tensor: ...
    def __ipow__(self, other: Any, /) -> Tensor: ...  # type: ignore[misc]
    def __iand__(self, other: Any, /) -> Tensor: ...
    def __ior__(self, other: Any, /) -> Tensor: ...
    def __ixor__(self, other: Any, /) -> Tensor: ...
    def __ilshift__(self, other: Any, /) -> Tensor: ...
    def __irshift__(self, other: Any, /) -> Tensor: ...
    def __eq__(self, other: object, /) -> Tensor: ...  # type: ignore[override]
    def __ne__(self, other: object, /) -> Tensor: ...  # type: ignore[override]
    def __lt__(self, other: Any, /) -> Tensor: ...
    def __le__(self, other: Any, /) -> Tensor: ...
    def __gt__(self, other: Any, /) -> Tensor: ...
    def __ge__(self, other: Any, /) -> Tensor: ...
    def __hash__(self) -> int: ...
    def __neg__(self) -> Tensor: ...
    def __pos__(self) -> Tensor: ...
    def __invert__(self) -> Tensor: ...
    def __abs__(self) -> Tensor: ...
    def __bool__(self) -> bool: ...
    def __int__(self) -> int: ...
    def __float__(self) -> float: ...
    def __index__(self) -> int: ...
    def __complex__(self) -> complex: ...
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray: ...
    def __getitem__(self, key: Any, /) -> Tensor:
        """``x[key]``: ``array_api::getitem``, a new tensor."""
    def __setitem__(self, key: Any, value: Any, /) -> None:
        """``x[key] = value``: ``array_api::setitem``, written into this tensor."""
    def __array_ufunc__(self, ufunc: Any, method: str, /, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy's ufunc given tensors: NumPy's values, arrays on the tensors' device (the
        operator ``numpy::<ufunc>``, or the standard's function for a plain call)."""
    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any, /) -> Any:
        """NumPy's function given tensors: NumPy's values, arrays on the tensors' device (the
        operator ``numpy::<function>``)."""
    def __iter__(self) -> Iterator[Tensor]:
        """The rows, ``x[0]``, ``x[1]``, ...; a 0-d tensor is a ``TypeError``."""
    def __len__(self) -> int:
        """``shape[0]``, as NumPy's ``len``; a 0-d tensor is a ``TypeError``."""
    def __format__(self, spec: str, /) -> str:
        """A 0-d tensor formats as its Python scalar (``f"{x:.3f}"``); any other only with an
        empty spec."""
    def __reduce__(self) -> tuple[Any, ...]:
        """Pickling and ``copy.deepcopy``: the values (a host copy) and the device."""
    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        """``boxfall.array_api.namespace(self.device)``: the namespace of the tensor's device."""
    def to_device(self, device: str, /, *, stream: Any = None) -> Any:
        """A copy on ``device`` (a device string, a backend name, or ``"cpu"`` for a NumPy
        array), as the array API standard's ``to_device``."""
    # NumPy's methods that client code calls, each the function of boxfall.array_api on the
    # tensor's device (put on the class by importing boxfall.array_api).
    def all(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        """NumPy's ``x.all()``: ``array_api::all``."""
    def any(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        """NumPy's ``x.any()``: ``array_api::any``."""
    def astype(self, dtype: Any, /, *, copy: bool = True) -> Tensor:
        """NumPy's ``x.astype(dtype)`` (``dtype`` as NumPy reads it): ``array_api::astype``."""
    def max(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        """NumPy's ``x.max()``: ``array_api::max``."""
    def min(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        """NumPy's ``x.min()``: ``array_api::min``."""
    @property
    def real(self) -> Tensor:
        """NumPy's ``x.real``: ``array_api::real``."""
    @property
    def imag(self) -> Tensor:
        """NumPy's ``x.imag``: ``array_api::imag`` (of a real array, zeros)."""
    def ravel(self) -> Tensor:
        """NumPy's ``x.ravel()``: ``reshape(x, (-1,))``, a view where the data allow it."""
    def reshape(self, *shape: Any, copy: bool | None = None) -> Tensor:
        """NumPy's ``x.reshape(shape)`` or ``x.reshape(*shape)``: the standard's ``reshape``."""
    def sum(self, axis: Any = None, dtype: Any = None, *, keepdims: bool = False) -> Tensor:
        """NumPy's ``x.sum()``: ``array_api::sum``."""
    def view(self, dtype: Any = None, /) -> Tensor:
        """NumPy's ``x.view()``: a view of ``x``; with another dtype, ``x``'s bytes read as
        ``dtype`` in a new read-only tensor on ``x``'s device."""
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of a host copy (always on the CPU); ``copy=False`` raises
        ``BufferError``, as no device memory is shared."""
    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: kDLCPU, the device of the capsule ``__dlpack__`` exports."""
