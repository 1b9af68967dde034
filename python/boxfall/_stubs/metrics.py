"""The runtime twin of ``metrics.pyi``: its names, for ``mypy.stubtest``
(``_boxfall.pyi`` says why)."""

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
