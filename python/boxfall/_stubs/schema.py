"""The runtime twin of ``schema.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

# ruff: noqa: F401
from boxfall._boxfall import (
    AliasInfo,
    Argument,
    FunctionSchema,
    parse_schema,
    parse_schemas_count,
)
