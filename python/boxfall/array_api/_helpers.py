"""What the chapters share, beneath them all (it imports none of them): which objects are arrays
and scalars, and which device an array is on."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._boxfall import Tensor
from .._device import canonical_device  # noqa: F401  (the chapters take it from here)

ARRAY_TYPES = (np.ndarray, Tensor)
"""The array objects of ``boxfall.array_api``: NumPy arrays on the CPU, ``bf.Tensor`` elsewhere."""

SCALAR_TYPES = (bool, int, float)
"""The Python scalars a ``Scalar`` argument binds (complex ones become 0-d arrays)."""


def is_array(x: Any) -> bool:
    """Whether ``x`` is an array object of the namespace."""
    return isinstance(x, ARRAY_TYPES)


def same_device(a: Any, b: Any) -> bool:
    """Whether two device strings name the same device (``"Native"`` and ``"Native:0"``)."""
    # The same text first, as str compares it: ``a == b`` with a ``bf.Tensor.device`` (a
    # ``Device``, whose ``__eq__`` is Python) on either side is a Python call, on every
    # ``*_like`` and ``astype`` call of a namespace.
    if isinstance(a, str) and isinstance(b, str) and str.__eq__(a, b):
        return True
    return a == b or canonical_device(a) == canonical_device(b)


def device_of(x: Any) -> str:
    """The device of an array: ``"cpu"`` for a NumPy array, ``"<Backend>:<index>"`` else."""
    return x.device if isinstance(x, Tensor) else "cpu"
