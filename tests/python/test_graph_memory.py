"""Graph mode's memory (issue #40): a graph's intermediate results that no tensor holds are
not kept alive after it runs, and a sync leaves no recorded state behind. On a test backend
whose payloads register themselves, so that the live ones can be counted."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import Box, register

LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


class Tracked(Box):
    """A payload that registers itself in ``LIVE`` (which holds it weakly)."""

    def __init__(self, a: Any) -> None:
        super().__init__(a)
        LIVE.add(self)


GRAPH = register("GraphMemoryTest", lambda graph: graph.replay, payload=Tracked)


@pytest.fixture(autouse=True)
def synced() -> Any:
    bf.sync()
    yield
    bf.sync()


def live() -> int:
    gc.collect()
    return len(LIVE)


def test_only_the_results_a_tensor_holds_outlive_the_program() -> None:
    x = GRAPH.tensor(np.arange(1000.0))
    before = live()
    y = xp.add(x, x)
    z = xp.multiply(y, y)
    w = xp.subtract(z, x)
    out = xp.sum(w)
    del y, z, w
    bf.sync()
    # The program made y, z, w and out; only out is held.
    assert live() == before + 1
    assert float(out) == float(np.sum((2 * np.arange(1000.0)) ** 2 - np.arange(1000.0)))


def test_a_sync_keeps_no_input_nor_pending_tensor_alive() -> None:
    x = GRAPH.tensor(np.arange(10.0))
    xs = weakref.ref(x.payload)
    y = xp.add(x, x)
    del x
    # The graph reads x: its payload lives while the graph is pending...
    assert live() >= 1 and xs() is not None
    bf.sync()
    # ...and not after it ran, when nothing holds x.
    gc.collect()
    assert xs() is None
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(10.0))


def test_results_nothing_holds_are_never_computed() -> None:
    x = GRAPH.tensor(np.arange(10.0))
    before = live()
    ran = bf.metrics.graphs()["graphs_run"]
    for _ in range(5):
        xp.multiply(x, x)  # dropped at once
    bf.sync()
    assert live() == before
    assert bf.metrics.graphs()["graphs_run"] == ran
    assert bf.graph.dump() == "no pending graph"


def test_a_recording_holds_no_input_that_no_live_tensor_can_read() -> None:
    # Issue #53, defect 7: work recorded and dropped (each `r` replaced by the next) kept every
    # input it read alive until the sync, 40 of 4 MiB here; eager mode keeps one.
    src = np.zeros(1 << 19)  # 4 MiB of float64
    before = live()
    for i in range(40):
        r = xp.multiply(GRAPH.tensor(src + i), 2.0)
    assert bf.graph.is_pending(r)
    # The inputs of the last r or two, and those added since the recording last looked.
    assert live() - before <= 4
    np.testing.assert_array_equal(r.numpy(), (src + 39) * 2)
    assert live() - before == 1  # r's result


def test_an_input_a_live_tensor_holds_is_kept_though_no_live_node_reads_it() -> None:
    # x is read by dropped work only, but x itself can be read again: the graph keeps its
    # input, so that the next read of x is the same input, not another (another graph).
    x = GRAPH.tensor(np.ones(1 << 19))
    keep = weakref.ref(x.payload)
    for _ in range(3):
        xp.multiply(x, 2.0)  # dropped at once
    ys = [xp.add(GRAPH.tensor(np.zeros(1 << 19)), 1.0) for _ in range(3)]  # past the bytes
    y = xp.add(x, 1.0)
    assert keep() is not None
    np.testing.assert_array_equal(y.numpy(), 2.0)
    assert all(float(xp.sum(t)) == 1 << 19 for t in ys)


def test_a_jax_recording_lets_go_of_the_device_arrays_no_live_tensor_can_read() -> None:
    jax = pytest.importorskip("jax")
    import boxfall.jax as bj

    gx = bj.namespace(graph=True)
    src = np.zeros(1 << 20, np.float32)  # 4 MiB

    def held() -> int:
        gc.collect()
        return sum(a.nbytes for a in jax.live_arrays())

    before = held()
    for i in range(40):
        r = gx.asarray(src + i) * 2
    assert bf.graph.is_pending(r)
    assert held() - before <= 5 * src.nbytes  # 40 of them before
    np.testing.assert_array_equal(r.numpy(), (src + 39) * 2)
