"""Devices as ``bf.Tensor.device`` gives them: ``"<Backend>:<index>"`` strings equal to every
other spelling of the same device (``"Native"``, ``"native:0"``)."""

from __future__ import annotations

from typing import Any

_CANONICAL: dict[str, str] = {}

_DEVICES: dict[str, tuple[int, str]] = {}
"""Per backend whose devices are counted (``declare_devices``): how many it has, and them in
words."""


def declare_devices(backend: str, count: int, described: str = "") -> None:
    """Says that ``backend`` has ``count`` devices (indices ``0`` to ``count - 1``; ``described``
    names them for the error), so that a device string of another index is a ``ValueError``
    wherever a device is named (``asarray(..., device=)``, ``to_device``, ``namespace``).
    ``boxfall.jax`` declares JAX's devices; a backend that declares nothing takes any index."""
    _DEVICES[backend] = (int(count), described)
    _CANONICAL.clear()  # an index accepted before may be none of its devices


def canonical_device(device: Any) -> str:
    """``device`` as ``bf.Tensor.device`` prints it: ``"cpu"``, or ``"<Backend>:<index>"`` with
    the backend's own spelling and index 0 when none is written (``"native"`` is
    ``"Native:0"``). A name that is no backend, an index that is no number, or an index that no
    device of the backend has (Native has one device, index 0) is a ``ValueError``."""
    text = str(device)
    found = _CANONICAL.get(text)
    if found is not None:
        return found
    from . import dispatch_keys

    if text.lower() == "cpu":
        return "cpu"
    name, colon, index = text.partition(":")
    known = {k.lower(): k for k in dispatch_keys()}
    if name.lower() not in known or (colon and not index.isdigit()):
        raise ValueError(
            f"no device {text!r}: a device is 'cpu' or a backend's name, optionally with an "
            f"index ('Native:0'); the keys are {sorted(known.values())}"
        )
    backend, number = known[name.lower()], int(index or 0)
    if number >= 1 << 16 or (backend == "Native" and number != 0):
        raise ValueError(f"no device {text!r}: {backend} has no device of index {number}")
    counted = _DEVICES.get(backend)
    if counted is not None and number >= counted[0]:
        count, described = counted
        raise ValueError(
            f"no device {text!r}: {backend} has no device of index {number}; it has {count} "
            f"(indices 0 to {count - 1}{': ' + described if described else ''})"
        )
    found = f"{backend}:{number}"
    if len(_CANONICAL) < 1024:  # device strings are few; the bound keeps odd callers harmless
        _CANONICAL[text] = found
    return found


class Device(str):
    """A device string (``"Native:0"``) equal to every spelling of its device: ``t.device ==
    "Native"`` and ``== "native:0"`` are true. It hashes as its own text."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, str):
            return NotImplemented
        if str.__eq__(self, other):
            return True
        try:
            return canonical_device(other) == str(self)
        except ValueError:
            return False

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return repr(str(self))
