"""Graph mode's writes from several threads (issue #53, defect 4): two threads each ``x += 1.0``
on one tensor while a third reads ``float(xp.sum(x))``. A write of a tensor pending in another
thread's graph computes that graph first, then records the write in the writer's own graph,
under the tensor's write lock; a read computes the graph that holds the tensor. Before, a
reader's sync put the value it computed back into the tensor after a writer had rebound it to
a newer write (all of that writer's writes were lost), and a reader that read the tensor just
before a write rebound it found its value left out of the sync (``FallbackError: a pending
tensor ... was not computed``). On JAX's CPU (``bj.namespace(graph=True)``) and on the NumPy
test graph backend; the switch interval is made short so that the threads interleave."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import boxfall as bf
import boxfall.array_api as bxp
import numpy as np
import pytest
from graph_backend import Compiler, register

GRAPH = register("GraphThreadsTest", Compiler())

WRITERS, WRITES, ROUNDS, N = 2, 30, 20, 4


@pytest.fixture
def interleaved() -> Iterator[None]:
    was = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    bf.sync()
    yield
    sys.setswitchinterval(was)
    bf.sync()


def namespaces() -> list[Any]:
    return [
        pytest.param("test", id="test-backend"),
        pytest.param("jax", id="jax"),
    ]


def backend(which: str) -> tuple[Any, Callable[[], Any]]:
    if which == "jax":
        pytest.importorskip("jax")
        import boxfall.jax as bj

        xp = bj.namespace(graph=True)
        return xp, lambda: xp.asarray(np.zeros(N, np.float32))
    return bxp, lambda: GRAPH.tensor(np.zeros(N, np.float32))


def one_round(xp: Any, x: Any) -> tuple[list[BaseException], list[float]]:
    """Two writers' ``x += 1.0`` and a reader's ``float(xp.sum(x))`` until they end: the
    exceptions raised and the values read."""
    errors: list[BaseException] = []
    reads: list[float] = []
    done = threading.Event()

    def write() -> None:
        try:
            y = x
            for _ in range(WRITES):
                y += 1.0
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    def read() -> None:
        try:
            while not done.is_set():
                reads.append(float(xp.sum(x)))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    writers = [threading.Thread(target=write) for _ in range(WRITERS)]
    reader = threading.Thread(target=read)
    reader.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    return errors, reads


@pytest.mark.parametrize("which", namespaces())
def test_two_writers_and_a_reader_lose_no_write(which: str, interleaved: None) -> None:
    xp, make = backend(which)
    end = float(N * WRITERS * WRITES)
    for _ in range(ROUNDS):
        x = make()
        errors, reads = one_round(xp, x)
        assert errors == []
        assert float(xp.sum(x)) == end
        # Every read is a state between the start and the end: whole increments of every element.
        assert all(0.0 <= r <= end and r % N == 0 for r in reads), reads
