"""Graph mode: ``Graph``, syncing and the graph's figures and limits.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Iterable
from typing import Any, final

from boxfall._stubs.ops import OpOverload
from boxfall._stubs.tensor import Tensor

@final
class Graph:
    """A recorded graph, as a backend's compiler gets it (``bf.register_backend(...,
    compile=)``): its inputs, nodes and outputs, and ``replay``."""

    @property
    def backend(self) -> str:
        """The backend's name."""
    @property
    def device(self) -> str:
        """The device of its inputs and results (``"JAXGraph:1"``): a program with no inputs is
        placed there by its compiler."""
    @property
    def inputs(self) -> list[tuple[str, tuple[int, ...]]]:
        """The inputs' ``(dtype, shape)``, in the order their payloads are given."""
    @property
    def scalars(self) -> list[str]:
        """The scalar inputs' types (``"bool"``, ``"int"``, ``"float"``): their values follow
        the inputs' payloads in what the compiled function is given."""
    @property
    def nodes(self) -> list[tuple[OpOverload, tuple[Any, ...], list[tuple[str, tuple[int, ...]]]]]:
        """The nodes, in order: ``(op, args, outputs)``, ``op`` a ``bf.OpOverload``, each argument
        ``("input", i)``, ``("scalar", j)`` (scalar input ``j``), ``("node", n, k)`` (result ``k``
        of node ``n``) or ``("const", value)``, and the outputs' ``(dtype, shape)``."""
    @property
    def outputs(self) -> list[tuple[int, int]]:
        """The results given back, in order: ``(node, k)``."""
    @property
    def key(self) -> str:
        """The graph's structure as a string (what the cache of compiled graphs is keyed by),
        the backend's settings last."""
    @property
    def settings(self) -> str:
        """The backend's settings the graph is compiled under (its compiler's ``settings()``;
        empty for none)."""
    def replay(self, payloads: Iterable[Any]) -> list[Any]:
        """Runs the nodes eagerly on the backend (its own kernels, or the CPU fallback), on
        tensors wrapping ``payloads`` (one per input, then the scalar inputs' values), and gives
        the outputs' payloads."""

def _refuse_in_graph(op: str, backend: str, reason: str) -> None:
    """Marks operator ``op`` as one graph backend ``backend``'s compiler cannot put in a program
    (its kernel there cannot be traced), for ``reason``: its calls there break the graph."""

def _graph_refusal(op: str, backend: str) -> str | None:
    """Why graph backend ``backend`` refused operator ``op``, or None where it did not."""

def graph_compiled_in_run(ns: int) -> None:
    """The compiled graph running in this thread spent ``ns`` nanoseconds of its run compiling:
    counted as compile time in ``graph_metrics()``, not execution."""

def sync() -> None:
    """Computes every pending tensor of this thread (``bf.sync()``). Where a node of a graph
    fails (its program failed, and the node failed run alone), the tensors computed from it
    hold its error, raised again at each of their reads, and the rest are computed:
    ``bf.sync()`` raises the first such error once every graph was synced."""

def graph_key_bits() -> int:
    """The bits of the ``Graph`` key (0 before any graph backend): what ``bf.eager()`` excludes."""

def graph_limit(backend: str) -> int:
    """The most nodes a graph of ``backend`` records before it is cut (``bf.graph.limit``)."""

def set_graph_limit(backend: str, nodes: int) -> None:
    """Sets the most nodes a graph of ``backend`` records before it is cut
    (``bf.graph.set_limit``)."""

def graph_dump() -> str:
    """This thread's pending graphs in words (``bf.graph.dump()``)."""

def graph_metrics() -> dict[str, Any]:
    """Graph mode's figures (``bf.metrics.graphs()``)."""

def reset_graph_metrics() -> None:
    """Sets graph mode's figures back to zero."""

def is_pending(t: Tensor) -> bool:
    """Whether a tensor is pending (its values not computed yet)."""
