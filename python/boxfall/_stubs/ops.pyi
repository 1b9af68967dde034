"""Operators: ``OpOverload``, its packets and namespaces, and finding them.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Sequence
from typing import Any, Protocol, final

from boxfall._stubs.keys import DispatchKeySet
from boxfall._stubs.schema import FunctionSchema

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

def overloads(base: str) -> list[OpOverload]:
    """The defined overloads of ``ns::op``, in definition order."""

def definitions_version() -> int:
    """A number that changes whenever an operator is defined or undefined."""

def find_op(name: str) -> OpOverload:
    """The defined operator ``name``."""

def call_first_binding(
    overloads: Sequence[OpOverload], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> Any:
    """Calls the first overload, in order, whose schema binds the arguments."""

def namespaces() -> list[str]:
    """The namespaces that hold a defined operator, sorted."""

def operators_in(ns: str) -> list[str]:
    """The operators of namespace ``ns`` by name (no namespace, no overload), sorted."""
