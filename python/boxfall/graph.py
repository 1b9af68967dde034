"""Graph mode: operators on a backend registered with ``compile=`` are
recorded and give pending tensors, computed together at a sync point (``t.numpy()``,
``float(t)``, ``t.payload``, a graph break, :func:`boxfall.sync`) by the program the backend's
compiler made of the graph.

``bf.sync()`` computes every pending tensor of the thread; ``with bf.eager():`` runs a block
eagerly; :func:`dump` shows the pending graphs; ``bf.metrics.graphs()`` counts.

A failed program never makes unrelated pending tensors uncomputable: its graph is run a node at
a time, eagerly, and the tensors computed from a node that fails hold that node's error (the
kernel's own exception, a note naming the operator), raised at the ``bf.sync()`` that computed
them and at each of their reads, while every other pending tensor of the thread is computed. A
failure that no node explains (the program's own: its compile, the device's memory) commits
nothing: every tensor stays pending, and the next sync retries.
"""

from __future__ import annotations

import operator

from . import _boxfall


def dump() -> str:
    """This thread's pending graphs in words (inputs, one node a line, outputs), as they would
    be compiled now; ``"no pending graph"`` when there is none."""
    return _boxfall.graph_dump()


def is_pending(tensor: _boxfall.Tensor) -> bool:
    """Whether ``tensor``'s values are still to be computed (it is a pending tensor)."""
    return _boxfall.is_pending(tensor)


def limit(backend: str) -> int:
    """The most nodes a graph of graph backend ``backend`` records before it is cut: computed
    then, without waiting for the device, the next call starting a new graph (4096 unless
    :func:`set_limit` changed it)."""
    return _boxfall.graph_limit(backend)


def set_limit(backend: str, nodes: int) -> None:
    """Sets the most nodes a graph of graph backend ``backend`` records before it is cut.

    A small limit pipelines a device that runs programs asynchronously (JAX): the program of a
    graph's first part runs on the device while the host records the next part, where one
    graph keeps the device idle for the whole recording. Each cut costs a program's launch and
    the fusion its compiler would have done across it. Raises ``bf.RegistrationError`` where
    ``backend`` is no graph backend or ``nodes`` is 0, and ``ValueError`` where ``nodes`` is
    negative."""
    nodes = operator.index(nodes)
    if nodes < 0:
        raise ValueError(
            f"bf.graph.set_limit: a graph of backend {backend!r} must be allowed at least one "
            f"node, not {nodes}"
        )
    _boxfall.set_graph_limit(backend, nodes)


__all__ = ["dump", "is_pending", "limit", "set_limit"]
