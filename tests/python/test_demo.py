"""The command line: ``python -m boxfall demo`` runs, agrees with NumPy and reports fallbacks."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

ERROR_LINE = re.compile(r"^max abs error: (\S+)", re.MULTILINE)


def run_boxfall(*args: str, cwd) -> subprocess.CompletedProcess:
    """``python -m boxfall ARGS`` in a fresh interpreter, with the default fallback policy."""
    env = {k: v for k, v in os.environ.items() if k != "BOXFALL_FALLBACK"}
    return subprocess.run(
        [sys.executable, "-m", "boxfall", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One run of ``python -m boxfall demo --steps 2``."""
    return run_boxfall("demo", "--steps", "2", cwd=tmp_path_factory.mktemp("demo"))


def test_demo_exits_zero(demo_run):
    assert demo_run.returncode == 0, demo_run.stdout + demo_run.stderr


def test_demo_matches_numpy(demo_run):
    match = ERROR_LINE.search(demo_run.stdout)
    assert match, demo_run.stdout
    assert float(match.group(1)) < 1e-9


def test_demo_reports_fallen_back_operators(demo_run):
    out = demo_run.stdout
    # layer_norm and linear have only CPU kernels: they reach Accel through the fallback.
    assert "demo::layer_norm" in out
    assert "demo::linear" in out


def test_help_lists_the_subcommands(tmp_path):
    result = run_boxfall("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "demo" in result.stdout
    assert "bench" in result.stdout


def test_demo_rejects_bad_options(tmp_path):
    result = run_boxfall("demo", "--steps", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "--steps" in result.stderr


def test_demo_plot(tmp_path):
    plot = tmp_path / "fallbacks.png"
    result = run_boxfall("demo", "--steps", "1", "--hidden", "8", "--plot", str(plot), cwd=tmp_path)
    if importlib.util.find_spec("matplotlib") is None:
        assert result.returncode == 2
        assert "matplotlib" in result.stderr
        assert not plot.exists()
    else:
        assert result.returncode == 0, result.stdout + result.stderr
        assert plot.stat().st_size > 0


def test_demo_on_native_uses_rust_kernels_and_the_fallback(tmp_path):
    run = run_boxfall("demo", "--backend", "native", "--steps", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    match = ERROR_LINE.search(run.stdout)
    assert match and float(match.group(1)) < 1e-9, run.stdout
    assert "dispatch table of demo::matmul for Native: kernel" in run.stdout
    report = run.stdout.split("bytes from CPU", 1)[1]
    assert "demo::layer_norm" in report  # CPU-only: through the fallback
    assert "demo::relu " not in report  # a Rust kernel: never falls back


@pytest.fixture(scope="module")
def array_api_run(tmp_path_factory):
    """One run of ``python -m boxfall demo --workload array-api --steps 3``."""
    return run_boxfall(
        "demo", "--workload", "array-api", "--steps", "3", cwd=tmp_path_factory.mktemp("xp")
    )


def test_array_api_workload_matches_numpy(array_api_run):
    assert array_api_run.returncode == 0, array_api_run.stdout + array_api_run.stderr
    match = ERROR_LINE.search(array_api_run.stdout)
    assert match, array_api_run.stdout
    assert float(match.group(1)) < 1e-9
    for result in ("centroids", "labels", "inertia", "w", "rmse"):
        assert re.search(rf"^  {result} +max abs difference", array_api_run.stdout, re.MULTILINE)


def test_array_api_workload_reports_what_fell_back(array_api_run):
    report = array_api_run.stdout.split("bytes from CPU", 1)[1]
    # Accel has no kernel of its own for these: they ran through the CPU fallback.
    for op in ("argmin", "matmul", "linalg_solve", "multiply.Scalar_Tensor"):
        assert f"array_api::{op} " in report, op
    # Views (expand_dims, .T) are served by boxfall itself: no operator ran for them.
    for op in ("expand_dims", "permute_dims"):
        assert f"array_api::{op} " not in report, op
    # Accel's own kernels (Tensor-Tensor overloads) never fall back.
    for op in ("add", "multiply", "sum"):
        assert f"array_api::{op} " not in report, op


def test_array_api_workload_fails_on_a_wrong_result(tmp_path):
    # The device run's fit made wrong by 1e-6: the check against NumPy must catch it.
    script = (
        "import sys, numpy as np\n"
        "from boxfall import demo, demo_array_api as d\n"
        "real = d.workload\n"
        "def wrong(xp, data, iterations):\n"
        "    out = real(xp, data, iterations)\n"
        "    if xp is not np:\n"
        "        out['w'] = out['w'] + 1e-6\n"
        "    return out\n"
        "d.workload = wrong\n"
        "sys.exit(demo.main(['--workload', 'array-api', '--steps', '2']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "BOXFALL_FALLBACK"}
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert re.search(r"^max abs error: 1\.0\d*e-06 .* FAILED$", run.stdout, re.MULTILINE)


def test_array_api_workload_runs_on_accel_only(tmp_path):
    run = run_boxfall("demo", "--workload", "array-api", "--backend", "native", cwd=tmp_path)
    assert run.returncode == 2
    assert "--backend accel" in run.stderr
