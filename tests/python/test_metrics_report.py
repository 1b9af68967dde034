"""bf.metrics per (operator, backend): op_stats, report, to_dict, to_csv, plot, and what counts
as a failure (docs/backend-authors.md, "What the report says"). Timings are only checked
against their invariants."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
import sys
import time
import warnings

import boxfall as bf
import numpy as np
import pytest

FIGURES = list(bf.metrics.FIELDS)
TIME = re.compile(r"^\d+(\.\d+)? (us|ms|s)$")
SIZE = re.compile(r"^\d+(\.\d+)? (B|KB|MB|GB)$")
CELL = re.compile(r"\S+(?: \S+)*")


def _cpu_fallback_on(backend):
    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, backend.name)
    return fb


@pytest.fixture(scope="module")
def two(backend_factory):
    """Two Python backends, each with bf.cpu_fallback as its fallback (named as other modules'
    backends, whose keys they take again: the suite has to fit in the process's key slots)."""
    # Eager (no residency): the figures below count every byte each way.
    a, b = backend_factory("FbAccel", lazy=False), backend_factory("DispAccelB", lazy=False)
    libs = [_cpu_fallback_on(a), _cpu_fallback_on(b)]
    yield a, b
    for fb in libs:
        fb.close()


@pytest.fixture
def ops(ns, lib):
    """``bf.ops.<ns>`` with neg (fast), slow (a kernel that sleeps 30 ms) and big (any size).

    30 ms, not 2: on a loaded machine a preempted fast call once outweighed a 2 ms sleep.
    """
    lib.define("neg(Tensor self) -> Tensor")
    lib.impl("neg", lambda self: -self, "CPU")
    lib.define("slow(Tensor self) -> Tensor")

    def slow(self):
        time.sleep(0.030)
        return self * 2.0

    lib.impl("slow", slow, "CPU")
    bf.metrics.reset()
    return getattr(bf.ops, ns)


def split_ok(figures):
    return (
        figures["to_cpu_ns"] + figures["kernel_ns"] + figures["from_cpu_ns"]
        <= figures["fallback_ns"]
    )


def test_op_stats_has_totals_and_each_backends_own_figures(ns, ops, two):
    a, b = two
    for _ in range(3):
        ops.neg(a.tensor(np.ones(2)))
    ops.neg(b.tensor(np.ones(5)))
    s = bf.metrics.op_stats(f"{ns}::neg")
    assert sorted(s) == sorted([*FIGURES, "backends", "last_failure"])
    assert sorted(s["backends"]) == sorted([a.name, b.name])
    mine, other = s["backends"][a.name], s["backends"][b.name]
    assert sorted(mine) == sorted([*FIGURES, "last_failure"])
    assert mine["last_failure"] is None
    assert (mine["fallbacks"], mine["bytes_to_cpu"], mine["bytes_from_cpu"]) == (3, 48, 48)
    assert (other["fallbacks"], other["bytes_to_cpu"], other["bytes_from_cpu"]) == (1, 40, 40)
    for key in ("fallbacks", "failures", "bytes_to_cpu", "bytes_from_cpu"):
        assert s[key] == mine[key] + other[key]
    # Never fell back: zeros and no backends.
    assert bf.metrics.op_stats(f"{ns}::slow") == {
        **dict.fromkeys(FIGURES, 0),
        "backends": {},
        "last_failure": None,
    }


def test_the_time_splits_into_steps_within_the_whole(ns, ops, two):
    a, _ = two
    ops.slow(a.tensor(np.ones(3)))
    s = bf.metrics.op_stats(f"{ns}::slow")
    for figures in (s, s["backends"][a.name]):
        assert split_ok(figures), figures
        assert figures["to_cpu_ns"] > 0 and figures["kernel_ns"] > 0 and figures["from_cpu_ns"] > 0
    # The kernel's own sleep is in the kernel step, not in the moves.
    assert s["kernel_ns"] > s["to_cpu_ns"] and s["kernel_ns"] > s["from_cpu_ns"]


def test_lent_arguments_are_not_timed_and_the_result_copy_is_step_3(ns, lib):
    """Native lends its host memory to a Python kernel: step 1 copies nothing and is not timed
    (a clock read would cost more than its bookkeeping), so ``to_cpu_ns`` stays 0 while its
    bytes are counted; the result's copy into Native memory is timed in step 3."""
    lib.define("pause(Tensor a, Tensor b) -> Tensor")

    def pause(a, b):
        time.sleep(0.030)
        return a + b

    lib.impl("pause", pause, "CPU")
    op = getattr(bf.ops, ns).pause.default
    x, y = bf.native.tensor(np.ones(4)), bf.native.tensor(np.ones(4))
    op(x, y)  # the first call plans the fast path
    bf.metrics.reset()
    for _ in range(3):
        assert np.array_equal(op(x, y).numpy(), np.full(4, 2.0))
    s = bf.metrics.op_stats(f"{ns}::pause")["backends"]["Native"]
    assert (s["fallbacks"], s["bytes_to_cpu"], s["bytes_from_cpu"]) == (3, 3 * 64, 3 * 32)
    assert s["to_cpu_ns"] == 0, s
    assert s["kernel_ns"] >= 3 * 30_000_000 and s["from_cpu_ns"] > 0, s
    assert split_ok(s), s


def _table(report: str) -> list[str]:
    """The table's lines: the header, the rows and the total (not the lines after it)."""
    lines = report.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("total ("))
    return lines[: end + 1]


def test_report_columns_line_up_on_every_line(ns, ops, two):
    a, b = two
    ops.neg(a.tensor(np.ones(1)))
    ops.neg(b.tensor(np.ones(300_000)))
    ops.slow(a.tensor(np.ones(2_000)))
    table = _table(bf.metrics.report())
    header = table[0]
    assert all(len(line) == len(header) for line in table), "\n".join(table)
    columns = [(m.start(), m.end()) for m in CELL.finditer(header)]
    assert [header[s:e] for s, e in columns[:4]] == ["operator", "backend", "calls", "failed"]
    assert "to CPU" in header and "from CPU" in header and "bytes to CPU" in header
    for line in table[2:]:
        if set(line) <= {"-"}:
            continue
        for i, (start, end) in enumerate(columns):
            if i < 2:  # left-aligned: the cell starts under the header
                if line.startswith("total") and i == 1:
                    continue  # the total row names no backend
                assert line[start] != " " and (start == 0 or line[start - 1] == " "), (i, line)
            else:  # right-aligned: the cell ends under the header's end
                assert line[end - 1] != " " and (end == len(line) or line[end] == " "), (i, line)


def _rows(report: str) -> dict[tuple[str, str], dict[str, str]]:
    """The table's rows as {(operator, backend): {column: cell}}."""
    table = _table(report)
    header = [m.group() for m in CELL.finditer(table[0])]
    out = {}
    for line in table[2:-2]:
        cells = [m.group() for m in CELL.finditer(line)]
        assert len(cells) == len(header), line
        out[(cells[0], cells[1])] = dict(zip(header, cells, strict=True))
    return out


def test_report_units_fit_the_numbers(ns, ops, two):
    a, b = two
    ops.neg(a.tensor(np.ones(1)))  # 8 B
    ops.neg(b.tensor(np.ones(300_000)))  # 2.4 MB
    ops.slow(a.tensor(np.ones(256)))  # 2 KB, 30 ms in the kernel
    rows = _rows(bf.metrics.report())
    for row in rows.values():
        for col in ("total time", "mean", "to CPU", "kernel", "from CPU"):
            assert TIME.match(row[col]), (col, row)
        for col in ("bytes to CPU", "bytes from CPU"):
            assert SIZE.match(row[col]), (col, row)
    assert rows[(f"{ns}::neg", a.name)]["bytes to CPU"] == "8 B"
    assert rows[(f"{ns}::slow", a.name)]["bytes from CPU"] == "2.00 KB"
    assert rows[(f"{ns}::neg", b.name)]["bytes to CPU"] == "2.29 MB"
    assert rows[(f"{ns}::slow", a.name)]["kernel"].endswith(" ms")


def test_report_sorts_filters_and_cuts(ns, ops, two):
    a, b = two
    for _ in range(4):
        ops.neg(a.tensor(np.ones(1)))
    ops.neg(b.tensor(np.ones(1000)))
    ops.slow(a.tensor(np.ones(1)))
    neg, slow = f"{ns}::neg", f"{ns}::slow"

    def order(**kwargs):
        return [key for key in _rows(bf.metrics.report(**kwargs))]

    assert order()[0] == (slow, a.name)  # time: the sleeping kernel first
    assert order(sort="count")[0] == (neg, a.name)
    assert order(sort="bytes")[0] == (neg, b.name)
    assert order(sort="name") == sorted(order(sort="name"))
    only_a = order(backend=a.name.lower())  # any case
    assert only_a == [(slow, a.name), (neg, a.name)]
    assert order(backend=b.handle) == [(neg, b.name)]  # a Backend object
    cut = bf.metrics.report(sort="count", top=1)
    assert list(_rows(cut)) == [(neg, a.name)]
    assert "(2 more rows not shown; the total counts them)" in cut
    assert "total (2 operators, 3 rows)" in cut
    last = bf.metrics.report().splitlines()[-1]
    assert last.startswith("implement natively first")
    assert last.index(slow) < last.index(neg)
    assert f"on {a.name}" in bf.metrics.report(backend=a.name).splitlines()[-1]

    with pytest.raises(ValueError, match="'time', 'count', 'bytes', 'name'.*'speed'"):
        bf.metrics.report(sort="speed")
    with pytest.raises(ValueError, match="at least 0"):
        bf.metrics.report(top=-1)
    with pytest.raises(bf.UnknownKeyError, match="NoSuchBackend"):
        bf.metrics.report(backend="NoSuchBackend")


def _json_types_only(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_types_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_types_only(v) for v in value)
    # None: an operator's `last_failure` when none failed.
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))


def test_to_dict_round_trips_through_json(ns, ops, two):
    a, b = two
    ops.neg(a.tensor(np.ones(2)))
    ops.neg(b.tensor(np.ones(2)))
    d = bf.metrics.to_dict()
    assert _json_types_only(d)
    assert json.loads(json.dumps(d)) == d
    entry = d[f"{ns}::neg"]
    stats = bf.metrics.op_stats(f"{ns}::neg")
    assert entry["fallbacks"] == stats["fallbacks"] == 2  # (times are converted at each read)
    assert sorted(entry["backends"]) == sorted([a.name, b.name])
    assert entry["backends"][a.name]["bytes_to_cpu"] == 16


def test_to_csv_writes_one_row_per_operator_and_backend(ns, ops, two, tmp_path):
    a, b = two
    for _ in range(2):
        ops.neg(a.tensor(np.ones(2)))
    ops.neg(b.tensor(np.ones(3)))
    ops.slow(a.tensor(np.ones(1)))
    path = tmp_path / "fallbacks.csv"
    bf.metrics.to_csv(path)
    buffer = io.StringIO()
    bf.metrics.to_csv(buffer)
    text = path.read_text()

    def untimed(t):  # the times are converted anew at each read
        return [
            {k: v for k, v in r.items() if not k.endswith("_ns")}
            for r in csv.DictReader(io.StringIO(t))
        ]

    assert untimed(text) == untimed(buffer.getvalue())
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == ["operator", "backend", *FIGURES]
    rows = {(r["operator"], r["backend"]): r for r in reader}
    assert set(rows) == {(f"{ns}::neg", a.name), (f"{ns}::neg", b.name), (f"{ns}::slow", a.name)}
    assert rows[(f"{ns}::neg", a.name)]["fallbacks"] == "2"
    assert rows[(f"{ns}::neg", b.name)]["bytes_to_cpu"] == "24"
    for r in rows.values():
        assert split_ok({k: int(r[k]) for k in FIGURES}), r


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed"
)
def test_plot_writes_a_png_of_where_the_time_goes(ns, ops, two, tmp_path):
    a, b = two
    ops.neg(a.tensor(np.ones(2)))
    ops.slow(a.tensor(np.ones(2)))
    ops.neg(b.tensor(np.ones(2)))
    path = tmp_path / "fallbacks.png"
    fig = bf.metrics.plot(path, backend=a.name)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert a.name in fig._suptitle.get_text()
    ax = fig.axes[0]
    top_down = sorted(zip(ax.get_yticks(), ax.get_yticklabels(), strict=True), key=lambda t: -t[0])
    assert [label.get_text() for _, label in top_down] == [f"{ns}::slow", f"{ns}::neg"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == ["moving to the CPU", "CPU kernel", "moving back / writing back"]
    # Every backend, the top one only; no path: nothing written, the figure returned.
    fig = bf.metrics.plot(top=1)
    assert len(fig.axes[0].get_yticklabels()) == 1


def test_plot_without_matplotlib_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install matplotlib"):
        bf.metrics.plot()


# ---------------------------------------------------------------------------------- failures


def _counts(name: str, backend: str) -> tuple[int, int]:
    s = bf.metrics.op_stats(name)["backends"].get(backend, dict.fromkeys(FIGURES, 0))
    assert split_ok(s), s
    return s["fallbacks"], s["failures"]


def test_every_refusal_and_failure_counts_as_a_failed_fallback(ns, lib, two, backend_factory):
    a, b = two
    ops = getattr(bf.ops, ns)
    bf.metrics.reset()
    lib.define("f(Tensor self) -> Tensor")
    lib.impl("f", lambda self: self + 1.0, "CPU")
    name = f"{ns}::f"
    x = a.tensor(np.ones(2))

    # The policy "error".
    bf.set_fallback_policy("error")
    with pytest.raises(bf.FallbackError):
        ops.f(x)
    bf.set_fallback_policy("allow")
    assert _counts(name, a.name) == (1, 1)
    # A "warn" warning that the user made an error.
    bf.set_fallback_policy("warn")
    with warnings.catch_warnings():
        warnings.simplefilter("error", bf.FallbackWarning)
        with pytest.raises(bf.FallbackWarning):
            ops.f(x)
    bf.set_fallback_policy("allow")
    assert _counts(name, a.name) == (2, 2)
    # A CPU kernel that raises.
    lib.define("boom(Tensor self) -> Tensor")

    def boom(self):
        raise RuntimeError("boom")

    lib.impl("boom", boom, "CPU")
    with pytest.raises(RuntimeError, match="boom"):
        ops.boom(x)
    assert _counts(f"{ns}::boom", a.name) == (1, 1)
    # No CPU kernel at all.
    lib.define("nocpu(Tensor self) -> Tensor")
    with pytest.raises(bf.NoKernelError):
        ops.nocpu(x)
    assert _counts(f"{ns}::nocpu", a.name) == (1, 1)
    # Tensors of two backends.
    lib.define("two(Tensor a, Tensor b) -> Tensor")
    lib.impl("two", lambda a, b: a + b, "CPU")
    with pytest.raises(bf.FallbackError):
        ops.two(x, b.tensor(np.ones(2)))
    s = bf.metrics.op_stats(f"{ns}::two")
    assert (s["fallbacks"], s["failures"]) == (1, 1)
    # A hook that raises (a backend name test_backend_registration takes again).
    bad = bf.register_backend(
        "Replaced",
        to_cpu=lambda p: (_ for _ in ()).throw(OSError("link down")),
        from_cpu=lambda a: a,
        copy_from_cpu=lambda p, a: None,
        replace=True,
    )
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, "Replaced")
        with pytest.raises(OSError, match="link down"):
            ops.f(bad.tensor(np.ones(1)))
    assert _counts(name, "Replaced") == (1, 1)


def test_view_operators_refused_or_copied_against_a_warning_filter_count_as_failures(ns, lib, two):
    a, _ = two
    bf.metrics.reset()
    lib.define("v(Tensor(a) self) -> Tensor(a)")
    lib.impl("v", lambda self: self, "CPU")
    op = getattr(bf.ops, ns).v.default
    name = f"{ns}::v"
    x = a.tensor(np.ones(2))
    with pytest.raises(bf.FallbackError, match="view operator"):
        op(x)
    assert _counts(name, a.name) == (1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bf.FallbackWarning)
        with pytest.raises(bf.FallbackWarning):
            bf.call_fallback(bf.CpuFallback(views="copy"), op, x)
    assert _counts(name, a.name) == (2, 2)
    # A copy that went through is no failure.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bf.FallbackWarning)
        bf.call_fallback(bf.CpuFallback(views="copy"), op, x)
    assert _counts(name, a.name) == (3, 2)


def test_a_fallback_recorded_by_hand_counts_as_any_other(ns, ops, two):
    # Issue 53: a graph program's host callbacks ran outside the dispatcher and were missing
    # from the report; bf.metrics.record_fallback counts such a fallback.
    a, _ = two
    op = getattr(bf.ops, ns).neg.default
    bf.metrics.reset()
    bf.metrics.record_fallback(
        op, a, fallback_ns=5_000, kernel_ns=3_000, bytes_to_cpu=32, bytes_from_cpu=16
    )
    bf.metrics.record_fallback(
        f"{ns}::neg", "fbaccel", fallback_ns=1_000, error=ValueError("the kernel broke")
    )
    stats = bf.metrics.op_stats(op)["backends"][a.name]
    assert (stats["fallbacks"], stats["failures"]) == (2, 1)
    assert (stats["bytes_to_cpu"], stats["bytes_from_cpu"]) == (32, 16)
    assert stats["fallback_ns"] >= stats["kernel_ns"] > 0
    assert stats["last_failure"] == {"type": "ValueError", "message": "the kernel broke"}
    assert [r["operator"] for r in bf.metrics.rows(a)] == [f"{ns}::neg"]
    assert f"{ns}::neg" in bf.metrics.report()
    with pytest.raises(bf.UnknownKeyError):
        bf.metrics.record_fallback(op, "NoSuchBackend")
