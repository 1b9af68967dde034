"""boxfall's pytest plugin: which test made which operator fall back to the CPU.

Installed with boxfall (the ``pytest11`` entry point ``boxfall``; ``-p no:boxfall`` turns it
off). It does nothing unless asked, and importing it imports neither boxfall nor NumPy:

- ``pytest --boxfall-fallbacks`` records, for every test, the operators that ran through the CPU
  fallback during its call phase (per backend, with the figures of ``bf.metrics.op_stats``:
  calls, failures, time, bytes each way) and prints a table at the end: the operators, most
  fallbacks first, then the tests against those operators. ``--boxfall-fallbacks-file PATH``
  (which implies the flag) also writes the records to ``PATH``: ``.json`` (a list of objects)
  or ``.csv``, one row per test and (operator, backend), with the columns ``test``, then those
  of ``bf.metrics.to_csv`` (``operator``, ``backend``, ``fallbacks`` ... ``kernel_call_ns``).
  The records are the plugin's own: a test that calls ``bf.metrics.reset()`` does not erase
  them. Under pytest-xdist (``-n``) each worker records its tests and the controller merges
  them into one table and one file.
- ``@pytest.mark.boxfall_no_fallback(backend=None, ops=None)``, on a test, a class or a module
  (``pytestmark``): the test fails at teardown if an operator (one of ``ops``, names or
  ``bf.OpOverload``\\ s, if given) ran through the CPU fallback on ``backend`` (any backend if
  None; a name, in any case, or a ``bf.Backend``) during its call phase, naming the operators
  and their counts, with or without the flag. A graph backend's host callbacks (an operator
  its compiled program ran on the CPU) are CPU fallbacks of that backend and count too. It
  never raises inside the operator, so client code that catches the fallback's error
  (``NotImplementedError``) and takes another path cannot hide a fallback. A refused fallback
  (policy ``"error"``) counts as a fallback. Several markers (a module's and a test's) each
  apply. The marker's arguments are checked at the test's setup, once its fixtures ran: a
  positional argument, another keyword, or a backend or operator of the wrong type is an
  error of the setup, and the test does not run. A backend name that no registered backend
  has then (the test's body may register it) is an error at teardown that lists the
  registered backends, as is an unknown operator name.
- ``--boxfall-fallbacks-file PATH`` into a directory that does not exist is a usage error
  before any test runs (the directory is not made).
- The fixture ``boxfall_fallbacks``: a :class:`Fallbacks`, the fallbacks the running test has
  caused so far in its call phase.

A fallback counts for the test whose call phase it happens in, whichever thread runs it.
Fallbacks outside every test's call (collection, fixtures' setup and teardown) count for no
test: the table says how many there were in a line of its own, and the file has them in rows
whose ``test`` is :data:`OUTSIDE`, so that the file adds up to what boxfall counted in the run.
A reset by other means than ``bf.metrics.reset()`` (counters that go down unannounced) loses
what the running test had counted before it.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

if TYPE_CHECKING:
    from _pytest.config import Config
    from _pytest.config.argparsing import Parser
    from _pytest.nodes import Item
    from _pytest.reports import TestReport
    from _pytest.terminal import TerminalReporter

MARKER = "boxfall_no_fallback"
"""The marker's name."""

_RECORDER = "boxfall-fallbacks-recorder"
"""The name the recorder is registered under with pytest's plugin manager."""

OUTSIDE = "<outside the tests' calls>"
"""The ``test`` of the file's rows of the fallbacks outside every test's call phase (during
collection, fixtures' setup and teardown), so that the file adds up to boxfall's counts."""

_REPORT_ATTR = "boxfall_fallbacks"
"""The attribute of a call report that carries the test's rows (serialized by xdist)."""

Key = tuple[str, str]
"""(operator, backend)."""
Figures = dict[str, int]
"""The figures of ``bf.metrics.FIELDS`` for one (operator, backend)."""


def _fields() -> tuple[str, ...]:
    from boxfall.metrics import FIELDS

    return FIELDS


def _snapshot() -> dict[Key, Figures]:
    """boxfall's counters now, per (operator, backend), of every backend that fell back."""
    from boxfall import metrics

    fields = metrics.FIELDS
    return {
        (op, backend): {f: figures[f] for f in fields}
        for op, stats in metrics.to_dict().items()
        for backend, figures in stats["backends"].items()
    }


def _add_since(
    total: dict[Key, Figures], before: dict[Key, Figures], now: dict[Key, Figures]
) -> None:
    """Adds to ``total`` what was counted between the snapshots ``before`` and ``now``. A count
    lower in ``now`` than in ``before`` means the counters were reset in between without telling
    us: what ``now`` holds was counted since, and is what is added. (Only the counts say so:
    boxfall keeps times in clock ticks and converts them to nanoseconds when read, so a time
    may read a nanosecond lower than it did with nothing counted in between; a time's
    difference is taken as at least 0.)"""
    for key, figures in now.items():
        base = before.get(key)
        if base is not None and any(figures[f] < base[f] for f in _COUNTS):
            base = None
        into = total.setdefault(key, dict.fromkeys(figures, 0))
        for f, value in figures.items():
            into[f] += max(0, value - (base[f] if base is not None else 0))


_COUNTS = ("fallbacks", "failures", "bytes_to_cpu", "bytes_from_cpu", "kernel_calls")
"""The figures that only grow between two resets."""


class _Tracker:
    """What one test's call phase counted: a snapshot at the start, and what was counted before
    each ``bf.metrics.reset()`` inside it."""

    def __init__(self) -> None:
        self._counted: dict[Key, Figures] = {}
        self._base: dict[Key, Figures] | None = None
        self.ran = False

    def start(self) -> None:
        from boxfall import metrics

        self._base = _snapshot()
        self.ran = True
        metrics._reset_listeners.append(self._before_reset)

    def _before_reset(self) -> None:
        if self._base is not None:
            _add_since(self._counted, self._base, _snapshot())
            self._base = {}

    def stop(self) -> None:
        from boxfall import metrics

        if self._base is None:
            return
        with_listener = metrics._reset_listeners
        if self._before_reset in with_listener:
            with_listener.remove(self._before_reset)
        _add_since(self._counted, self._base, _snapshot())
        self._base = None

    def counted(self) -> dict[Key, Figures]:
        """Every (operator, backend) that fell back so far, with its figures."""
        total = {k: dict(v) for k, v in self._counted.items()}
        if self._base is not None:
            _add_since(total, self._base, _snapshot())
        return {k: v for k, v in total.items() if v["fallbacks"] > 0}

    def rows(self) -> list[dict[str, Any]]:
        """:meth:`counted` as rows: ``operator``, ``backend``, then the figures; most fallbacks
        first."""
        return _as_rows(self.counted())


def _as_rows(counted: Mapping[Key, Figures]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"operator": op, "backend": b, **figures} for (op, b), figures in counted.items()
    ]
    rows.sort(key=lambda r: (-r["fallbacks"], r["operator"], r["backend"]))
    return rows


_TRACKER = pytest.StashKey[_Tracker]()


def _op_name(op: object) -> str:
    name = getattr(op, "name", op)  # a bf.OpOverload has its name in .name
    if not isinstance(name, str):
        raise TypeError(
            f"{MARKER}: ops are operator names or bf.OpOverloads, not {type(op).__name__}"
        )
    return name


class Fallbacks(Mapping[str, int]):
    """The CPU fallbacks the running test has caused so far in its call phase (the fixture
    ``boxfall_fallbacks``), read live: a mapping of operator name (``"ns::op.overload"``) to
    fallback count on every backend, holding the operators that fell back (``not fallbacks``:
    none did). A name that did not fall back reads 0 (``fallbacks["demo::add.Tensor"]``), as a
    ``collections.Counter`` would, without being in it. Fallbacks during the test's setup
    (fixtures) do not count; ``bf.metrics.reset()`` in the test does not erase them.
    """

    def __init__(self, tracker: _Tracker) -> None:
        self._tracker = tracker

    def rows(self, backend: str | None = None) -> list[dict[str, Any]]:
        """One dict per (operator, backend) that fell back, most fallbacks first: ``operator``,
        ``backend`` and the figures of ``bf.metrics.op_stats`` (``fallbacks``, ``failures``,
        ``fallback_ns``, ..., ``bytes_to_cpu``, ``bytes_from_cpu``); only ``backend``'s (a
        name, in any case) if given."""
        rows = self._tracker.rows()
        if backend is not None:
            rows = [r for r in rows if r["backend"].lower() == backend.lower()]
        return rows

    def counts(self, backend: str | None = None) -> dict[str, int]:
        """Operator name -> fallbacks, on ``backend`` only if given (a name, in any case)."""
        out: dict[str, int] = {}
        for r in self.rows(backend):
            out[r["operator"]] = out.get(r["operator"], 0) + r["fallbacks"]
        return out

    def total(self, backend: str | None = None) -> int:
        """Every fallback so far (on ``backend`` only, if given)."""
        return sum(self.counts(backend).values())

    def __getitem__(self, op: object) -> int:
        return self.counts().get(_op_name(op), 0)

    def __contains__(self, op: object) -> bool:
        return self[op] > 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.counts())

    def __len__(self) -> int:
        return len(self.counts())

    def __repr__(self) -> str:
        return f"Fallbacks({self.counts()!r})"


def _recorder(config: Config) -> _Recorder:
    """The recorder of this run, registered the first time it is needed."""
    found = config.pluginmanager.get_plugin(_RECORDER)
    if found is None:
        found = _Recorder(config)
        config.pluginmanager.register(found, _RECORDER)
    return found


def _asked(config: Config) -> bool:
    return bool(config.getoption("boxfall_fallbacks") or config.getoption("boxfall_fallbacks_file"))


# ---- the hooks of the entry point: all that runs when the plugin is not asked for --------------


def pytest_addoption(parser: Parser) -> None:
    group = parser.getgroup("boxfall", "boxfall: CPU fallbacks per test")
    group.addoption(
        "--boxfall-fallbacks",
        action="store_true",
        dest="boxfall_fallbacks",
        help="record the operators each test's call made fall back to the CPU (boxfall), "
        "and print a table of them at the end",
    )
    group.addoption(
        "--boxfall-fallbacks-file",
        metavar="PATH",
        dest="boxfall_fallbacks_file",
        help="also write those records to PATH, .json or .csv (implies --boxfall-fallbacks)",
    )
    group.addoption(
        "--boxfall-fallbacks-top",
        type=int,
        default=30,
        metavar="N",
        dest="boxfall_fallbacks_top",
        help="operators and tests shown in the table, most fallbacks first (default 30; 0: all)",
    )


def pytest_configure(config: Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(backend=None, ops=None): fail the test at teardown if an operator (one of "
        "ops, if given) ran through boxfall's CPU fallback on backend (a name or a bf.Backend; "
        "any, if None) during its call",
    )
    path = config.getoption("boxfall_fallbacks_file")
    if path and os.path.splitext(path)[1].lower() not in (".json", ".csv"):
        raise pytest.UsageError(f"--boxfall-fallbacks-file must end in .json or .csv, not {path!r}")
    if path:
        # Checked before any test runs: the file is written at the end, and a directory that
        # does not exist would lose the whole run's records then. It is not made for the user.
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise pytest.UsageError(
                f"--boxfall-fallbacks-file {path!r}: the directory {folder!r} does not exist "
                "(boxfall does not create it)"
            )
    if _asked(config):
        _recorder(config).record_all = True


def pytest_collection_modifyitems(config: Config, items: list[Item]) -> None:
    if _asked(config):
        return
    marked = [item for item in items if item.get_closest_marker(MARKER) is not None]
    if marked:
        _recorder(config)
        for item in marked:
            item.stash[_TRACKER] = _Tracker()


@pytest.fixture
def boxfall_fallbacks(request: pytest.FixtureRequest) -> Fallbacks:
    """The CPU fallbacks this test has caused so far in its call phase: a :class:`Fallbacks`
    (operator name -> count; ``.rows()``, ``.counts(backend)``, ``.total(backend)``)."""
    _recorder(request.config)
    item = request.node
    tracker = item.stash.get(_TRACKER, None)
    if tracker is None:
        tracker = item.stash[_TRACKER] = _Tracker()
    return Fallbacks(tracker)


# ---- the recorder: registered only when asked (the flag, a marker, the fixture) ----------------


class _Spec(NamedTuple):
    """A ``boxfall_no_fallback`` marker's arguments, checked: ``given`` as written (for the
    messages), ``backend`` the backend's name as boxfall counts it (None: any), ``names`` the
    operators' names (None: any)."""

    given: str
    backend: str | None
    names: list[str] | None


def _known_backends() -> list[str]:
    """The names of the backends registered now (``bf.backends()``), in registration order."""
    import boxfall as bf

    return [b.name for b in bf.backends()]


def _backend_named(name: str) -> str | None:
    """The registered backend ``name`` names (in any case), or None."""
    known = _known_backends()
    if name in known:
        return name
    matches = [k for k in known if k.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


def _spec(marker: pytest.Mark) -> _Spec:
    """The marker's arguments, checked before its test runs: keywords only, ``backend`` None,
    a backend's name or a ``bf.Backend``, ``ops`` names or ``bf.OpOverload``\\ s. A bad one
    raises a ``ValueError`` naming the marker and the argument. A backend name that no
    registered backend has is kept as written (the test may register it) and checked at
    teardown (:func:`_violations`)."""
    given = ", ".join(
        [*(repr(a) for a in marker.args), *(f"{k}={v!r}" for k, v in marker.kwargs.items())]
    )
    where = f"{MARKER}({given})"
    if marker.args:
        raise ValueError(
            f"{where}: takes keywords only (backend=..., ops=[...]), not the positional "
            f"argument{'s' if len(marker.args) != 1 else ''} "
            f"{', '.join(repr(a) for a in marker.args)}"
        )
    unknown = sorted(set(marker.kwargs) - {"backend", "ops"})
    if unknown:
        raise ValueError(
            f"{where}: takes backend= and ops=, not {', '.join(k + '=' for k in unknown)}"
        )
    backend = marker.kwargs.get("backend")
    if backend is not None and not isinstance(backend, str):
        name = getattr(backend, "name", None)  # a bf.Backend counts by its name
        import boxfall as bf

        if not isinstance(backend, bf.Backend) or not isinstance(name, str):
            raise ValueError(
                f"{where}: backend= is a backend's name or a bf.Backend, not "
                f"{type(backend).__name__}"
            )
        backend = name
    if isinstance(backend, str):
        backend = _backend_named(backend) or backend
    ops = marker.kwargs.get("ops")
    if isinstance(ops, str) or (ops is not None and not isinstance(ops, Iterable)):
        ops = [ops]
    names = None if ops is None else [getattr(op, "name", op) for op in ops]
    wrong = [n for n in names or [] if not isinstance(n, str)]
    if wrong:
        raise ValueError(
            f"{where}: ops are operator names or bf.OpOverloads, not {type(wrong[0]).__name__}"
        )
    return _Spec(given, backend, names)


def _violations(rows: list[dict[str, Any]], spec: _Spec) -> str | None:
    """What the marker forbids that ``rows`` hold, as text, or None."""
    backend, names, given = spec.backend, spec.names, spec.given
    if backend is not None and _backend_named(backend) is None:
        # Unknown when the test started, and still: a typo must not read as "never fell back".
        return (
            f"{MARKER}({given}): no backend is named {backend!r}; the registered backends "
            f"are {', '.join(_known_backends())}"
        )
    if names:
        from boxfall import UnknownOperatorError, metrics

        for name in names:
            try:  # a typo must not read as "never fell back"
                metrics.counter_value(name)
            except UnknownOperatorError as e:
                return f"{MARKER}({given}): {e}"
    found = [
        r
        for r in rows
        if (backend is None or r["backend"].lower() == backend.lower())
        and (names is None or r["operator"] in names)
    ]
    if not found:
        return None
    what = "; ".join(
        f"{r['operator']} on {r['backend']}: {r['fallbacks']} "
        f"fallback{'s' if r['fallbacks'] != 1 else ''}"
        f"{f' ({n} refused or failed)' if (n := r['failures']) else ''}"
        for r in found
    )
    return f"{MARKER}({given}): the test's call ran through the CPU fallback: {what}"


_SPECS = pytest.StashKey[list[_Spec]]()
"""A marked test's markers, checked at its setup."""


class _Recorder:
    """The hooks that record: registered by the flag, a marker on a collected test, or the
    fixture. ``record_all`` (the flag): every test is recorded and reported; otherwise only
    the tests that have a tracker (a marker or the fixture)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.record_all = False
        self.tests: dict[str, dict[Key, Figures]] = {}
        self.recorded = 0
        self.session: _Tracker | None = None
        self.outside: dict[Key, Figures] = {}
        self.write_error: str | None = None

    def _controller(self) -> bool:
        """This process hands the tests to xdist's workers and runs none."""
        dist = getattr(self.config.option, "dist", "no")
        return dist != "no" and not hasattr(self.config, "workerinput")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.record_all and not self._controller():
            self.session = _Tracker()
            self.session.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: Item) -> Iterator[None]:
        tracker = item.stash.get(_TRACKER, None)
        if tracker is None and self.record_all:
            tracker = item.stash[_TRACKER] = _Tracker()
        if tracker is None:
            yield
            return
        tracker.start()
        try:
            yield
        finally:
            tracker.stop()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        if call.when == "call" and self.record_all:
            tracker = item.stash.get(_TRACKER, None)
            if tracker is not None and tracker.ran:
                setattr(outcome.get_result(), _REPORT_ATTR, tracker.rows())

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_setup(self, item: Item) -> None:
        """Checks the test's markers once its fixtures are set up (a fixture may register the
        backend named), before the test runs: a misused marker is an error of the setup, and
        the test does not run."""
        markers = list(item.iter_markers(MARKER))
        if not markers:
            return
        try:
            item.stash[_SPECS] = [_spec(m) for m in markers]
            return
        except ValueError as e:
            problem = str(e)
        pytest.fail(problem, pytrace=False)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: Item) -> None:
        tracker = item.stash.get(_TRACKER, None)
        specs = item.stash.get(_SPECS, None)
        if tracker is None or not tracker.ran or not specs:
            return
        rows = tracker.rows()
        problems = [p for spec in specs if (p := _violations(rows, spec))]
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)

    def pytest_runtest_logreport(self, report: TestReport) -> None:
        rows = getattr(report, _REPORT_ATTR, None)
        if report.when != "call" or rows is None:
            return
        self.recorded += 1
        into = self.tests.setdefault(report.nodeid, {})
        for row in rows:
            figures = {k: v for k, v in row.items() if k not in ("operator", "backend")}
            have = into.setdefault((row["operator"], row["backend"]), dict.fromkeys(figures, 0))
            for f, v in figures.items():
                have[f] = have.get(f, 0) + v

    def file_rows(self) -> list[dict[str, Any]]:
        """One row per test and (operator, backend): ``test``, ``operator``, ``backend``, the
        figures; in the order the tests ran."""
        return [{"test": t, **r} for t, counted in self.tests.items() for r in _as_rows(counted)]

    def _count_outside(self) -> None:
        """What this process counted outside the tests' calls: the session's count less the
        tests'. A worker hands it to the controller."""
        if self.session is None:
            return
        self.session.stop()
        outside = self.session.counted()
        for counted in self.tests.values():
            for key, figures in counted.items():
                if key in outside:
                    for f, v in figures.items():
                        outside[key][f] = max(0, outside[key][f] - v)
        outside = {k: v for k, v in outside.items() if v["fallbacks"] > 0}
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput[_REPORT_ATTR] = _as_rows(outside)  # type: ignore[attr-defined]
        else:
            self.outside = outside

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist's controller: a worker finished; adds what it counted outside the calls."""
        for row in getattr(node, "workeroutput", {}).get(_REPORT_ATTR, []):
            figures = {k: v for k, v in row.items() if k not in ("operator", "backend")}
            into = self.outside.setdefault((row["operator"], row["backend"]), {})
            for f, v in figures.items():
                into[f] = into.get(f, 0) + v

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._count_outside()
        path = self.config.getoption("boxfall_fallbacks_file")
        if not path or not self.record_all or hasattr(self.config, "workerinput"):
            return
        rows = self.file_rows()
        rows += [{"test": OUTSIDE, **r} for r in _as_rows(self.outside)]
        try:
            with open(path, "w", newline="", encoding="utf-8") as f:
                if path.lower().endswith(".json"):
                    json.dump(rows, f, indent=1)
                    f.write("\n")
                else:
                    columns = ("test", "operator", "backend", *_fields())
                    writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
                    writer.writeheader()
                    writer.writerows(rows)
        except OSError as e:
            # Checked at the start, yet gone or refused now: the table still prints, and says so.
            self.write_error = f"{path} could not be written: {e}"
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def pytest_terminal_summary(self, terminalreporter: TerminalReporter) -> None:
        if not self.record_all or hasattr(self.config, "workerinput"):
            return
        tr = terminalreporter
        tr.write_sep("=", "boxfall CPU fallbacks per test")
        top = self.config.getoption("boxfall_fallbacks_top")
        for line in summary(self.tests, self.recorded, tr._tw.fullwidth, top, self.outside):
            tr.write_line(line)
        path = self.config.getoption("boxfall_fallbacks_file")
        if self.write_error:
            tr.write_line(f"boxfall: {self.write_error}", red=True)
        elif path:
            tr.write_line(f"written to {path}")


# ---- the table --------------------------------------------------------------------------------


def _size(n: int) -> str:
    """Bytes as ``bf.metrics.report`` writes them (1 KB = 1024 B)."""
    value = float(n)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _table(head: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """Columns aligned: the first ``left`` to the left, the others to the right."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(head), *(line(r) for r in rows)]


def summary(
    tests: Mapping[str, Mapping[Key, Figures]],
    recorded: int,
    width: int = 100,
    top: int = 30,
    outside: Mapping[Key, Figures] | None = None,
) -> list[str]:
    """The lines of the table: a total; the operators (per backend), most fallbacks first; then
    the tests, most fallbacks first, against those operators, as many operator columns as fit
    ``width``, the rest summed in ``other``, and a total row. ``top``: only so many operators
    and tests are listed (all if 0); the totals count them all. ``outside``: the fallbacks
    outside the tests' calls, a line of its own."""
    out = sorted((outside or {}).items(), key=lambda kv: (-kv[1]["fallbacks"], kv[0]))
    elsewhere = []
    if out:
        most = ", ".join(f"{op} on {b} {f['fallbacks']}" for (op, b), f in out[:3])
        more = f", and {len(out) - 3} more operators" if len(out) > 3 else ""
        elsewhere.append(
            f"{sum(f['fallbacks'] for _, f in out)} fallbacks outside the tests' calls "
            f"(collection, fixtures; not in the table): {most}{more}"
        )
    per_op: dict[Key, Figures] = {}
    hit_by: dict[Key, int] = {}
    per_test: dict[str, int] = {}
    for test, counted in tests.items():
        for key, figures in counted.items():
            into = per_op.setdefault(key, dict.fromkeys(figures, 0))
            for f, v in figures.items():
                into[f] += v
            hit_by[key] = hit_by.get(key, 0) + 1
            per_test[test] = per_test.get(test, 0) + figures["fallbacks"]
    total = sum(per_test.values())
    if not total:
        return [f"no operator fell back to the CPU in the {recorded} tests recorded", *elsewhere]
    keys = sorted(per_op, key=lambda k: (-per_op[k]["fallbacks"], k))
    backends = {b for _, b in keys}
    lines = [
        f"{total} fallbacks in {len(per_test)} of {recorded} tests: {len(keys)} operators "
        f"on {len(backends)} backend{'s' if len(backends) != 1 else ''}",
        *elsewhere,
        "",
    ]
    head = ["#", "operator", "backend", "fallbacks", "failures", "tests", "to CPU", "from CPU"]
    rows = [
        [
            str(i),
            op,
            b,
            str(per_op[op, b]["fallbacks"]),
            str(per_op[op, b]["failures"]),
            str(hit_by[op, b]),
            _size(per_op[op, b]["bytes_to_cpu"]),
            _size(per_op[op, b]["bytes_from_cpu"]),
        ]
        for i, (op, b) in enumerate(keys, 1)
    ]
    table = _table(head, rows if top <= 0 else rows[:top], left=3)
    lines += table
    if top > 0 and len(rows) > top:
        lines.append(
            f"... {len(rows) - top} more operators (--boxfall-fallbacks-top 0 shows them all)"
        )
    order = sorted(per_test, key=lambda t: (-per_test[t], t))
    shown = order if top <= 0 else order[:top]
    # The tests against the operators: as many numbered columns as fit, then the rest.
    name_width = min(max(len(t) for t in shown), max(30, width // 2))
    count_width = len(str(total)) + 2
    room = width - name_width - count_width  # the test and total columns
    fit = 0
    for i, key in enumerate(keys, 1):
        need = max(len(str(i)), len(str(per_op[key]["fallbacks"]))) + 2
        if room - need < (0 if i == len(keys) else count_width):  # leave room for "other"
            break
        room -= need
        fit += 1
    if top > 0:
        fit = min(fit, top)  # only the operators listed above
    columns, other = keys[:fit], fit < len(keys)
    head = ["test", "total", *(str(i) for i in range(1, len(columns) + 1))]
    head += ["other"] if other else []

    def short(t: str) -> str:
        return t if len(t) <= name_width else "..." + t[len(t) - name_width + 3 :]

    def row(name: str, counts: Mapping[Key, int]) -> list[str]:
        cells = [name, str(sum(counts.values()))]
        cells += [str(counts.get(k, 0) or ".") for k in columns]
        if other:
            cells.append(str(sum(v for k, v in counts.items() if k not in columns) or "."))
        return cells

    body = [row(short(t), {k: f["fallbacks"] for k, f in tests[t].items()}) for t in shown]
    lines += ["", "tests x operators (fallbacks; the columns are the operators numbered above):"]
    table = _table(head, [*body, row("total", {k: per_op[k]["fallbacks"] for k in keys})])
    lines += table[:-1]
    if len(shown) < len(order):
        lines.append(
            f"... {len(order) - len(shown)} more tests (--boxfall-fallbacks-top 0 shows them all)"
        )
    lines.append(table[-1])
    return lines


__all__ = ["MARKER", "OUTSIDE", "Fallbacks", "boxfall_fallbacks", "summary"]
