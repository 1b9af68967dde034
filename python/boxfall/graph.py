"""Graph mode (DESIGN section 13): operators on a backend registered with ``compile=`` are
recorded and give pending tensors, computed together at a sync point (``t.numpy()``,
``float(t)``, ``t.payload``, a graph break, :func:`boxfall.sync`) by the program the backend's
compiler made of the graph.

``bf.sync()`` computes every pending tensor of the thread; ``with bf.eager():`` runs a block
eagerly; :func:`dump` shows the pending graphs; ``bf.metrics.graphs()`` counts.
"""

from __future__ import annotations

from . import _boxfall


def dump() -> str:
    """This thread's pending graphs in words (inputs, one node a line, outputs), as they would
    be compiled now; ``"no pending graph"`` when there is none."""
    return _boxfall.graph_dump()


def is_pending(tensor: _boxfall.Tensor) -> bool:
    """Whether ``tensor``'s values are still to be computed (it is a pending tensor)."""
    return _boxfall.is_pending(tensor)


__all__ = ["dump", "is_pending"]
