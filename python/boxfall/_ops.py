"""``bf.ops``: operators by namespace, overload packets and overloads (as ``torch.ops``).

``OpNamespace`` and ``OpOverloadPacket`` are Rust classes (``src/python/namespace.rs``,
``packet.rs``): each keeps what it looked up while the definitions stay as they are, and a
packet's call goes straight on to its overload's vectorcall entry."""

from __future__ import annotations

from . import _boxfall
from ._boxfall import OpNamespace, OpOverloadPacket

__all__ = ["OpNamespace", "OpOverloadPacket", "ops"]


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
