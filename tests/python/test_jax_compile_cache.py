"""``bj.enable_compilation_cache``: a graph-mode program compiled by one process is loaded, not
compiled, by the next process that turns the cache on in the same directory, however quickly it
compiled (JAX's default keeps no program that compiled in under a second: graph mode's small
programs were never kept). Counted by JAX's monitoring events, in fresh processes; no timing
(``benches/jax_compile_cache.py`` times it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("jax")

CHILD = r"""
import json, sys
from collections import Counter
import jax
import numpy as np
import boxfall as bf
import boxfall.jax as bj

counts = Counter()
jax.monitoring.register_event_listener(lambda event, **_: counts.update([event]))
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **_: counts.update([event])
)
ex = bj.namespace()
if sys.argv[2] == "late":
    # a compile before the cache is on: JAX has decided about its cache once already
    float(ex.sum(ex.asarray(np.arange(3.0, dtype=np.float32)) * 2.0))
folder = bj.enable_compilation_cache(sys.argv[1])
counts.clear()
gx = bj.namespace(graph=True)
x = gx.asarray(np.arange(12.0, dtype=np.float32).reshape(4, 3))
y = gx.matmul(gx.exp(x * 0.1) + 1.5, gx.matrix_transpose(x))
out = np.asarray(gx.sum(y, axis=0))
print(json.dumps({
    "folder": folder,
    "compiles": counts["/jax/core/compile/backend_compile_duration"],
    "hits": counts["/jax/compilation_cache/cache_hits"],
    "writes": counts["/jax/compilation_cache/cache_misses"],
    "graphs": bf.metrics.graphs()["compiled"],
    "out": out.tolist(),
}))
"""


def _child(folder, when):
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), when],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_graph_modes_programs_and_compiles_none(tmp_path):
    folder = tmp_path / "cache" / "jax"  # made by the call
    first = _child(folder, "late")
    assert first["folder"] == str(folder)
    assert first["graphs"] == 1
    # The first process compiled its programs and wrote each, although each compiled quickly.
    assert first["compiles"] >= 1 and first["hits"] == 0
    assert first["writes"] == first["compiles"]
    assert any(folder.iterdir())
    second = _child(folder, "early")
    # Every request to XLA's compile step was answered by the cache: nothing compiled anew.
    assert second["graphs"] == 1  # boxfall still made the graph's program (traced, lowered)
    assert second["compiles"] == second["hits"] >= 1
    assert second["writes"] == 0
    assert second["out"] == first["out"]
