"""The one-test backend "Scratch" that the view and payload tests build on (test_view_hook.py,
test_device_views_audit.py, test_immutable_payloads.py): each registers it again
(``replace=True``: the backend key slots are few) with hooks of its own, and the frame here
gives it the CPU fallback for every operator and a library for its kernels while a ``with``
block runs."""

from __future__ import annotations

from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
from conftest import DeviceBuffer

NAME = "Scratch"


def strided(data: np.ndarray, shape: Any, strides: Any, offset: int) -> np.ndarray:
    """The elements of ``data`` that a view hook's arguments name (``strides`` and ``offset``
    in elements, as boxfall gives them), as a NumPy view of ``data``'s memory."""
    flat = data.reshape(-1)
    return np.lib.stride_tricks.as_strided(
        flat[offset:], shape=shape, strides=tuple(s * flat.itemsize for s in strides)
    )


def shared_view(payload: Any, shape: Any, strides: Any, offset: int) -> Any:
    """The ``view`` hook of a device whose memory is NumPy's: a ``DeviceBuffer`` sharing the
    payload's memory."""
    view = DeviceBuffer.__new__(DeviceBuffer)
    view.data = strided(payload.data, shape, strides, offset)
    return view


def gathered_view(payload: Any, shape: Any, strides: Any, offset: int) -> tuple[Any, bool]:
    """The ``view`` hook of a device whose kernels index buffers from their start: the view
    gathered into a new ``DeviceBuffer``, a copy, and said to be one."""
    return DeviceBuffer(strided(payload.data, shape, strides, offset)), False


class ScratchBackend:
    """The backend "Scratch" registered with ``hooks`` (those of ``bf.register_backend``), and
    its ``boxfall.array_api`` namespace ``xp``. Inside ``with``: the CPU fallback for every
    operator, and ``lib``, a ``bf.Library("array_api", "IMPL")`` for the test's kernels; every
    library opened with :meth:`library` is closed at the block's end, the last opened first."""

    def __init__(self, **hooks: Any) -> None:
        self.handle = bf.register_backend(NAME, replace=True, **hooks)
        self.xp = xp.namespace(NAME)
        self._libraries: list[bf.Library] = []

    def library(self, ns: str, kind: str) -> bf.Library:
        """A ``bf.Library(ns, kind)`` closed when the ``with`` block ends."""
        lib = bf.Library(ns, kind)
        self._libraries.append(lib)
        return lib

    def __enter__(self) -> ScratchBackend:
        self.library("_", "IMPL").fallback(bf.cpu_fallback, NAME)
        self.lib = self.library("array_api", "IMPL")
        return self

    def __exit__(self, *exc: object) -> None:
        while self._libraries:
            self._libraries.pop().close()
