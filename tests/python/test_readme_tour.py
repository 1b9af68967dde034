"""The README's Python blocks run as a newcomer would paste them, one after another in a fresh
interpreter: every name they use is one they defined (the tour once called
``bf.call_fallback(bf.cpu_fallback, op, ...)`` with no ``op``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def readme_python() -> str:
    return "\n".join(BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8")))


def test_the_readme_python_blocks_run_in_order(tmp_path):
    pytest.importorskip("matplotlib")  # the metrics block draws bf.metrics.plot's chart
    script = tmp_path / "tour.py"
    script.write_text(readme_python(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,  # the blocks write fallbacks.csv and fallbacks.png here
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "fallbacks.png").exists() and (tmp_path / "fallbacks.csv").exists()


def test_the_blocks_are_found():
    # The tour, the backend, a backend's own fallback, the metrics, and backend authors' habits.
    assert len(BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))) >= 5
