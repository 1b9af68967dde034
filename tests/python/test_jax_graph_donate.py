"""Graph mode's in-place updates donate their input buffers: on
``bj.namespace(graph=True)``, ``x += y`` whose old payload nothing else holds is consumed by the
``jax.jit`` program (its result is written in that buffer), while a payload the user holds, one
given to ``asarray``, a viewed tensor's and the scalar inputs' cached arrays are kept; a program
with a host callback consumes nothing; no JAX warning is raised. On JAX's CPU, which donates."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
from boxfall.jax import _graph  # noqa: E402

# A donation JAX cannot use ("Some donated buffers were not usable") warns: an error here.
pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture
def gx() -> Any:
    """Graph mode's namespace, its compiler consuming buffers of any size (the tests' are
    small)."""
    bf.sync()
    compiler = bj.graph_compiler()
    compiler.donate_min_bytes = 0
    yield bj.namespace(graph=True)
    compiler.donate_min_bytes = _graph.DONATE_MIN_BYTES
    bf.sync()


def tensors(gx: Any) -> tuple[Any, Any]:
    """x = [0, 1, 2, 3] and y = [1, 1, 1, 1], float32, computed."""
    x = gx.asarray(np.arange(4, dtype=np.float32))
    y = gx.asarray(np.ones(4, dtype=np.float32))
    bf.sync()
    return x, y


def counts() -> tuple[int, int]:
    """Buffers donated: as the JAX compiler counts them, and as boxfall's figures do."""
    return bj.graph_compiler().donated, bf.metrics.graphs()["donated"]


def test_an_in_place_update_whose_old_payload_nothing_holds_is_written_in_its_buffer(gx):
    compiler = bj.graph_compiler()
    x, y = tensors(gx)
    bf.metrics.reset()
    before = compiler.donated
    x += y
    bf.sync()
    assert compiler.donated == before + 1
    assert bf.metrics.graphs()["donated"] == 1
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 1.0)
    compiles = compiler.compiles
    for step in range(3):
        # An address, not the array: holding the array would keep it from being donated. (The
        # first program's input may be NumPy's memory, which XLA copies rather than reuses.)
        buffer = x.payload.unsafe_buffer_pointer()
        x += y
        bf.sync()
        assert compiler.donated == before + 2 + step
        assert x.payload.unsafe_buffer_pointer() == buffer  # the result is in the old buffer
    assert compiler.compiles == compiles  # the same program, its donating jit reused
    assert bf.metrics.graphs()["compiled"] == 1
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 4.0)
    assert compiler.donated_bytes >= 4 * 4 * 4


def test_the_values_are_eager_modes(gx):
    ex = bj.namespace()
    got, want = tensors(gx), tensors(ex)
    for xp, (x, y) in ((gx, got), (ex, want)):
        for _ in range(3):
            x *= 0.5
            x += xp.multiply(y, 2.0)
            x -= xp.sum(x)
        bf.sync()
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(got[1].numpy(), np.ones(4))


def test_a_payload_the_user_holds_is_not_donated_and_stays_readable(gx):
    x, y = tensors(gx)
    held = x.payload
    before = counts()
    x += y
    bf.sync()
    assert counts() == (before[0], before[1])
    assert not held.is_deleted()
    np.testing.assert_array_equal(np.asarray(held), np.arange(4))
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 1.0)


def test_an_array_given_to_asarray_is_not_donated(gx):
    a = jax.numpy.arange(4, dtype=jax.numpy.float32)
    x = gx.asarray(a)
    y = gx.asarray(np.ones(4, dtype=np.float32))
    bf.sync()
    before = counts()
    x += y
    bf.sync()
    assert counts() == before
    assert not a.is_deleted()
    np.testing.assert_array_equal(np.asarray(a), np.arange(4))
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 1.0)


def test_a_viewed_base_is_not_donated_and_its_view_sees_the_write(gx):
    x, y = tensors(gx)
    v = x[1:3]
    before = counts()
    x += y
    bf.sync()
    assert counts() == before
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 1.0)
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])
    v += 10.0  # a write through the view: its base written, not donated either
    bf.sync()
    assert counts() == before
    np.testing.assert_array_equal(x.numpy(), [1.0, 12.0, 13.0, 4.0])


def test_a_tensor_read_after_its_write_keeps_its_old_payload_for_the_reader(gx):
    x, y = tensors(gx)
    before = counts()
    z = gx.multiply(x, 2.0)  # pending, reads x's old values: an input of the same graph
    x += y
    bf.sync()
    # x's old payload was consumed: both results are outputs, and z read it first.
    assert counts() == (before[0] + 1, before[1] + 1)
    np.testing.assert_array_equal(z.numpy(), np.arange(4) * 2.0)
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 1.0)


def test_an_input_of_no_output_shape_or_dtype_is_not_donated(gx):
    x, y = tensors(gx)
    before = counts()
    s = gx.sum(x)  # x read, not written: still held by x
    t = gx.asarray(np.arange(4, dtype=np.int32))
    bf.sync()
    t += 1  # int32: an output of its own dtype
    m = gx.astype(t, gx.float32)
    bf.sync()
    assert counts() == (before[0] + 1, before[1] + 1)  # t's old payload only
    assert float(s) == 6.0
    np.testing.assert_array_equal(m.numpy(), np.arange(4) + 1.0)


def test_the_scalar_inputs_cached_arrays_are_never_donated(gx):
    x, _ = tensors(gx)
    for factor in (0.5, 0.5, 0.25):
        x *= factor
        bf.sync()
    assert _graph._PACKS
    assert not any(a.is_deleted() for a in _graph._PACKS.values())
    np.testing.assert_array_equal(x.numpy(), np.arange(4) * 0.0625)


def test_a_program_with_a_host_callback_donates_nothing(gx):
    compiler, nx = bj._graph_mode_without("JAXGraphDonateNoAdd", frozenset({"add"}))
    x = nx.asarray(np.arange(4, dtype=np.float32))
    y = nx.asarray(np.ones(4, dtype=np.float32))
    bf.sync()
    bf.metrics.reset()
    for _ in range(2):
        x += y
        bf.sync()
    assert compiler.host_callbacks["array_api::add"] == 2
    assert compiler.donated == 0
    assert bf.metrics.graphs()["donated"] == 0
    assert bf.metrics.graphs()["compiled"] == 1
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 2.0)


def test_values_read_before_a_donation_keep_theirs(gx):
    compiler = bj.graph_compiler()
    x, y = tensors(gx)
    x += y
    bf.sync()
    read = x.numpy()
    total = float(gx.sum(x))
    before = compiler.donated
    for _ in range(3):
        x += y
        bf.sync()
    assert compiler.donated > before  # x's later payloads were donated...
    np.testing.assert_array_equal(read, np.arange(4) + 1.0)  # ...not what was read of them
    assert total == 10.0
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 4.0)


def test_a_compiler_told_not_to_donate_keeps_every_buffer(gx):
    compiler = bj.graph_compiler()
    x, y = tensors(gx)
    before = counts()
    compiler.donate = False
    try:
        for _ in range(2):
            x += y
            bf.sync()
    finally:
        compiler.donate = True
    assert counts() == before
    np.testing.assert_array_equal(x.numpy(), np.arange(4) + 2.0)


def test_by_default_only_a_buffer_of_the_least_bytes_or_more_is_donated(gx):
    compiler = bj.graph_compiler()
    compiler.donate_min_bytes = _graph.DONATE_MIN_BYTES
    n = _graph.DONATE_MIN_BYTES // 4  # float32: the least bytes exactly
    for size, donated in ((4, 0), (n - 1, 0), (n, 1)):
        x = gx.asarray(np.zeros(size, dtype=np.float32))
        y = gx.asarray(np.ones(size, dtype=np.float32))
        bf.sync()
        before = counts()
        x += y
        bf.sync()
        assert counts() == (before[0] + donated, before[1] + donated), size
        assert float(gx.sum(x)) == size
