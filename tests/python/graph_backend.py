"""The graph-mode test backends (test_graph_mode.py, test_graph_inplace.py,
test_graph_memory.py): a payload holding a NumPy array, a compiler that replays each graph
with the backend's CPU fallback and counts its compiles, and the registration of a backend of
them under a name of each module's own."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import boxfall as bf
import numpy as np


class Box:
    """The test backend's payload: a NumPy array in a box."""

    def __init__(self, a: Any) -> None:
        self.a = np.asarray(a)

    @property
    def dtype(self) -> Any:
        return self.a.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.a.shape


class Compiler:
    """Replays each graph (``graph.replay``), counting compiles and runs (``runs``: per graph
    key); ``fail`` makes the compiled functions raise; ``delay`` (seconds) makes each run
    sleep first, the GIL released, so that other threads find its graph being computed;
    ``on_compile(graph)``, if set, runs inside each compile; ``runs_ahead`` is what each
    compiled function says of being run ahead, and ``pending_at_runs`` the pending graphs
    (``bf.graph.dump()``) at each run: none at a sync, which takes the graph it runs, and the
    part recorded so far at a run ahead of its sync."""

    def __init__(self) -> None:
        self.graphs: list[bf.Graph] = []
        self.fail = False
        self.delay = 0.0
        self.on_compile: Any = None
        self.runs: Counter[str] = Counter()
        self.runs_ahead = False
        self.pending_at_runs: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, graph: bf.Graph) -> Any:
        if self.on_compile is not None:
            self.on_compile(graph)
        self.graphs.append(graph)
        key = graph.key

        compiler = self

        class Run:
            @property
            def runs_ahead(self) -> bool:
                return compiler.runs_ahead

            def __call__(self, payloads: list[Any]) -> list[Any]:
                with compiler._lock:
                    compiler.runs[key] += 1
                compiler.pending_at_runs.append(bf.graph.dump())
                if compiler.delay:
                    time.sleep(compiler.delay)
                if compiler.fail:
                    raise RuntimeError("the test program failed")
                return graph.replay(payloads)

        return Run()

    def settle(self) -> None:
        """Back to its defaults: nothing set to fail, delay or run at a compile."""
        self.fail = False
        self.delay = 0.0
        self.on_compile = None
        self.runs_ahead = False


def fresh(compiler: Compiler) -> Any:
    """An autouse fixture's body for a module of ``compiler``'s backend: each test starts with
    nothing pending, no graph or run counted and the metrics reset, and leaves ``compiler`` at
    its defaults and nothing pending (``yield from fresh(COMPILER)``)."""
    bf.sync()
    compiler.graphs.clear()
    compiler.runs.clear()
    compiler.pending_at_runs.clear()
    compiler.settle()
    bf.metrics.reset()
    yield
    compiler.settle()
    bf.sync()


def run_threads(n: int, target: Any) -> list[BaseException]:
    """Runs ``target(i)`` on ``n`` threads, lined up by a barrier; the exceptions raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


_LIBRARIES: list[bf.Library] = []
"""The backends' fallback libraries, held (a library collected undoes its registrations)."""


def register(name: str, compile: Any, payload: type = Box) -> bf.Backend:
    """A graph backend ``name`` of ``payload``s compiled by ``compile``, with the CPU fallback
    for every operator, both kept for the process's life."""
    backend = bf.register_backend(
        name,
        to_cpu=lambda p: p.a,
        from_cpu=lambda a: payload(a.copy()),
        copy_from_cpu=lambda p, a: payload(a.copy()),
        compile=compile,
    )
    library = bf.Library("_", "IMPL")
    library.fallback(bf.cpu_fallback, name)
    library._for_process_life()
    _LIBRARIES.append(library)
    return backend
