"""The runtime side of ``namespace.pyi``: the names it describes, from the extension, for
``mypy.stubtest`` to check the stub against (it checks a name that ``_boxfall.pyi``
re-exports in the module that defines it, which it imports). Nothing else imports this."""

# ruff: noqa: F401
from boxfall._boxfall import (
    NamespaceFunction,
    _make_view,
    _output_metas,
    _view_info,
    array_kernel,
    binary_function,
    operator_function,
    view_function,
)
