"""boxfall: an operator dispatcher with a boxed CPU fallback.

Operators are defined with PyTorch's schema language, kernels are Python or NumPy functions (CPU
tensors are NumPy arrays), and a backend that implements a few operators natively runs every
other one through one boxed CPU fallback, counted per operator::

    import numpy as np, boxfall as bf

    lib = bf.Library("demo", "DEF")
    lib.define("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
    lib.impl("add.Tensor", lambda self, other, alpha=1: self + alpha * other, "CPU")
    x = bf.native.tensor(np.arange(3.0))       # Native falls back to the CPU kernel
    bf.ops.demo.add(x, x).numpy()              # array([0., 2., 4.])
    bf.metrics.counter_value("demo::add.Tensor")   # 1
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from . import _boxfall
from ._boxfall import (
    AliasInfo,
    Argument,
    Backend,
    CpuFallback,
    DispatchKeySet,
    Fallthrough,
    FunctionSchema,
    Graph,
    Library,
    OpOverload,
    PayloadKernel,
    Tensor,
    backends,
    call_fallback,
    cpu_fallback,
    fallthrough,
    get_backend,
    parse_schema,
    register_backend,
    register_functionality_key,
    sync,
)
from ._coverage import Coverage, coverage
from ._errors import (
    ArgumentError,
    BoxfallError,
    DataDependentError,
    DTypeError,
    FallbackError,
    FallbackWarning,
    KernelError,
    NarrowingWarning,
    NoKernelError,
    PolicyError,
    RegistrationError,
    SchemaError,
    UnknownKeyError,
    UnknownOperatorError,
)
from ._ops import OpNamespace, OpOverloadPacket, ops

__version__ = "0.1.0"


if TYPE_CHECKING:  # only for checkers: stubtest takes a Literal alias for a function
    _Policy: TypeAlias = Literal["allow", "warn", "error"]
    """The names of the fallback policies (any case is accepted too: ``"Warn"``)."""

OpName: TypeAlias = str | OpOverload
"""An operator as a name (``"demo::add.Tensor"``; ``"demo::add"`` is the overload with the
empty name) or as an :class:`OpOverload` (``bf.ops.demo.add.Tensor``)."""


def _op_name(op: object) -> str:
    if isinstance(op, OpOverload):
        return op.name
    if isinstance(op, str):
        return op
    raise TypeError(
        f"an operator is a name such as 'demo::add.Tensor' or a bf.OpOverload, "
        f"not {type(op).__name__}"
    )


def _op_names(ops: OpName | Iterable[OpName]) -> list[str]:
    if isinstance(ops, (str, OpOverload)):
        return [_op_name(ops)]
    try:
        items = list(ops)
    except TypeError:
        raise TypeError(
            "ops is an operator (a name or a bf.OpOverload) or a list of them, "
            f"not {type(ops).__name__}"
        ) from None
    return [_op_name(op) for op in items]


def set_fallback_policy(
    policy: _Policy | None, ops: OpName | Iterable[OpName] | None = None
) -> None:
    """Sets what happens when an operator reaches a CPU fallback, however it is reached: a
    backend's registered fallback, ``bf.cpu_fallback(op, keys, stack)`` in a fallback of a
    backend's own, an explicit :func:`call_fallback`, or ``cpu_fallback`` as one operator's
    kernel.

    ``"allow"`` runs it; ``"warn"`` runs it and warns once per (operator, backend) with
    :class:`FallbackWarning`; ``"error"`` raises :class:`FallbackError` instead. Policy names
    are taken in any case (``"Warn"``); any other value is a :class:`PolicyError` (a
    ``ValueError``) that names the valid ones.

    With ``ops`` (one operator or a list: names such as ``"demo::matmul"``, or ``OpOverload``
    objects) the policy is those operators' own and wins over the process-wide one; ``None``
    clears their own policies, so that they follow the process-wide one again. Every name is
    checked before anything changes: an unknown one is an :class:`UnknownOperatorError` that
    lists the closest names. The environment variable ``BOXFALL_FALLBACK`` sets the initial
    process-wide policy (a value that is no policy warns at import and means ``"allow"``).
    """
    if policy is not None and not isinstance(policy, str):
        raise PolicyError(
            'a fallback policy is "allow", "warn" or "error" (or None with ops, to clear), '
            f"not {type(policy).__name__}"
        )
    _boxfall.set_fallback_policy(policy, None if ops is None else _op_names(ops))


@overload
def get_fallback_policy(op: None = None) -> _Policy: ...
@overload
def get_fallback_policy(op: OpName) -> _Policy | None: ...
def get_fallback_policy(op: OpName | None = None) -> _Policy | None:
    """The process-wide fallback policy; with ``op``, that operator's own policy, or ``None``
    if it has none (it then follows the process-wide one)."""
    name = None if op is None else _op_name(op)
    return _boxfall.get_fallback_policy(name)  # type: ignore[return-value]


def _key_bits(names: tuple[str, ...]) -> int:
    return _boxfall.key_bits(list(names))


@contextlib.contextmanager
def include_keys(*names: str) -> Iterator[None]:
    """Adds dispatch keys to this thread's included set for the block (nestable)."""
    bits = _key_bits(names)
    inc, exc = _boxfall.local_keys()
    _boxfall.set_local_keys(inc | bits, exc & ~bits)
    try:
        yield
    finally:
        _boxfall.set_local_keys(inc, exc)


@contextlib.contextmanager
def _excluding(bits: int) -> Iterator[None]:
    inc, exc = _boxfall.local_keys()
    _boxfall.set_local_keys(inc & ~bits, exc | bits)
    try:
        yield
    finally:
        _boxfall.set_local_keys(inc, exc)


def exclude_keys(*names: str) -> contextlib.AbstractContextManager[None]:
    """Removes dispatch keys from every call of this thread for the block (nestable)."""
    return _excluding(_key_bits(names))


def eager() -> contextlib.AbstractContextManager[None]:
    """Runs the block eagerly on graph backends (graph mode's ``Graph`` key excluded on this
    thread): operators run at once, as without ``compile=``; tensors pending before the block
    are computed when the block reads them (nestable)."""
    return _excluding(_boxfall.graph_key_bits())


def dispatch_keys() -> list[str]:
    """Every registered dispatch key, lowest priority first."""
    return _boxfall.key_names()


_impl_libraries: dict[str, Library] = {}


def impl(
    qualname: OpName,
    dispatch_key: str = "CPU",
    *,
    boxed: bool = False,
    allow_override: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: registers the function as the kernel of ``qualname`` (``"ns::op.overload"``,
    or an :class:`OpOverload` such as ``bf.ops.demo.relu.default``) for ``dispatch_key`` (any
    case: ``"accel"``; ``"CompositeImplicitAutograd"`` is ``CompositeImplicit``).

    The registration lives in a library per namespace kept for the life of the process.
    """
    qualname = _op_name(qualname)
    if "::" not in qualname:
        raise RegistrationError(f"bf.impl needs a qualified name ('ns::op'), got {qualname!r}")
    ns = qualname.split("::", 1)[0]

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        lib = _impl_libraries.get(ns)
        if lib is None:
            lib = _impl_libraries[ns] = Library(ns, "IMPL")
            lib._for_process_life()  # it goes at exit: no ResourceWarning then
        lib.impl(qualname, fn, dispatch_key, boxed=boxed, allow_override=allow_override)
        return fn

    return register


from . import graph, metrics, native, testing  # noqa: E402  (they use the names above)
from ._custom_op import CustomOpDef, custom_op  # noqa: E402
from ._shape_rules import TensorMeta  # noqa: E402

get_fallback_policy()  # reads BOXFALL_FALLBACK now, at import
if (_env_problem := _boxfall.fallback_env_problem()) is not None:
    warnings.warn(_env_problem, RuntimeWarning, stacklevel=2)
del _env_problem

__all__ = [
    "AliasInfo",
    "Argument",
    "ArgumentError",
    "Backend",
    "BoxfallError",
    "Coverage",
    "CpuFallback",
    "PayloadKernel",
    "CustomOpDef",
    "DTypeError",
    "DataDependentError",
    "DispatchKeySet",
    "FallbackError",
    "FallbackWarning",
    "NarrowingWarning",
    "Fallthrough",
    "FunctionSchema",
    "Graph",
    "KernelError",
    "Library",
    "NoKernelError",
    "OpName",
    "OpNamespace",
    "OpOverload",
    "OpOverloadPacket",
    "PolicyError",
    "RegistrationError",
    "SchemaError",
    "Tensor",
    "TensorMeta",
    "UnknownKeyError",
    "UnknownOperatorError",
    "backends",
    "call_fallback",
    "coverage",
    "cpu_fallback",
    "custom_op",
    "dispatch_keys",
    "eager",
    "exclude_keys",
    "fallthrough",
    "get_backend",
    "get_fallback_policy",
    "graph",
    "impl",
    "include_keys",
    "metrics",
    "native",
    "ops",
    "parse_schema",
    "register_backend",
    "register_functionality_key",
    "set_fallback_policy",
    "sync",
    "testing",
]
