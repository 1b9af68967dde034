"""The runtime side of ``library.pyi``: the names it describes, from the extension, for
``mypy.stubtest`` to check the stub against (it checks a name that ``_boxfall.pyi``
re-exports in the module that defines it, which it imports). Nothing else imports this."""

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
