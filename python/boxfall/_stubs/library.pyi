"""Libraries and kernels: ``Library``, the CPU fallback, payload kernels and the fallback policy.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias, final

import numpy as np

from boxfall._stubs.keys import DispatchKeySet, _KeyName
from boxfall._stubs.ops import OpOverload

_LibraryKind: TypeAlias = Literal["DEF", "IMPL", "FRAGMENT"]
"""What a library may do: ``"DEF"`` defines a namespace (one per namespace), ``"FRAGMENT"``
adds definitions to it, ``"IMPL"`` registers kernels and fallbacks only."""

_Views: TypeAlias = Literal["refuse", "copy"]
"""What a CPU fallback does with a view operator: refuse it (``FallbackError``) or copy (and
warn)."""

_Policy: TypeAlias = Literal["allow", "warn", "error"]
"""The fallback policies."""

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

fallthrough: Fallthrough
"""The fallthrough kernel: registered for a key, the key is skipped."""

cpu_fallback: CpuFallback
"""The boxed CPU fallback (``views="refuse"``)."""

def call_fallback(
    fallback: _BoxedKernel | CpuFallback, op: OpOverload, /, *args: Any, **kwargs: Any
) -> Any:
    """``bf.call_fallback(fallback, op, *args, **kwargs)``: runs a boxed fallback from typed
    code (c10's call_fallback_fn); ``fallback`` and ``op`` are positional-only, so every
    keyword reaches the operator."""

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
