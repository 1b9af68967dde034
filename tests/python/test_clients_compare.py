"""``tests/clients/run.py --compare``: how CI holds graph mode's outcomes on SciPy's and
scikit-learn's tests to eager mode's. The rows are those the plugin writes (one a test); no
pytest run here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "clients" / "run.py"


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("clients_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(ns: str, test: str, outcome: str, **extra: str) -> dict[str, str]:
    return {"label": "scipy.x", "ns": ns, "outcome": outcome, "nodeid": f"{test}[{ns}]", **extra}


def test_the_same_outcomes_are_no_difference(run):
    rows = [
        row("boxfall_jax", "t.py::a", "passed"),
        row("boxfall_jax_graph", "t.py::a", "passed"),
        row("boxfall_jax", "t.py::b", "skipped"),
        row("boxfall_jax_graph", "t.py::b", "skipped"),
        row("boxfall_jax", "t.py::c", "failed"),  # fails alike: no difference either
        row("boxfall_jax_graph", "t.py::c", "failed"),
    ]
    assert run.differences(rows, "boxfall_jax", "boxfall_jax_graph") == ([], [])


def test_a_failure_on_one_namespace_alone_is_unexpected_and_named(run):
    rows = [
        row("boxfall_jax", "t.py::a", "passed"),
        row("boxfall_jax_graph", "t.py::a", "failed"),
    ]
    unexpected, known = run.differences(rows, "boxfall_jax", "boxfall_jax_graph")
    assert unexpected == ["t.py::a[boxfall_jax]: boxfall_jax passed, boxfall_jax_graph failed"]
    assert known == []


def test_a_test_run_on_one_namespace_only_is_a_difference(run):
    rows = [row("boxfall_jax", "t.py::a", "passed")]
    unexpected, _ = run.differences(rows, "boxfall_jax", "boxfall_jax_graph")
    assert unexpected == ["t.py::a[boxfall_jax]: boxfall_jax passed, boxfall_jax_graph not run"]


def test_an_expected_failure_on_the_other_is_known_with_its_reason(run):
    rows = [
        row("boxfall_jax", "t.py::a", "passed"),
        row("boxfall_jax_graph", "t.py::a", "xfailed", xfail="a copy, not a view"),
    ]
    unexpected, known = run.differences(rows, "boxfall_jax", "boxfall_jax_graph")
    assert unexpected == []
    assert len(known) == 1 and known[0].endswith("xfailed (a copy, not a view)")


def test_a_known_failure_that_passes_again_is_a_difference(run):
    # The plugin's xfail is strict: a fixed test fails on the graph namespace.
    rows = [
        row("boxfall_jax", "t.py::a", "passed"),
        row("boxfall_jax_graph", "t.py::a", "failed"),
    ]
    unexpected, _ = run.differences(rows, "boxfall_jax", "boxfall_jax_graph")
    assert len(unexpected) == 1


def test_the_other_name_may_not_be_part_of_the_base_name(run):
    with pytest.raises(ValueError, match="second's name is in the first's"):
        run.differences([], "boxfall_jax_graph", "boxfall_jax")


def test_a_pytest_run_past_its_timeout_is_stopped_and_said_so(run, tmp_path):
    """``--timeout``: the run is killed and its line says so (its counts so far still count:
    not a broken run). Each run is waited for alone (``os.wait4``), as runs side by side are."""
    slow = tmp_path / "test_slow.py"
    slow.write_text("import time\ntime.sleep(120)\n\ndef test_never():\n    pass\n")
    line, ok = run._run("slow", [str(slow)], tmp_path / "rows.jsonl", 5, [], None)
    assert line.startswith("slow: timed out after 5s"), line
    assert ok


def test_a_pytest_run_that_breaks_is_not_ok_and_shows_its_output(run, tmp_path):
    broken = tmp_path / "test_broken.py"
    broken.write_text("def test_x():\n    pass\n")
    line, ok = run._run(
        "broken", [str(broken), "--no-such-option"], tmp_path / "r.jsonl", 60, [], None
    )
    assert not ok
    assert line.startswith("broken: exit 4"), line
    assert "no-such-option" in line
