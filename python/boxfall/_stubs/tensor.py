"""The runtime side of ``tensor.pyi``: the names it describes, from the extension, for
``mypy.stubtest`` to check the stub against (it checks a name that ``_boxfall.pyi``
re-exports in the module that defines it, which it imports). Nothing else imports this."""

# ruff: noqa: F401
from boxfall._boxfall import (
    Tensor,
)
