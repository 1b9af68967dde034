"""Type stubs of the Rust extension module ``boxfall._boxfall``.

The docstrings are those of the Rust bindings (``src/python/``), so that ``help()`` in an editor
and an IDE's hover show what the module's own ``__doc__`` strings say.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, Protocol, TypeAlias, final

import numpy as np

_LibraryKind: TypeAlias = Literal["DEF", "IMPL", "FRAGMENT"]
"""What a library may do: ``"DEF"`` defines a namespace (one per namespace), ``"FRAGMENT"``
adds definitions to it, ``"IMPL"`` registers kernels and fallbacks only."""

_Views: TypeAlias = Literal["refuse", "copy"]
"""What a CPU fallback does with a view operator: refuse it (``FallbackError``) or copy (and
warn)."""

_Policy: TypeAlias = Literal["allow", "warn", "error"]
"""The fallback policies."""

_KeyName: TypeAlias = (
    Literal["CPU", "Native", "CompositeImplicit", "CompositeImplicitAutograd", "cpu", "native"]
    | str
)
"""A dispatch key's name: a backend (``"CPU"``, ``"Native"``, a registered one such as
``"Accel"``), a functionality key, or ``"CompositeImplicit"`` (``"CompositeImplicitAutograd"``
is its PyTorch name). Any case is taken where it names one key (``"cpu"``, ``"accel"``); an
unknown name is an ``UnknownKeyError`` (a ``KeyError``) listing the known keys."""

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

@final
class AliasInfo:
    """An alias annotation: ``(a!)`` is ``AliasInfo(before=["a"], after=["a"], is_write=True)``."""

    def __new__(
        cls, before: Sequence[str], after: Sequence[str] | None = None, is_write: bool = False
    ) -> AliasInfo: ...
    @property
    def before(self) -> list[str]:
        """The alias sets before the arrow (``a`` of ``(a -> b)``), in written order."""
    @property
    def after(self) -> list[str]:
        """The alias sets after the arrow, in written order (``before`` when there is none)."""
    @property
    def is_write(self) -> bool:
        """Whether the annotation has ``!``: the operator writes the value."""

@final
class Argument:
    """One argument or return of a schema."""

    @property
    def name(self) -> str:
        """The name (``""`` for an unnamed return)."""
    @property
    def type(self) -> str:
        """The type as written, without the alias annotation (``"Tensor"`` for
        ``Tensor(a!)``)."""
    @property
    def default(self) -> str | None:
        """The default as written (``"1"``, ``"None"``, ``"[0,1]"``), or None."""
    @property
    def kwarg_only(self) -> bool:
        """Whether it comes after ``*``."""
    @property
    def alias(self) -> AliasInfo | None:
        """The alias annotation, or None."""
    @property
    def is_write(self) -> bool:
        """Whether the operator writes it (``(a!)``, also on a list's elements)."""

@final
class FunctionSchema:
    """A parsed operator schema; ``str()`` prints it as PyTorch does."""

    @property
    def name(self) -> str:
        """``ns::op`` (without the overload)."""
    @property
    def overload_name(self) -> str:
        """The overload name, ``""`` for the default overload."""
    @property
    def operator_name(self) -> str:
        """``ns::op`` or ``ns::op.overload``, as counters and errors name it."""
    @property
    def is_mutable(self) -> bool:
        """Whether some argument is written (``(a!)``)."""
    @property
    def is_vararg(self) -> bool:
        """Whether the arguments end in ``...``."""
    @property
    def is_varret(self) -> bool:
        """Whether the returns end in ``...``."""
    @property
    def arguments(self) -> list[Argument]:
        """The arguments."""
    @property
    def returns(self) -> list[Argument]:
        """The returns."""
    @property
    def tensor_arguments(self) -> list[int]:
        """Indices of the arguments that hold tensors (Tensor, Tensor?, Tensor[], Tensor?[])."""
    @property
    def written_arguments(self) -> list[int]:
        """Indices of the arguments the operator writes (``(a!)``, also on a list's
        elements)."""
    @property
    def return_aliases(self) -> list[int | None]:
        """For each return, the index of the argument it aliases, or None."""
    @property
    def has_view_returns(self) -> bool:
        """Whether some return is a view of an argument (``Tensor(a)``, not written)."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class DispatchKeySet:
    """The key set of a call, as a boxed kernel receives it; its highest key is the kernel's
    own."""

    def highest(self) -> str | None:
        """The highest key's name (None for an empty set)."""
    def without_highest(self) -> DispatchKeySet:
        """The set without its highest key."""
    def names(self) -> list[str]:
        """The keys' names, highest first."""
    def __contains__(self, name: str, /) -> bool:
        """Whether the set holds the key of that name (any case, as everywhere)."""
    def __len__(self) -> int:
        """How many keys the set holds."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

class _Redispatch(Protocol):
    """``OpOverload.redispatch``: a builtin method bound to its operator."""

    __self__: OpOverload
    def __call__(self, keys: DispatchKeySet, *args: Any, **kwargs: Any) -> Any:
        """Dispatches on ``keys`` without its highest key."""

@final
class OpNamespace:
    """The operators of one namespace: ``bf.ops.demo.add`` is the packet of ``demo::add``
    (an ``OpOverloadPacket``). The packets are kept while the definitions stay as they are; an
    operator defined or undefined since is looked up again."""

    def __new__(cls, ns: str) -> OpNamespace: ...
    def __getattribute__(self, name: str, /) -> OpOverloadPacket:
        """The packet of operator ``name`` (``AttributeError`` if none is defined); a name
        that starts with two underscores is the object's own attribute."""
    def __dir__(self) -> list[str]:
        """The operators defined in the namespace (``add`` for ``demo::add.Tensor``), sorted."""

@final
class OpOverloadPacket:
    """All overloads of one operator name; a call picks the first, in definition order, whose
    schema binds the arguments. ``packet.Tensor`` is one overload, ``packet.default`` the
    overload named ``""``. The overload objects are kept (``packet.default is
    packet.default``) and looked up again only once an operator was defined or undefined."""

    def __new__(cls, qualified_name: str) -> OpOverloadPacket: ...
    @property
    def name(self) -> str:
        """``ns::op``."""
    def overloads(self) -> list[str]:
        """The overload names, in definition order (``"default"`` for ``""``)."""
    def __getattribute__(self, overload: str, /) -> OpOverload:
        """The overload of that name (``default`` for ``""``); ``name``, ``overloads`` and the
        names that start with two underscores are the packet's own attributes."""
    def __dir__(self) -> list[str]:
        """The overload names (``"default"`` for ``""``) and the packet's own attributes."""
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The one overload's call, or the first overload's whose schema binds the arguments."""

@final
class OpOverload:
    """One operator overload: callable, with its schema and dispatch table
    (``bf.ops.demo.add.Tensor``); taken wherever an operator's name is."""

    @property
    def name(self) -> str:
        """``ns::op`` or ``ns::op.overload``."""
    @property
    def overload_name(self) -> str:
        """The overload name (``""`` for the default overload)."""
    @property
    def tags(self) -> list[str]:
        """The operator's tags (``Library.define(tags=)``)."""
    @property
    def schema(self) -> FunctionSchema:
        """The schema."""
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Binds the arguments to the schema, dispatches on their keys and returns the returns
        (one value, a tuple for several, None for ``()``)."""
    def call_boxed(self, stack: list[Any]) -> list[Any]:
        """A boxed call: ``stack`` holds every argument; returns a new list of the returns and
        leaves ``stack`` as it was."""
    @property
    def redispatch(self) -> _Redispatch:
        """From inside a kernel: ``op.redispatch(keys, *args, **kwargs)`` dispatches on
        ``keys`` without its highest key. One object per operator, made at the first look-up
        (bound to it: ``__self__``)."""
    def redispatch_boxed(self, keys: DispatchKeySet, stack: list[Any]) -> None:
        """The boxed form of ``redispatch``: replaces the contents of ``stack`` (the
        arguments) with the returns, as a boxed kernel must."""
    def dispatch_table(self) -> dict[str, str]:
        """Key name -> what serves it: "kernel", "composite kernel", "backend fallback",
        "fallthrough" or "missing"."""

@final
class Fallthrough:
    """The fallthrough kernel: registered for a key, the key is skipped."""

@final
class CpuFallback:
    """The boxed CPU fallback. ``CpuFallback(views="copy")`` copies view operators (with a
    warning) instead of refusing them."""

    def __new__(cls, *, views: _Views = "refuse") -> CpuFallback: ...
    @property
    def views(self) -> _Views:
        """ "refuse" or "copy"."""
    def __call__(self, op: OpOverload, keys: DispatchKeySet, stack: list[Any]) -> None:
        """Runs the CPU fallback as a boxed kernel: ``stack`` holds the arguments and gets the
        returns (left as it was if the fallback fails). For a backend's own fallback."""

@final
class PayloadKernel:
    """A kernel of a Python backend that gets its tensors' payloads and returns the result's
    payload (or a tuple of them): boxfall takes the payloads out and wraps the result in Rust,
    so ``fn`` may be a compiled function itself (``jax.jit(jnp.add)``), with no Python frame
    around it. Register it with ``Library.impl`` for the backend's key, for an operator that
    writes none of its arguments.

    It serves a call whose arguments are all tensors of the backend, given by position (at
    most four), of one dtype among ``dtypes``; every other call, and a ``TypeError`` or
    ``ValueError`` that ``fn`` raises, goes to ``otherwise``, a usual kernel of the backend
    (which may hand the call to the CPU fallback)."""

    def __new__(
        cls,
        fn: Callable[..., Any],
        *,
        dtypes: Iterable[str | np.dtype[Any] | type],
        otherwise: Callable[..., Any],
    ) -> PayloadKernel: ...
    @property
    def fn(self) -> Callable[..., Any]:
        """The function that gets payloads."""
    @property
    def otherwise(self) -> Callable[..., Any]:
        """The kernel that serves every other call."""
    @property
    def dtypes(self) -> list[np.dtype[Any]]:
        """The dtypes served."""

_BoxedKernel = Callable[[OpOverload, DispatchKeySet, list[Any]], None]

@final
class Library:
    """Registrations of one namespace: definitions, kernels and fallbacks, undone together by
    ``close()`` or at the end of a ``with`` block.

    A library collected while still open undoes its registrations too, and warns with a
    ``ResourceWarning`` that names the library and what it undid, as an unclosed file warns:
    keep a reference to the library for as long as its registrations are needed. The garbage
    collector sees the Python kernels a library registered, so a kernel that refers back to
    its library does not keep it alive forever.
    """

    def __new__(cls, ns: str, kind: _LibraryKind) -> Library: ...
    @property
    def ns(self) -> str:
        """The namespace."""
    @property
    def kind(self) -> _LibraryKind:
        """ "DEF", "IMPL" or "FRAGMENT"."""
    @property
    def is_open(self) -> bool:
        """Whether the library is still open."""
    def define(self, schema: str, *, tags: Sequence[str] | None = None) -> str:
        """Defines an operator; returns its name (``ns::op.overload``). ``tags`` (c10's
        operator tags): ``"default_dtypes"`` where the dtypes of its results are the
        library's choice (indices, counts), so a device lacking the one its CPU kernel made
        gets its default of that kind (int32 for int64) rather than a ``bf.DTypeError``. An
        unknown tag is a ``bf.SchemaError``, and nothing is defined."""
    def impl(
        self,
        name: str | OpOverload,
        fn: Callable[..., Any] | Fallthrough | CpuFallback | PayloadKernel,
        dispatch_key: _KeyName = "CPU",
        *,
        boxed: bool = False,
        allow_override: bool = False,
    ) -> None:
        """Registers ``fn`` as the kernel of ``name`` (a name, or a ``bf.OpOverload``) for
        ``dispatch_key``. The operator must be in the library's own namespace."""
    def fallback(
        self, fn: _BoxedKernel | Fallthrough | CpuFallback, dispatch_key: _KeyName
    ) -> None:
        """Registers a backend fallback for ``dispatch_key`` (namespace "_" only):
        ``bf.cpu_fallback``, ``bf.fallthrough``, or a Python boxed ``fn(op, keys, stack)``."""
    def register_native_kernels(self) -> list[str]:
        """Registers Native's Rust kernels for this library's operators that have one of the
        schemas Native implements; returns their names."""
    def register_native_array_api_kernels(self) -> list[str]:
        """Registers Native's Rust kernels for this library's operators that have one of the
        array API standard's schemas Native implements (``boxfall.array_api``'s); returns
        their names."""
    def register_shape_rule(self, name: str | OpOverload, fn: Callable[..., Any]) -> None:
        """Registers ``fn`` as the shape rule of ``name`` (an operator of this library's
        namespace), as ``torch.library.register_fake`` does: graph mode asks it for the outputs
        of a call it records. ``fn`` gets a ``bf.TensorMeta`` per tensor argument and the other
        arguments as values (a value it reads is a constant of the recorded graph), and
        returns the outputs' ``bf.TensorMeta``, a tuple of them for several returns, or raises
        ``bf.DataDependentError`` where they depend on the values (a counted graph break). A
        wrong result is a ``bf.RegistrationError`` naming the operator, at the call; another
        exception fails the call. Undone when the library closes."""
    def register_array_api_shape_rules(self) -> list[str]:
        """Registers the array API's shape rules (Rust's, those of ``boxfall.array_api``'s
        operators) for this library's operators that have one; returns their names."""
    def close(self) -> None:
        """Removes every registration of this library (no warning: it was closed on
        purpose)."""
    def _for_process_life(self) -> None:
        """Marks the library as kept for the life of the process (``@bf.impl``'s): it then
        goes at interpreter exit without a ``ResourceWarning``."""
    def __enter__(self) -> Library: ...
    def __exit__(self, *_exc: object) -> bool: ...

@final
class Graph:
    """A recorded graph, as a backend's compiler gets it (``bf.register_backend(...,
    compile=)``): its inputs, nodes and outputs, and ``replay``."""

    @property
    def backend(self) -> str:
        """The backend's name."""
    @property
    def device(self) -> str:
        """The device of its inputs and results (``"JAXGraph:1"``): a program with no inputs is
        placed there by its compiler."""
    @property
    def inputs(self) -> list[tuple[str, tuple[int, ...]]]:
        """The inputs' ``(dtype, shape)``, in the order their payloads are given."""
    @property
    def scalars(self) -> list[str]:
        """The scalar inputs' types (``"bool"``, ``"int"``, ``"float"``): their values follow
        the inputs' payloads in what the compiled function is given."""
    @property
    def nodes(self) -> list[tuple[OpOverload, tuple[Any, ...], list[tuple[str, tuple[int, ...]]]]]:
        """The nodes, in order: ``(op, args, outputs)``, ``op`` a ``bf.OpOverload``, each argument
        ``("input", i)``, ``("scalar", j)`` (scalar input ``j``), ``("node", n, k)`` (result ``k``
        of node ``n``) or ``("const", value)``, and the outputs' ``(dtype, shape)``."""
    @property
    def outputs(self) -> list[tuple[int, int]]:
        """The results given back, in order: ``(node, k)``."""
    @property
    def key(self) -> str:
        """The graph's structure as a string (what the cache of compiled graphs is keyed by),
        the backend's settings last."""
    @property
    def settings(self) -> str:
        """The backend's settings the graph is compiled under (its compiler's ``settings()``;
        empty for none)."""
    def replay(self, payloads: Iterable[Any]) -> list[Any]:
        """Runs the nodes eagerly on the backend (its own kernels, or the CPU fallback), on
        tensors wrapping ``payloads`` (one per input, then the scalar inputs' values), and gives
        the outputs' payloads."""

@final
class Backend:
    """A registered backend: makes tensors on its devices."""

    @property
    def name(self) -> str:
        """The backend's (and its dispatch key's) name."""
    def tensor(self, array: Any, index: int = 0, *, op: OpOverload | None = None) -> Tensor:
        """A tensor on device ``index`` holding ``array``'s values (through ``from_cpu``). On a
        backend registered with ``narrow=True``, a 64-bit dtype the device lacks becomes the
        32-bit one of its kind, warned once and counted for ``op`` (the operator that asked),
        warned every time without one; else a ``bf.DTypeError``."""
    def dtype_for(self, dtype: Any, *, op: OpOverload | None = None) -> str:
        """The dtype (its name) a request for ``dtype`` gets on this backend's devices:
        ``dtype`` where held; the 32-bit one of a 64-bit dtype's kind the device lacks where
        the backend narrows (``bf.NarrowingWarning`` once for ``op``, counted in its
        ``op_stats(op)["narrowed"]``); else a ``bf.DTypeError`` naming dtype, operator and
        backend. A backend's own kernel given a ``dtype`` asks this, so that its result's
        dtype is the one the CPU fallback's would have."""
    def tensor_from_payload(self, payload: Any, index: int = 0) -> Tensor:
        """A tensor on device ``index`` around an existing payload."""
    @property
    def dtypes(self) -> list[str]:
        """The dtypes the backend's devices hold, by name (every dtype of the array API
        standard unless ``register_backend(dtypes=)`` named fewer), extension dtypes it
        declared (``"bfloat16"``) last."""
    @property
    def narrow(self) -> bool:
        """Whether a 64-bit dtype the device lacks becomes the 32-bit one of its kind
        (``register_backend(narrow=)``), as JAX without 64-bit types does."""
    @property
    def thread_safe(self) -> bool:
        """Whether the backend's hooks and kernels may run on several threads at once (False:
        boxfall runs them one at a time)."""
    @property
    def lazy(self) -> bool:
        """Whether the backend takes part in residency (``register_backend(lazy=)``): host
        copies kept, the CPU fallback's results left on the host until the device needs them.
        False for Native, whose tensors are host memory."""

fallthrough: Fallthrough
"""The fallthrough kernel: registered for a key, the key is skipped."""
cpu_fallback: CpuFallback
"""The boxed CPU fallback (``views="refuse"``)."""

def parse_schema(text: str) -> FunctionSchema:
    """Parses a schema (``"ns::op.overload(args) -> returns"``); a malformed one raises
    ``bf.SchemaError`` showing the column and a caret."""

def parse_schemas_count(texts: Sequence[str]) -> int:
    """Parses many schemas and returns how many parsed (for measuring parse speed without the
    cost of building Python objects)."""

def overloads(base: str) -> list[OpOverload]:
    """The defined overloads of ``ns::op``, in definition order."""

def definitions_version() -> int:
    """A number that changes whenever an operator is defined or undefined."""

def find_op(name: str) -> OpOverload:
    """The defined operator ``name``."""

def _output_metas(op: str, *args: Any, **kwargs: Any) -> list[tuple[str, tuple[int, ...]]] | None:
    """The dtypes and shapes the registered shape rule of operator ``op`` gives for these
    arguments (bound as a call binds them; nothing runs), or None where it has no rule or its
    rule cannot know them."""

def _refuse_in_graph(op: str, backend: str, reason: str) -> None:
    """Marks operator ``op`` as one graph backend ``backend``'s compiler cannot put in a program
    (its kernel there cannot be traced), for ``reason``: its calls there break the graph."""

def _graph_refusal(op: str, backend: str) -> str | None:
    """Why graph backend ``backend`` refused operator ``op``, or None where it did not."""

def array_kernel(kernel: Callable[..., Any], as_arrays: Callable[[Any], Any]) -> Callable[..., Any]:
    """The CPU kernel ``boxfall.array_api`` registers for ``kernel``: its result as
    ``as_arrays(result)`` gives it (NumPy arrays as they are)."""

@final
class NamespaceFunction:
    """A function of ``boxfall.array_api``: the calls its route takes go to an operator's
    overload directly, any other to the Python function it wraps (``__wrapped__``). The binary
    route (``add``, ``equal``, ...) takes two arrays, or an array and a plain Python scalar; the
    operator route (any other function that is one operator) takes a call with an array first
    and no dtype asked; the view route (``expand_dims``, ``matrix_transpose``) makes a view
    whose layout it knows (:func:`view_function`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, instance: object, owner: type | None = None, /) -> Any: ...
    @property
    def __wrapped__(self) -> Callable[..., Any]: ...

def binary_function(
    both: Callable[..., Any],
    right: Callable[..., Any],
    left: Callable[..., Any],
    general: Callable[..., Any],
) -> NamespaceFunction:
    """A :class:`NamespaceFunction` of the binary route: the overloads ``both`` (two arrays),
    ``right`` (an array and a scalar) and ``left`` (a scalar and an array), ``general`` serving
    other calls."""

def operator_function(
    op: Callable[..., Any], general: Callable[..., Any], dtype_at: int | None = None
) -> NamespaceFunction:
    """A :class:`NamespaceFunction` of the operator route: ``op``, ``general`` serving other
    calls; ``dtype_at``: the position of its ``dtype`` parameter, if it has one."""

def view_function(general: Callable[..., Any]) -> NamespaceFunction:
    """A :class:`NamespaceFunction` of the view route, for ``general``, the namespace's
    ``expand_dims`` or ``matrix_transpose`` (by its ``__name__``; another name is a
    ``ValueError``): the view of a tensor whose layout it knows (it kept the layout of a view
    ``general`` made of a tensor of that dtype and shape, with that axis) is made without a
    Python frame; any other call goes to ``general``."""

def _make_view(
    base: Tensor,
    chain: tuple[Any, ...],
    layout: Any,
    origin: int,
    writable: bool,
) -> Tensor:
    """A view of ``base`` through the steps ``chain``, whose layout on the base's stand-in
    array (first element at ``origin``) is ``layout`` (``boxfall.array_api._views``)."""

def _view_info(t: Any) -> tuple[Tensor, tuple[Any, ...], Any, int, bool] | None:
    """``(base, chain, layout, origin, writable)`` of a view, else None."""

def call_first_binding(
    overloads: Sequence[OpOverload], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> Any:
    """Calls the first overload, in order, whose schema binds the arguments."""

def call_fallback(
    fallback: _BoxedKernel | CpuFallback, op: OpOverload, /, *args: Any, **kwargs: Any
) -> Any:
    """``bf.call_fallback(fallback, op, *args, **kwargs)``: runs a boxed fallback from typed
    code (c10's call_fallback_fn); ``fallback`` and ``op`` are positional-only, so every
    keyword reaches the operator."""

def register_backend(
    name: str,
    *,
    to_cpu: Callable[[Any], np.ndarray],
    from_cpu: Callable[..., Any],
    copy_from_cpu: Callable[[Any, np.ndarray], Any],
    to_cpu_many: Callable[[list[Any]], Sequence[np.ndarray]] | None = None,
    shares_memory: bool = False,
    replace: bool = False,
    dtypes: Iterable[str | np.dtype[Any] | type] | None = None,
    thread_safe: bool = True,
    lazy: bool = True,
    view: Callable[[Any, tuple[int, ...], tuple[int, ...], int], Any] | None = None,
    view_write: Callable[[Any, Any, tuple[int, ...], tuple[int, ...], int], Any] | None = None,
    narrow: bool = False,
    compile: Callable[[Graph], Callable[[list[Any]], Sequence[Any]]] | None = None,
    from_cpu_takes_device: bool = False,
) -> Backend:
    """Registers a Python backend and its dispatch key; later backends rank above earlier ones.

    ``to_cpu(payload) -> ndarray``, ``from_cpu(ndarray) -> payload`` and
    ``copy_from_cpu(payload, ndarray)`` (writes the array's values, and shape, into the payload
    and returns None, or returns a new payload holding them, for a device whose memory is
    immutable: it takes the tensor's place, a write of it that its views see) move tensors;
    with ``from_cpu_takes_device=True``, ``from_cpu`` is called ``from_cpu(ndarray, device=i)``,
    ``i`` the index of the tensor's device (``"Accel:1"``: 1), for a backend of several devices
    (the registration says so, not the hook's signature: a hook wrapped by a decorator that
    takes ``**kwargs`` keeps its own signature's calls);
    ``to_cpu_many(payloads) -> arrays`` moves all of a call's tensors at once when given.
    ``shares_memory=True`` says ``to_cpu`` may return memory shared with the payload: the
    fallback then copies the arguments a kernel writes before it runs.

    With ``replace``, a backend registered earlier under ``name`` gets the new hooks and keeps
    its key (a notebook cell run twice): its tensors, kernels and fallbacks stay, and every
    ``Backend`` object of it uses the new hooks. Without it, a name registered twice is a
    ``RegistrationError``.

    ``dtypes`` names the dtypes the device holds (None: every dtype of the array API
    standard): the namespace's ``dtypes()``/``default_dtypes()`` follow it, creation functions
    without a dtype make the device's defaults (float32 on a device without float64), and a
    result of another dtype is a ``bf.DTypeError`` before it moves. The payload ``from_cpu``
    returns must have its array's shape and dtype, else a ``bf.KernelError``. With
    ``thread_safe=False`` the backend's hooks, and the kernels and fallbacks registered for it
    from then on, run one at a time (under one re-entrant lock of the backend).

    ``dtypes`` may also name extension dtypes NumPy knows (``ml_dtypes.bfloat16``): tensors of
    them work through the CPU fallback, whose kernels get NumPy arrays of that dtype (NumPy's
    promotion with ``ml_dtypes``: bfloat16 with float32 is float32). The results whose dtype
    the standard lets the library choose (indices, counts, ``sum``'s accumulator: operators
    tagged ``default_dtypes``) come in the device's default of their kind (int32 without
    int64). ``narrow=True`` is JAX's rule without 64-bit types: a 64-bit dtype the device
    lacks, asked for or made by a CPU kernel, becomes the 32-bit one of its kind (int64 to
    int32, uint64 to uint32, float64 to float32, complex128 to complex64), with a
    ``bf.NarrowingWarning`` once per operator and a count in
    ``bf.metrics.op_stats(op)["narrowed"]``; without it, such a request is a
    ``bf.DTypeError``.

    ``lazy`` (residency): the CPU fallback keeps the host copy of a tensor it read (used while
    no write through boxfall came since) and leaves its results on the host until the device
    needs them (a kernel of the backend runs on them, ``t.payload`` is read,
    ``t.materialize()``); ``lazy=False``: every read calls ``to_cpu`` and every result
    ``from_cpu`` at once, for a backend whose payloads change where boxfall does not see it or
    whose ``from_cpu`` must run eagerly.

    ``view(payload, shape, strides, offset) -> payload | (payload, False) | None`` (optional)
    makes a view of a payload on the device: the payload of ``shape`` whose element at index
    ``i`` is the base payload's element ``offset + sum(i[d] * strides[d])`` of its values in C
    order (strides and offset count elements; a stride may be negative, or 0 for a broadcast
    axis). A payload alone (or ``(payload, True)``) shares the base's device memory: a kernel
    of the backend that writes it writes the base, as a NumPy view does. ``(payload, False)``
    is a copy (a gather into a new buffer): after a kernel of the backend writes it, boxfall
    writes its values into the base (``to_cpu`` of the copy, through the view into the base's
    host values, the base then on the host only; all counted in ``bf.metrics.transfers()``),
    all or nothing (an error names the view's operators, the hook and the backend, and the
    base keeps its values). A kernel of the backend reads a view
    (``x.T``, ``x[1:]``, ``expand_dims(x, 0)``) through it with nothing moved: a base whose
    values were on the host only gets its payload once (``from_cpu``) and every view of it is
    made from that. Return None for a view the device cannot make (boxfall then makes its
    values on the host and moves them with ``from_cpu``). A payload of another shape than
    ``shape`` or another dtype than the base's is a ``bf.KernelError`` naming the hook, the
    view's operators and the backend.

    ``view_write(base, values, shape, strides, offset) -> payload | None`` (optional) writes
    the values of a view that a kernel of the backend wrote as a copy (``view`` returned
    ``(payload, False)`` or None, or there is no ``view``) into its base on the device, the
    view's place given as to ``view``: it returns the base's new payload (a scatter, JAX's
    ``base.at[...].set(values)``), which takes the base's place as a write of it, or None
    where it wrote the base's payload where it is. Without it boxfall writes the view's
    values into its base through the host.

    A kernel of the backend whose return aliases a written argument (``Tensor(a!)``: ``add_``)
    returns that argument (written where it is), None (the same), or a new payload or a new
    ``bf.Tensor`` of the backend for it (a device whose memory is immutable): boxfall puts it
    in the argument's place as a write of it, and the caller gets the argument.

    ``compile(graph) -> function`` (optional) makes the backend a graph backend (graph
    mode): an operator on its tensors is recorded and returns pending tensors (dtype, shape
    and device known, values not yet), computed together at a sync point
    (``t.numpy()``, ``float(t)``, ``t.payload``, a graph break, ``bf.sync()``): the pending
    graph, a :class:`Graph`, is given to ``compile``, whose function of the input payloads (a
    list) gives the output payloads; compiled functions are cached by the graph's structure.
    Where ``compile`` has a ``settings()`` method, the string it returns (the backend's settings
    that change what a compile makes: JAX's x64 and matmul precision) is read once a sync and
    is part of the cache's key, so a change of them compiles anew, with a reason naming them.
    A function whose attribute ``donates`` is true (any size) or an int (the least bytes) may
    consume (donate) input payloads: where there is one to offer, it is called with
    ``donate=``, a list of one bool per payload, true for the old payload of a tensor written
    in place that nothing else holds (no tensor, view, Python reference or cache), of an
    output's dtype and shape, of the least bytes or more (the attribute is read at each such
    run; false offers none); it may reuse those buffers for
    its results (``jax.jit``'s ``donate_argnums``), and sets false, before it returns or
    raises, the entries of those it kept. Where it raises with an entry left true, that input
    is taken as gone: the tensors computed from it cannot be computed (reading one says so),
    and the next sync computes the rest. ``bf.metrics.graphs()["donated"]`` counts them.
    A function whose attribute ``runs_ahead`` is true (read at each sync) may be run ahead:
    where a recording repeats the graph its last two syncs ran, it is called at the
    recording's first node (on the inputs read so far, the last run's for the rest, and the
    last run's scalars), and its results are the sync's only where the recording turns out to
    be that graph on that data, else let go (``ran_ahead`` and ``ahead_missed`` in
    ``bf.metrics.graphs()``). Set it only on a function whose call has no effect but its
    results, returns at once while the device computes (JAX's async dispatch), and reads
    payloads nothing writes in place. A function whose attribute ``checks_results`` is true
    (read at each sync) is then called ``f.check_results(payloads)`` with a run's output
    payloads before the sync commits them (its own run's, or a run ahead's once confirmed):
    what it raises fails the run, as the run raising would (boxfall.jax's programs read there
    the checks of kernels that give numbers where NumPy raises, so that a run ahead still only
    launches).
    """

def backends_version() -> int:
    """A number that changes whenever a backend is registered or replaced."""

def host_data_target(op: OpOverload, device: str) -> tuple[Backend, int] | None:
    """The backend and device index that host data given to the creation operator ``op`` for
    ``device`` goes to through ``Backend.tensor`` (a transfer the user asked for), where the
    device's backend serves ``op`` with ``bf.cpu_fallback``; None elsewhere."""

def get_backend(name: _KeyName) -> Backend:
    """The backend registered under ``name`` (any case: ``"accel"`` finds ``Accel``), Native
    included. A name that is no backend (``"CPU"``, whose tensors are NumPy arrays, a
    functionality key, an unknown name) is an ``UnknownKeyError`` that lists the backends."""

def backends() -> list[Backend]:
    """Every backend, Native first, then those registered from Python in registration order
    (lowest priority first, as ``bf.dispatch_keys()`` lists keys)."""

def coverage(key: _KeyName, namespace: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The key's registered name and ``(operator name, what serves it on the key)`` for every
    defined operator, or those of ``namespace``, sorted by name (``bf.coverage`` wraps it)."""

def namespaces() -> list[str]:
    """The namespaces that hold a defined operator, sorted."""

def operators_in(ns: str) -> list[str]:
    """The operators of namespace ``ns`` by name (no namespace, no overload), sorted."""

def native_backend() -> Backend:
    """The built-in Native backend."""

def native_kernel_names() -> list[tuple[str, list[str]]]:
    """The operators Native implements in Rust: ``(name, argument types)``."""

def register_functionality_key(name: str) -> str:
    """Registers a functionality key (above every backend key); returns its name."""

def key_bits(names: Sequence[_KeyName]) -> int:
    """The bits of the named keys (an unknown name raises KeyError listing the known keys)."""

def key_names() -> list[str]:
    """Every registered key's name, lowest priority first."""

def local_keys() -> tuple[int, int]:
    """This thread's (included, excluded) key bits."""

def set_local_keys(include: int, exclude: int) -> tuple[int, int]:
    """Sets this thread's included/excluded key bits; returns the previous ones."""

def set_fallback_policy(policy: str | None, ops: Sequence[str] | None = None) -> None:
    """Sets the fallback policy, for every operator or (with ``ops``) for those operators
    only; ``None`` with ``ops`` clears their own policies (``bf.set_fallback_policy`` wraps
    it)."""

def get_fallback_policy(op: str | None = None) -> str | None:
    """The process-wide fallback policy, or with ``op`` that operator's own (None if it has
    none)."""

def fallback_env_problem() -> str | None:
    """What is wrong with ``BOXFALL_FALLBACK``, if anything (the package warns with it at
    import)."""

def counter_value(name: str) -> int:
    """The CPU-fallback count of operator ``name`` (0 if it never fell back)."""

def counters() -> list[tuple[str, int]]:
    """``(operator name, fallback count)`` of every operator counted since the last reset."""

def op_stats(name: str) -> dict[str, Any]:
    """The fallback figures of operator ``name`` (``bf.metrics.op_stats`` wraps it)."""

def all_stats() -> list[tuple[str, dict[str, Any]]]:
    """``(operator name, figures)`` of every operator counted since the last reset."""

def report(backend: str | None = None, sort: str = "time", top: int | None = None) -> str:
    """The fallback table, a row per (operator, backend) (``bf.metrics.report`` wraps it)."""

def reset_metrics() -> None:
    """Zeroes every counter and forgets which operators warned."""

def set_counting(on: bool) -> bool:
    """Turns the counting of this thread's calls on or off; returns whether it was on
    (``bf.metrics._uncounted()`` enters it while a graph's program is traced)."""

def record_fallback(
    op: OpOverload,
    backend: str,
    fallback_ns: int,
    kernel_ns: int,
    bytes_to_cpu: int,
    bytes_from_cpu: int,
    error: BaseException | None = None,
) -> None:
    """Counts one CPU fallback that ran outside the dispatcher (``bf.metrics.record_fallback``
    wraps it)."""

def graph_compiled_in_run(ns: int) -> None:
    """The compiled graph running in this thread spent ``ns`` nanoseconds of its run compiling:
    counted as compile time in ``graph_metrics()``, not execution."""

def user_transfers() -> dict[str, dict[str, int]]:
    """The transfers users asked for, per backend name (``bf.metrics.transfers()`` wraps it)."""

def profile_begin() -> None:
    """Starts timing the backends' own kernels (``bf.metrics.profile()`` enters it)."""

def profile_end() -> None:
    """Ends one ``profile_begin`` (``bf.metrics.profile()`` leaves it)."""

def set_fast_path(on: bool) -> bool:
    """Turns the fast path on or off (for tests that compare it with the general path);
    returns whether it was on."""

def vectorcall_installed() -> bool:
    """Whether calls of ``OpOverload`` objects from Python come by vectorcall (switched on by
    the first call of any operator)."""

def sync() -> None:
    """Computes every pending tensor of this thread (``bf.sync()``). Where a node of a graph
    fails (its program failed, and the node failed run alone), the tensors computed from it
    hold its error, raised again at each of their reads, and the rest are computed:
    ``bf.sync()`` raises the first such error once every graph was synced."""

def graph_key_bits() -> int:
    """The bits of the ``Graph`` key (0 before any graph backend): what ``bf.eager()`` excludes."""

def graph_limit(backend: str) -> int:
    """The most nodes a graph of ``backend`` records before it is cut (``bf.graph.limit``)."""

def set_graph_limit(backend: str, nodes: int) -> None:
    """Sets the most nodes a graph of ``backend`` records before it is cut
    (``bf.graph.set_limit``)."""

def graph_dump() -> str:
    """This thread's pending graphs in words (``bf.graph.dump()``)."""

def graph_metrics() -> dict[str, Any]:
    """Graph mode's figures (``bf.metrics.graphs()``)."""

def reset_graph_metrics() -> None:
    """Sets graph mode's figures back to zero."""

def is_pending(t: Tensor) -> bool:
    """Whether a tensor is pending (its values not computed yet)."""
