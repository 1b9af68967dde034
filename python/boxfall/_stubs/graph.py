"""The runtime side of ``graph.pyi``: the names it describes, from the extension, for
``mypy.stubtest`` to check the stub against (it checks a name that ``_boxfall.pyi``
re-exports in the module that defines it, which it imports). Nothing else imports this."""

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
