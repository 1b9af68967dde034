"""``boxfall.jax`` on two JAX devices: each namespace's tensors live on its own device, in eager
and in graph mode, and move between devices by ``jax.device_put``. Run by
``test_jax_devices.py`` in a process of its own, where JAX's CPU shows two devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=2``, read when JAX starts); on a machine
with two accelerators, ``python -m pytest tests/python/jax_two_devices.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402

if len(jax.devices()) < 2:
    pytest.skip("JAX shows one device here", allow_module_level=True)

D0, D1 = jax.devices()[:2]


def on(t: Any) -> Any:
    """The JAX device a tensor's payload is on."""
    (device,) = t.payload.devices()
    return device


@pytest.fixture(params=[False, True], ids=["eager", "graph"])
def xp1(request: Any) -> Any:
    return bj.namespace(1, graph=request.param)


def test_a_namespace_by_index_or_device_object_is_that_device():
    assert bj.namespace(D1).zeros(2).device == "JAX:1"
    assert bj.namespace(1, graph=True).zeros(2).device == "JAXGraph:1"
    with pytest.raises(ValueError, match="no device of index 2"):
        bj.namespace(2)


def test_creation_functions_make_their_arrays_on_the_namespaces_device(xp1):
    made = [
        xp1.zeros(3),
        xp1.ones((2, 2)),
        xp1.full(2, 0.5),
        xp1.arange(4),
        xp1.eye(3),
        xp1.asarray(np.arange(3.0, dtype=np.float32)),
        xp1.asarray(jax.device_put(np.ones(2, np.float32), D0), device=xp1.zeros(1).device),
        xp1.linspace(0, 1, 5),
    ]
    bf.sync()
    for t in made:
        assert t.device.endswith(":1") and on(t) == D1
    np.testing.assert_array_equal(np.asarray(made[3]), [0, 1, 2, 3])


def test_kernels_and_the_cpu_fallback_keep_results_on_the_device(xp1):
    x = xp1.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    kernel = xp1.sum(xp1.matmul(x, xp1.matrix_transpose(x)) + 1.0, axis=1)
    like = xp1.ones_like(x)
    fell_back = xp1.unique_values(xp1.asarray(np.array([3, 1, 3], np.int32)))  # no JAX kernel
    empty = x[:, 0:0]  # a view of no elements
    bf.sync()
    for t in (kernel, like, fell_back):
        assert t.device.endswith(":1") and on(t) == D1
    np.testing.assert_allclose(np.asarray(kernel), [21.0, 66.0])
    np.testing.assert_array_equal(np.asarray(fell_back), [1, 3])
    assert np.asarray(empty).shape == (2, 0)


def test_an_in_place_write_through_the_host_stays_on_the_device():
    # copy_from_cpu makes the new payload where the old one was.
    payload = jax.device_put(np.zeros(3, np.float32), D1)
    written = bj.device_hooks.copy_from_cpu(payload, np.ones(3, np.float32))
    assert written.devices() == {D1}
    np.testing.assert_array_equal(np.asarray(written), [1.0, 1.0, 1.0])


def test_to_device_between_jax_devices_is_a_device_put_not_the_host():
    x0 = bj.namespace(0).asarray(np.arange(4.0, dtype=np.float32))
    assert on(x0) == D0  # its payload made before the counts start
    bf.metrics.reset()
    x1 = x0.to_device("JAX:1")
    g1 = x1.to_device("JAXGraph:1")
    back = bj.namespace(1, graph=True).add(g1, 1.0).to_device("JAX:0")
    assert (x1.device, on(x1)) == ("JAX:1", D1)
    assert (g1.device, on(g1)) == ("JAXGraph:1", D1)
    assert (back.device, on(back)) == ("JAX:0", D0)
    moved = bf.metrics.transfers()
    assert all(c["to_host"] == c["materialized"] == 0 for c in moved.values()), moved
    np.testing.assert_array_equal(np.asarray(back), [1.0, 2.0, 3.0, 4.0])


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_call_on_two_devices_is_refused_naming_both(graph):
    # Arrays placed on their devices (JAX's committed arrays; an array JAX made with no device
    # asked follows the other, as in JAX itself).
    xp0, xp1 = bj.namespace(0, graph=graph), bj.namespace(1, graph=graph)
    a = xp0.asarray(np.zeros(2, np.float32))
    b = xp1.asarray(np.ones(2, np.float32))
    for f in (xp1.add, xp1.matmul):
        with pytest.raises(bf.BoxfallError, match=r"two devices, JAX(Graph)?:0 and JAX(Graph)?:1"):
            f(a, b)
    if graph:
        with pytest.raises(bf.BoxfallError, match="two devices"):
            xp1.add(xp0.add(a, 1.0), xp1.add(b, 1.0))  # pending tensors of two devices
    bf.sync()


def test_graph_mode_on_the_second_device_computes_there():
    g = bj.namespace(1, graph=True)
    e = bj.namespace(1)
    data = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)

    def step(xp: Any, x: Any) -> Any:
        c = xp.take(x, xp.arange(3), axis=0)
        d = xp.sum(xp.multiply(x, x), axis=1, keepdims=True) - 2.0 * (x @ c.T)
        return xp.argmin(d, axis=1), xp.mean(x, axis=0)

    bf.metrics.reset()
    got = step(g, g.asarray(data))
    want = step(e, e.asarray(data))
    bf.sync()
    assert bf.metrics.graphs()["graphs_run"] == 1
    for a, b in zip(got, want, strict=True):
        assert on(a) == D1 and a.device == "JAXGraph:1"
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)


def test_a_graph_is_computed_where_a_call_on_another_device_begins():
    # A program runs on one device: recording on device 1 after device 0 (one thread, one
    # recording) computes device 0's graph first, counted as a sync of that reason.
    g0, g1 = bj.namespace(0, graph=True), bj.namespace(1, graph=True)
    bf.metrics.reset()
    a = g0.add(g0.asarray(np.ones(3, np.float32)), 1.0)
    b = g1.multiply(g1.asarray(np.ones(3, np.float32)), 3.0)
    assert bf.metrics.graphs()["syncs"].get("another device") == 1
    bf.sync()
    assert (on(a), on(b)) == (D0, D1)
    np.testing.assert_array_equal(np.asarray(a) + np.asarray(b), [5.0, 5.0, 5.0])
