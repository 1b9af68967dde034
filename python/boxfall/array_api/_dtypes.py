"""The standard's data types, as NumPy's dtype objects (``xp.float64 == np.dtype("float64")``),
and the default dtypes."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .._boxfall import backends_version, get_backend

bool = np.dtype("bool")  # noqa: A001  (the standard's name)
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")

ALL = (
    bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float32, float64, complex64, complex128,
)  # fmt: skip
_ALL_NAMES = frozenset(d.name for d in ALL)

DEFAULT = {
    "real floating": float64,
    "complex floating": complex128,
    "integral": int64,
    "indexing": int64,
}


_held: dict[str, tuple[np.dtype, ...]] = {}
_defaults: dict[str, dict[str, np.dtype]] = {}
_held_names: dict[tuple[str, Any], str | None] = {}
_held_version = -1


def _dtype_named(name: str) -> np.dtype:
    """The NumPy dtype of a name ``bf.Backend.dtypes`` gives: the standard's, or an extension
    dtype NumPy knows but may not find by name (``ml_dtypes``' ``bfloat16``)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # a backend declared one of its dtypes, so it is installed

        return np.dtype(getattr(ml_dtypes, name))


def _current() -> None:
    """Forgets what the caches below know once any backend is registered again (its ``dtypes``
    may differ now)."""
    global _held_version
    version = backends_version()
    if version != _held_version:
        _held.clear()
        _defaults.clear()
        _held_names.clear()
        _held_version = version


def held_by(device: object) -> tuple[np.dtype, ...]:
    """The dtypes ``device`` holds: every dtype of the standard, unless its backend was
    registered with ``dtypes=`` naming fewer (``bf.Backend.dtypes``). Kept per backend until a
    backend is registered again (every creation function on a device asks)."""
    if device is None:
        return ALL
    _current()
    text = str(device)
    found = _held.get(text)
    if found is not None:
        return found
    name = text.split(":", 1)[0]
    if name.lower() == "cpu":
        return ALL
    try:
        names = get_backend(name).dtypes
    except LookupError:
        return ALL
    found = ALL if set(names) == _ALL_NAMES else tuple(map(_dtype_named, names))
    if len(_held) < 256:  # device spellings are few; the bound keeps odd callers harmless
        _held[text] = found
    return found


def holds(device: object, dtype: Any) -> builtins.bool:
    """Whether ``device`` holds ``dtype`` (a dtype object, type or name). Kept per (device,
    dtype): a function asked for a dtype on a device asks this at every call, and turning a
    dtype object into a ``np.dtype`` and comparing it with each held one is microseconds of
    Python a call."""
    return _name_if_held(device, dtype) is not None


def held_name(device: object, dtype: Any) -> str | None:
    """``dtype``'s name (the operators' dtype argument) where ``device`` holds it; else None
    (None asked, or a dtype the device lacks, which a caller decides at each call: its
    narrowing is counted and warned then). Kept with ``holds``'s answer: ``astype(mask,
    x.dtype)`` in a loop asked ``holds`` and the name at every call, a third of the call's
    Python."""
    return None if dtype is None else _name_if_held(device, dtype)


def _name_if_held(device: object, dtype: Any) -> str | None:
    """``dtype``'s name where ``device`` holds it, else None: kept per (device, dtype), but for
    an unhashable dtype-like, decided afresh."""
    _current()
    key = (str(device), dtype)
    try:
        return _held_names[key]
    except KeyError:
        pass
    except TypeError:
        return _decide(device, dtype)
    name = _decide(device, dtype)
    if len(_held_names) < 1024:
        _held_names[key] = name
    return name


def _decide(device: object, dtype: Any) -> str | None:
    d = np.dtype(dtype)
    held = held_by(device)
    return d.name if held is ALL or d in held else None


def defaults_of(device: object) -> dict[str, np.dtype]:
    """The default dtypes on ``device``: the standard's (``DEFAULT``, the object itself) where
    the device holds them; else float64 if held, else float32 (complex128 or
    complex64, int64 or int32 likewise). Kept per device as ``held_by`` is."""
    _current()
    text = str(device)
    found = _defaults.get(text)
    if found is None:
        found = _defaults_from(held_by(device))
        if len(_defaults) < 256:
            _defaults[text] = found
    return found


def _defaults_from(held: tuple[np.dtype, ...]) -> dict[str, np.dtype]:
    # A device that holds the standard's defaults has the standard's rule, whatever else it
    # declares (JAX with x64 adds bfloat16): a list of np.int32 stays int32 there, as on NumPy.
    if held is ALL or all(d in held for d in DEFAULT.values()):
        return DEFAULT

    def pick(wide: np.dtype, narrow: np.dtype) -> np.dtype:
        return wide if wide in held else narrow

    integral = pick(int64, int32)
    return {
        "real floating": pick(float64, float32),
        "complex floating": pick(complex128, complex64),
        "integral": integral,
        "indexing": integral,
    }


__all__ = [
    "bool",
    "complex64",
    "complex128",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
