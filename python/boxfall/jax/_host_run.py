"""Graph mode's host callbacks on JAX: the nodes of a graph's program that run their CPU
kernels on the host, gathered while JAX traces the program so that nodes in a row are one host
callback (``jax.pure_callback``), one round trip to the host, not one each."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

import boxfall as bf

if TYPE_CHECKING:
    from ._graph import _Parts


class _Pending:
    """Output ``out`` of the host node ``node`` while the run of host nodes it belongs to is
    being gathered (`HostRun`): a later host node of the run reads it on the host; a kernel of
    the device that reads it ends the run first (its host callback is made then)."""

    __slots__ = ("node", "out")

    def __init__(self, node: int, out: int) -> None:
        self.node = node
        self.out = out


class HostNode(NamedTuple):
    """A node that runs its CPU kernel on the host: ``run(arrays, crossed, back)`` runs it
    (counted) on its operands' host values, given which of them came from the device and which
    of its results go back there."""

    node: int
    """Its index in the graph."""
    run: Callable[[list[Any], list[bool], list[bool]], tuple[np.ndarray, ...]]
    operands: list[Any]
    """Per operand: a traced value, or a `_Pending` value of an earlier node of the run."""
    shapes: tuple[Any, ...]


def readers_of(graph: _Parts) -> dict[tuple[int, int], set[int]]:
    """Per node output ``(node, out)``: the nodes that read it, -1 for the program's outputs."""
    readers: dict[tuple[int, int], set[int]] = {}
    for i, (_, args, _) in enumerate(graph.nodes):
        for a in args:
            if a[0] == "node":
                readers.setdefault((a[1], a[2]), set()).add(i)
    for n, k in graph.outputs:
        readers.setdefault((n, k), set()).add(-1)
    return readers


class HostRun:
    """The host nodes met while a program is traced, run as one host callback (one round trip
    to the host, on a TPU about 1.2 ms each after the first's 4 ms) instead of one each: a host
    node joins the run being gathered; a kernel of the device that reads a value of the run
    ends it (`flush`: its callback is made there, taking every value the run reads from the
    device, and giving back only what a later node or the program's outputs read), and so does
    the program's end. A kernel that reads nothing of the run leaves it open, so the host
    nodes on either side of it share one callback (the callback runs once the kernels whose
    values it reads did)."""

    __slots__ = ("graph", "readers", "values", "nodes", "sizes")

    def __init__(self, graph: _Parts, values: list[list[Any]]) -> None:
        self.graph = graph
        self.readers: dict[tuple[int, int], set[int]] | None = None
        self.values = values
        self.nodes: list[HostNode] = []
        self.sizes: list[int] = []
        """The nodes each callback made so far serves, in order."""

    def add(self, node: HostNode) -> list[Any]:
        self.nodes.append(node)
        return [_Pending(node.node, k) for k in range(len(node.shapes))]

    def read(self, value: Any) -> Any:
        """``value`` for a kernel of the device: a value of the run is computed first."""
        if type(value) is not _Pending:
            return value
        self.flush()
        return self.values[value.node][value.out]

    def flush(self) -> None:
        """The run gathered so far as one host callback, its values in ``values``."""
        nodes, self.nodes = self.nodes, []
        if not nodes:
            return
        if self.readers is None:
            self.readers = readers_of(self.graph)
        members = {n.node for n in nodes}
        operands: list[Any] = []  # the device values the callback takes
        at: dict[int, int] = {}  # by id: an operand's place among them
        plan: list[list[tuple[bool, Any]]] = []  # per node operand: (made on the host, where)
        for n in nodes:
            steps: list[tuple[bool, Any]] = []
            for v in n.operands:
                if type(v) is _Pending:
                    steps.append((True, (v.node, v.out)))
                else:
                    if id(v) not in at:
                        at[id(v)] = len(operands)
                        operands.append(v)
                    steps.append((False, at[id(v)]))
            plan.append(steps)
        # A result goes back to the device only where something outside the run reads it.
        back = [
            [bool(self.readers.get((n.node, k), set()) - members) for k in range(len(n.shapes))]
            for n in nodes
        ]
        returned = [
            (n.node, k) for n, b in zip(nodes, back, strict=True) for k, g in enumerate(b) if g
        ]
        shapes = tuple(
            n.shapes[k] for n, b in zip(nodes, back, strict=True) for k, g in enumerate(b) if g
        )
        for n in nodes:
            self.values[n.node] = [None] * len(n.shapes)
        if not returned:  # nothing reads the run's values: nothing to run
            return
        self.sizes.append(len(nodes))
        served = len(nodes)

        def host(*arrays: Any) -> tuple[Any, ...]:
            bf.metrics._host_callback_ran(served)
            made: dict[tuple[int, int], Any] = {}
            for n, steps, b in zip(nodes, plan, back, strict=True):
                got = [made[w] if on_host else arrays[w] for on_host, w in steps]
                crossed = [not on_host for on_host, _ in steps]
                for k, r in enumerate(n.run(got, crossed, b)):
                    made[(n.node, k)] = r
            return tuple(made[w] for w in returned)

        outs = jax.pure_callback(host, shapes, *operands)
        for (i, k), o in zip(returned, outs, strict=True):
            self.values[i][k] = o
