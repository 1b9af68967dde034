"""The JAX backend's kernels: ``jax.numpy`` for the ``array_api`` operators a workload spends its
time in, registered as a user would (``bf.Library("array_api", "IMPL").impl(...)``).

Each kernel takes the cases whose result JAX computes as NumPy's kernel does (the same dtype
rule, the same values within floating rounding) and hands every other case to the CPU fallback
(``bf.call_fallback``), which then raises NumPy's error or computes NumPy's result: mixed
dtypes (NumPy's promotion), integer division, the standard's special cases that
``boxfall.array_api``'s own kernels handle, shapes that do not fit. A case JAX refuses (a shape
error at trace time) goes the same way, so an error always reads as NumPy's.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

import boxfall as bf
from boxfall import _coverage

from ._index_kernels import indexing
from ._kernels_base import NoDevice, _Kernels, exact, scalar_fits
from ._kernels_checks import CHECKS, checked, collecting_checks
from ._kernels_creation import _creation
from ._kernels_elementwise import BINARY, SCALAR_STEPS, _elementwise
from ._kernels_fft import _fft
from ._kernels_linalg import _decompositions, _linear_algebra
from ._kernels_manipulation import _manipulation
from ._kernels_searching import _searching
from ._kernels_statistics import _statistics

_DATA_DEPENDENT = "data-dependent output shape ({}): eager mode reads the values on the host"
_SINGLE_ON_TPU = (
    "float64/complex128 inputs (x64 on) go to the CPU fallback: JAX's {} on a TPU is single "
    "precision"
)
REASONS: dict[str, str | dict[str, str]] = {
    "array_api::nonzero": _DATA_DEPENDENT.format("the count of nonzero elements"),
    "array_api::repeat.Tensor": _DATA_DEPENDENT.format("the sum of the repeats"),
    **{
        f"array_api::unique_{kind}": _DATA_DEPENDENT.format("the number of distinct values")
        for kind in ("all", "counts", "inverse", "values")
    },
    **{
        f"array_api::setitem{overload}": (
            "writes into x and returns nothing, where a jax.Array is immutable: the CPU "
            "fallback's result is put back by copy_from_cpu; graph mode records it as "
            "setitem_functional, a JAX kernel"
        )
        for overload in ("", ".Scalar")
    },
    **{
        f"array_api::linalg_{name}": {"tpu": _SINGLE_ON_TPU.format("linear algebra")}
        for name in (
            "cholesky",
            "det",
            "eigh",
            "eigvalsh",
            "inv",
            "matrix_norm",
            "matrix_norm.Scalar",
            "matrix_power",
            "matrix_rank",
            "matrix_rank.Tensor",
            "pinv",
            "pinv.Tensor",
            "qr",
            "slogdet",
            "solve",
            "svd",
            "svdvals",
        )  # fmt: skip
    },
    **{
        f"array_api::{name}{overload}": {
            "tpu": "floating inputs go to the CPU fallback: a TPU's floating remainder is no "
            "IEEE fmod (1 // 0.1 is 10 there, x % inf NaN)"
        }
        for name in ("floor_divide", "remainder")
        for overload in ("", ".Tensor_Scalar", ".Scalar_Tensor", "_", "_.Scalar")
    },
    **{
        f"array_api::fft_{name}": {"tpu": _SINGLE_ON_TPU.format("FFT")}
        for name in (
            "fft",
            "ifft",
            "fftn",
            "ifftn",
            "rfft",
            "irfft",
            "rfftn",
            "irfftn",
            "hfft",
            "ihfft",
        )  # fmt: skip
    },
}
"""Why the CPU fallback serves each operator (or some cases of one) on boxfall.jax, per device
kind where that decides it (``bf.coverage("JAX")`` shows it)."""

__all__ = [
    "BINARY",
    "CHECKS",
    "REASONS",
    "SCALAR_STEPS",
    "NoDevice",
    "_Kernels",
    "checked",
    "collecting_checks",
    "exact",
    "scalar_fits",
    "register",
]


def register(
    backend: bf.Backend,
    device: jax.Device,
    in_place: bool = True,
    devices: Sequence[jax.Device] = (),
) -> tuple[bf.Library, list[str]]:
    """Registers the kernels for ``backend`` (new payloads on ``device``, or on the device of
    ``devices`` a creation operator names) in a new
    ``array_api`` library, which the caller keeps for as long as the kernels should serve, and
    returns it with the operators it serves. ``in_place=False`` leaves the in-place operators
    (``x += y``) to the CPU fallback."""
    kern = _Kernels(backend, device, devices)
    _elementwise(kern)
    _statistics(kern)
    _linear_algebra(kern)
    _decompositions(kern)
    _searching(kern)
    _fft(kern)
    _manipulation(kern)
    _creation(kern)
    indexing(kern)
    _coverage.explain(backend.name, REASONS)
    lib = bf.Library("array_api", "IMPL")
    names = []
    for key, kernel in kern.table.items():
        if in_place or not key.partition(".")[0].endswith("_"):
            lib.impl(key, kernel, backend.name)
            names.append(key)
    return lib, sorted(names)
