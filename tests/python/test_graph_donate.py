"""Donation's protocol (in-place updates donate their input buffers), on a
test backend whose compiled functions opt in (``donates = True``) and record the ``donate=``
list boxfall gives: true only for the old payload of a tensor written in place that nothing
else holds (no tensor, no Python reference); a function that raises with an entry left true
leaves that input consumed, so a retry that reads it fails saying so, while one that cleared
its entries (kept its inputs) is retried as any failed graph is."""

from __future__ import annotations

from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from graph_backend import Compiler, fresh, register


class Donating(Compiler):
    """Replays each graph, as ``Compiler`` does, in functions that take ``donate=``: each
    call's list is recorded (None where boxfall gave none); ``keep`` clears it (nothing
    consumed) before the function runs or fails."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[list[bool] | None] = []
        self.keep = False
        self.made: list[Any] = []

    def donates(self, value: Any) -> None:
        """Sets every function's ``donates`` (boxfall reads it at each run)."""
        for run in self.made:
            run.donates = value

    def __call__(self, graph: bf.Graph) -> Any:
        replay = super().__call__(graph)

        def run(payloads: list[Any], donate: list[bool] | None = None) -> list[Any]:
            self.given.append(None if donate is None else list(donate))
            if donate is not None and self.keep:
                donate[:] = [False] * len(donate)
            return replay(payloads)

        run.donates = True  # type: ignore[attr-defined]
        self.made.append(run)
        return run

    def settle(self) -> None:
        super().settle()
        self.given = []
        self.keep = False
        self.donates(True)


COMPILER = Donating()
GRAPH = register("GraphDonates", COMPILER)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    yield from fresh(COMPILER)


def computed(values: Any) -> Any:
    t = GRAPH.tensor(np.asarray(values, dtype=np.float64))
    bf.sync()
    return t


def test_the_old_payload_of_a_tensor_written_in_place_may_be_consumed() -> None:
    x, y = computed([1.0, 2.0]), computed([10.0, 20.0])
    x += y
    bf.sync()
    assert COMPILER.given == [[True, False]]  # x's old payload; y's is held by y
    assert bf.metrics.graphs()["donated"] == 1  # the function kept nothing
    np.testing.assert_array_equal(x.numpy(), [11.0, 22.0])


def test_a_function_that_keeps_its_inputs_is_counted_as_donating_nothing() -> None:
    COMPILER.keep = True
    x, y = computed([1.0, 2.0]), computed([10.0, 20.0])
    x += y
    bf.sync()
    assert COMPILER.given == [[True, False]]
    assert bf.metrics.graphs()["donated"] == 0


def test_a_payload_python_holds_is_never_offered() -> None:
    x, y = computed([1.0, 2.0]), computed([10.0, 20.0])
    held = x.payload
    x += y
    bf.sync()
    assert COMPILER.given == [None]  # nothing to offer: called without donate=
    np.testing.assert_array_equal(held.a, [1.0, 2.0])
    np.testing.assert_array_equal(x.numpy(), [11.0, 22.0])


def test_a_tensor_only_read_is_never_offered() -> None:
    x, y = computed([1.0, 2.0]), computed([10.0, 20.0])
    z = xp.add(x, y)
    bf.sync()
    assert COMPILER.given == [None]
    np.testing.assert_array_equal(z.numpy(), [11.0, 22.0])


def test_a_failure_after_a_donation_loses_only_what_the_consumed_input_computes() -> None:
    x, y = computed([1.0, 2.0]), computed([10.0, 20.0])
    x += y
    w = xp.multiply(y, 2.0)  # in the same graph, reads no consumed input
    COMPILER.fail = True
    with pytest.raises(bf.BoxfallError, match="GraphDonates.*consumed 1 input buffer"):
        bf.sync()
    COMPILER.fail = False
    assert bf.metrics.graphs()["failures"] == 1
    assert bf.graph.is_pending(x) and bf.graph.is_pending(w)  # nothing committed
    # x's old values are gone: reading x says so; the next sync computes the rest (w) alone.
    with pytest.raises(bf.BoxfallError, match=r"GraphDonates.*consumed \(donated\)"):
        x.numpy()
    assert not bf.graph.is_pending(w)
    np.testing.assert_array_equal(w.numpy(), [20.0, 40.0])
    (last,) = COMPILER.graphs[-1:]
    assert len(last.inputs) == 1  # y: the consumed input is read by no node run
    with pytest.raises(bf.BoxfallError, match="consumed"):
        xp.add(x, y).numpy()  # what reads x later cannot be computed either
    bf.sync()  # nothing left that fails


def test_a_failure_of_a_function_that_kept_its_inputs_is_retried() -> None:
    x, y = computed([1.0, 2.0]), computed([10.0, 20.0])
    x += y
    COMPILER.keep = True
    COMPILER.fail = True
    with pytest.raises(bf.BoxfallError, match="no tensor was changed") as info:
        bf.sync()
    assert "consumed" not in str(info.value)
    COMPILER.fail = False
    np.testing.assert_array_equal(x.numpy(), [11.0, 22.0])


def test_donates_says_the_least_bytes_offered_or_that_none_is() -> None:
    x, y = computed([1.0, 2.0]), computed([10.0, 20.0])
    x += y
    bf.sync()  # compiled: x's old payload (float64[2], 16 bytes) offered
    for donates, offered in ((17, False), (16, True), (0, True), (False, False), (True, True)):
        COMPILER.donates(donates)
        COMPILER.given.clear()
        x += y
        bf.sync()
        assert COMPILER.given == ([[True, False]] if offered else [None]), donates
    np.testing.assert_array_equal(x.numpy(), [61.0, 122.0])
