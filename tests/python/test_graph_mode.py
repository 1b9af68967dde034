"""Graph mode's mechanism on a test backend whose compiler replays each
graph with NumPy (the backend's CPU fallback) and counts its compilations; across threads too
(graphs are kept per (backend, thread): a pending tensor read on any thread gets the value
eager code would see, waiting for a sync another thread runs of its graph, and one recorded on
a thread that ended stays computable)."""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
import weakref
from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import Box, Compiler, fresh, register, run_threads
from hypothesis import given, settings
from hypothesis import strategies as st

COMPILER = Compiler()
GRAPH = register("GraphTest", COMPILER)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    yield from fresh(COMPILER)


def tensors(n: int = 4, dtype: Any = np.float64) -> tuple[bf.Tensor, bf.Tensor]:
    a = np.arange(n, dtype=dtype)
    return GRAPH.tensor(a), GRAPH.tensor(a * 2 + 1)


def program(x: bf.Tensor, y: bf.Tensor) -> bf.Tensor:
    z = xp.add(x, y)
    w = xp.multiply(z, y)
    return xp.subtract(w, x)


def test_operators_record_pending_tensors_whose_values_equal_eager_ones() -> None:
    x, y = tensors()
    out = program(x, y)
    assert bf.graph.is_pending(out)
    assert COMPILER.graphs == []  # nothing ran yet
    with bf.eager():
        expected = program(x, y)
    assert not bf.graph.is_pending(expected)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    assert not bf.graph.is_pending(out)
    assert len(COMPILER.graphs) == 1
    assert bf.metrics.graphs()["syncs"] == {"numpy": 1}


def test_pending_meta_is_known_without_computing() -> None:
    x, y = tensors(5, np.float32)
    out = program(x, y)
    assert out.shape == (5,)
    assert out.dtype == np.float32
    assert out.device == x.device
    assert bf.graph.is_pending(out)
    assert COMPILER.graphs == []


def test_a_second_identical_run_compiles_nothing() -> None:
    # Compiled programs are cached for the process: each test's graphs take shapes of their own.
    x, y = tensors(7)
    first = program(x, y).numpy()
    x2, y2 = tensors(7)
    second = program(x2, y2).numpy()
    np.testing.assert_array_equal(first, second)
    figures = bf.metrics.graphs()
    assert len(COMPILER.graphs) == 1
    assert (figures["compiled"], figures["cache_hits"], figures["graphs_run"]) == (1, 1, 2)
    assert figures["nodes_per_graph"] == 3


def test_a_changed_shape_recompiles() -> None:
    program(*tensors(8)).numpy()
    program(*tensors(9)).numpy()
    assert len(COMPILER.graphs) == 2
    figures = bf.metrics.graphs()
    assert figures["compiled"] == 2
    # Each compile says why: the nearest compiled graph had other input shapes.
    # It names the site: the frame of this file where the sync happened.
    assert f"GraphTest at {__file__}:" in figures["recompiles"][-1]
    assert ": the inputs' dtypes and shapes: " in figures["recompiles"][-1]
    assert "float64[9]" in figures["recompiles"][-1]


def test_a_site_that_compiles_many_graphs_is_warned_about_once(caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="boxfall")
    for n in range(1, 12):
        x, y = tensors(n)
        xp.add(x, y).numpy()  # one site: a new shape, a new graph, each time
        line = sys._getframe().f_lineno - 1
    warnings = [r.getMessage() for r in caplog.records if "distinct graphs" in r.getMessage()]
    assert len(warnings) == 1
    assert f"compiled 9 distinct graphs at {__file__}:{line}" in warnings[0]
    assert "the last one because " in warnings[0]


def test_a_changed_python_scalar_compiles_nothing() -> None:
    x, _ = tensors()
    for step, rate in enumerate((0.5, 0.25, 2.0)):
        y = xp.subtract(xp.multiply(x, rate), 1)  # a learning rate's kind of scalar
        np.testing.assert_array_equal(y.numpy(), np.arange(4.0) * rate - 1)
        if step == 0:
            graph = COMPILER.graphs[-1]
            assert graph.scalars == ["float", "int"]
            assert [a for _, args, _ in graph.nodes for a in args if a[0] == "scalar"] == [
                ("scalar", 0),
                ("scalar", 1),
            ]
    assert bf.metrics.graphs()["compiled"] == 1
    # The scalar's type is part of the structure: it decides the result's dtype.
    i = GRAPH.tensor(np.arange(4, dtype=np.int64))
    np.testing.assert_array_equal(xp.multiply(i, 3).numpy(), np.arange(4) * 3)
    half = xp.multiply(i, 0.5)
    assert half.dtype == xp.float64
    np.testing.assert_array_equal(half.numpy(), np.arange(4) * 0.5)
    assert bf.metrics.graphs()["compiled"] == 3


def test_a_scalar_that_decides_a_shape_stays_a_constant() -> None:
    x, _ = tensors()
    ns = xp.namespace("GraphTest:0")
    for n in (3, 5):
        r = xp.add(ns.arange(n, dtype=xp.float64), 1.0)
        np.testing.assert_array_equal(r.numpy(), np.arange(n) + 1.0)
    assert bf.metrics.graphs()["compiled"] == 2


def test_an_operator_without_a_shape_rule_is_a_counted_graph_break() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    u = xp.unique_values(z)  # data-dependent (no shape rule): a graph break
    assert not bf.graph.is_pending(u)
    assert not bf.graph.is_pending(z)  # its input was computed at the break
    np.testing.assert_array_equal(u.numpy(), np.arange(4) * 3 + 1)
    figures = bf.metrics.graphs()
    assert figures["breaks"] == {"array_api::unique_values": 1}
    assert figures["syncs"] == {"graph break": 1}


def test_a_call_that_reads_no_pending_tensor_runs_at_once_and_breaks_nothing() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    ns = xp.namespace("GraphTest:0")
    made = ns.asarray(np.arange(4.0))  # host data: no rule, but nothing pending is read
    assert not bf.graph.is_pending(made)
    assert bf.graph.is_pending(z)  # the graph was not cut
    np.testing.assert_array_equal(xp.add(z, made).numpy(), np.arange(4) * 4 + 1)
    figures = bf.metrics.graphs()
    assert figures["breaks"] == {} and figures["syncs"] == {"numpy": 1}


def test_eager_runs_operators_at_once() -> None:
    x, y = tensors()
    with bf.eager():
        z = xp.add(x, y)
    assert not bf.graph.is_pending(z)
    np.testing.assert_array_equal(z.numpy(), np.arange(4) * 3 + 1)
    assert COMPILER.graphs == []


def test_a_pending_tensor_read_in_eager_is_computed() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    with bf.eager():
        w = xp.multiply(z, z)
    assert not bf.graph.is_pending(w)
    np.testing.assert_array_equal(w.numpy(), (np.arange(4) * 3 + 1) ** 2)


def test_a_failing_program_leaves_every_tensor_as_it_was() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    w = xp.multiply(z, y)
    COMPILER.fail = True
    with pytest.raises(bf.BoxfallError, match="GraphTest") as info:
        w.numpy()
    assert "the test program failed" in str(info.value)
    assert bf.graph.is_pending(z) and bf.graph.is_pending(w)
    assert bf.metrics.graphs()["failures"] == 1
    COMPILER.fail = False
    np.testing.assert_array_equal(w.numpy(), (np.arange(4) * 3 + 1) * (np.arange(4) * 2 + 1))
    np.testing.assert_array_equal(z.numpy(), np.arange(4) * 3 + 1)


def test_intermediates_no_tensor_holds_are_not_outputs() -> None:
    x, y = tensors(10)
    dead = xp.add(y, y)
    out = program(x, y)  # its two intermediates are dropped
    del dead  # and nothing needs this node's result: it is left out
    out.numpy()
    (graph,) = COMPILER.graphs
    assert len(graph.nodes) == 3
    assert graph.outputs == [(2, 0)]


def test_the_graph_describes_its_nodes() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    w = xp.multiply(z, x)
    dump = bf.graph.dump()
    assert "array_api::add(i0, i1)" in dump and "float64[4]" in dump
    w.numpy()
    (graph,) = COMPILER.graphs
    assert graph.backend == "GraphTest"
    assert graph.inputs == [("float64", (4,)), ("float64", (4,))]
    (op, args, outs), (op2, args2, _) = graph.nodes
    assert (op.name, op2.name) == ("array_api::add", "array_api::multiply")
    assert args == (("input", 0), ("input", 1))
    assert outs == [("float64", (4,))]
    assert args2 == (("node", 0, 0), ("input", 0))
    assert bf.graph.dump() == "no pending graph"


def test_sync_computes_every_pending_tensor() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    bf.sync()
    assert not bf.graph.is_pending(z)
    assert bf.metrics.graphs()["syncs"] == {"sync": 1}
    assert isinstance(z.payload, Box)


def test_payload_computes_a_pending_tensor() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    p = z.payload
    assert isinstance(p, Box)
    np.testing.assert_array_equal(p.a, np.arange(4) * 3 + 1)
    assert bf.metrics.graphs()["syncs"] == {"payload": 1}


def test_scalars_and_numpy_arrays_read_pending_tensors() -> None:
    x, y = tensors()
    z = xp.add(x, y)
    np.testing.assert_array_equal(np.asarray(z), np.arange(4) * 3 + 1)
    s = xp.add(GRAPH.tensor(np.float64(2.5)), GRAPH.tensor(np.float64(1.0)))
    assert bf.graph.is_pending(s)
    assert s.shape == () and s.ndim == 0
    assert float(s) == 3.5
    assert bf.metrics.graphs()["syncs"] == {"numpy": 2}


def test_a_write_of_an_input_after_recording_is_not_seen_by_the_graph() -> None:
    x, y = tensors()
    z = xp.add(x, y)  # reads x as it is now
    x += y  # an in-place operator: recorded as `add`, x's data now its pending result
    np.testing.assert_array_equal(z.numpy(), np.arange(4) * 3 + 1)
    np.testing.assert_array_equal(x.numpy(), np.arange(4) * 3 + 1)


SHAPES = [(1,), (3,), (2, 3)]
STEP = st.tuples(
    st.sampled_from(
        ["add", "subtract", "multiply", "sum", "iadd", "view", "transpose", "read", "drop"]
    ),
    st.integers(0, 1_000),
    st.integers(0, 1_000),
)


def run_steps(start: list[np.ndarray], steps: list[tuple[str, int, int]]) -> list[np.ndarray]:
    """Runs the steps on the test backend (in graph mode unless the caller is in bf.eager())
    and gives every live tensor's values at the end, in order."""
    live: list[Any] = [GRAPH.tensor(a) for a in start]
    for name, i, j in steps:
        a, b = live[i % len(live)], live[j % len(live)]
        if name in ("add", "subtract", "multiply"):
            live.append(getattr(xp, name)(a, b))
        elif name == "sum":
            live.append(xp.sum(a))  # a reduction (recorded: it has a shape rule)
        elif name == "iadd" and np.broadcast_shapes(a.shape, b.shape) == a.shape:
            a += b  # recorded as `add`; through its base where `a` is a view
        elif name == "view" and a.ndim >= 1:
            live.append(a[..., ::-1])  # a view: later writes of it or its base reach both
        elif name == "transpose" and a.ndim >= 2:
            # a view of a view (of its shape, so that every step still broadcasts)
            live.append(xp.matrix_transpose(xp.matrix_transpose(a)))
        elif name == "read":
            a.numpy()
        elif name == "drop" and len(live) > 1:
            live.pop(i % len(live))
    return [t.numpy() for t in live]


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(st.sampled_from(SHAPES), min_size=1, max_size=3),
    steps=st.lists(STEP, max_size=12),
)
def test_random_programs_give_the_eager_values(
    shapes: list[tuple[int, ...]], steps: list[tuple[str, int, int]]
) -> None:
    rng = np.random.default_rng(0)
    start = [rng.standard_normal(s) for s in shapes]
    with bf.eager():
        expected = run_steps(start, steps)
    got = run_steps(start, steps)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_the_report_gives_graph_modes_figures() -> None:
    x, y = tensors()
    xp.unique_values(xp.add(x, y))
    text = bf.metrics.report()
    # The add's graph may be compiled already (the cache is the process's): a hit then.
    g = bf.metrics.graphs()
    assert g["compiled"] + g["cache_hits"] == 1
    assert f"graph mode: {g['compiled']} graphs compiled" in text
    assert "graph breaks: array_api::unique_values 1" in text
    assert "syncs: graph break 1" in text


def test_a_view_of_computed_tensors_is_made_at_once_and_read_as_an_input() -> None:
    x, y = tensors(6)
    v, w = x[1:4], y[:3]  # views of computed tensors: real views, no graph cut
    z = xp.add(v, w)
    assert bf.graph.is_pending(z)
    np.testing.assert_array_equal(z.numpy(), np.arange(6.0)[1:4] + (np.arange(6.0) * 2 + 1)[:3])
    figures = bf.metrics.graphs()
    assert figures["breaks"] == {} and figures["syncs"] == {"numpy": 1}


def test_a_write_to_a_views_base_after_recording_is_not_seen_by_the_graph() -> None:
    x, _ = tensors(4)
    v = x[1:3]
    z = xp.multiply(v, 2.0)
    x[1] = 100.0  # a write: the pending graph is computed first, with the values it read
    np.testing.assert_array_equal(z.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(v.numpy(), [100.0, 2.0])  # the view is still one


def test_a_view_function_of_a_pending_tensor_makes_a_view_without_computing_it() -> None:
    # A view of a pending tensor is a view, as in eager mode; its values are made from its
    # base's once the base is computed, and nothing breaks the graph.
    x, y = tensors(6)
    z = xp.reshape(xp.add(x, y), (2, 3))
    t = xp.expand_dims(xp.matrix_transpose(z), axis=0)
    assert bf.graph.is_pending(t)
    want = (np.arange(6.0) * 3 + 1).reshape(2, 3).T[None]
    np.testing.assert_array_equal(t.numpy(), want)
    figures = bf.metrics.graphs()
    assert figures["syncs"] == {"numpy": 1} and figures["breaks"] == {}


# -- threads (graphs are kept per (backend, thread); a pending tensor is read on any) ---------


def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``program``'s values, computed by NumPy."""
    return (a + b) * b - a


def test_threads_reading_one_pending_tensor_wait_for_one_computation() -> None:
    a, b = np.arange(6.0), np.arange(6.0) * 3 + 1
    out = program(GRAPH.tensor(a), GRAPH.tensor(b))  # recorded on this thread
    assert bf.graph.is_pending(out)
    COMPILER.delay = 0.05  # the first reader's program runs while the others read
    got: list[Any] = [None] * 6

    def read(i: int) -> None:
        got[i] = out.numpy()

    assert run_threads(6, read) == []
    for g in got:
        np.testing.assert_array_equal(g, expected(a, b))
    # One program ran: the readers that came while it ran waited for its result.
    assert sum(COMPILER.runs.values()) == 1


def test_a_thread_that_records_while_another_computes_its_graph_waits_and_goes_on() -> None:
    # The recording thread's graph is computed by a reader on another thread; the recording
    # thread's next call waits for that sync and records into the next graph.
    a = np.arange(4.0)
    x = GRAPH.tensor(a)
    first = xp.add(x, x)
    COMPILER.delay = 0.1
    reader = threading.Thread(target=first.numpy)
    reader.start()
    time.sleep(0.02)  # mostly inside the reader's program; either order gives the values
    second = xp.multiply(first, x)
    third = xp.add(second, first)
    reader.join()
    np.testing.assert_array_equal(third.numpy(), (a + a) * a + (a + a))
    np.testing.assert_array_equal(first.numpy(), a + a)


def test_many_threads_record_their_own_graphs_and_read_each_others() -> None:
    # Stress: each thread records its own graphs step by step and reads pending tensors that
    # the other threads and the main thread recorded (some being computed, some recorded on
    # further meanwhile), each with the value eager code gives.
    n, steps = 6, 25
    shared_in = [np.arange(5.0) + k for k in range(4)]
    shared = [program(GRAPH.tensor(v), GRAPH.tensor(v + 1)) for v in shared_in]
    published: list[tuple[bf.Tensor, np.ndarray] | None] = [None] * n
    COMPILER.delay = 0.001

    def work(i: int) -> None:
        rng = np.random.default_rng(i)
        for step in range(steps):
            a = rng.standard_normal(5)
            x = GRAPH.tensor(a)
            y = xp.add(xp.multiply(x, float(step)), x)
            published[i] = (y, a * step + a)
            other = published[(i + step) % n]
            if other is not None:
                np.testing.assert_allclose(np.asarray(other[0]), other[1], rtol=1e-12)
            k = (i + step) % len(shared)
            np.testing.assert_array_equal(
                shared[k].numpy(), expected(shared_in[k], shared_in[k] + 1)
            )
            if step % 5 == 4:
                np.testing.assert_allclose(y.numpy(), a * step + a, rtol=1e-12)

    assert run_threads(n, work) == []
    for p in published:
        assert p is not None
        np.testing.assert_allclose(p[0].numpy(), p[1], rtol=1e-12)


def test_a_pending_tensor_of_a_thread_that_ended_is_computed_on_another() -> None:
    a, b = np.arange(3.0), np.arange(3.0) + 5
    kept: dict[str, bf.Tensor] = {}

    def record() -> None:
        kept["out"] = program(GRAPH.tensor(a), GRAPH.tensor(b))

    t = threading.Thread(target=record)
    t.start()
    t.join()
    assert bf.graph.is_pending(kept["out"])
    np.testing.assert_array_equal(kept["out"].numpy(), expected(a, b))


def test_the_graph_of_a_thread_that_ended_is_let_go_once_its_results_are_dropped() -> None:
    kept: dict[str, Any] = {}

    def record() -> None:
        x = GRAPH.tensor(np.arange(3.0))
        kept["payload"] = weakref.ref(x.payload)
        kept["out"] = xp.add(x, x)

    t = threading.Thread(target=record)
    t.start()
    t.join()
    gc.collect()
    assert kept["payload"]() is not None  # the graph reads it: kept while its result is
    del kept["out"]
    bf.sync()  # lets go of the ended threads' graphs that nothing can read
    gc.collect()
    assert kept["payload"]() is None


def test_a_compiler_that_reads_a_tensor_of_the_graph_it_compiles_fails_rather_than_waits() -> None:
    x = GRAPH.tensor(np.arange(2.0))
    out = xp.add(x, xp.multiply(x, x))

    def read_own(graph: bf.Graph) -> None:
        out.numpy()

    COMPILER.on_compile = read_own
    with pytest.raises(Exception, match="being computed by this thread"):
        out.numpy()
    COMPILER.on_compile = None
    assert bf.graph.is_pending(out)  # nothing committed
    np.testing.assert_array_equal(out.numpy(), np.arange(2.0) + np.arange(2.0) ** 2)


def test_in_place_writes_recorded_while_other_threads_read_lose_nothing() -> None:
    # The writer records `acc += x` (the functional add, the result rebound to `acc`) while
    # readers compute its graph now and then: each read sees some whole number of additions,
    # never fewer than before, and none is lost.
    steps = 60
    x = GRAPH.tensor(np.ones(4))
    acc = GRAPH.tensor(np.zeros(4))
    COMPILER.delay = 0.001
    done = threading.Event()
    seen: list[list[float]] = [[], [], []]

    def work(i: int) -> None:
        nonlocal acc
        if i == 0:
            for _ in range(steps):
                acc += x
            done.set()
            return
        while not done.is_set():
            v = acc.numpy()
            assert np.all(v == v[0]) and v[0] == int(v[0])
            seen[i].append(float(v[0]))

    assert run_threads(3, work) == []
    np.testing.assert_array_equal(acc.numpy(), np.full(4, float(steps)))
    for s in seen[1:]:
        assert s == sorted(s) and all(0 <= v <= steps for v in s)
