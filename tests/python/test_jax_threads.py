"""boxfall.jax's writes from several threads: a write through a view reads the view's values,
writes its part on the host and writes the view back into its base whole, so two threads
writing two parts of one base lost one's writes now and then (scikit-learn's
``_parallel_pairwise``: joblib's threads each write ``dist_matrix[slice_, ...]`` of one
transposed array). The CPU fallback holds the base's write lock for the call, so each write
sees the others'. Eager and graph mode: there ``ret``, the transpose of a pending ``empty``, is
no view but a pending tensor, whose writes are recorded functionally (a read of it, then its
rebinding to the result), the lock held from the read to the rebinding."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

import boxfall.jax as bj  # noqa: E402
from graph_backend import run_threads  # noqa: E402


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_threads_writing_parts_of_one_view_lose_no_write(graph):
    xp = bj.namespace(graph=graph)
    n, rows = 4, 3
    blocks = [np.full((rows, 5), k + 1.0, np.float32) for k in range(n)]
    values = [xp.asarray(b) for b in blocks]
    for _ in range(40):
        ret = xp.empty((5, n * rows), dtype=xp.float32).T  # a view: rows of it are columns

        def write(k, ret=ret):
            ret[k * rows : (k + 1) * rows, ...] = values[k]

        assert run_threads(n, write) == []
        np.testing.assert_array_equal(np.asarray(ret), np.concatenate(blocks))
