"""The runtime twin of ``keys.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

# ruff: noqa: F401
from boxfall._boxfall import (
    DispatchKeySet,
    key_bits,
    key_names,
    local_keys,
    register_functionality_key,
    set_local_keys,
)
