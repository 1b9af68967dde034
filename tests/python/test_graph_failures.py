"""A failed program never makes unrelated pending tensors uncomputable (issue #53, defects 5 and
13): where a graph's program fails, its graph is run a node at a time, eagerly; the tensors
computed from the node that fails hold its error, raised at the sync that computed them and at
each of their reads, and every other pending tensor of the thread, recorded before or after,
is computed. A failure no node explains (the program's own) still commits nothing. On the
NumPy test backend (its CPU kernel of ``linalg_matrix_power`` raises NumPy's ``LinAlgError``
for a singular matrix's inverse) and on boxfall.jax's graph mode, where the same kernel runs as
a host callback inside the ``jax.jit`` program."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import Compiler, fresh, register

COMPILER = Compiler()
GRAPH = register("GraphFailureTest", COMPILER)

SINGULAR = np.zeros((2, 2))


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    yield from fresh(COMPILER)


def notes(e: BaseException) -> str:
    return " ".join(getattr(e, "__notes__", []))


def test_a_failed_node_leaves_every_other_pending_tensor_computable() -> None:
    x = GRAPH.tensor(np.arange(4.0))
    before = xp.add(x, 1.0)
    p = xp.linalg.matrix_power(GRAPH.tensor(SINGULAR), -1)
    after = xp.multiply(x, 3.0)
    # The sync that computes p raises p's error, NumPy's own, naming the operator...
    with pytest.raises(np.linalg.LinAlgError, match="Singular") as info:
        bf.sync()
    assert "linalg_matrix_power" in notes(info.value)
    assert bf.metrics.graphs()["failures"] == 1
    # ...and computed the tensors recorded before and after it.
    assert not bf.graph.is_pending(before) and not bf.graph.is_pending(after)
    np.testing.assert_array_equal(before.numpy(), np.arange(4.0) + 1)
    np.testing.assert_array_equal(after.numpy(), np.arange(4.0) * 3)
    # p raises at each read; nothing else does, new work computes, a sync finds nothing.
    for _ in range(2):
        with pytest.raises(np.linalg.LinAlgError, match="Singular"):
            p.numpy()
    np.testing.assert_array_equal(xp.add(x, 5.0).numpy(), np.arange(4.0) + 5)
    bf.sync()


def test_a_read_of_an_unrelated_tensor_computes_it_and_leaves_the_error_with_its_tensor() -> None:
    x = GRAPH.tensor(np.arange(3.0))
    p = xp.linalg.matrix_power(GRAPH.tensor(SINGULAR), -1)
    y = xp.subtract(x, 1.0)
    np.testing.assert_array_equal(y.numpy(), np.arange(3.0) - 1)  # its graph holds p: no raise
    bf.sync()  # p's failure was found by y's read, not by this sync
    with pytest.raises(np.linalg.LinAlgError):
        p.numpy()
    # A call that reads p raises p's error at the call, as eager mode would at p's.
    with pytest.raises(np.linalg.LinAlgError):
        xp.add(p, 1.0)
    assert float(xp.sum(y)) == 0.0


def test_the_tensors_computed_from_a_failed_node_hold_its_error() -> None:
    x = GRAPH.tensor(np.ones(2))
    p = xp.linalg.matrix_power(GRAPH.tensor(SINGULAR), -1)
    q = xp.multiply(p, 2.0)  # computed from p
    r = xp.matmul(q, x)
    ok = xp.add(x, x)
    del p, q
    with pytest.raises(np.linalg.LinAlgError) as info:
        r.numpy()
    assert "linalg_matrix_power" in notes(info.value)
    assert "GraphFailureTest" in notes(info.value)
    np.testing.assert_array_equal(ok.numpy(), [2.0, 2.0])


def test_a_failure_no_node_explains_commits_nothing_and_is_retried() -> None:
    # Every node computes alone: the program's own failure leaves every tensor pending.
    x = GRAPH.tensor(np.arange(3.0))
    y = xp.add(x, 1.0)
    COMPILER.fail = True
    with pytest.raises(bf.FallbackError, match="the test program failed"):
        bf.sync()
    assert bf.graph.is_pending(y)
    COMPILER.fail = False
    np.testing.assert_array_equal(y.numpy(), np.arange(3.0) + 1)


class Marker:
    """An object whose life a weak reference watches."""


def fail_and_catch() -> weakref.ref[Marker]:
    marker = Marker()
    p = xp.linalg.matrix_power(GRAPH.tensor(SINGULAR), -1)
    with pytest.raises(np.linalg.LinAlgError) as info:
        p.numpy()
    with pytest.raises(np.linalg.LinAlgError) as again:
        p.numpy()
    # Each read raises a copy of the one exception: its own traceback, the type and notes kept.
    assert info.value is not again.value
    assert notes(info.value) == notes(again.value)
    return weakref.ref(marker)


def test_a_raised_failure_holds_no_reader_frame_alive() -> None:
    # The frame that read p holds p (which holds the error) and the raised exception (which
    # holds the frame): a cycle through the tensor's Rust side that no collector sees, were the
    # stored exception itself raised. Each read raises a copy, so the frame is collected.
    gone = fail_and_catch()
    gc.collect()
    assert gone() is None


def jax_graph() -> Any:
    pytest.importorskip("jax")
    import boxfall.jax as bj

    return bj.namespace(graph=True)


def test_a_failed_host_callback_of_a_jax_program_poisons_nothing() -> None:
    # Issue #53, defect 13: every later sync, read and computation raised the callback's error
    # (a `FallbackError` of the compiled graph) until p was deleted.
    gx = jax_graph()
    a = gx.asarray(np.arange(4, dtype=np.float32))
    before = gx.add(a, 1.0)
    p = gx.linalg.matrix_power(gx.asarray(np.zeros((2, 2), np.float32)), -1)
    after = gx.multiply(a, 3.0)
    with pytest.raises(np.linalg.LinAlgError):
        bf.sync()
    np.testing.assert_array_equal(before.numpy(), np.arange(4) + 1)
    np.testing.assert_array_equal(after.numpy(), np.arange(4) * 3)
    later = gx.subtract(a, 1.0)
    np.testing.assert_array_equal(later.numpy(), np.arange(4) - 1)
    bf.sync()
    with pytest.raises(np.linalg.LinAlgError, match="Singular"):
        p.numpy()


def test_a_jax_graph_read_before_the_failed_tensor_is_not_raised_at() -> None:
    gx = jax_graph()
    a = gx.asarray(np.arange(3, dtype=np.float32))
    p = gx.linalg.matrix_power(gx.asarray(np.zeros((2, 2), np.float32)), -1)
    assert float(gx.sum(a)) == 3.0
    with pytest.raises(np.linalg.LinAlgError):
        float(gx.sum(p))
