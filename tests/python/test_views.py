"""Views of device arrays, as NumPy makes them (``boxfall.array_api._views``): basic indexing,
``reshape`` (where the data allow it), ``permute_dims``, ``matrix_transpose``/``.mT``/``.T``,
``expand_dims``, ``squeeze`` and ``broadcast_to`` of a ``bf.Tensor`` are views of its base on
Native and on a Python backend; writes through a view (setitem, in-place operators, an in-place
or out= operator through the CPU fallback) reach the base and every other view, writes of the
base are seen through its views, advanced indexing copies, and a kernel that raises changes
nothing."""

from __future__ import annotations

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from conftest import unique
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


@pytest.fixture(scope="module")
def ops():
    """Two operators that only a NumPy CPU kernel serves, reached through the CPU fallback: an
    in-place ``scale_(x, f)`` and an out= ``neg.out(x, *, out)``; and ``fail_(x)``, whose kernel
    writes its argument and then raises."""
    ns = unique("views")
    lib = bf.Library(ns, "DEF")
    lib.define("scale_(Tensor(a!) x, float f) -> ()")
    lib.define("neg.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.define("fail_(Tensor(a!) x) -> ()")

    def scale_(x, f):
        x *= f

    def neg_out(x, *, out):
        np.negative(x, out=out)
        return out

    def fail_(x):
        x[...] = 99.0
        raise RuntimeError("the kernel failed after writing")

    lib.impl("scale_", scale_, "CPU")
    lib.impl("neg.out", neg_out, "CPU")
    lib.impl("fail_", fail_, "CPU")
    yield getattr(bf.ops, ns)
    lib.close()


@pytest.fixture(params=["Native", "accel"])
def nsp(request, accel):
    """The namespace of Native, and of the Python backend."""
    return xp.namespace("Native" if request.param == "Native" else accel.device)


def values(t):
    return np.asarray(t.numpy())


# --- the reproducers -------------------------------------------------------------------------


def test_a_write_through_a_row_reaches_the_base(nsp):
    u = nsp.zeros((2, 3))
    v = u[0, :]
    v[0] = 1.0
    assert float(u[0, 0]) == 1.0
    assert v.device == u.device


def test_a_write_of_the_base_is_seen_through_its_views(nsp):
    u = nsp.zeros((2, 3))
    v, w = u[1], nsp.permute_dims(u, (1, 0))
    u[1, 2] = 7.0
    assert float(v[2]) == 7.0 and float(w[2, 1]) == 7.0
    u += 1.0
    np.testing.assert_array_equal(values(v), [1.0, 1.0, 8.0])


def test_an_ellipsis_in_place_add_writes_the_array(nsp):
    ret, part = nsp.zeros(4), nsp.asarray([1.0, 2.0, 3.0, 4.0])
    ret[...] += part
    ret[1:3] += part[:2]
    np.testing.assert_array_equal(values(ret), [1.0, 3.0, 5.0, 4.0])


def test_adding_to_the_diagonal_of_one_matrix_of_a_stack(nsp):
    cov = nsp.zeros((2, 3, 3))
    flat = nsp.reshape(cov[1], (-1,))
    flat[::4] += 2.5
    want = np.zeros((2, 3, 3))
    want[1] += np.eye(3) * 2.5
    np.testing.assert_array_equal(values(cov), want)


# --- each function ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, step",
    [
        (lambda ns, x: ns.reshape(x, (3, 2)), lambda a: a.reshape(3, 2)),
        (lambda ns, x: ns.reshape(x, (-1,)), lambda a: a.reshape(-1)),
        (lambda ns, x: ns.permute_dims(x, (1, 0)), lambda a: a.T),
        (lambda ns, x: ns.matrix_transpose(x), lambda a: a.T),
        (lambda ns, x: x.T, lambda a: a.T),
        (lambda ns, x: x.mT, lambda a: a.T),
        (lambda ns, x: ns.expand_dims(x, axis=1), lambda a: a[:, None]),
        (lambda ns, x: ns.squeeze(ns.expand_dims(x, axis=0), axis=0), lambda a: a),
        (lambda ns, x: x[None, ..., ::-1], lambda a: a[None, ..., ::-1]),
        (lambda ns, x: ns.moveaxis(x, 0, -1), lambda a: np.moveaxis(a, 0, -1)),
        (lambda ns, x: ns.moveaxis(x, (0, 1), (1, 0)), lambda a: np.moveaxis(a, (0, 1), (1, 0))),
    ],
    ids=[
        "reshape",
        "reshape -1",
        "permute_dims",
        "matrix_transpose",
        "T",
        "mT",
        "expand_dims",
        "squeeze",
        "index",
        "moveaxis",
        "moveaxis tuple",
    ],
)
def test_each_function_gives_a_view_written_both_ways(nsp, make, step):
    base = np.arange(6.0).reshape(2, 3)
    x = nsp.asarray(base)
    bf.metrics.reset()
    v = make(nsp, x)
    want = step(base)
    assert v.shape == want.shape and v.dtype == want.dtype
    assert sum(bf.metrics.counters().values()) == 0  # no operator, no transfer, to make it
    np.testing.assert_array_equal(values(v), want)
    v[...] = -np.arange(want.size, dtype=float).reshape(want.shape)  # through the view
    want[...] = -np.arange(want.size, dtype=float).reshape(want.shape)
    np.testing.assert_array_equal(values(x), base)
    x[...] = 10.0  # through the base
    np.testing.assert_array_equal(values(v), np.full(want.shape, 10.0))


def test_moveaxis_with_a_bad_axis_raises_as_numpy(nsp):
    x = nsp.zeros((2, 3))
    with pytest.raises(ValueError):  # NumPy's AxisError is a ValueError
        nsp.moveaxis(x, 2, 0)
    with pytest.raises(ValueError):
        nsp.moveaxis(x, (0, 0), (0, 1))


def test_broadcast_to_is_a_read_only_view(nsp):
    x = nsp.asarray([1.0, 2.0])
    b = nsp.broadcast_to(x, (3, 2))
    x[0] = 5.0
    np.testing.assert_array_equal(values(b), [[5.0, 2.0]] * 3)
    with pytest.raises(ValueError, match="read-only"):
        b[0, 0] = 3.0
    np.testing.assert_array_equal(values(x), [5.0, 2.0])


def test_a_reshape_the_data_do_not_allow_is_a_copy(nsp):
    x = nsp.asarray(np.arange(6.0).reshape(2, 3))
    flat = nsp.reshape(x.T, (6,))  # NumPy copies here too
    flat[0] = 100.0
    assert float(x[0, 0]) == 0.0
    with pytest.raises(Exception, match="copy"):
        nsp.reshape(x.T, (6,), copy=False)
    copied = nsp.reshape(x, (6,), copy=True)
    copied[0] = 100.0
    assert float(x[0, 0]) == 0.0


def test_advanced_indexing_copies(nsp):
    x = nsp.asarray(np.arange(4.0))
    picked, masked = x[nsp.asarray([0, 1])], x[x > 1.0]
    picked[0] = masked[0] = -1.0
    np.testing.assert_array_equal(values(x), np.arange(4.0))


def test_an_integer_index_of_every_axis_is_a_copy_as_numpys_scalar(nsp):
    x = nsp.asarray(np.arange(4.0))
    e = x[1]
    assert e.shape == ()
    x[1] = 9.0
    assert float(e) == 1.0  # NumPy's x[1] is a scalar, not a view
    z = x[1, ...]  # but a 0-d view with an ellipsis
    x[1] = 8.0
    assert float(z) == 8.0


def test_a_view_of_a_view_shares_the_first_base(nsp):
    x = nsp.zeros((3, 4))
    v = nsp.reshape(x[1:], (2, 2, 2))[:, 1]
    v[...] = 1.0
    want = np.zeros((3, 4))
    want[1:].reshape(2, 2, 2)[:, 1] = 1.0
    np.testing.assert_array_equal(values(x), want)


def test_in_place_and_out_operators_through_the_fallback_write_the_base(nsp, ops):
    x = nsp.asarray(np.arange(6.0).reshape(2, 3))
    row = x[1]
    ops.scale_(row, 2.0)
    ops.neg.out(nsp.asarray([1.0, 2.0]), out=x[0, 1:])
    np.testing.assert_array_equal(values(x), [[0.0, -1.0, -2.0], [6.0, 8.0, 10.0]])
    np.testing.assert_array_equal(values(row), [6.0, 8.0, 10.0])


def test_a_kernel_that_raises_changes_neither_the_view_nor_the_base(nsp, ops):
    x = nsp.asarray(np.arange(6.0).reshape(2, 3))
    v, other = x[:, 1], x[1]
    np.testing.assert_array_equal(values(other), [3.0, 4.0, 5.0])
    with pytest.raises(RuntimeError, match="failed after writing"):
        ops.fail_(v)
    np.testing.assert_array_equal(values(x), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(values(v), [1.0, 4.0])
    np.testing.assert_array_equal(values(other), [3.0, 4.0, 5.0])


def test_a_failed_write_through_a_read_only_view_leaves_the_base(nsp, ops):
    x = nsp.asarray([1.0, 2.0])
    b = nsp.broadcast_to(x, (2, 2))
    with pytest.raises(ValueError, match="read-only"):
        ops.scale_(b, 3.0)
    np.testing.assert_array_equal(values(x), [1.0, 2.0])


def test_a_backend_kernel_reads_a_view_as_its_values(accel):
    with bf.Library("array_api", "IMPL") as lib:
        seen = []

        def accel_negative(x):
            seen.append(x.payload.data.copy())
            return accel.handle.tensor(-x.payload.data)

        lib.impl("negative", accel_negative, accel.name)
        ax = xp.namespace(accel.device)
        x = ax.asarray(np.arange(6.0).reshape(2, 3))
        y = -x[:, 1]
        np.testing.assert_array_equal(seen[0], [1.0, 4.0])
        np.testing.assert_array_equal(values(y), [-1.0, -4.0])


# --- random chains, side by side with NumPy --------------------------------------------------

SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


def _reshapes(shape):
    size = int(np.prod(shape))
    out = {(size,), (-1,), (1, size), tuple(reversed(shape))}
    out |= {(d, size // d) for d in range(1, size + 1) if size % d == 0}
    return sorted(out)


@st.composite
def steps(draw, shape):
    """One step on an array of ``shape``: a new view of it, or a write."""
    ndim = len(shape)
    kinds = ["index", "reshape", "permute", "expand", "set", "iadd", "scale_", "neg_out"]
    if ndim >= 2:
        kinds.append("mT")
    if 1 in shape:
        kinds.append("squeeze")
    kind = draw(st.sampled_from(kinds))
    if kind in ("index", "set"):
        arg = draw(hnp.basic_indices(shape, min_dims=0, allow_newaxis=True))
    elif kind == "reshape":
        arg = draw(st.sampled_from(_reshapes(shape)))
    elif kind == "permute":
        arg = tuple(draw(st.permutations(range(ndim))))
    elif kind == "expand":
        arg = draw(st.integers(-ndim - 1, ndim))
    elif kind == "squeeze":
        arg = draw(st.sampled_from([i for i, n in enumerate(shape) if n == 1]))
    else:
        arg = None
    value = draw(st.integers(-9, 9).map(float))
    return kind, arg, value


def _numpy_step(arrays, i, kind, arg, value):
    a = arrays[i]
    if kind == "index":
        arrays.append(np.asarray(a[arg]) if np.isscalar(a[arg]) else a[arg])
    elif kind == "reshape":
        arrays.append(np.reshape(a, arg))
    elif kind == "permute":
        arrays.append(np.transpose(a, arg))
    elif kind == "mT":
        arrays.append(np.swapaxes(a, -1, -2))
    elif kind == "expand":
        arrays.append(np.expand_dims(a, arg))
    elif kind == "squeeze":
        arrays.append(np.squeeze(a, axis=arg))
    elif kind == "set":
        a[arg] = value
    elif kind == "iadd":
        a += value
    elif kind == "scale_":
        a *= value
    elif kind == "neg_out":
        np.negative(np.full(a.shape, value), out=a)


def _boxfall_step(ns, ops, arrays, i, kind, arg, value):
    a = arrays[i]
    if kind == "index":
        arrays.append(a[arg])
    elif kind == "reshape":
        arrays.append(ns.reshape(a, arg))
    elif kind == "permute":
        arrays.append(ns.permute_dims(a, arg))
    elif kind == "mT":
        arrays.append(a.mT)
    elif kind == "expand":
        arrays.append(ns.expand_dims(a, axis=arg))
    elif kind == "squeeze":
        arrays.append(ns.squeeze(a, axis=arg))
    elif kind == "set":
        a[arg] = value
    elif kind == "iadd":
        a += value
    elif kind == "scale_":
        ops.scale_(a, value)
    elif kind == "neg_out":
        ops.neg.out(ns.full(a.shape, value), out=a)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=SHAPES, data=st.data())
def test_random_chains_of_views_and_writes_match_numpy(accel, ops, shape, data):
    namespaces = [xp.namespace("Native"), xp.namespace(accel.device)]
    base = np.arange(float(np.prod(shape))).reshape(shape)
    numpy_arrays = [base.copy()]
    worlds = [[ns.asarray(base)] for ns in namespaces]
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        i = data.draw(st.integers(0, len(numpy_arrays) - 1), label="array")
        kind, arg, value = data.draw(steps(numpy_arrays[i].shape), label="step")
        _numpy_step(numpy_arrays, i, kind, arg, value)
        for ns, arrays in zip(namespaces, worlds, strict=True):
            _boxfall_step(ns, ops, arrays, i, kind, arg, value)
            assert len(arrays) == len(numpy_arrays)
            for got, want in zip(arrays, numpy_arrays, strict=True):
                assert got.shape == want.shape, (kind, arg)
                np.testing.assert_array_equal(values(got), want, err_msg=f"{kind} {arg}")


def test_a_native_view_is_read_and_written_in_rust(monkeypatch):
    """A Native base's views are made and written from their offset and strides, without the
    NumPy chain (which a Python backend's use)."""
    from boxfall.array_api import _views

    def refuse(*args):
        raise AssertionError("the NumPy chain ran")

    monkeypatch.setattr(_views, "materialize", refuse)
    monkeypatch.setattr(_views, "write", refuse)
    nx = xp.namespace("Native")
    x = nx.asarray(np.arange(12.0).reshape(3, 4))
    v = nx.permute_dims(x[::-1, 1::2], (1, 0))
    np.testing.assert_array_equal(values(v), np.arange(12.0).reshape(3, 4)[::-1, 1::2].T)
    v[0] = -1.0
    want = np.arange(12.0).reshape(3, 4)
    want[::-1, 1::2].T[0] = -1.0
    np.testing.assert_array_equal(values(x), want)


def test_the_same_step_of_arrays_alike_gives_each_its_own_view(nsp):
    """A view's step is decided once per layout and step (``_views._step``) and reused: two
    arrays of one shape and dtype share it, and each view still sees and writes its own base;
    an axis of another type is decided afresh (a float axis is NumPy's error, not the int's
    view)."""
    a = nsp.asarray(np.arange(6.0).reshape(2, 3))
    b = nsp.asarray(np.arange(6.0, 12.0).reshape(2, 3))
    va, vb = nsp.expand_dims(a, axis=1), nsp.expand_dims(b, axis=1)
    assert va.shape == vb.shape == (2, 1, 3)
    vb[1, 0, 2] = -1.0
    np.testing.assert_array_equal(values(a), np.arange(6.0).reshape(2, 3))
    assert values(b)[1, 2] == -1.0
    np.testing.assert_array_equal(values(va)[:, 0], values(a))
    np.testing.assert_array_equal(values(nsp.matrix_transpose(va[:, 0])), values(a).T)
    with pytest.raises(Exception):  # noqa: B017 - NumPy's own error for an axis of float
        nsp.expand_dims(a, axis=1.0)
