"""The runtime twin of ``ops.pyi``: its names, for ``mypy.stubtest`` (``_boxfall.pyi`` says why)."""

# ruff: noqa: F401
from boxfall._boxfall import (
    OpNamespace,
    OpOverload,
    OpOverloadPacket,
    call_first_binding,
    definitions_version,
    find_op,
    namespaces,
    operators_in,
    overloads,
)
