"""``.ci/conformance``, the array API test suite's run in CI: without the suite beside the
checkout it skips with a message and succeeds, and its known-failure lists are well formed
(the suite itself is outside the repository, so no test runs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "conformance"
LISTS = ROOT / ".ci" / "conformance-known-failures"


def test_without_the_suite_it_says_it_skipped_and_succeeds(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / ".ci" / "conformance")
    done = subprocess.run(
        [sys.executable, str(checkout / ".ci" / "conformance")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "conformance: skipped:" in done.stdout
    assert str(tmp_path / "shared" / "array-api-tests") in done.stdout


def test_every_namespace_ci_runs_has_a_list_of_test_ids_with_reasons():
    for name in ("cpu", "native", "python"):
        lines = (LISTS / f"{name}.txt").read_text().splitlines()
        entries = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
        for line in entries:
            test_id, sep, reason = line.partition("  # ")
            assert sep and reason.strip(), f"{name}.txt: no reason for {line!r}"
            assert test_id.startswith(("array_api_tests/", "(the suite did not start)")), line
        ids = [ln.partition("  # ")[0] for ln in entries]
        assert len(ids) == len(set(ids)), f"{name}.txt lists a test twice"


def _listed(name: str) -> set[str]:
    lines = (LISTS / f"{name}.txt").read_text().splitlines()
    return {ln.partition("  # ")[0] for ln in lines if ln.strip() and not ln.startswith("#")}


def test_graph_modes_known_failures_lie_within_eager_modes():
    # Graph mode fails nothing eager mode passes: what its list holds, eager mode's holds.
    for graph, eager in (("jax-graph", "jax"), ("jax-graph-x64", "jax-x64")):
        if (LISTS / f"{graph}.txt").exists():
            assert _listed(graph) <= _listed(eager), f"{graph}.txt lists more than {eager}.txt"


def test_the_script_refuses_a_graph_list_beyond_the_eager_one(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / ".ci" / "conformance-known-failures").mkdir(parents=True)
    shutil.copy(SCRIPT, checkout / ".ci" / "conformance")
    known = checkout / ".ci" / "conformance-known-failures"
    (known / "jax.txt").write_text("array_api_tests/test_a.py::test_x  # why\n")
    (known / "jax-graph.txt").write_text(
        "array_api_tests/test_a.py::test_x  # why\narray_api_tests/test_b.py::test_y  # why\n"
    )
    source = (checkout / ".ci" / "conformance").read_text()
    namespace: dict = {
        "__name__": "conformance_under_test",
        "__file__": str(checkout / ".ci" / "c"),
    }
    exec(compile(source, "conformance", "exec"), namespace)  # noqa: S102 - the script itself
    assert namespace["lists_within_eager"]() == 1
