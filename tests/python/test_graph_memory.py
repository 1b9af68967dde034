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
