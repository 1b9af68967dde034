"""Per-operator CPU-fallback counters.

An operator is named ``ns::name.overload``, or ``ns::name`` for the overload whose name is
empty (``demo::add`` is not ``demo::add.Tensor``), or given as an ``OpOverload``. A name is
known if the operator is defined, or was counted since the last reset; any other is an
:class:`~boxfall.UnknownOperatorError` that lists the closest names, so that a typo does not
read as "never fell back".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _boxfall

if TYPE_CHECKING:
    from . import OpName


def _name(op: OpName) -> str:
    from . import _op_name

    return _op_name(op)


def counter_value(name: OpName) -> int:
    """How many times the operator went through the CPU fallback (0 if never)."""
    return _boxfall.counter_value(_name(name))


def counters() -> dict[str, int]:
    """Every operator counted since the last reset, with its count."""
    return dict(_boxfall.counters())


def counter_names() -> list[str]:
    """The operators counted since the last reset, sorted."""
    return [n for n, _ in _boxfall.counters()]


def op_stats(name: OpName) -> dict[str, Any]:
    """``fallbacks``, ``failures``, ``fallback_ns``, ``bytes_to_cpu``, ``bytes_from_cpu`` of one
    operator; zeros if it never fell back."""
    return _boxfall.op_stats(_name(name))


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
