"""A graph backend's size limit (``bf.graph.set_limit``): past it a graph is cut (computed
then, the next call starting a new graph), with values as one graph would give; each part of
a run of cut calls is counted at its site as that part, so cutting warns of no recompile."""

from __future__ import annotations

import logging
from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import Compiler, fresh, register

COMPILER = Compiler()
NAME = "GraphLimitTest"
GRAPH = register(NAME, COMPILER)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    before = bf.graph.limit(NAME)
    yield from fresh(COMPILER)
    bf.graph.set_limit(NAME, before)


def chain(x: bf.Tensor, steps: int) -> bf.Tensor:
    """``steps`` operators, one after another, a cycle of ten (a part of three nodes is
    another structure at each of ten places)."""
    ops = (
        xp.add, xp.multiply, xp.subtract, xp.maximum, xp.minimum,
        xp.divide, xp.hypot, xp.copysign, xp.logaddexp, xp.atan2,
    )  # fmt: skip
    for i in range(steps):
        x = ops[i % len(ops)](x, float(i % 3 + 1))
    return x


def test_the_default_limit_keeps_a_long_run_of_calls_one_graph() -> None:
    assert bf.graph.limit(NAME) == 4096
    x = GRAPH.tensor(np.arange(4.0))
    chain(x, 40).numpy()
    figures = bf.metrics.graphs()
    assert (figures["graphs_run"], figures["max_nodes"]) == (1, 40)
    assert figures["syncs"] == {"numpy": 1}


def test_a_graph_past_the_limit_is_cut_and_gives_the_eager_values() -> None:
    bf.graph.set_limit(NAME, 3)
    assert bf.graph.limit(NAME) == 3
    a = np.arange(5.0)
    out = chain(GRAPH.tensor(a), 7)
    with bf.eager():
        expected = chain(GRAPH.tensor(a), 7).numpy()
    np.testing.assert_array_equal(out.numpy(), expected)
    figures = bf.metrics.graphs()
    # 7 calls in graphs of at most 3 nodes: cut at the 4th and 7th calls, the rest at the read.
    assert figures["syncs"] == {"size limit": 2, "numpy": 1}
    assert (figures["graphs_run"], figures["max_nodes"]) == (3, 3)
    assert [len(g.nodes) for g in COMPILER.graphs] == [3, 3, 1]


def test_parts_of_a_run_of_cut_calls_are_counted_apart_at_their_site(caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="boxfall")
    bf.graph.set_limit(NAME, 3)
    x = GRAPH.tensor(np.arange(6.0))
    for _ in range(3):
        chain(x, 30).numpy()  # ten distinct parts at one site, the same ten each time
    figures = bf.metrics.graphs()
    assert figures["compiled"] == 10
    assert figures["cache_hits"] == 20
    # More than 8 distinct graphs at one line, none a recompile: no warning.
    assert not [r for r in caplog.records if "distinct graphs" in r.getMessage()]
    assert any("(part 2 of a graph cut at the size limit)" in r for r in figures["recompiles"]), (
        figures["recompiles"]
    )


def test_a_part_that_compiles_anew_at_every_call_is_still_warned_about(caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="boxfall")
    bf.graph.set_limit(NAME, 2)
    for n in range(1, 12):
        chain(GRAPH.tensor(np.arange(float(n))), 3).numpy()  # a new shape each call
    warnings = [r.getMessage() for r in caplog.records if "distinct graphs" in r.getMessage()]
    assert len(warnings) == 2  # the first part and the second, each 11 graphs
    assert all("of a graph cut at the size limit" in w for w in warnings)


def test_a_limit_is_set_only_on_a_graph_backend_and_never_to_zero() -> None:
    with pytest.raises(bf.RegistrationError, match="'Native' is no graph backend"):
        bf.graph.set_limit("Native", 10)
    with pytest.raises(bf.RegistrationError, match=f"graph of backend '{NAME}'.*at least one"):
        bf.graph.set_limit(NAME, 0)
    with pytest.raises(bf.BoxfallError, match="unknown dispatch key 'NoSuchBackend'"):
        bf.graph.set_limit("NoSuchBackend", 10)
    with pytest.raises(ValueError, match=f"graph of backend '{NAME}'.*not -5"):
        bf.graph.set_limit(NAME, -5)
    assert bf.graph.limit(NAME) == 4096


def test_a_loop_that_reads_no_value_is_warned_about_once_its_cuts_keep_compiling(
    caplog: Any,
) -> None:
    caplog.set_level(logging.WARNING, logger="boxfall")
    bf.graph.set_limit(NAME, 24)
    x = GRAPH.tensor(np.arange(3.0))
    for _ in range(30):
        # A step of 23 nodes: a cut of 24 falls one node later in it each time, 23 graphs
        # (the first 8 parts counted apart, the next 15 together).
        x = chain(x, 23)
    x.numpy()
    warnings = [r.getMessage() for r in caplog.records if "distinct graphs" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "(part 9 or later of a graph cut at the size limit)" in warnings[0]
    assert "call `bf.sync()` at each step" in warnings[0]
