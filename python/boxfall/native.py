"""The built-in ``Native`` backend: Rust-owned host memory. ``cpu_fallback`` is registered for it
at import, so every operator with a CPU kernel runs on Native tensors."""

from __future__ import annotations

from typing import Any

from . import _boxfall
from ._boxfall import Backend, Library, Tensor

backend: Backend = _boxfall.native_backend()
"""The Native backend object."""


def tensor(array: Any, index: int = 0) -> Tensor:
    """A Native tensor holding a copy of ``array`` (any dtype of the array API standard: bool,
    int8-64, uint8-64, float32/64, complex64/128), of any rank NumPy supports.

    A big-endian array of one of these dtypes (``>f8``) is taken in native byte order (the
    values are the same; its copy costs what a strided array's does). Another dtype raises
    :class:`boxfall.DTypeError` (a ``TypeError``) naming it and the supported ones; memory
    that cannot be allocated raises ``MemoryError``, as NumPy does.
    """
    return backend.tensor(array, index)


def register_kernels(lib: Library) -> list[str]:
    """Registers, in ``lib``, Native's Rust kernels for the operators of ``lib``'s namespace that
    are defined with a schema Native implements (see :func:`kernel_names`); returns their
    names. A schema matches as a whole: the name and argument types, no alias annotation (an
    in-place or view schema of the same name is not Native's functional kernel), and one
    ``Tensor`` return. The kernels raise where the NumPy kernels they stand in for raise
    (repeated or out-of-range axes, shapes that do not broadcast or multiply), as
    :class:`boxfall.KernelError` naming the operator; the cases they do not compute (mixed
    dtypes, batched matmul...) go to the CPU fallback, which obeys the fallback policy. Large
    kernels run with the GIL released. The registrations go with ``lib``."""
    return lib.register_native_kernels()


def register_array_api_kernels(lib: Library) -> list[str]:
    """Registers, in ``lib``, Native's Rust kernels for the operators of ``lib``'s namespace
    defined with the array API standard's schemas as :mod:`boxfall.array_api` writes them
    (``add(Tensor x1, Tensor x2)``, ``add.Tensor_Scalar``, ``add.Scalar_Tensor``, the same for
    ``subtract``, ``multiply``, ``divide`` and the six comparisons; ``sum``, ``prod``, ``mean``,
    ``max``, ``min``); returns their names. They compute as NumPy 2 does, for every dtype:
    the standard's type promotion, Python scalars as weak (``x + 1`` keeps ``x.dtype``),
    integers wrapping on overflow, true division of integers as float64, NumPy's accumulation
    dtypes and pairwise sums. The cases they do not compute (``subtract`` of bools, ordering
    comparisons of complex numbers, int64 against uint64 comparisons, a Python int the
    array's dtype cannot hold, empty ``mean``/``max``/``min``, ``max``/``min`` of complex
    numbers, a ``dtype`` that is not a safe cast, ``axis=()``) go to the CPU fallback.
    ``boxfall.array_api`` registers them for its own operators at import."""
    return lib.register_native_array_api_kernels()


def kernel_names() -> list[tuple[str, list[str]]]:
    """The operators Native implements in Rust: ``(name, argument types)``."""
    return _boxfall.native_kernel_names()


__all__ = ["backend", "kernel_names", "register_array_api_kernels", "register_kernels", "tensor"]
