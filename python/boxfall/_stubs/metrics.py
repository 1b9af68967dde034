"""The runtime side of ``metrics.pyi``: the names it describes, from the extension, for
``mypy.stubtest`` to check the stub against (it checks a name that ``_boxfall.pyi``
re-exports in the module that defines it, which it imports). Nothing else imports this."""

# ruff: noqa: F401
from boxfall._boxfall import (
    all_stats,
    counter_value,
    counters,
    op_stats,
    profile_begin,
    profile_end,
    record_fallback,
    report,
    reset_metrics,
    set_counting,
    set_fast_path,
    user_transfers,
    vectorcall_installed,
)
