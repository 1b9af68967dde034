"""``bf.ops``: operators by namespace, overload packets and overloads (as ``torch.ops``)."""

from __future__ import annotations

from typing import Any

from . import _boxfall
from ._boxfall import OpOverload


class OpOverloadPacket:
    """All overloads of one operator name; a call picks the first, in definition order, whose
    schema binds the arguments. ``packet.Tensor`` is one overload, ``packet.default`` the
    overload named ``""``."""

    def __init__(self, qualified_name: str) -> None:
        self._name = qualified_name

    @property
    def name(self) -> str:
        """``ns::op``."""
        return self._name

    def _overloads(self) -> list[OpOverload]:
        found = _boxfall.overloads(self._name)
        if not found:
            raise AttributeError(f"operator '{self._name}' is not defined")
        return found

    def overloads(self) -> list[str]:
        """The overload names, in definition order (``"default"`` for ``""``)."""
        return [o.overload_name or "default" for o in self._overloads()]

    def __getattr__(self, overload: str) -> OpOverload:
        if overload.startswith("__"):
            raise AttributeError(overload)
        name = self._name if overload == "default" else f"{self._name}.{overload}"
        for o in _boxfall.overloads(self._name):
            if o.name == name:
                return o
        raise AttributeError(f"'{self._name}' has no overload '{overload}'")

    def __dir__(self) -> list[str]:
        """The overload names (``"default"`` for ``""``) and the packet's own attributes."""
        own = [n for n in object.__dir__(self) if not n.startswith("_")]
        return [o.overload_name or "default" for o in _boxfall.overloads(self._name)] + sorted(own)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        overloads = self._overloads()
        if len(overloads) == 1:
            return overloads[0](*args, **kwargs)
        return _boxfall.call_first_binding(overloads, args, kwargs)

    def __repr__(self) -> str:
        return f"OpOverloadPacket({self._name})"


class OpNamespace:
    """The operators of one namespace: ``bf.ops.demo.add``."""

    def __init__(self, ns: str) -> None:
        self._ns = ns

    def __getattr__(self, name: str) -> OpOverloadPacket:
        if name.startswith("__"):
            raise AttributeError(name)
        qualified = f"{self._ns}::{name}"
        if not _boxfall.overloads(qualified):
            raise AttributeError(f"operator '{qualified}' is not defined")
        return OpOverloadPacket(qualified)

    def __dir__(self) -> list[str]:
        """The operators defined in the namespace (``add`` for ``demo::add.Tensor``), sorted."""
        return _boxfall.operators_in(self._ns)

    def __repr__(self) -> str:
        return f"OpNamespace({self._ns})"


class _Ops:
    def __getattr__(self, ns: str) -> OpNamespace:
        if ns.startswith("__"):
            raise AttributeError(ns)
        return OpNamespace(ns)

    def __dir__(self) -> list[str]:
        """The namespaces that hold a defined operator, sorted."""
        return _boxfall.namespaces()


ops = _Ops()
"""Operators by namespace: ``bf.ops.demo.add.Tensor(x, y)``."""
