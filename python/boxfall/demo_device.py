"""The demo's simulated device: the Python backend ``Accel``, whose tensors live in
:class:`DeviceBuffer` objects. Both workloads of ``python -m boxfall demo`` run on it (the
transformer block, :mod:`boxfall.demo`, and the array API one, :mod:`boxfall.demo_array_api`),
so it lives beneath both: ``demo`` hands ``--workload array-api`` to ``demo_array_api``, which
takes the device from here, not from ``demo``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import boxfall as bf

BACKEND = "Accel"
"""The name of the demo's Python device backend."""

# The registered Accel backend: a backend cannot be registered twice in one process.
_backend: Any = None


class DeviceBuffer:
    """Memory on the simulated device: a private NumPy array that nobody else holds."""

    def __init__(self, array: np.ndarray) -> None:
        """Copy ``array`` onto the device."""
        self._data = np.array(array, copy=True)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the buffer's contents."""
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        """The element type of the buffer's contents."""
        return self._data.dtype

    def read(self) -> np.ndarray:
        """A host copy of the contents (device-to-host transfer)."""
        return self._data.copy()

    def write(self, array: np.ndarray) -> None:
        """Overwrite the contents with ``array`` (host-to-device transfer into this buffer)."""
        array = np.asarray(array)
        if array.shape == self._data.shape:
            self._data[...] = array
        else:
            self._data = np.array(array, copy=True)

    def view(self) -> np.ndarray:
        """The contents themselves, for the device's own kernels; callers must not keep them."""
        return self._data

    def __repr__(self) -> str:
        """Shape and dtype, never the contents."""
        return f"DeviceBuffer(shape={self.shape}, dtype={self.dtype})"


def _to_cpu(buffer: DeviceBuffer) -> np.ndarray:
    """Backend hook: device payload -> a new host array."""
    return buffer.read()


def _from_cpu(array: np.ndarray) -> DeviceBuffer:
    """Backend hook: host array -> a new device payload."""
    return DeviceBuffer(array)


def _copy_from_cpu(buffer: DeviceBuffer, array: np.ndarray) -> None:
    """Backend hook: write a host array into an existing payload (dst first, like ``copy_``)."""
    buffer.write(array)


def accel_backend() -> Any:
    """The ``Accel`` backend, registered on first use (once per process)."""
    global _backend
    if _backend is None:
        _backend = bf.register_backend(
            BACKEND, to_cpu=_to_cpu, from_cpu=_from_cpu, copy_from_cpu=_copy_from_cpu
        )
    return _backend


def device_data(t: Any) -> Any:
    """The device-side array of an Accel tensor; host values pass as they are."""
    return t.payload.view() if isinstance(t, bf.Tensor) else t
