"""Per-operator CPU-fallback counters (names ``ns::name`` or ``ns::name.overload``)."""

from __future__ import annotations

from typing import Any

from . import _boxfall


def counter_value(name: str) -> int:
    """How many times ``name`` went through the CPU fallback (0 if never)."""
    return _boxfall.counter_value(name)


def counters() -> dict[str, int]:
    """Every operator counted since the last reset, with its count."""
    return dict(_boxfall.counters())


def counter_names() -> list[str]:
    """The operators counted since the last reset, sorted."""
    return [n for n, _ in _boxfall.counters()]


def op_stats(name: str) -> dict[str, Any]:
    """``fallbacks``, ``failures``, ``fallback_ns``, ``bytes_to_cpu``, ``bytes_from_cpu`` (and
    ``backends``) of one operator; zeros if it never fell back."""
    return _boxfall.op_stats(name)


def to_dict() -> dict[str, dict[str, Any]]:
    """Every counted operator's stats, for JSON."""
    return dict(_boxfall.all_stats())


def report() -> str:
    """A table of the operators that fell back: backend, count, failures, total ms, mean us,
    MB moved each way; the slowest first."""
    return _boxfall.report()


def reset() -> None:
    """Zeroes every counter and forgets which operators warned."""
    _boxfall.reset_metrics()


__all__ = ["counter_names", "counter_value", "counters", "op_stats", "report", "reset", "to_dict"]
