"""The runtime twin of ``tensor.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

# ruff: noqa: F401
from boxfall._boxfall import (
    Tensor,
)
