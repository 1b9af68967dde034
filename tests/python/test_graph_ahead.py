"""Running ahead (graph mode): a recording that repeats the graph its last two
syncs ran launches that program as soon as the graph's inputs are recorded, and its sync commits
those results only where the whole recording is that graph on the same scalar values; else they
are let go and the graph runs as recorded. On the NumPy test compiler, whose functions say
whether they may run ahead (``runs_ahead``) and record what was pending at each of their runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import Compiler, fresh, register
from hypothesis import given, settings
from hypothesis import strategies as st

COMPILER = Compiler()
GRAPH = register("GraphAhead", COMPILER)

NOTHING_PENDING = "no pending graph"


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    yield from fresh(COMPILER)
    COMPILER.runs_ahead = False


def step(x: bf.Tensor, scale: float = 2.0) -> bf.Tensor:
    y = xp.multiply(x, scale)
    z = xp.add(y, x)
    return xp.sum(xp.multiply(z, z))


def expected(a: np.ndarray, scale: float = 2.0) -> float:
    z = a * scale + a
    return float(np.sum(z * z))


def calls(n: int, a: np.ndarray, scale: float = 2.0) -> list[float]:
    """``n`` calls of ``step``, each read (a sync)."""
    return [float(step(GRAPH.tensor(a), scale)) for _ in range(n)]


def ahead() -> tuple[int, int]:
    """Graph mode's counts since the test began: runs ahead confirmed, and let go."""
    figures = bf.metrics.graphs()
    return figures["ran_ahead"], figures["ahead_missed"]


def ran_ahead() -> list[str]:
    """The pending graphs found at the runs that ran ahead (at a sync, nothing is pending)."""
    return [p for p in COMPILER.pending_at_runs if p != NOTHING_PENDING]


def test_a_graph_repeated_runs_ahead_from_its_third_call_with_the_eager_value() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(11.0)
    got = calls(4, a)
    assert got == [expected(a)] * 4
    assert ahead() == (2, 0)
    figures = bf.metrics.graphs()
    assert (figures["compiled"], figures["graphs_run"]) == (1, 4)
    # Launched at the first node (the input was recorded then), not at the sync.
    assert len(ran_ahead()) == 2
    for pending in ran_ahead():
        assert "multiply" in pending and "sum" not in pending
    assert "2 run ahead (0 missed)" in bf.metrics.report()


def test_a_program_that_does_not_say_it_runs_ahead_runs_at_its_sync() -> None:
    a = np.arange(12.0)
    assert calls(4, a) == [expected(a)] * 4
    assert ahead() == (0, 0)
    assert ran_ahead() == []


def late_scalar(x: bf.Tensor, scale: float) -> bf.Tensor:
    """A graph whose first node reads no scalar: launched there, before ``scale`` is recorded."""
    y = xp.multiply(x, x)
    return xp.sum(xp.multiply(y, scale))


def test_a_scalar_recorded_after_the_launch_with_another_value_is_a_miss_not_wrong() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(13.0)
    for _ in range(2):
        assert float(late_scalar(GRAPH.tensor(a), 2.0)) == float(np.sum(a * a * 2.0))
    # The same graph on another value: launched at its first node, on the last calls' value.
    assert float(late_scalar(GRAPH.tensor(a), 5.0)) == float(np.sum(a * a * 5.0))
    [pending] = ran_ahead()
    assert "multiply" in pending and "sum" not in pending
    assert ahead() == (0, 1)
    figures = bf.metrics.graphs()
    assert (figures["compiled"], figures["graphs_run"]) == (1, 3)


def test_a_scalar_recorded_before_the_launch_with_another_value_launches_nothing() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(14.0)
    calls(2, a)
    assert float(step(GRAPH.tensor(a), 5.0)) == expected(a, 5.0)
    assert ahead() == (0, 0)
    assert ran_ahead() == []


def test_another_operator_after_the_launch_lets_the_run_go() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(20.0)
    calls(2, a)
    x = GRAPH.tensor(a)
    z = xp.add(xp.multiply(x, 2.0), x)
    out = xp.sum(xp.subtract(z, z))
    assert len(ran_ahead()) == 1
    assert float(out) == 0.0
    assert ahead() == (0, 1)


def test_a_longer_recording_lets_the_run_go() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(15.0)
    calls(2, a)
    s = step(GRAPH.tensor(a))
    more = xp.add(s, 1.0)
    assert float(more) == expected(a) + 1.0
    assert ahead() == (0, 1)


def test_other_outputs_held_let_the_run_go_and_compute_them_all() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(16.0)
    calls(2, a)
    x = GRAPH.tensor(a)
    y = xp.multiply(x, 2.0)
    z = xp.add(y, x)
    s = xp.sum(xp.multiply(z, z))
    assert float(s) == expected(a)  # y and z are outputs too now
    np.testing.assert_array_equal(z.numpy(), a * 3)
    np.testing.assert_array_equal(y.numpy(), a * 2)
    assert bf.metrics.graphs()["ahead_missed"] == 1


def test_two_graphs_in_turn_never_run_ahead() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(17.0)
    for _ in range(3):
        assert float(step(GRAPH.tensor(a))) == expected(a)
        assert float(xp.sum(xp.add(GRAPH.tensor(a), 1.0))) == float(np.sum(a + 1))
    assert ahead() == (0, 0)
    assert ran_ahead() == []


def test_a_run_ahead_that_fails_is_let_go_and_the_sync_reports_its_own_failure() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(18.0)
    calls(2, a)
    COMPILER.fail = True
    out = step(GRAPH.tensor(a))  # the launch failed: no error here
    assert bf.graph.is_pending(out)
    with pytest.raises(bf.BoxfallError, match="the test program failed"):
        float(out)
    assert bf.graph.is_pending(out)
    COMPILER.fail = False
    assert float(out) == expected(a)
    figures = bf.metrics.graphs()
    assert (figures["ran_ahead"], figures["ahead_missed"], figures["failures"]) == (0, 0, 1)
    # A failure forgets the guess: two syncs of the graph make it again (the retry above and
    # the first of these calls), and the two calls after them run ahead.
    assert calls(3, a) == [expected(a)] * 3
    assert bf.metrics.graphs()["ran_ahead"] == 2


def test_an_input_written_in_place_after_the_launch_is_not_seen_by_the_graph() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(19.0)
    calls(2, a)
    x = GRAPH.tensor(a)
    out = step(x)
    with bf.eager():
        x += 100.0  # an eager write: the graph read x's data as it was
    assert float(out) == expected(a)
    assert bf.metrics.graphs()["ran_ahead"] == 1


def late_input(x: bf.Tensor, y: bf.Tensor) -> bf.Tensor:
    """A graph that reads ``y`` at its last node only."""
    z = xp.multiply(x, x)
    return xp.sum(xp.add(xp.multiply(z, x), y))


def test_an_input_read_late_is_last_runs_data_when_it_is_the_same_tensor() -> None:
    COMPILER.runs_ahead = True
    a, b = np.arange(21.0), np.ones(21)
    x, y = GRAPH.tensor(a), GRAPH.tensor(b)
    got = [float(late_input(x, y)) for _ in range(3)]
    assert got == [float(np.sum(a**3 + b))] * 3
    # Launched at the first node, y taken from the last run before the recording read it.
    [pending] = ran_ahead()
    assert pending.count("multiply") == 1
    assert bf.metrics.graphs()["ran_ahead"] == 1


def test_a_new_tensor_read_late_is_waited_for_where_the_last_ones_data_is_gone() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(22.0)
    x = GRAPH.tensor(a)
    got = [float(late_input(x, GRAPH.tensor(np.full(22, float(i))))) for i in range(3)]
    assert got == [float(np.sum(a**3 + i)) for i in range(3)]
    # The last call's y was dropped: the launch waited for this call's, at the last node.
    [pending] = ran_ahead()
    assert pending.count("multiply") == 2 and "add" in pending
    assert ahead() == (1, 0)


def test_a_new_tensor_read_late_while_the_last_one_lives_is_a_miss_not_a_wrong_value() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(23.0)
    x = GRAPH.tensor(a)
    kept = [GRAPH.tensor(np.full(23, float(i))) for i in range(4)]
    got = [float(late_input(x, y)) for y in kept]
    assert got == [float(np.sum(a**3 + i)) for i in range(4)]
    # The third call launched on the second's y, still alive: let go. The fourth is not
    # guessed (a miss skips the recording after it).
    assert ahead() == (0, 1)
    assert len(ran_ahead()) == 1


def test_a_thread_that_syncs_the_recording_during_its_launch_wins_and_no_value_is_lost() -> None:
    COMPILER.runs_ahead = True
    a = np.arange(24.0)
    x = GRAPH.tensor(a)
    for i in range(2):
        assert float(late_input(x, GRAPH.tensor(np.full(24, float(i))))) == float(np.sum(a**3 + i))
    # This call's launch waits for its new y, at the last node, and sleeps (the GIL let go):
    # meanwhile another thread reads z, a sync of this recording, which takes the graph.
    COMPILER.delay = 0.1
    z = xp.multiply(x, x)
    read: list[Any] = []

    def reader() -> None:
        deadline = time.monotonic() + 10
        while not ran_ahead() and time.monotonic() < deadline:
            time.sleep(0.001)
        read.append(z.numpy())

    thread = threading.Thread(target=reader)
    thread.start()
    out = xp.sum(xp.add(xp.multiply(z, x), GRAPH.tensor(np.full(24, 5.0))))
    thread.join()
    assert len(ran_ahead()) == 1  # the launch happened, and the reader synced during it
    np.testing.assert_array_equal(read[0], a * a)
    assert float(out) == float(np.sum(a**3 + 5.0))
    figures = bf.metrics.graphs()
    # The reader's sync computed the whole graph (the launch's was not its to confirm), and
    # the launch, back after that sync began, was let go unconfirmed and uncounted.
    assert (figures["failures"], figures["ran_ahead"], figures["ahead_missed"]) == (0, 0, 0)


OPS = ["add", "multiply", "subtract", "scale", "iadd", "sum"]


def replay(steps: list[tuple[str, float]], x: Any, y: Any, ns: Any) -> Any:
    """``steps`` on ``x`` (``y`` read by the last), in namespace ``ns`` (boxfall's or NumPy)."""
    t = ns.multiply(x, 1.0)
    for name, c in steps:
        if name == "add":
            t = ns.add(t, x)
        elif name == "multiply":
            t = ns.multiply(t, t)
        elif name == "subtract":
            t = ns.subtract(t, x)
        elif name == "scale":
            t = ns.multiply(t, c)
        elif name == "iadd":
            t += x
        else:
            t = ns.add(ns.sum(t), t)
    return ns.add(t, y)


@given(
    steps=st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from([0.5, 2.0, -1.0])), max_size=6),
    change=st.sampled_from(["none", "scalar", "y kept", "y new", "one more"]),
)
@settings(max_examples=40, deadline=None)
def test_random_programs_run_ahead_give_the_eager_values(
    steps: list[tuple[str, float]], change: str
) -> None:
    COMPILER.runs_ahead = True
    a, b = np.linspace(-1.0, 1.0, 5), np.linspace(2.0, 3.0, 5)
    x, y = GRAPH.tensor(a), GRAPH.tensor(b)
    for _ in range(3):
        np.testing.assert_allclose(replay(steps, x, y, xp).numpy(), replay(steps, a, b, np))
    # A fourth call as the last, or changed after its launch in one way.
    b2 = b + 1.0 if change in ("y kept", "y new") else b
    y2 = GRAPH.tensor(b2) if change in ("y kept", "y new") else y
    if change == "y new":
        del y  # the last run's y is gone: the launch waits for this one
    s2 = [(n, 3.0 if n == "scale" else c) for n, c in steps] if change == "scalar" else steps
    s2 = s2 + [("add", 0.0)] if change == "one more" else s2
    np.testing.assert_allclose(replay(s2, x, y2, xp).numpy(), replay(s2, a, b2, np))
