"""The runtime side of ``backends.pyi``: the names it describes, from the extension, for
``mypy.stubtest`` to check the stub against (it checks a name that ``_boxfall.pyi``
re-exports in the module that defines it, which it imports). Nothing else imports this."""

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
