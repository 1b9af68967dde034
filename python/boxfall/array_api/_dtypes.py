"""The standard's data types, as NumPy's dtype objects (``xp.float64 == np.dtype("float64")``),
and the default dtypes."""

from __future__ import annotations

import numpy as np

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
DEFAULT = {
    "real floating": float64,
    "complex floating": complex128,
    "integral": int64,
    "indexing": int64,
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
