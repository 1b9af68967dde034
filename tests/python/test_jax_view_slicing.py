"""Views on boxfall.jax lowered as jit lowers basic indexing: a slice, a reversal, a transpose
and a reshape (``lax.slice``), not a gather of each element's flat index; a write through a
view of steps 1 as ``lax.dynamic_update_slice``, not a scatter. Checked on the layouts NumPy's
basic indexing makes, against NumPy's values, and in graph mode's compiled programs."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from boxfall.jax import _hooks, _slicing  # noqa: E402

BASE = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)

KEYS: list[Any] = [
    (slice(None), 1),
    (1,),
    (slice(1, 3), slice(None, None, 2)),
    (slice(None, None, -1),),
    (2, slice(4, 0, -2), slice(1, 5)),
    (slice(None), None, slice(2, 3)),
    (Ellipsis, 0),
    (0, 0, 0, Ellipsis),  # a 0-d view (without the ellipsis NumPy gives a scalar)
    (slice(3, 0, -1), 2, slice(None, None, 3)),
]
TRANSPOSES = [None, "T", (1, 0, 2)]


def _layout(base: np.ndarray, view: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """A NumPy view's shape, strides and offset in elements of its C-ordered base."""
    item = base.itemsize
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return view.shape, tuple(s // item for s in view.strides), offset // item


def _views() -> list[Any]:
    found = []
    for key, t in itertools.product(KEYS, TRANSPOSES):
        v = BASE[key]
        if t == "T":
            v = v.T
        elif t is not None:
            if v.ndim != 3:
                continue
            v = v.transpose(t)
        found.append(pytest.param(_layout(BASE, v), id=f"{key}-{t}"))
    return found


@pytest.mark.parametrize("layout", _views())
def test_a_basic_indexing_view_reads_as_a_slice_with_numpys_values(layout: Any) -> None:
    shape, strides, offset = layout
    assert _slicing.slicing(BASE.shape, shape, strides, offset) is not None
    want = np.lib.stride_tricks.as_strided(
        BASE.reshape(-1)[offset:], shape, [s * BASE.itemsize for s in strides]
    )

    def read(b: Any) -> Any:
        return _hooks.strided_view(b, shape, strides, offset)

    np.testing.assert_array_equal(np.asarray(read(jnp.asarray(BASE))), want)
    hlo = jax.jit(read).lower(jnp.asarray(BASE)).as_text()
    assert "gather" not in hlo


@pytest.mark.parametrize("layout", _views())
def test_a_write_through_a_basic_indexing_view_is_numpys_and_no_scatter_where_steps_are_1(
    layout: Any,
) -> None:
    shape, strides, offset = layout
    values = -1.0 - np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    want = BASE.copy()
    np.lib.stride_tricks.as_strided(
        want.reshape(-1)[offset:], shape, [s * BASE.itemsize for s in strides]
    )[...] = values

    def write(b: Any, v: Any) -> Any:
        return _hooks.strided_view_write(b, v, shape, strides, offset)

    got = write(jnp.asarray(BASE), jnp.asarray(values))
    np.testing.assert_array_equal(np.asarray(got), want)
    plan = _slicing.slicing(BASE.shape, shape, strides, offset)
    assert plan is not None
    if all(st == 1 for st in plan.step):
        hlo = jax.jit(write).lower(jnp.asarray(BASE), jnp.asarray(values)).as_text()
        assert "scatter" not in hlo


def test_an_overlapping_layout_is_a_gather_with_numpys_values() -> None:
    # A sliding window (strides (1, 1)) is no slicing of the base: the gather stays.
    shape, strides, offset = (3, 4), (1, 1), 2
    base = np.arange(10, dtype=np.float32)
    assert _slicing.slicing(base.shape, shape, strides, offset) is None
    want = np.lib.stride_tricks.as_strided(base[offset:], shape, (4, 4))
    got = _hooks.strided_view(jnp.asarray(base), shape, strides, offset)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_graph_mode_lowers_slices_and_transposes_with_no_gather(monkeypatch: Any) -> None:
    gathers: list[Any] = []
    real = _hooks._gather

    def counted(*args: Any, **kwargs: Any) -> Any:
        gathers.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(_hooks, "_gather", counted)

    def program(xp: Any, x: Any) -> Any:
        a = x[1:, ::2]
        b = x.T[::-1]
        c = xp.matmul(a, b[:3, 1:3])
        x[0, 1:4] = c[0, :3] if c.shape[1] >= 3 else c[0, 0]
        return xp.sum(c) + xp.sum(x[:, 2]) + xp.sum(a.mT)

    data = np.arange(30, dtype=np.float32).reshape(5, 6) / 7
    eager = bj.namespace()
    graph = bj.namespace(graph=True)
    want = float(program(eager, eager.asarray(data)))
    got = program(graph, graph.asarray(data))
    bf.sync()
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    assert gathers == []
    lowered = bj.graph_compiler().lowered_text()
    assert "stablehlo.slice" in lowered and "gather" not in lowered
