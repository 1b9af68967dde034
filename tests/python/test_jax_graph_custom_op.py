"""A user's operator in graph mode on JAX (``bj.namespace(graph=True)``): a ``bf.custom_op``
with a shape rule and a JAX kernel registered for the graph backend records, its kernel runs
inside the compiled program (no host callback, no break), and its values equal eager mode's; a
kernel JAX cannot trace is a counted graph break with its reason (that sync's values computed
eagerly, later calls breaking at once), not a failure; a wrong rule is a
``bf.RegistrationError`` naming the operator; ``bf.DataDependentError`` a counted break. On
JAX's CPU here."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
import jax.numpy as jnp  # noqa: E402

NS = "jaxgraphcustom"
bj.graph_compiler()  # graph mode's backend, registered at its first use: kernels go on its key


def _wrap(x: bf.Tensor, payload: Any) -> bf.Tensor:
    """``payload`` as a tensor of ``x``'s backend and device."""
    name, _, index = x.device.partition(":")
    return bf.get_backend(name).tensor_from_payload(payload, int(index or 0))


@bf.custom_op(f"{NS}::scaled_cumsum", mutates_args=())
def scaled_cumsum(x: np.ndarray, factor: float) -> np.ndarray:
    return np.cumsum(x, axis=-1) * factor


@scaled_cumsum.register_shape_rule
def _(x: bf.TensorMeta, factor: float) -> bf.TensorMeta:
    return bf.TensorMeta(x.dtype, x.shape)


@scaled_cumsum.register_kernel([bj.BACKEND_NAME, bj.GRAPH_BACKEND_NAME])
def _(x: bf.Tensor, factor: float) -> bf.Tensor:
    return _wrap(x, jnp.cumsum(x.payload, axis=-1) * factor)


@bf.custom_op(f"{NS}::host_only", mutates_args=())
def host_only(x: np.ndarray) -> np.ndarray:
    return x + 1


@host_only.register_shape_rule
def _(x: bf.TensorMeta) -> bf.TensorMeta:
    return x


@host_only.register_kernel([bj.BACKEND_NAME, bj.GRAPH_BACKEND_NAME])
def _(x: bf.Tensor) -> bf.Tensor:
    # NumPy on the payload: fine eagerly, impossible on JAX's traced arrays.
    return _wrap(x, jnp.asarray(np.asarray(x.payload) + 1))


@pytest.fixture
def gx() -> Any:
    bf.sync()
    bf.metrics.reset()
    yield bj.namespace(graph=True)
    bf.sync()


def program(xp: Any, x: Any) -> Any:
    return xp.add(scaled_cumsum(xp.multiply(x, 2.0), 0.5), 1.0)


def test_a_custom_op_runs_its_jax_kernel_inside_the_program_with_eager_values(gx: Any) -> None:
    compiler = bj.graph_compiler()
    a = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    ex = bj.namespace()
    want = program(ex, ex.asarray(a)).numpy()
    compiles = compiler.compiles
    for _ in range(2):
        got = program(gx, gx.asarray(a))
        assert bf.graph.is_pending(got)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    assert compiler.compiles == compiles + 1  # the second run: the cached program
    assert compiler.host_callbacks[scaled_cumsum.name] == 0  # on the device, traced
    figures = bf.metrics.graphs()
    assert figures["breaks"] == {} and figures["failures"] == 0
    np.testing.assert_allclose(want, (np.cumsum(a * 2, axis=-1) * 0.5 + 1), rtol=1e-5)


def test_a_kernel_jax_cannot_trace_is_a_counted_break_with_its_reason(gx: Any) -> None:
    compiler = bj.graph_compiler()
    name = host_only.name
    a = np.arange(6, dtype=np.float32)
    x = gx.asarray(a)
    y = gx.multiply(host_only(gx.add(x, 1.0)), 3.0)
    assert bf.graph.is_pending(y)  # recorded: it has a rule
    with pytest.warns(RuntimeWarning, match="cannot be traced by JAX"):
        got = y.numpy()  # the program fails to trace; the graph runs eagerly instead
    np.testing.assert_array_equal(got, (a + 2) * 3)
    assert "cannot be traced by JAX" in compiler.untraced[name]
    assert "cannot be traced" in bf._boxfall._graph_refusal(name, bj.GRAPH_BACKEND_NAME)
    figures = bf.metrics.graphs()
    assert figures["breaks"] == {name: 1} and figures["failures"] == 0
    # From now on a call breaks the graph when it is recorded.
    z = host_only(gx.add(x, 2.0))
    assert not bf.graph.is_pending(z)
    np.testing.assert_array_equal(z.numpy(), a + 3)
    assert bf.metrics.graphs()["breaks"] == {name: 2}


def test_a_wrong_rule_is_an_error_and_a_data_dependent_one_a_break(gx: Any) -> None:
    x = gx.add(gx.asarray(np.arange(4, dtype=np.float32)), 1.0)
    with bf.Library(NS, "FRAGMENT") as lib:
        lib.register_shape_rule("scaled_cumsum", lambda x, factor: bf.TensorMeta(x.dtype, (-4,)))
        with pytest.raises(bf.RegistrationError, match=f"'{scaled_cumsum.name}'.*negative"):
            scaled_cumsum(x, 2.0)
    with bf.Library(NS, "FRAGMENT") as lib:
        lib.register_shape_rule("scaled_cumsum", lambda x, factor: _data_dependent())
        y = scaled_cumsum(x, 2.0)
    assert not bf.graph.is_pending(y)
    np.testing.assert_allclose(y.numpy(), np.cumsum(np.arange(4) + 1) * 2.0)
    assert bf.metrics.graphs()["breaks"] == {scaled_cumsum.name: 1}


def _data_dependent() -> bf.TensorMeta:
    raise bf.DataDependentError
