"""docs/graph-mode.md's Python blocks run as written, one after another in a fresh interpreter
(JAX's CPU): the page's API (bf.sync's siblings, bf.graph.dump, bf.graph.is_pending, a user's
operator with a shape rule) is the package's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "graph-mode.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def test_the_page_python_blocks_run_and_record(tmp_path):
    blocks = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 2  # the tour, and a user's operator with a shape rule
    # After the page's own lines: what they say holds (the rule made the operator record).
    check = (
        "\nz = pairs(x, 3)\n"
        "assert bf.graph.is_pending(z), 'the operator with a rule was not recorded'\n"
        "assert z.shape == (18,) and float(z[0]) == 0.0\n"
        "assert not bf.metrics.graphs()['breaks']\n"
    )
    script = tmp_path / "page.py"
    script.write_text("\n".join(blocks) + check, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "graph of JAXGraph" in done.stdout  # bf.graph.dump()'s pending graph
