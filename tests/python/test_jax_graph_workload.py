"""The workload's graph-mode variants of issue #40 on JAX (``boxfall.workload``): a k-means that
reads a value every step compiles nothing from its third step on and syncs only where it reads;
``maximum`` without its JAX kernel keeps each call one program (a host callback); a
data-dependent operator makes exactly one counted graph break a call. On JAX's CPU here;
``benches/jax_device.py --graph`` gives the same figures with times on a TPU."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
from boxfall import workload  # noqa: E402

PROBLEM = workload.Problem(n=600)


@pytest.fixture(scope="module")
def data():
    return tuple(a.astype(np.float32) for a in workload.make_data(PROBLEM))


@pytest.fixture
def gx():
    bf.sync()
    bf.metrics.reset()
    yield bj.namespace(graph=True)
    bf.sync()


def test_a_convergence_check_compiles_nothing_after_its_second_step(gx, data):
    x, _ = data
    want = workload.kmeans_converging(np, x, PROBLEM)
    assert want[2] >= 4  # enough steps for the claim to say something
    compiler = bj.graph_compiler()
    gxx = gx.asarray(x)
    first = compiler.compiles
    got = workload.kmeans_converging(gx, gxx, PROBLEM)
    # the first step's graph (with the start) and the second's (centers now an input) are
    # new; every later step is the second's graph again
    assert compiler.compiles - first <= 2
    assert got[2] == want[2]
    np.testing.assert_allclose(got[0].numpy(), want[0], rtol=1e-4, atol=1e-4)
    bf.metrics.reset()
    again = compiler.compiles
    got = workload.kmeans_converging(gx, gxx, PROBLEM)
    figures = bf.metrics.graphs()
    assert compiler.compiles == again
    # one sync a step, where the code reads the step's value, and nothing else
    assert sum(figures["syncs"].values()) == want[2]
    assert figures["breaks"] == {}
    np.testing.assert_array_equal(got[1].numpy(), want[1])


def test_without_a_jax_kernel_a_call_stays_one_program(gx, data):
    x, y = data
    compiler, nx = bj._graph_mode_without("JAXGraphTestNoMaximum", frozenset({"maximum"}))
    want = workload.kmeans_ridge(np, x.astype(np.float64), y.astype(np.float64), PROBLEM)
    for call in range(2):
        bf.metrics.reset()
        compiler.host_callbacks.clear()
        got = workload.kmeans_ridge(nx, nx.asarray(x), nx.asarray(y), PROBLEM)
        bf.sync()
        figures = bf.metrics.graphs()
        assert figures["graphs_run"] == 1
        assert figures["breaks"] == {}
        assert compiler.host_callbacks == {"array_api::maximum": PROBLEM.iterations}
        assert figures["compiled"] == (1 if call == 0 else 0)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), w, rtol=2e-3, atol=2e-3)


def test_a_data_dependent_operator_is_one_counted_break_a_call(gx, data):
    x, y = data
    want = workload.kmeans_ridge_clusters_used(np, x, y, PROBLEM)
    gxx, gxy = gx.asarray(x), gx.asarray(y)
    for _ in range(2):
        bf.metrics.reset()
        got = workload.kmeans_ridge_clusters_used(gx, gxx, gxy, PROBLEM)
        bf.sync()
        figures = bf.metrics.graphs()
        assert figures["breaks"] == {"array_api::unique_values": 1}
        assert figures["graphs_run"] == 2
        # the standard leaves the order of unique values to the library
        np.testing.assert_array_equal(np.sort(got[0].numpy()), np.sort(want[0]))
        np.testing.assert_array_equal(got[1].numpy(), want[1])
        np.testing.assert_allclose(got[2].numpy(), want[2], rtol=2e-3, atol=2e-3)
