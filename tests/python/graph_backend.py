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
    ``on_compile(graph)``, if set, runs inside each compile."""

    def __init__(self) -> None:
        self.graphs: list[bf.Graph] = []
        self.fail = False
        self.delay = 0.0
        self.on_compile: Any = None
        self.runs: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, graph: bf.Graph) -> Any:
        if self.on_compile is not None:
            self.on_compile(graph)
        self.graphs.append(graph)
        key = graph.key

        def run(payloads: list[Any]) -> list[Any]:
            with self._lock:
                self.runs[key] += 1
            if self.delay:
                time.sleep(self.delay)
            if self.fail:
                raise RuntimeError("the test program failed")
            return graph.replay(payloads)

        return run


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
