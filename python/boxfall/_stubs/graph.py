"""The runtime twin of ``graph.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

# ruff: noqa: F401
from boxfall._boxfall import (
    Graph,
    _graph_refusal,
    _refuse_in_graph,
    graph_compiled_in_run,
    graph_dump,
    graph_key_bits,
    graph_limit,
    graph_metrics,
    is_pending,
    reset_graph_metrics,
    set_graph_limit,
    sync,
)
