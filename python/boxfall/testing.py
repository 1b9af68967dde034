"""Helpers for testing code on boxfall, starting with a backend written in Python.

A backend author's first check that the CPU fallback carries a whole library is to run it on a
device whose every operator falls back. :func:`python_backend_namespace` registers such a
device, the smallest backend written in Python (as the README's ``Accel``: its payload holds a
NumPy array, the three copy hooks move it, ``bf.cpu_fallback`` serves every operator), and
returns ``boxfall.array_api`` on it::

    import boxfall.testing
    xp = boxfall.testing.python_backend_namespace("PyAccel")
    x = xp.asarray([1.0, 2.0])            # bf.Tensor on PyAccel:0
    xp.sum(x * 2)                         # array_api::multiply, sum: through the CPU fallback

``import boxfall`` imports this module (it registers nothing until called). The array API
standard's test suite runs on it the same way (``.ci/conformance``):
``array-api-conformance "boxfall.testing.python_backend_namespace('PyAccel')"``.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

import boxfall as bf


class HostBuffer:
    """The payload of :func:`register_python_backend`'s backends: "device memory" that is a
    private NumPy array (a copy of what it was made from)."""

    def __init__(self, array: Any) -> None:
        """Holds a copy of ``array``."""
        self.data = np.array(array, copy=True)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the contents (boxfall reads a Python payload's ``shape``)."""
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the contents (boxfall reads a Python payload's ``dtype``)."""
        return self.data.dtype

    def __repr__(self) -> str:
        """Shape and dtype, never the contents."""
        return f"HostBuffer(shape={self.shape}, dtype={self.dtype})"


def _to_cpu(buffer: HostBuffer) -> np.ndarray:
    return buffer.data.copy()


def _from_cpu(array: np.ndarray) -> HostBuffer:
    return HostBuffer(array)


def _copy_from_cpu(buffer: HostBuffer, array: np.ndarray) -> None:
    array = np.asarray(array)
    if array.shape == buffer.data.shape and array.dtype == buffer.data.dtype:
        buffer.data[...] = array
    else:
        buffer.data = np.array(array, copy=True)


_registered: dict[str, Any] = {}
_fallbacks: list[Any] = []  # one library of fallback registrations, made on first use


def register_python_backend(name: str = "PyAccel") -> Any:
    """Registers (once per process: a second call returns the first's) a backend ``name``
    written in Python, with :class:`HostBuffer` payloads, the hooks ``to_cpu`` (a copy),
    ``from_cpu`` and ``copy_from_cpu``, and ``bf.cpu_fallback`` as its fallback for every
    operator; returns its ``bf.Backend``. A name some other code registered is a
    ``bf.RegistrationError``, as for ``bf.register_backend``."""
    found = _registered.get(name)
    if found is not None:
        return found
    backend = bf.register_backend(
        name, to_cpu=_to_cpu, from_cpu=_from_cpu, copy_from_cpu=_copy_from_cpu
    )
    if not _fallbacks:
        lib = bf.Library("_", "IMPL")
        lib._for_process_life()  # the backends live as long as the process
        _fallbacks.append(lib)
    _fallbacks[0].fallback(bf.cpu_fallback, name)
    _registered[name] = backend
    return backend


def python_backend_namespace(name: str = "PyAccel") -> types.ModuleType:
    """``boxfall.array_api.namespace(name)`` on the backend :func:`register_python_backend`
    registers (idempotently): the whole standard on a device written in Python."""
    import boxfall.array_api as xp

    register_python_backend(name)
    return xp.namespace(name)


__all__ = ["HostBuffer", "python_backend_namespace", "register_python_backend"]
