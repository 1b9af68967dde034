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
