"""Graph mode on JAX: host nodes in a row run as one host callback (one round trip to the host,
not one each), with eager mode's values; ``bf.metrics.graphs()`` counts a program's callbacks
and the nodes each serves. On JAX's CPU here. The operators run on the host are ``exp``,
``negative`` and ``sin`` on a graph backend of their own that serves them with no JAX kernel
(``bj._graph_mode_without``), so the tests do not depend on which operators lack a kernel.
Eager mode's values there are the CPU kernels' (NumPy's) for those operators and the device's
for the rest (float32 multiply and add, rounded alike): the programs run on NumPy are the
reference."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402

ON_HOST = frozenset({"exp", "negative", "sin"})


@pytest.fixture(scope="module")
def hosted():
    compiler, nx = bj._graph_mode_without("JAXGraphTestHostRun", ON_HOST)
    return compiler, nx


@pytest.fixture
def nx(hosted):
    bf.sync()
    bf.metrics.reset()
    yield hosted[1]
    bf.sync()


def data():
    return np.random.default_rng(3).standard_normal((6, 4)).astype(np.float32)


def test_three_host_operators_in_a_row_are_one_host_callback(nx, hosted):
    compiler = hosted[0]
    a = data()

    def program(xp, x):
        return xp.add(xp.sin(xp.negative(xp.exp(xp.multiply(x, 0.5)))), 1.0)

    want = program(np, a)
    before = {f"array_api::{n}": compiler.host_callbacks[f"array_api::{n}"] for n in ON_HOST}
    got = program(nx, nx.asarray(a))
    np.testing.assert_array_equal(np.asarray(got), want)
    g = bf.metrics.graphs()
    assert g["host_callbacks"] == [[3]]  # one program, one callback serving three nodes
    assert (g["callbacks_run"], g["callback_nodes_run"]) == (1, 3)
    # Each operator is still counted as a CPU fallback of its own, once.
    for name, count in before.items():
        assert compiler.host_callbacks[name] == count + 1
        assert bf.metrics.op_stats(name)["backends"]["JAXGraphTestHostRun"]["fallbacks"] == 1
    # Only the run's input crossed to the host and only its last value back: the values
    # passed within the callback moved nowhere.
    crossed = sum(
        bf.metrics.op_stats(f"array_api::{n}")["backends"]["JAXGraphTestHostRun"][k]
        for n in ON_HOST
        for k in ("bytes_to_cpu", "bytes_from_cpu")
    )
    assert crossed == 2 * a.nbytes


def test_a_kernel_that_reads_a_host_value_ends_the_run(nx):
    a = data()

    def program(xp, x):
        e = xp.exp(x)
        k = xp.multiply(e, 2.0)  # a kernel of the device reading the host's value
        return xp.sin(k), xp.negative(xp.add(e, k))

    want = program(np, a)
    got = [np.asarray(r) for r in program(nx, nx.asarray(a))]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    g = bf.metrics.graphs()
    assert g["host_callbacks"] == [[1, 2]]
    assert (g["callbacks_run"], g["callback_nodes_run"]) == (2, 3)


def test_a_kernel_between_host_nodes_that_reads_none_of_them_leaves_one_callback(nx):
    a, b = data(), data()[::-1].copy()

    def program(xp, x, y):
        e = xp.exp(x)
        k = xp.multiply(y, 3.0)  # reads nothing of the host's
        return xp.add(xp.negative(e), xp.sin(k))

    want = program(np, a, b)
    got = np.asarray(program(nx, nx.asarray(a), nx.asarray(b)))
    np.testing.assert_array_equal(got, want)
    g = bf.metrics.graphs()
    assert g["host_callbacks"] == [[3]]
    assert g["callbacks_run"] == 1


def test_a_repeated_program_runs_one_callback_a_run_and_the_report_says_so(nx):
    a = data()

    def program(xp, x):
        return xp.sin(xp.negative(xp.exp(x)))

    for _ in range(3):
        np.asarray(program(nx, nx.asarray(a)))
    g = bf.metrics.graphs()
    assert g["host_callbacks"] == [[3]]  # compiled once
    assert (g["callbacks_run"], g["callback_nodes_run"]) == (3, 9)
    assert "host callbacks: 3 run, serving 9 nodes" in bf.metrics.report()
