"""A graph backend keeps a bounded number of compiled programs: a process that keeps meeting
new shapes (a test suite, a service fed inputs of every size) must not hold a program per
shape for ever (a JAX program holds its compiled executable; SciPy's tests on boxfall.jax grew
past 10 GB so). Past the bound the cache starts again; a graph needed again compiles again and
gives the same values."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import register

PROGRAMS: weakref.WeakSet[Any] = weakref.WeakSet()
COMPILES: list[int] = []

BOUND = 256
"""The bound the core keeps to (``PROGRAMS_KEPT`` in src/graph/state.rs)."""


class Program:
    """A compiled graph that registers itself in ``PROGRAMS`` (held weakly) while it lives."""

    def __init__(self, graph: bf.Graph) -> None:
        self.graph = graph
        PROGRAMS.add(self)

    def __call__(self, payloads: list[Any]) -> list[Any]:
        return self.graph.replay(payloads)


def compile_graph(graph: bf.Graph) -> Program:
    COMPILES.append(1)
    return Program(graph)


register("GraphCacheBoundTest", compile_graph)
gx = xp.namespace("GraphCacheBoundTest")


@pytest.fixture(autouse=True)
def synced() -> Any:
    bf.sync()
    yield
    bf.sync()


def test_programs_of_ever_new_shapes_are_kept_within_the_bound():
    for n in range(1, BOUND + 60):
        got = (gx.ones(n) * 2.0).numpy()
        assert got.shape == (n,) and float(got.sum()) == 2.0 * n
    gc.collect()
    assert len(COMPILES) >= BOUND + 59
    assert 0 < len(PROGRAMS) <= BOUND


def test_a_graph_dropped_from_the_cache_compiles_again_with_the_same_values():
    a = np.arange(3.0)
    first = (gx.asarray(a) + 1.0).numpy()
    for n in range(1000, 1000 + BOUND + 1):  # enough new graphs to start the cache again
        (gx.ones(n) + 1.0).numpy()
    before = len(COMPILES)
    again = (gx.asarray(a) + 1.0).numpy()
    assert len(COMPILES) == before + 1
    np.testing.assert_array_equal(again, first)
