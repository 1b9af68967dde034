"""``bf.metrics.plot``: where the CPU-fallback time goes, as a chart (matplotlib, optional)."""

from __future__ import annotations

import os
from typing import Any

#: The steps of a fallback, as the chart colours them (colour-blind safe: Okabe-Ito).
_STEPS = (
    ("to_cpu_ns", "moving to the CPU", "#0072B2"),
    ("kernel_ns", "CPU kernel", "#E69F00"),
    ("from_cpu_ns", "moving back / writing back", "#009E73"),
    ("other_ns", "fallback bookkeeping", "#BBBBBB"),
)


class PlotDependencyError(ImportError):
    """``bf.metrics.plot`` was called without matplotlib installed."""


def _matplotlib() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PlotDependencyError(
            "bf.metrics.plot needs matplotlib, which is not installed: pip install matplotlib "
            '(or pip install ".[plot]" in boxfall\'s checkout)'
        ) from e
    return Figure


def _unit(ns: float) -> tuple[float, str]:
    """The divisor and name of the time unit that fits ``ns``."""
    if ns >= 1e9:
        return 1e9, "s"
    if ns >= 1e6:
        return 1e6, "ms"
    return 1e3, "us"


def _time(ns: float) -> str:
    div, unit = _unit(ns)
    v = ns / div
    return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"


def _size(b: int) -> str:
    if b < 1024:
        return f"{b} B"
    for unit, div in (("KB", 1024), ("MB", 1024**2), ("GB", 1024**3)):
        if b < 999.5 * div or unit == "GB":
            return f"{b / div:.3g} {unit}"
    raise AssertionError("unreachable")


def _label(row: dict[str, Any], share: float) -> str:
    calls = row["fallbacks"]
    pct = "<1%" if 0 < share < 0.005 else f"{share:.0%}"
    parts = [f"{_time(row['fallback_ns'])} ({pct})", f"{calls} call{'s' if calls != 1 else ''}"]
    if row["failures"]:
        parts.append(f"{row['failures']} failed")
    moved = row["bytes_to_cpu"] + row["bytes_from_cpu"]
    if moved:
        parts.append(f"{_size(row['bytes_to_cpu'])} to / {_size(row['bytes_from_cpu'])} from CPU")
    return ", ".join(parts)


def plot_fallbacks(
    rows: list[dict[str, Any]],
    *,
    path: str | os.PathLike[str] | None,
    backend: str | None,
    top: int | None,
) -> Any:
    """The chart of ``rows`` (``metrics.rows()``, most time first), saved to ``path`` if given."""
    figure_class = _matplotlib()
    total_ns = sum(r["fallback_ns"] for r in rows)
    total_calls = sum(r["fallbacks"] for r in rows)
    shown = rows if top is None else rows[:top]
    backends = sorted({r["backend"] for r in rows})
    one_backend = len(backends) <= 1

    height = 1.9 + 0.42 * max(len(shown), 1)
    fig = figure_class(figsize=(11, height), layout="constrained")
    ax = fig.add_subplot()
    where = backend or (backends[0] if one_backend and backends else ", ".join(backends))
    fig.suptitle(
        f"Where the CPU fallback time goes{f' on {where}' if where else ''}",
        fontsize=13,
        fontweight="bold",
    )
    if not shown:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no operator fell back", ha="center", va="center", fontsize=12)
        if path is not None:
            fig.savefig(path, dpi=120)
        return fig

    n_ops = len({r["operator"] for r in rows})
    hidden = len(rows) - len(shown)
    operators = f"{n_ops} operator{'s' if n_ops != 1 else ''}"
    ax.set_title(
        f"{_time(total_ns)} in {total_calls} fallbacks of {operators}"
        + (f" ({hidden} more not shown)" if hidden else "")
        + ": implement the top bars natively first",
        fontsize=10,
        color="#444444",
        loc="left",
    )
    div, unit = _unit(max(r["fallback_ns"] for r in shown))
    ys = list(range(len(shown)))[::-1]  # the slowest at the top
    for key, name, colour in _STEPS:
        if key == "other_ns" and not any(
            r["fallback_ns"] - r["to_cpu_ns"] - r["kernel_ns"] - r["from_cpu_ns"]
            > 0.01 * r["fallback_ns"]
            for r in shown
        ):
            continue  # too thin to see anywhere: no legend entry either
        lefts = []
        widths = []
        for r in shown:
            steps = r["to_cpu_ns"] + r["kernel_ns"] + r["from_cpu_ns"]
            values = {**r, "other_ns": max(r["fallback_ns"] - steps, 0)}
            before = 0.0
            for k, _, _ in _STEPS:
                if k == key:
                    break
                before += values[k]
            lefts.append(before / div)
            widths.append(values[key] / div)
        ax.barh(
            ys,
            widths,
            left=lefts,
            height=0.66,
            color=colour,
            label=name,
            edgecolor="white",
            linewidth=0.5,
        )

    longest = max(r["fallback_ns"] for r in shown) / div
    for y, r in zip(ys, shown, strict=True):
        share = r["fallback_ns"] / total_ns if total_ns else 0.0
        ax.text(
            r["fallback_ns"] / div + longest * 0.01,
            y,
            _label(r, share),
            va="center",
            fontsize=8.5,
            color="#B00020" if r["failures"] else "#222222",
        )
    names = [r["operator"] if one_backend else f"{r['operator']} [{r['backend']}]" for r in shown]
    ax.set_yticks(ys, names, fontsize=9, family="monospace")
    ax.set_xlim(0, longest * 1.75)  # room for the labels
    ax.set_xlabel(f"time in the CPU fallback ({unit})")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(axis="x", color="#E5E5E5", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(loc="lower right", fontsize=9, frameon=False, title="time spent", title_fontsize=9)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
