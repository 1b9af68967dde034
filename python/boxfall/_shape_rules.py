"""What a shape rule (``lib.register_shape_rule(op, fn)``, as ``torch.library.register_fake``)
sees and gives: a :class:`TensorMeta` per tensor, and :class:`DataDependentError` for an output
it cannot know.

A rule runs when graph mode records a call of its operator (each call: keep it cheap), with a
``TensorMeta`` for each tensor argument and every other argument as its value, and returns the
outputs' metas, as the operator's CPU kernel would make them (NumPy's dtypes; a
device without 64-bit types narrows them as it narrows every result)::

    @bf.custom_op("demo::pairs", mutates_args=())
    def pairs(x: np.ndarray, n: int) -> np.ndarray:
        return np.repeat(x, n)

    @pairs.register_shape_rule
    def _(x: bf.TensorMeta, n: int) -> bf.TensorMeta:
        size = 1
        for s in x.shape:
            size *= s
        return bf.TensorMeta(x.dtype, (size * n,))

A value a rule reads (``n`` above) is a constant of the recorded graph: a call with another
value is another graph, compiled again.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._errors import DataDependentError


class TensorMeta:
    """A tensor's dtype, shape and device, without its values: what a shape rule gets for a
    tensor argument and returns for each output. ``dtype`` is a dtype's name (``"float32"``;
    a NumPy dtype or type is taken and named), ``shape`` a tuple of ints, ``device`` the
    device's name (``"JAXGraph:0"``) or None (an output's: it is made on the call's device)."""

    __slots__ = ("device", "dtype", "shape")

    dtype: str
    shape: tuple[int, ...]
    device: str | None

    def __init__(self, dtype: Any, shape: Any, device: str | None = None) -> None:
        name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        sizes = tuple(operator.index(s) for s in shape)
        object.__setattr__(self, "dtype", name)
        object.__setattr__(self, "shape", sizes)
        object.__setattr__(self, "device", device)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"bf.TensorMeta is immutable: {name} cannot be set")

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorMeta):
            return NotImplemented
        return (self.dtype, self.shape, self.device) == (other.dtype, other.shape, other.device)

    def __hash__(self) -> int:
        return hash((self.dtype, self.shape, self.device))

    def __repr__(self) -> str:
        device = "" if self.device is None else f", device={self.device!r}"
        return f"bf.TensorMeta({self.dtype!r}, {self.shape!r}{device})"


__all__ = ["DataDependentError", "TensorMeta"]
