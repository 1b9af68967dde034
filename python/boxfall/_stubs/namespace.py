"""The runtime twin of ``namespace.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

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
