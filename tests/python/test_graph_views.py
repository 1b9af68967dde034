"""Views in graph mode (views behave as in eager mode): a view of a pending
or computed tensor of a graph backend is a view, its reads and the writes through it recorded
as nodes on its base's data (``array_api::_strided_view``, ``_strided_view_write``). On the
test backend whose compiler replays each graph with NumPy, and on ``bj.namespace(graph=True)``
(JAX's CPU here); the values are eager mode's in both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boxfall as bf
import boxfall.array_api as bxp
import numpy as np
import pytest
from graph_backend import Compiler, fresh, register

COMPILER = Compiler()
GRAPH = register("GraphViews", COMPILER)
NUMPY_XP = bxp.namespace("GraphViews:0")


def _jax_namespace() -> Any:
    pytest.importorskip("jax")
    import boxfall.jax as bj

    return bj.namespace(graph=True)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    yield from fresh(COMPILER)


@pytest.fixture(params=["numpy", "jax"])
def xp(request: Any) -> Any:
    """A graph-mode namespace: the NumPy test compiler's, or JAX's."""
    return NUMPY_XP if request.param == "numpy" else _jax_namespace()


def breaks() -> dict[str, int]:
    return dict(bf.metrics.graphs()["breaks"])


def pending(xp: Any, a: np.ndarray) -> Any:
    """A pending tensor of ``a``'s values (``a + 0``: a node of the graph)."""
    return xp.add(xp.asarray(a), 0)


def f32(a: Any) -> np.ndarray:
    """``a`` in float32, which JAX holds without 64-bit types."""
    return np.asarray(a, dtype=np.float32)


def both_modes(xp: Any, program: Callable[[Any, Any], list[Any]], a: np.ndarray) -> None:
    """``program(xp, x)`` gives eager mode's values in graph mode, breaking no graph."""
    with bf.eager():
        want = [t.numpy() for t in program(xp, xp.asarray(a))]
    bf.metrics.reset()
    got = program(xp, pending(xp, a))
    assert breaks() == {}
    assert any(bf.graph.is_pending(t) for t in got)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w)


def test_a_write_through_a_view_of_a_pending_tensor_reaches_its_base(xp: Any) -> None:
    x = pending(xp, f32(np.arange(6.0).reshape(2, 3)))
    v = x[0]
    assert bf.graph.is_pending(v)
    v[...] = 5.0
    v[1] = 7.0
    assert bf.graph.is_pending(x)
    np.testing.assert_array_equal(x.numpy(), [[5.0, 7.0, 5.0], [3.0, 4.0, 5.0]])
    np.testing.assert_array_equal(v.numpy(), [5.0, 7.0, 5.0])
    assert breaks() == {}
    if xp is not NUMPY_XP:  # JAX runs both on the device: no host callback
        import boxfall.jax as bj

        compiler = bj.graph_compiler()
        for name in ("array_api::_strided_view", "array_api::_strided_view_write"):
            assert name in compiler.native and compiler.host_callbacks[name] == 0


def test_a_write_to_the_base_shows_in_an_existing_view(xp: Any) -> None:
    x = pending(xp, f32(np.arange(6.0).reshape(2, 3)))
    v = x[:, 1]
    w = xp.multiply(v, 2.0)  # reads the view before the writes
    x += 10.0
    x[1] = -1.0
    got = xp.add(v, 0.0)  # reads it after them
    np.testing.assert_array_equal(w.numpy(), [2.0, 8.0])
    np.testing.assert_array_equal(got.numpy(), [11.0, -1.0])
    np.testing.assert_array_equal(v.numpy(), [11.0, -1.0])
    assert breaks() == {}


def test_chains_of_views_read_and_write_their_first_base(xp: Any) -> None:
    def program(xp: Any, x: Any) -> list[Any]:
        t = xp.matrix_transpose(x)[1:]  # x.T[1:]: one view of x
        r = xp.reshape(x[1:], (6,))  # reshape of a slice
        s = xp.multiply(t, 3.0)
        t[0] = 100.0  # x[:, 1] = 100
        r += 1.0  # x[1:] += 1
        return [x, t, r, s, xp.expand_dims(r, axis=0)]

    both_modes(xp, program, f32(np.arange(9.0).reshape(3, 3)))


def test_in_place_operators_on_views(xp: Any) -> None:
    def program(xp: Any, x: Any) -> list[Any]:
        v = x[1:, ::2]
        w = xp.asarray(f32([10.0, 20.0]))
        v += 1.0
        v *= w  # broadcast along the view's rows
        v[...] = xp.subtract(v, x[0, :2])  # a view of the same base on the right
        u = x[0]
        u += u  # one view on both sides
        return [x, v, u]

    both_modes(xp, program, f32(np.arange(12.0).reshape(3, 4)))


def test_a_write_through_a_view_of_a_computed_tensor_is_recorded(xp: Any) -> None:
    x = xp.asarray(f32(np.arange(4.0)))
    v = x[1:3]
    x += 1.0  # a base whose view was made: recorded
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])
    v += 10.0
    assert bf.graph.is_pending(x)
    np.testing.assert_array_equal(x.numpy(), [1.0, 12.0, 13.0, 4.0])
    assert breaks() == {}


def test_a_read_only_view_refuses_a_write_as_eager_mode_does(xp: Any) -> None:
    x = pending(xp, f32(np.arange(3.0)))
    b = xp.broadcast_to(x, (2, 3))
    with pytest.raises(ValueError):
        b[0] = 1.0
    np.testing.assert_array_equal(x.numpy(), [0.0, 1.0, 2.0])


def test_a_failed_program_leaves_the_base_and_its_views_as_they_were() -> None:
    xp = NUMPY_XP
    x = pending(xp, np.arange(4.0))
    v = x[1:]
    v += 10.0
    w = x[:2]
    COMPILER.fail = True
    with pytest.raises(bf.BoxfallError, match="the test program failed"):
        x.numpy()
    with pytest.raises(bf.BoxfallError, match="the test program failed"):
        w.numpy()
    assert bf.graph.is_pending(x) and bf.graph.is_pending(v) and bf.graph.is_pending(w)
    COMPILER.fail = False
    np.testing.assert_array_equal(v.numpy(), [11.0, 12.0, 13.0])
    np.testing.assert_array_equal(w.numpy(), [0.0, 11.0])
    np.testing.assert_array_equal(x.numpy(), [0.0, 11.0, 12.0, 13.0])


def test_a_view_is_read_by_a_node_of_the_graph() -> None:
    xp = NUMPY_XP
    x = xp.asarray(f32(np.arange(6.0).reshape(2, 3)))
    y = xp.matmul(xp.matrix_transpose(x), x)
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(y.numpy(), a.T @ a)
    (graph,) = COMPILER.graphs
    names = [op.name for op, _, _ in graph.nodes]
    assert names == ["array_api::_strided_view", "array_api::matmul"]
    (_, args, _), _ = graph.nodes
    assert args[1:] == (("const", [3, 2]), ("const", [1, 3]), ("const", 0))


def test_a_view_of_an_input_calls_no_view_hook_and_a_loop_compiles_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gx = _jax_namespace()
    import boxfall.jax as bj

    class Counted(dict):  # type: ignore[type-arg]
        calls = 0

        def get(self, *args: Any) -> Any:
            Counted.calls += 1
            return super().get(*args)

    # The JAX view hook looks its layout up once a call.
    monkeypatch.setattr(bj.device_hooks, "_views", Counted())
    compiler = bj.graph_compiler()
    a = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    x = gx.asarray(a)
    before = None
    for step in range(3):
        got = gx.add(gx.matmul(gx.matrix_transpose(x), x), x[1])
        np.testing.assert_allclose(got.numpy(), a.T @ a + a[1], rtol=1e-5)
        if step == 0:
            before = compiler.compiles
    assert compiler.compiles == before  # the same views again: the cached program
    assert Counted.calls == 0
    assert breaks() == {}


def test_a_view_read_by_several_calls_is_one_node_until_its_base_is_written() -> None:
    xp = NUMPY_XP
    a = np.arange(6.0).reshape(2, 3)
    b = a + 100  # another base whose transpose has the same layout
    x, y = xp.asarray(a), xp.asarray(b)
    t = xp.matrix_transpose(x)
    outs = [xp.matmul(t, x), xp.add(t, 1.0), xp.multiply(xp.matrix_transpose(x), 2.0)]
    outs.append(xp.add(xp.matrix_transpose(y), t))  # two bases of one layout: two reads
    x += 1.0  # x's data is rebound: the next read of t is a new node
    outs.append(xp.add(t, 0.0))
    t[0] = -5.0  # a write through the view, then its read
    outs.append(xp.multiply(t, 1.0))
    want = [a.T @ a, a.T + 1, a.T * 2, b.T + a.T, a.T + 1]
    after = (a + 1).T.copy()
    after[0] = -5.0
    want.append(after)
    for got, w in zip(outs, want, strict=True):
        np.testing.assert_array_equal(got.numpy(), w)
    (graph,) = COMPILER.graphs
    reads = [op.name for op, _, _ in graph.nodes].count("array_api::_strided_view")
    # x.T, y.T, x.T after the write of x, and after the write through t (its base rebound).
    assert reads == 4
    assert breaks() == {}
