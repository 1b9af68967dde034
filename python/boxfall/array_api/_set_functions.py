"""Set functions (the standard's chapter of that name), as data: each operator returns a tuple
of arrays, and the namespace's function gives it as the standard's named tuple."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._registry import CHOSEN, Op, register


class UniqueAllResult(NamedTuple):
    """``unique_all``'s result."""

    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


class UniqueCountsResult(NamedTuple):
    """``unique_counts``'s result."""

    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    """``unique_inverse``'s result."""

    values: Any
    inverse_indices: Any


def _unique(x: Any) -> tuple[Any, Any, Any, Any]:
    # NaNs are distinct from each other, as the standard says (NumPy's default merges them);
    # the inverse has the input's shape.
    values, indices, inverse, counts = np.unique(
        np.asarray(x).reshape(-1),
        return_index=True,
        return_inverse=True,
        return_counts=True,
        equal_nan=False,
    )
    return values, indices, inverse.reshape(np.shape(x)), counts


def _unique_all(x: Any, /) -> tuple[Any, ...]:
    return _unique(x)


def _unique_counts(x: Any, /) -> tuple[Any, ...]:
    values, _, _, counts = _unique(x)
    return values, counts


def _unique_inverse(x: Any, /) -> tuple[Any, ...]:
    values, _, inverse, _ = _unique(x)
    return values, inverse


def _unique_values(x: Any, /) -> Any:
    return _unique(x)[0]


OPS, _public = register(
    [
        Op(
            "unique_all(Tensor x) -> (Tensor values, Tensor indices, Tensor inverse_indices, "
            "Tensor counts)",
            _unique_all,
            public=False,
            tags=CHOSEN,
        ),
        Op(
            "unique_counts(Tensor x) -> (Tensor values, Tensor counts)",
            _unique_counts,
            public=False,
            tags=CHOSEN,
        ),
        Op(
            "unique_inverse(Tensor x) -> (Tensor values, Tensor inverse_indices)",
            _unique_inverse,
            public=False,
            tags=CHOSEN,
        ),
        Op("unique_values(Tensor x) -> Tensor", _unique_values, public=False),
    ]
)


def unique_all(x: Any, /) -> UniqueAllResult:
    """The operator ``array_api::unique_all``: the unique values, the index of each one's first
    occurrence, the inverse indices (``x``'s shape) and the counts."""
    return UniqueAllResult(*OPS["unique_all"](x))


def unique_counts(x: Any, /) -> UniqueCountsResult:
    """The operator ``array_api::unique_counts``: the unique values and their counts."""
    return UniqueCountsResult(*OPS["unique_counts"](x))


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    """The operator ``array_api::unique_inverse``: the unique values and, in ``x``'s shape,
    the index of each element's value among them."""
    return UniqueInverseResult(*OPS["unique_inverse"](x))


def unique_values(x: Any, /) -> Any:
    """The operator ``array_api::unique_values``: the unique values, sorted."""
    return OPS["unique_values"](x)


__all__ = ["unique_all", "unique_counts", "unique_inverse", "unique_values"]
