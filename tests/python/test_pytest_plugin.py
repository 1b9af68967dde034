"""boxfall's pytest plugin (``pytest_boxfall``, issue 37), run by pytester in fresh pytest
processes: boxfall's registry of backends and operators is process-global, so each run gets a
process of its own (``runpytest_subprocess``), where the conftest below registers two Python
backends and three operators.

The plugin is loaded by its entry point, as ``pip install boxfall`` makes it available; the
totals of its table are checked against boxfall's own counters over the repository's OpenCL
tests and over a part of SciPy's array API tests on a boxfall namespace.
"""

from __future__ import annotations

import csv
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boxfall as bf
import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
import numpy as np
import boxfall as bf
from boxfall.testing import register_python_backend

ACCEL = register_python_backend("PlugAccel")
OTHER = register_python_backend("PlugOther")
LIB = bf.Library("plug", "DEF")
LIB.define("add(Tensor a, Tensor b) -> Tensor")
LIB.define("neg(Tensor a) -> Tensor")
LIB.define("relu(Tensor a) -> Tensor")
LIB.impl("add", lambda a, b: a + b, "CPU")
LIB.impl("neg", lambda a: -a, "CPU")
LIB.impl("relu", lambda a: np.maximum(a, 0), "CPU")


def on(backend=ACCEL):
    '''Four float64 ones (32 bytes) on ``backend``.'''
    return backend.tensor(np.ones(4))
"""


def run(pytester: pytest.Pytester, *args: str, **files: str) -> pytest.RunResult:
    """Writes the conftest and ``files`` (module name -> source), then runs pytest on them in a
    process of its own."""
    pytester.makeconftest(CONFTEST)
    if files:
        pytester.makepyfile(**files)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *args)


def rows_of(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``--boxfall-fallbacks-file``, numbers as ints."""
    if path.suffix == ".json":
        return json.loads(path.read_text())
    with path.open(newline="") as f:
        return [
            {k: (v if k in ("test", "operator", "backend") else int(v)) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def fallbacks_by_test(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
    return {(r["test"], r["operator"], r["backend"]): r["fallbacks"] for r in rows}


def test_the_entry_point_is_declared_and_importing_it_imports_neither_boxfall_nor_numpy():
    entry = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "boxfall"]
    assert [e.value for e in entry] == ["pytest_boxfall"]
    code = (
        "import sys, pytest_boxfall; heavy = {'boxfall', 'numpy'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


FALLING = """
import boxfall as bf
from conftest import ACCEL, OTHER, on

def test_many():
    for _ in range(3):
        bf.ops.plug.add(on(), on())
    bf.ops.plug.neg(on())

def test_one():
    bf.ops.plug.neg(on(OTHER))

def test_none():
    pass
"""


def test_not_asked_for_it_loads_but_records_nothing(pytester):
    source = FALLING + (
        "\ndef test_no_recorder(request):\n"
        "    assert request.config.pluginmanager.has_plugin('boxfall')\n"
        "    assert request.config.pluginmanager.get_plugin('boxfall-fallbacks-recorder') is None\n"
    )
    result = run(pytester, test_quiet=source)
    result.assert_outcomes(passed=4)
    result.stdout.no_fnmatch_line("*boxfall CPU fallbacks*")


def test_the_table_lists_operators_most_fallbacks_first_and_tests_against_them(pytester):
    result = run(pytester, "--boxfall-fallbacks", test_table=FALLING)
    result.assert_outcomes(passed=3)
    result.stdout.re_match_lines(
        [
            r"=+ boxfall CPU fallbacks per test =+",
            r"5 fallbacks in 2 of 3 tests: 3 operators on 2 backends",
            r"#\s+operator\s+backend\s+fallbacks\s+failures\s+tests\s+to CPU\s+from CPU",
            r"1\s+plug::add\s+PlugAccel\s+3\s+0\s+1\s+192 B\s+0 B",
            r"2\s+plug::neg\s+PlugAccel\s+1\s+0\s+1\s+32 B\s+0 B",
            r"3\s+plug::neg\s+PlugOther\s+1\s+0\s+1\s+32 B\s+0 B",
            r"tests x operators .*",
            r"test\s+total\s+1\s+2\s+3",
            r"test_table.py::test_many\s+4\s+3\s+1\s+\.",
            r"test_table.py::test_one\s+1\s+\.\s+\.\s+1",
            r"total\s+5\s+3\s+1\s+1",
        ],
        consecutive=False,
    )
    result.stdout.no_re_match_line(r"test_table.py::test_none\s+\d")


def test_the_table_lists_the_top_operators_and_tests_and_still_counts_them_all(pytester):
    result = run(pytester, "--boxfall-fallbacks", "--boxfall-fallbacks-top", "1", test_top=FALLING)
    result.stdout.re_match_lines(
        [
            r"1\s+plug::add\s+PlugAccel\s+3",
            r"\.\.\. 2 more operators .*",
            r"test\s+total\s+1\s+other",
            r"test_top.py::test_many\s+4\s+3\s+1",
            r"\.\.\. 1 more tests .*",
            r"total\s+5\s+3\s+2",
        ]
    )


def test_a_run_without_fallbacks_says_so(pytester):
    result = run(pytester, "--boxfall-fallbacks", test_clean="def test_a():\n    pass\n")
    result.stdout.fnmatch_lines(["no operator fell back to the CPU in the 1 tests recorded"])


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_the_file_has_a_row_per_test_and_operator_with_the_columns_of_to_csv(pytester, suffix):
    out = pytester.path / f"fallbacks{suffix}"
    result = run(pytester, f"--boxfall-fallbacks-file={out}", test_file=FALLING)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"written to {out}"])
    rows = rows_of(out)
    assert fallbacks_by_test(rows) == {
        ("test_file.py::test_many", "plug::add", "PlugAccel"): 3,
        ("test_file.py::test_many", "plug::neg", "PlugAccel"): 1,
        ("test_file.py::test_one", "plug::neg", "PlugOther"): 1,
    }
    assert [list(r) for r in rows] == [["test", "operator", "backend", *bf.metrics.FIELDS]] * 3
    add = rows[0]
    assert (add["failures"], add["bytes_to_cpu"]) == (0, 3 * 64)
    assert add["fallback_ns"] >= add["to_cpu_ns"] + add["kernel_ns"] + add["from_cpu_ns"] > 0


def test_a_file_that_is_neither_json_nor_csv_is_a_usage_error(pytester):
    result = run(pytester, "--boxfall-fallbacks-file=out.txt", test_x=FALLING)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--boxfall-fallbacks-file must end in .json or .csv*"])


RESETTING = """
import pytest
import boxfall as bf
from conftest import OTHER, on

@pytest.fixture
def made_in_setup():
    return bf.ops.plug.relu(on(OTHER))

def test_setup_only(made_in_setup):
    pass

def test_resets(boxfall_fallbacks):
    bf.ops.plug.neg(on())
    bf.metrics.reset()
    bf.ops.plug.neg(on())
    bf.ops.plug.add(on(), on())
    assert bf.metrics.counters() == {"plug::neg": 1, "plug::add": 1}  # the reset did reset
    assert dict(boxfall_fallbacks) == {"plug::neg": 2, "plug::add": 1}
    bf.metrics.reset()
    assert dict(boxfall_fallbacks) == {"plug::neg": 2, "plug::add": 1}

def test_many_first():
    for _ in range(3):
        bf.ops.plug.relu(on())

def test_a_reset_the_plugin_is_not_told_of():
    bf.ops.plug.relu(on())
    bf._boxfall.reset_metrics()  # not bf.metrics.reset(): the counters go down unannounced
    bf.ops.plug.relu(on())
"""


def test_a_test_that_resets_the_metrics_does_not_erase_the_records(pytester):
    out = pytester.path / "fallbacks.json"
    result = run(pytester, f"--boxfall-fallbacks-file={out}", test_reset=RESETTING)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        ["1 fallbacks outside the tests' calls (collection, fixtures; not in the table): "
         "plug::relu on PlugOther 1"]
    )  # fmt: skip
    assert fallbacks_by_test(rows_of(out)) == {
        ("test_reset.py::test_resets", "plug::neg", "PlugAccel"): 2,
        ("test_reset.py::test_resets", "plug::add", "PlugAccel"): 1,
        ("test_reset.py::test_many_first", "plug::relu", "PlugAccel"): 3,
        # Counts that went down: what was counted since that reset (the call before it, of
        # which nobody told the plugin, is lost).
        ("test_reset.py::test_a_reset_the_plugin_is_not_told_of", "plug::relu", "PlugAccel"): 1,
        # The fixture's fallback, in no test's call: a row of its own.
        ("<outside the tests' calls>", "plug::relu", "PlugOther"): 1,
    }


MARKED = """
import numpy as np
import pytest
import boxfall as bf
from conftest import ACCEL, OTHER, on

no_fallback = pytest.mark.boxfall_no_fallback

@no_fallback(backend="PlugAccel")
def test_any_op_fails():
    bf.ops.plug.neg(on())
    bf.ops.plug.neg(on())

@no_fallback(backend="PlugAccel")
def test_another_backend_passes():
    bf.ops.plug.neg(on(OTHER))

@no_fallback()
def test_any_backend_fails():
    bf.ops.plug.neg(on(OTHER))

@no_fallback(ops=["plug::add"])
def test_a_listed_op_fails():
    bf.ops.plug.add(on(), on())

@no_fallback(ops=[bf.ops.plug.add.default])
def test_an_unlisted_op_passes():
    bf.ops.plug.neg(on())

@no_fallback(backend="PlugAccel")
def test_no_fallback_passes():
    assert on().shape == (4,)

def negate(x):
    '''A client that tries boxfall and takes another path when it raises.'''
    try:
        return bf.ops.plug.neg(x).numpy()
    except NotImplementedError:
        return -x.numpy()

@no_fallback(backend="PlugAccel", ops=["plug::neg"])
def test_a_client_that_catches_the_error_still_fails():
    bf.set_fallback_policy("error")
    try:
        assert (negate(on()) == -1).all()
    finally:
        bf.set_fallback_policy("allow")

@pytest.fixture
def made_in_setup():
    return bf.ops.plug.neg(on())

@no_fallback(backend="PlugAccel")
def test_fallbacks_in_setup_do_not_count(made_in_setup):
    pass

@no_fallback(ops=["plug::no_such_op"])
def test_an_unknown_op_is_an_error():
    pass

@no_fallback(backend="PlugOther")
class TestClass:
    def test_a_method_fails(self):
        bf.ops.plug.relu(on(OTHER))
"""

MODULE_MARKED = """
import pytest
import boxfall as bf
from conftest import on

pytestmark = pytest.mark.boxfall_no_fallback(backend="plugaccel")  # any case

def test_the_module_marker_fails():
    bf.ops.plug.relu(on())

@pytest.mark.boxfall_no_fallback(ops=["plug::add"])
def test_both_markers_apply():
    bf.ops.plug.add(on(), on())
"""


@pytest.mark.parametrize("flag", [[], ["--boxfall-fallbacks"]], ids=["marker-alone", "with-flag"])
def test_the_marker_fails_a_test_at_teardown_naming_the_operators(pytester, flag):
    result = run(pytester, *flag, test_marked=MARKED, test_module_marked=MODULE_MARKED)
    failing = [
        "test_any_op_fails",
        "test_any_backend_fails",
        "test_a_listed_op_fails",
        "test_a_client_that_catches_the_error_still_fails",
        "test_an_unknown_op_is_an_error",
        "TestClass::test_a_method_fails",
        "test_the_module_marker_fails",
        "test_both_markers_apply",
    ]
    # Every call passed: the marker does not raise inside the operator; each failing test
    # errors at its teardown.
    result.assert_outcomes(passed=12, errors=len(failing))
    for name in failing:
        result.stdout.fnmatch_lines([f"ERROR test_*marked.py::{name} - *"])
    for name in ["another_backend", "an_unlisted_op", "no_fallback_passes", "in_setup"]:
        result.stdout.no_fnmatch_line(f"ERROR *{name}*")
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_any_op_fails*",
            "boxfall_no_fallback(backend='PlugAccel'): the test's call ran through the CPU "
            "fallback: plug::neg on PlugAccel: 2 fallbacks",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*plug::neg on PlugAccel: 1 fallback (1 refused or failed)"], consecutive=False
    )
    result.stdout.fnmatch_lines(
        ["boxfall_no_fallback(ops=?'plug::no_such_op'?): unknown operator 'plug::no_such_op'*"]
    )
    # Both markers of test_both_markers_apply (the module's and its own) name the operator.
    text = result.stdout.str()
    both = text[text.index("ERROR at teardown of test_both_markers_apply") :]
    assert both.count("plug::add on PlugAccel: 1 fallback") >= 2


MISUSED = """
import pytest
import boxfall as bf
from conftest import ACCEL, on

RAN = []

@pytest.mark.boxfall_no_fallback("PlugAccel")
def test_a_positional_backend():
    RAN.append(1)

@pytest.mark.boxfall_no_fallback(opz=["plug::neg"])
def test_a_misspelt_keyword():
    RAN.append(1)

@pytest.mark.boxfall_no_fallback(backend=3)
def test_a_backend_of_the_wrong_type():
    RAN.append(1)

@pytest.mark.boxfall_no_fallback(ops=[3.5])
def test_an_op_of_the_wrong_type():
    RAN.append(1)

def test_none_of_them_ran():
    assert RAN == []
"""


def test_a_misused_marker_is_an_error_at_setup_and_its_test_does_not_run(pytester):
    # Issue 53: these were reported at teardown, after the test had run and passed ("6 passed,
    # 3 errors"), through the plugin's internals.
    result = run(pytester, test_misused=MISUSED)
    result.assert_outcomes(passed=1, errors=4)
    for name, says in [
        ("test_a_positional_backend", "boxfall_no_fallback('PlugAccel'): takes keywords only "
         "(backend=..., ops=[...]), not the positional argument 'PlugAccel'"),
        ("test_a_misspelt_keyword", "boxfall_no_fallback(opz=['plug::neg']): takes backend= "
         "and ops=, not opz="),
        ("test_a_backend_of_the_wrong_type", "boxfall_no_fallback(backend=3): backend= is a "
         "backend's name or a bf.Backend, not int"),
        ("test_an_op_of_the_wrong_type", "boxfall_no_fallback(ops=[3.5]): ops are operator "
         "names or bf.OpOverloads, not float"),
    ]:  # fmt: skip
        says = "".join(f"[{c}]" if c in "[]*?" else c for c in says)  # as fnmatch reads it
        result.stdout.fnmatch_lines([f"*ERROR at setup of {name}*", says], consecutive=False)
    result.stdout.no_fnmatch_line("*pytest_boxfall*")  # no traceback through the plugin
    result.stdout.no_fnmatch_line("*ERROR at teardown*")


BACKENDS = """
import pytest
import boxfall as bf
from conftest import ACCEL, OTHER, on

@pytest.mark.boxfall_no_fallback(backend="PlugAcel")
def test_a_misspelt_backend_fails_naming_the_backends():
    bf.ops.plug.neg(on())

@pytest.mark.boxfall_no_fallback(backend=ACCEL)
def test_a_backend_object_that_fell_back_fails():
    bf.ops.plug.neg(on())

@pytest.mark.boxfall_no_fallback(backend=ACCEL)
def test_a_backend_object_that_did_not_fall_back_passes():
    bf.ops.plug.neg(on(OTHER))

@pytest.mark.boxfall_no_fallback(backend="PlugLater")
def test_a_backend_the_test_registers_counts():
    from boxfall.testing import register_python_backend

    later = register_python_backend("PlugLater")
    bf.ops.plug.neg(later.tensor(on().numpy()))
"""


def test_the_markers_backend_is_a_known_name_or_a_backend_object(pytester):
    # Issue 53: a misspelt backend, or a Backend object, passed a test that fell back.
    result = run(pytester, test_backends=BACKENDS)
    result.assert_outcomes(passed=4, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_a_misspelt_backend_fails_naming_the_backends*",
            "boxfall_no_fallback(backend='PlugAcel'): no backend is named 'PlugAcel'; the "
            "registered backends are Native, PlugAccel, PlugOther*",
        ],
        consecutive=False,
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_a_backend_object_that_fell_back_fails*",
            "*the test's call ran through the CPU fallback: plug::neg on PlugAccel: 1 fallback",
        ],
        consecutive=False,
    )
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_a_backend_the_test_registers_counts*",
         "*plug::neg on PlugLater: 1 fallback"],
        consecutive=False,
    )  # fmt: skip
    result.stdout.no_fnmatch_line("*ERROR*did_not_fall_back*")


def test_a_file_into_a_missing_directory_is_a_usage_error_before_any_test(pytester):
    # Issue 53: every test ran, then the records were lost in a bare traceback at the end.
    out = pytester.path / "no" / "such" / "dir" / "fallbacks.json"
    result = run(
        pytester,
        f"--boxfall-fallbacks-file={out}",
        test_x="def test_a():\n    raise SystemExit(7)\n",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--boxfall-fallbacks-file {str(out)!r}: the directory * does not exist*"]
    )
    assert not (pytester.path / "no").exists()


FIXTURE = """
import pytest
import boxfall as bf
from conftest import OTHER, on

@pytest.fixture
def made_in_setup():
    return bf.ops.plug.relu(on())

def test_fixture(made_in_setup, boxfall_fallbacks):
    assert not boxfall_fallbacks and len(boxfall_fallbacks) == 0  # setup's relu is not counted
    bf.ops.plug.neg(on())
    bf.ops.plug.neg(on())
    bf.ops.plug.add(on(OTHER), on(OTHER))
    assert dict(boxfall_fallbacks) == {"plug::neg": 2, "plug::add": 1}
    assert boxfall_fallbacks["plug::neg"] == 2
    assert boxfall_fallbacks[bf.ops.plug.add.default] == 1
    assert boxfall_fallbacks["plug::relu"] == 0 and "plug::relu" not in boxfall_fallbacks
    assert boxfall_fallbacks.counts("plugother") == {"plug::add": 1}
    assert boxfall_fallbacks.total() == 3 and boxfall_fallbacks.total("PlugAccel") == 2
    first, second = boxfall_fallbacks.rows()
    assert (first["operator"], first["backend"]) == ("plug::neg", "PlugAccel")
    assert first["fallbacks"] == 2
    assert (second["operator"], second["backend"]) == ("plug::add", "PlugOther")
    assert first["bytes_to_cpu"] == 64 and set(bf.metrics.FIELDS) <= set(first)
    assert repr(boxfall_fallbacks) == "Fallbacks({'plug::neg': 2, 'plug::add': 1})"

def test_another_test_starts_from_nothing(boxfall_fallbacks):
    assert dict(boxfall_fallbacks) == {}
"""


def test_the_fixture_gives_the_fallbacks_the_test_caused_so_far(pytester):
    result = run(pytester, test_fixture=FIXTURE)
    result.assert_outcomes(passed=2)


XDIST_A = FALLING
XDIST_B = """
import pytest
import boxfall as bf
from conftest import on

@pytest.mark.parametrize("n", [1, 2, 3])
def test_relu(n):
    for _ in range(n):
        bf.ops.plug.relu(on())

@pytest.mark.boxfall_no_fallback(backend="PlugAccel")
def test_marked():
    bf.ops.plug.neg(on())
"""


def test_under_xdist_the_workers_records_are_merged(pytester):
    if importlib.util.find_spec("xdist") is None:
        pytest.skip("pytest-xdist is not installed (pip install pytest-xdist)")
    out = pytester.path / "fallbacks.csv"
    result = run(
        pytester, "-n", "2", f"--boxfall-fallbacks-file={out}", test_a=XDIST_A, test_b=XDIST_B
    )
    result.assert_outcomes(passed=7, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_marked*", "*[[]gw?[]]*"])
    workers = {line.split()[1] for line in result.stdout.lines if line.startswith("[gw")}
    assert fallbacks_by_test(rows_of(out)) == {
        ("test_a.py::test_many", "plug::add", "PlugAccel"): 3,
        ("test_a.py::test_many", "plug::neg", "PlugAccel"): 1,
        ("test_a.py::test_one", "plug::neg", "PlugOther"): 1,
        ("test_b.py::test_relu[1]", "plug::relu", "PlugAccel"): 1,
        ("test_b.py::test_relu[2]", "plug::relu", "PlugAccel"): 2,
        ("test_b.py::test_relu[3]", "plug::relu", "PlugAccel"): 3,
        ("test_b.py::test_marked", "plug::neg", "PlugAccel"): 1,
    }
    result.stdout.re_match_lines([r"12 fallbacks in 6 of 7 tests: 4 operators on 2 backends"])
    assert workers, result.stdout.str()


# ---- the table's totals against boxfall's own counters, in the same run -------------------------

COUNT_CHECK = '''
"""Counts every CPU fallback of the run per (operator, backend), by itself: boxfall's counters
at the end, less those at the start, plus what each bf.metrics.reset() zeroed (it wraps
reset). Writes {"operator|backend": fallbacks} to $BOXFALL_COUNT_CHECK at the end."""
import json
import os

from boxfall import metrics

total = {}
base = {}


def now():
    return {
        f"{op}|{b}": f["fallbacks"]
        for op, s in metrics.to_dict().items()
        for b, f in s["backends"].items()
    }


def bank():
    for k, v in now().items():
        total[k] = total.get(k, 0) + v - base.get(k, 0)


original_reset = metrics.reset


def reset():
    global base
    bank()
    original_reset()
    base = {}


metrics.reset = reset


def pytest_sessionstart(session):
    base.update(now())


def pytest_sessionfinish(session):
    bank()
    with open(os.environ["BOXFALL_COUNT_CHECK"], "w") as f:
        json.dump({k: v for k, v in total.items() if v}, f)
'''


def _why_no_opencl() -> str | None:
    try:
        import pyopencl as cl

        if not any(p.get_devices() for p in cl.get_platforms()):
            return "no OpenCL platform has a device"
    except Exception as e:  # noqa: BLE001 - any failure means no OpenCL device here
        return f"no OpenCL device ({type(e).__name__}: {e})"
    return None


def _why_no_scipy() -> str | None:
    for module in ("scipy", "array_api_compat"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    return None


SUITES = {
    # The repository's own tests of the OpenCL example backend (about 200 tests).
    "opencl": (_why_no_opencl, [str(ROOT / "tests" / "python" / "test_opencl_backend.py")]),
    # SciPy's array API tests of scipy.cluster on the namespace of a Python backend, as
    # tests/clients/run.py runs them (about 190 tests).
    "scipy.cluster": (
        _why_no_scipy,
        [
            "--pyargs",
            "scipy.cluster",
            "-m",
            "array_api_backends",
            "-p",
            "boxfall_clients",
            "--boxfall-clients-only",
            "-k",
            "boxfall_python",
            "-W",
            "ignore::DeprecationWarning",
        ],
    ),
}


@pytest.mark.parametrize("suite", list(SUITES))
def test_the_tables_totals_equal_the_fallbacks_boxfall_counted_in_the_run(
    pytester, monkeypatch, suite
):
    why_not, args = SUITES[suite]
    why = why_not()
    if why is not None:
        pytest.skip(why)
    pytester.makepyfile(boxfall_count_check=COUNT_CHECK)
    counted = pytester.path / "counted.json"
    out = pytester.path / "fallbacks.json"
    monkeypatch.setenv("BOXFALL_COUNT_CHECK", str(counted))
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    monkeypatch.setenv("BOXFALL_FALLBACK", "allow")
    paths = [str(pytester.path), str(ROOT / "tests" / "clients"), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "boxfall_count_check", f"--boxfall-fallbacks-file={out}",
        *args,
    )  # fmt: skip
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    # The file's rows: one per test and operator, and those of the fallbacks outside the tests'
    # calls (SciPy's xp fixture makes an array on the namespace in every test's setup).
    rows = rows_of(out)
    file: dict[str, int] = {}
    for row in rows:
        key = f"{row['operator']}|{row['backend']}"
        file[key] = file.get(key, 0) + row["fallbacks"]
    assert file == json.loads(counted.read_text())
    in_calls = sum(r["fallbacks"] for r in rows if r["test"] != "<outside the tests' calls>")
    assert in_calls > 100, rows  # the suite did fall back
    result.stdout.re_match_lines(
        [rf"{in_calls} fallbacks in \d+ of \d+ tests: .*", rf"total\s+{in_calls}\b.*"],
        consecutive=False,
    )
