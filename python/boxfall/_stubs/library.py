"""The runtime twin of ``library.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

# ruff: noqa: F401
from boxfall._boxfall import (
    CpuFallback,
    Fallthrough,
    Library,
    PayloadKernel,
    call_fallback,
    cpu_fallback,
    fallback_env_problem,
    fallthrough,
    get_fallback_policy,
    set_fallback_policy,
)
