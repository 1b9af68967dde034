"""The built-in ``Native`` backend: Rust-owned host memory. ``cpu_fallback`` is registered for it
at import, so every operator with a CPU kernel runs on Native tensors."""

from __future__ import annotations

from typing import Any

from . import _boxfall
from ._boxfall import Backend, Tensor

backend: Backend = _boxfall.native_backend()
"""The Native backend object."""


def tensor(array: Any, index: int = 0) -> Tensor:
    """A Native tensor holding a copy of ``array`` (float32/64, int32/64 or bool)."""
    return backend.tensor(array, index)


__all__ = ["backend", "tensor"]
