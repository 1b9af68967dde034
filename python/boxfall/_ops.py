"""``bf.ops``: operators by namespace, overload packets and overloads (as ``torch.ops``)."""

from __future__ import annotations

from typing import Any

from . import _boxfall
from ._boxfall import OpNamespace, OpOverload


class OpOverloadPacket:
    """All overloads of one operator name; a call picks the first, in definition order, whose
    schema binds the arguments. ``packet.Tensor`` is one overload, ``packet.default`` the
    overload named ``""``.

    The overload objects are kept, as torch keeps them, and looked up again only when an
    operator was defined or undefined since (``_boxfall.definitions_version``): an overload
    object plans its fast path at its first call, so a new one per call cost more than the
    call itself. So ``packet.default is packet.default``."""

    def __init__(self, qualified_name: str) -> None:
        self._name = qualified_name
        self._version = -1
        self._found: list[OpOverload] = []

    @property
    def name(self) -> str:
        """``ns::op``."""
        return self._name

    def _overloads(self) -> list[OpOverload]:
        version = _boxfall.definitions_version()
        if version != self._version:
            self._found = _boxfall.overloads(self._name)
            self._version = version
        if not self._found:
            raise AttributeError(f"operator '{self._name}' is not defined")
        return self._found

    def overloads(self) -> list[str]:
        """The overload names, in definition order (``"default"`` for ``""``)."""
        return [o.overload_name or "default" for o in self._overloads()]

    def __getattr__(self, overload: str) -> OpOverload:
        if overload.startswith("__"):
            raise AttributeError(overload)
        name = self._name if overload == "default" else f"{self._name}.{overload}"
        try:
            found = self._overloads()
        except AttributeError:
            found = []
        for o in found:
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


class _Ops:
    def __getattr__(self, ns: str) -> OpNamespace:
        if ns.startswith("__"):
            raise AttributeError(ns)
        # Kept as an attribute (a namespace holds no operator itself, so it never goes stale):
        # the next ``bf.ops.<ns>`` is a plain attribute look-up. ``OpNamespace`` (Rust) keeps
        # the namespace's packets while the definitions stay.
        space = OpNamespace(ns)
        setattr(self, ns, space)
        return space

    def __dir__(self) -> list[str]:
        """The namespaces that hold a defined operator, sorted."""
        return _boxfall.namespaces()


ops = _Ops()
"""Operators by namespace: ``bf.ops.demo.add.Tensor(x, y)``."""
