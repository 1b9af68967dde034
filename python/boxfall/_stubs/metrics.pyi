"""The counters: fallback figures, reports, profiling and the user's transfers.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from typing import Any

from boxfall._stubs.ops import OpOverload

def counter_value(name: str) -> int:
    """The CPU-fallback count of operator ``name`` (0 if it never fell back)."""

def counters() -> list[tuple[str, int]]:
    """``(operator name, fallback count)`` of every operator counted since the last reset."""

def op_stats(name: str) -> dict[str, Any]:
    """The fallback figures of operator ``name`` (``bf.metrics.op_stats`` wraps it)."""

def all_stats() -> list[tuple[str, dict[str, Any]]]:
    """``(operator name, figures)`` of every operator counted since the last reset."""

def report(backend: str | None = None, sort: str = "time", top: int | None = None) -> str:
    """The fallback table, a row per (operator, backend) (``bf.metrics.report`` wraps it)."""

def reset_metrics() -> None:
    """Zeroes every counter and forgets which operators warned."""

def set_counting(on: bool) -> bool:
    """Turns the counting of this thread's calls on or off; returns whether it was on
    (``bf.metrics._uncounted()`` enters it while a graph's program is traced)."""

def record_fallback(
    op: OpOverload,
    backend: str,
    fallback_ns: int,
    kernel_ns: int,
    bytes_to_cpu: int,
    bytes_from_cpu: int,
    error: BaseException | None = None,
) -> None:
    """Counts one CPU fallback that ran outside the dispatcher (``bf.metrics.record_fallback``
    wraps it)."""

def user_transfers() -> dict[str, dict[str, int]]:
    """The transfers users asked for, per backend name (``bf.metrics.transfers()`` wraps it)."""

def profile_begin() -> None:
    """Starts timing the backends' own kernels (``bf.metrics.profile()`` enters it)."""

def profile_end() -> None:
    """Ends one ``profile_begin`` (``bf.metrics.profile()`` leaves it)."""

def set_fast_path(on: bool) -> bool:
    """Turns the fast path on or off (for tests that compare it with the general path);
    returns whether it was on."""

def vectorcall_installed() -> bool:
    """Whether calls of ``OpOverload`` objects from Python come by vectorcall (switched on by
    the first call of any operator)."""
