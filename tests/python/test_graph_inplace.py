"""Graph mode's writes and indexing, on a test backend whose compiler
replays each graph with NumPy: in-place operators (``x += y``) and ``x[key] = value`` of a
tensor are recorded functionally (the tensor's data becomes the pending result), ``x[key]``
with a basic key of a pending tensor is a view whose reads are recorded, and a write through a
view is recorded as a write of its base (``test_graph_views.py``), with eager mode's values."""

from __future__ import annotations

from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import Compiler, fresh, register
from hypothesis import given, settings
from hypothesis import strategies as st

COMPILER = Compiler()
GRAPH = register("GraphWrites", COMPILER)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    yield from fresh(COMPILER)


def breaks() -> dict[str, int]:
    return dict(bf.metrics.graphs()["breaks"])


def test_an_in_place_operator_on_a_computed_tensor_is_recorded() -> None:
    x, y = GRAPH.tensor(np.arange(4.0)), GRAPH.tensor(np.full(4, 10.0))
    z = xp.multiply(x, 2.0)  # reads x's old values
    x += y
    assert bf.graph.is_pending(x)  # the write is a node; x's data its pending result
    x *= 3
    np.testing.assert_array_equal(x.numpy(), (np.arange(4.0) + 10.0) * 3)
    np.testing.assert_array_equal(z.numpy(), np.arange(4.0) * 2.0)
    assert breaks() == {}
    (graph,) = COMPILER.graphs
    names = [op.name for op, _, _ in graph.nodes]
    assert names == [
        "array_api::multiply.Tensor_Scalar",
        "array_api::add",
        "array_api::multiply.Tensor_Scalar",
    ]


def test_an_in_place_operator_on_a_pending_tensor_is_recorded() -> None:
    x = GRAPH.tensor(np.arange(6, dtype=np.int64).reshape(2, 3))
    z = xp.add(x, x)
    z -= GRAPH.tensor(np.array([1, 1, 1]))  # broadcast into z's shape
    z //= 2
    np.testing.assert_array_equal(z.numpy(), (np.arange(6).reshape(2, 3) * 2 - 1) // 2)
    assert breaks() == {}
    assert len(COMPILER.graphs) == 1


@pytest.mark.parametrize(
    ("target", "other"), [("float32", "float64"), ("int16", "int64"), ("complex64", "float64")]
)
def test_an_in_place_operator_that_casts_its_result_back_is_recorded(
    target: str, other: str
) -> None:
    a, b = np.arange(-3, 3).astype(target), (np.arange(6) * 7919 + 0.25).astype(other)

    def run() -> np.ndarray:
        x = GRAPH.tensor(a)
        x += GRAPH.tensor(b)  # computed in the wider dtype, cast back into x's (same_kind)
        x *= 3
        return x.numpy()

    with bf.eager():
        want = run()
    got = run()
    assert got.dtype == want.dtype == np.dtype(target)
    np.testing.assert_array_equal(got, want)
    assert breaks() == {}
    names = [op.name for op, _, _ in COMPILER.graphs[-1].nodes]
    assert names[:2] == ["array_api::add", "array_api::astype"]


def test_an_in_place_operator_eager_refuses_breaks_and_raises_as_eager() -> None:
    x = GRAPH.tensor(np.arange(3, dtype=np.int64))
    with pytest.raises(Exception) as got:
        x /= 2  # NumPy's same_kind casting refuses float64 into int64
    with bf.eager(), pytest.raises(Exception) as want:
        y = GRAPH.tensor(np.arange(3, dtype=np.int64))
        y /= 2
    assert type(got.value) is type(want.value)
    np.testing.assert_array_equal(x.numpy(), np.arange(3))
    assert breaks() == {"array_api::divide_.Scalar": 1}


def test_a_failing_program_leaves_the_written_tensor_pending_and_its_old_values_kept() -> None:
    x = GRAPH.tensor(np.arange(3.0))
    x += 1.0
    COMPILER.fail = True
    with pytest.raises(bf.BoxfallError, match="the test program failed"):
        x.numpy()
    # Nothing committed: x is still the write's pending result, and the graph still reads
    # x's old values from its input, so the next sync computes the write once.
    assert bf.graph.is_pending(x)
    COMPILER.fail = False
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0) + 1.0)
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0) + 1.0)


def test_a_write_of_a_viewed_tensor_is_recorded_and_seen_through_the_view() -> None:
    x = GRAPH.tensor(np.arange(4.0))
    v = x[1:3]  # a view of a computed tensor
    x += 1.0
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])
    v += 10.0  # a write through the view reaches its base
    np.testing.assert_array_equal(x.numpy(), [1.0, 12.0, 13.0, 4.0])
    assert breaks() == {}


def test_a_basic_index_of_a_pending_tensor_is_recorded() -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    x = xp.multiply(GRAPH.tensor(a), 2.0)
    keys = [1, -1, (0, slice(1, None)), (Ellipsis, None, slice(None, None, -2)), (slice(None), 2)]
    got = [x[k] for k in keys]
    assert all(bf.graph.is_pending(g) for g in got)
    assert [g.shape for g in got] == [(a * 2)[k].shape for k in keys]
    for g, k in zip(got, keys, strict=True):
        np.testing.assert_array_equal(g.numpy(), (a * 2)[k])
    assert breaks() == {}


def test_the_same_index_again_compiles_nothing() -> None:
    def run(lo: int) -> Any:
        x = xp.add(GRAPH.tensor(np.arange(5.0)), 1.0)
        return xp.multiply(x[lo : lo + 2], 2.0).numpy()

    np.testing.assert_array_equal(run(1), [4.0, 6.0])
    np.testing.assert_array_equal(run(1), [4.0, 6.0])
    assert len(COMPILER.graphs) == 1  # one key: the view's layout compared by value
    np.testing.assert_array_equal(run(2), [6.0, 8.0])
    assert len(COMPILER.graphs) == 2


def test_an_index_numpy_refuses_or_an_array_index_breaks_as_eager() -> None:
    x = xp.add(GRAPH.tensor(np.arange(5.0)), 1.0)
    with pytest.raises(IndexError):
        x[7]
    y = xp.add(GRAPH.tensor(np.arange(5.0)), 1.0)
    picked = y[GRAPH.tensor(np.array([0, 4]))]
    np.testing.assert_array_equal(picked.numpy(), [1.0, 5.0])
    assert breaks() == {"array_api::getitem": 2}


def test_setitem_of_a_tensor_no_view_sees_is_recorded() -> None:
    x = xp.add(GRAPH.tensor(np.zeros((2, 3))), 1.0)
    x[0, 1] = 5.0
    x[1] = GRAPH.tensor(np.array([7.0, 8.0, 9.0]))
    x[..., 2] = 3  # an int into a float array
    assert bf.graph.is_pending(x)
    np.testing.assert_array_equal(x.numpy(), [[1.0, 5.0, 3.0], [7.0, 8.0, 3.0]])
    assert breaks() == {}
    y = GRAPH.tensor(np.arange(3, dtype=np.int32))  # a computed tensor: read as an input
    y[1:] = -1
    np.testing.assert_array_equal(y.numpy(), [0, -1, -1])
    assert breaks() == {}


def test_setitem_numpy_might_refuse_by_value_breaks_as_eager() -> None:
    x = xp.add(GRAPH.tensor(np.zeros(3, dtype=np.int8)), 1)
    with pytest.raises(OverflowError):
        x[0] = 300
    np.testing.assert_array_equal(x.numpy(), [1, 1, 1])
    assert breaks() == {"array_api::setitem.Scalar": 1}


# -- random programs ---------------------------------------------------------------------------

KEYS = [0, -1, slice(1, None), slice(None, None, -1), (Ellipsis, 0), (None, slice(0, 2)), ()]
STEP = st.tuples(
    st.sampled_from(
        "add multiply sum iadd isub imul iadd_scalar getitem setitem_scalar setitem view_write "
        "transpose reshape read drop".split()
    ),
    st.integers(0, 1_000),
    st.integers(0, 1_000),
    st.integers(0, len(KEYS) - 1),
)


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def valid(shape: tuple[int, ...], key: Any) -> bool:
    try:
        np.empty(shape)[key]
    except IndexError:
        return False
    return True


def run_steps(
    start: list[np.ndarray], steps: list[tuple[str, int, int, int]], backend: Any
) -> list[np.ndarray]:
    """Runs the steps (in graph mode unless the caller is in ``bf.eager()``) and gives every
    live tensor's values at the end. ``x[key]``, ``matrix_transpose`` and ``reshape`` make views
    (of views, too) in both modes, and any tensor, a view or a base of views, may be written
    after: the writes must reach the base and every view of it."""
    live: list[Any] = [backend(a) for a in start]
    scalar = 2 if start[0].dtype.kind in "iu" else 0.5
    for name, i, j, k in steps:
        ia = i % len(live)
        a, b = live[ia], live[j % len(live)]
        key = KEYS[k]
        fits = broadcast(a.shape, b.shape) == a.shape
        made = None
        if name in ("add", "multiply") and broadcast(a.shape, b.shape) is not None:
            made = getattr(xp, name)(a, b)
        elif name == "sum":
            made = xp.sum(a)
        elif name == "iadd" and fits:
            a += b
        elif name == "isub" and fits:
            a -= b
        elif name == "imul" and fits:
            a *= b
        elif name == "iadd_scalar":
            a += scalar
        elif name == "getitem" and valid(a.shape, key):
            made = a[key]
        elif name == "transpose" and a.ndim >= 2:
            made = xp.matrix_transpose(a)
        elif name == "reshape":
            made = xp.reshape(a, (-1,))
        elif name == "setitem_scalar" and valid(a.shape, key):
            a[key] = scalar
        elif name == "setitem" and valid(a.shape, key):
            part = np.empty(a.shape)[key].shape
            if broadcast(part, b.shape) == part:
                a[key] = b
        elif name == "view_write" and a.ndim > 0:
            v = a[1:]
            v += scalar
        elif name == "read":
            a.numpy()
        elif name == "drop" and len(live) > 1:
            live.pop(ia)
        if made is not None:
            live.append(made)
    return [t.numpy() for t in live]


SHAPES = [(1,), (3,), (2, 3)]
DTYPES = {np.float32: 1e-5, np.float64: 1e-12, np.int64: 0, np.int32: 0}


def check(got: list[np.ndarray], expected: list[np.ndarray], dtype: Any, steps: list[Any]) -> None:
    """The values are eager mode's, and nothing broke the graph (``asarray`` of the starting
    NumPy arrays aside): views and writes through them are recorded."""
    assert {k for k in breaks() if k != "array_api::asarray"} == set()
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        if DTYPES[dtype]:
            np.testing.assert_allclose(g, e, rtol=DTYPES[dtype])
        else:
            np.testing.assert_array_equal(g, e)


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from(list(DTYPES)),
    shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3),
    steps=st.lists(STEP, max_size=14),
)
def test_random_programs_with_writes_and_indexing_give_the_eager_values(
    dtype: Any, shapes: list[tuple[int, ...]], steps: list[tuple[str, int, int, int]]
) -> None:
    rng = np.random.default_rng(0)
    start = [(rng.standard_normal(s) * 4).astype(dtype) for s in shapes]
    with bf.eager():
        expected = run_steps(start, steps, GRAPH.tensor)
    bf.metrics.reset()
    got = run_steps(start, steps, GRAPH.tensor)
    check(got, expected, dtype, steps)


# -- the same on JAX's graph backend (its CPU here) ---------------------------------------------


def test_writes_and_indexing_on_jax_are_recorded_in_one_program() -> None:
    pytest.importorskip("jax")
    import boxfall.jax as bj

    gx = bj.namespace(graph=True)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with bf.eager():  # arrays from NumPy: made now (`asarray` of a host array is a break)
        start, ones, sevens = (gx.asarray(v) for v in (a, np.ones(4, np.float32), a[0] * 0 + 7))
    x = gx.multiply(start, 2.0)
    x += ones
    x[1, ::2] = -1.0
    x[0] = sevens
    y = x[1:, None, -1]
    assert bf.graph.is_pending(x) and bf.graph.is_pending(y)
    want = a * 2 + 1
    want[1, ::2] = -1.0
    want[0] = 7.0
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(y.numpy(), want[1:, None, -1])
    assert breaks() == {}
    compiler = bj.graph_compiler()
    for name in ("array_api::getitem", "array_api::setitem_functional"):
        assert name in compiler.native and compiler.host_callbacks[name] == 0


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from([np.float32, np.int32]),
    shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3),
    steps=st.lists(STEP, max_size=10),
)
def test_random_programs_on_jax_give_the_eager_values(
    dtype: Any, shapes: list[tuple[int, ...]], steps: list[tuple[str, int, int, int]]
) -> None:
    pytest.importorskip("jax")
    import boxfall.jax as bj

    gx = bj.namespace(graph=True)
    rng = np.random.default_rng(0)
    start = [(rng.standard_normal(s) * 4).astype(dtype) for s in shapes]
    with bf.eager():
        expected = run_steps(start, steps, gx.asarray)
    bf.metrics.reset()
    got = run_steps(start, steps, gx.asarray)
    check(got, expected, dtype, steps)
