"""A view's layout as jit lowers basic indexing: a strided slice of the base, a reversal, a
transpose and a reshape (``lax.slice``, ``lax.rev``), where the layout allows, instead of a
gather of each element's flat index; and a write through such a view as
``lax.dynamic_update_slice`` where its steps are 1. A gather is a program XLA cannot fuse or
partition as a slice (on a mesh it invites an all-gather); ``x[:, 1:]``, ``x[::2]``, ``x.T``,
``x[i]`` and their compositions are slices.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Slicing(NamedTuple):
    """A view of a C-ordered base as basic slicing: per base axis, the slice's bounds and
    (positive) step, the axes read backwards (a negative step), the base axes the view keeps
    (in base order; the others are one index each) and their order in the view."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]
    step: tuple[int, ...]
    reversed_axes: tuple[int, ...]
    kept: tuple[int, ...]
    order: tuple[int, ...]


def _c_strides(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def slicing(
    base_shape: tuple[int, ...], shape: tuple[int, ...], strides: tuple[int, ...], offset: int
) -> Slicing | None:
    """The slicing that makes this view (element strides and offset into the C-ordered base),
    or None where none does (an overlapping or otherwise irregular layout: a gather then).

    Each axis of the view longer than 1 takes the outermost base axis whose stride divides
    its own, not taken yet, and within whose bounds it stays; the offset is one index along
    each base axis. Element ``idx`` of the view is then at ``offset + sum(idx * strides)`` of
    the base, as the layout says, by construction."""
    base_strides = _c_strides(base_shape)
    if not 0 <= offset < max(1, math.prod(base_shape)):
        return None
    starts, rest = [], offset
    for s in base_strides:
        starts.append(rest // s)
        rest %= s
    taken: dict[int, tuple[int, int]] = {}  # base axis -> (view axis, step in its units)
    for i, (n, s) in enumerate(zip(shape, strides, strict=True)):
        if n == 1:
            continue
        for j, (b, bs) in enumerate(zip(base_shape, base_strides, strict=True)):
            if j in taken or b == 1 or s == 0 or s % bs:
                continue
            step = s // bs
            if 0 <= starts[j] + (n - 1) * step < b:
                taken[j] = (i, step)
                break
        else:
            return None
    lo, hi, steps, rev = [], [], [], []
    for j, start in enumerate(starts):
        if j not in taken:
            lo.append(start)
            hi.append(start + 1)
            steps.append(1)
            continue
        i, step = taken[j]
        last = start + (shape[i] - 1) * step
        first, end = (start, last) if step > 0 else (last, start)
        lo.append(first)
        hi.append(end + 1)
        steps.append(abs(step))
        if step < 0:
            rev.append(j)
    kept = tuple(sorted(taken))
    order = tuple(kept.index(j) for j in sorted(taken, key=lambda j: taken[j][0]))
    return Slicing(tuple(lo), tuple(hi), tuple(steps), tuple(rev), kept, order)


def _sliced_shape(plan: Slicing) -> tuple[int, ...]:
    return tuple(
        len(range(lo, hi, st)) for lo, hi, st in zip(plan.lo, plan.hi, plan.step, strict=True)
    )


def read(base: Any, plan: Slicing, shape: tuple[int, ...]) -> Any:
    """The view's values: the slice, reversed where it steps back, its kept axes in the view's
    order, reshaped to the view's shape (its axes of length 1 inserted)."""
    whole = all(lo == 0 and st == 1 for lo, st in zip(plan.lo, plan.step, strict=True))
    whole = whole and plan.hi == tuple(base.shape)
    # A transpose of the whole base (``x.T``, ``permute_dims``) slices nothing.
    x = base if whole else jax.lax.slice(base, plan.lo, plan.hi, plan.step)
    if plan.reversed_axes:
        x = jax.lax.rev(x, plan.reversed_axes)
    sliced = _sliced_shape(plan)
    x = x.reshape(tuple(sliced[j] for j in plan.kept))
    if plan.order != tuple(range(len(plan.order))):
        x = jnp.transpose(x, plan.order)
    return x.reshape(shape)


def write(base: Any, values: Any, plan: Slicing) -> Any:
    """``base`` with the view set to ``values`` (of the view's shape): ``values`` brought to the
    slice's layout, then ``lax.dynamic_update_slice`` where every step is 1, else an indexed
    set of the strided slice (a scatter)."""
    sliced = _sliced_shape(plan)
    kept_shape = tuple(sliced[j] for j in plan.kept)
    in_view = tuple(kept_shape[k] for k in plan.order)
    v = values.reshape(in_view).astype(base.dtype)  # as the scatter's set casts
    if plan.order != tuple(range(len(plan.order))):
        inverse = [0] * len(plan.order)
        for position, k in enumerate(plan.order):
            inverse[k] = position
        v = jnp.transpose(v, inverse)
    v = v.reshape(sliced)
    if plan.reversed_axes:
        v = jax.lax.rev(v, plan.reversed_axes)
    if all(st == 1 for st in plan.step):
        return jax.lax.dynamic_update_slice(base, v, plan.lo)
    index = tuple(slice(lo, hi, st) for lo, hi, st in zip(plan.lo, plan.hi, plan.step, strict=True))
    return base.at[index].set(v)
