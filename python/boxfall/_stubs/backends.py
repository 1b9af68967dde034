"""The runtime twin of ``backends.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

# ruff: noqa: F401
from boxfall._boxfall import (
    Backend,
    backends,
    backends_version,
    coverage,
    get_backend,
    host_data_target,
    native_backend,
    native_kernel_names,
    register_backend,
)
