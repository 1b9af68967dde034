"""The array API guide's story (docs/array-api.md), run as written: a Python backend with three
copy hooks and five kernels of its own runs the whole standard, the rest through the CPU
fallback.

The block registers the backend name "Accel", which other tests register too, so it runs in a
fresh interpreter; the checks after it are appended to the block's own code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "array-api.md"

CHECKS = """
import numpy as np
totals = bf.coverage("Accel", namespace="array_api").totals()
assert totals["kernel"] == 5 and totals["missing"] == 0, totals
assert totals["backend fallback"] > 200, totals
wn = np.array([[1.0, 2.0], [3.0, 4.0]]); vn = np.ones(2)
yn = np.exp(-(wn @ vn)) * 2 + vn
assert y.device == "Accel:0"
np.testing.assert_allclose(y.numpy(), yn)
np.testing.assert_allclose(xp.linalg.solve(w, y).numpy(), np.linalg.solve(wn, yn))
counted = bf.metrics.counters()
assert "array_api::add" not in counted and "array_api::matmul" not in counted, counted
assert counted["array_api::linalg_solve"] == 2 and counted["array_api::argsort"] == 1, counted
print("guide block OK")
"""


def _block() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")  # the guide's first block
    return text[start : text.index("```\n", start)]


def test_the_guide_s_first_block_runs_five_kernels_and_the_rest_through_the_fallback():
    code = _block() + CHECKS
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "guide block OK" in done.stdout
    assert "implement natively first on Accel" in done.stdout
