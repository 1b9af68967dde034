"""Arguments of the standard's signatures that the conformance suite exercises, on the CPU,
Native and a Python backend, against NumPy: ``diff``'s ``prepend``/``append``, an array
``rtol`` of ``linalg.pinv``/``matrix_rank``, ``vecdot``'s dtype and shape rule, and NumPy's
scalars (what NumPy's indexing gives on the CPU) where a function takes arrays, and
``from_dlpack``."""

from __future__ import annotations

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest


@pytest.fixture(scope="module")
def accel(backend_factory):
    """A Python backend (DeviceBuffer payloads, three copy hooks) with the CPU fallback."""
    backend = backend_factory("ArrayApiAccel")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        yield backend


@pytest.fixture(params=["cpu", "Native", "accel"])
def ns(request, accel):
    return xp.namespace(accel.device if request.param == "accel" else request.param)


def check(ns, got, want) -> None:
    device = ns.__array_namespace_info__().default_device()
    assert (got.device if isinstance(got, bf.Tensor) else "cpu") == device
    want = np.asarray(want)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


X = np.array([[1.0, 4.0, 9.0], [2.0, 3.0, 5.0]])


def test_diff_with_prepend_and_append(ns):
    before, after = np.zeros((2, 1)), np.full((2, 2), 10.0)
    got = ns.diff(ns.asarray(X), prepend=ns.asarray(before), append=ns.asarray(after))
    check(ns, got, np.diff(X, prepend=before, append=after))
    check(ns, ns.diff(ns.asarray(X), axis=0, n=1), np.diff(X, axis=0))
    check(ns, ns.diff(ns.asarray(X), append=ns.asarray(after)), np.diff(X, append=after))


def test_pinv_and_matrix_rank_take_an_array_rtol(ns):
    stack = np.stack([np.diag([1.0, 1e-3]), np.diag([2.0, 1.0])])
    rtol = np.array([1e-2, 1e-6])
    check(ns, ns.linalg.matrix_rank(ns.asarray(stack), rtol=ns.asarray(rtol)), [1, 2])
    want = np.linalg.pinv(stack, rcond=rtol)
    check(ns, ns.linalg.pinv(ns.asarray(stack), rtol=ns.asarray(rtol)), want)
    check(ns, ns.linalg.pinv(ns.asarray(stack), rtol=0.5), np.linalg.pinv(stack, rcond=0.5))
    check(ns, ns.linalg.matrix_rank(ns.asarray(stack), rtol=np.float32(1e-2)), [1, 2])


def test_vecdot_keeps_the_promoted_dtype_and_refuses_unequal_axes(ns):
    a, b = np.array([200, 100], dtype=np.int32), np.array([3, 2], dtype=np.int32)
    check(ns, ns.vecdot(ns.asarray(a), ns.asarray(b)), np.int32(800))
    x1, x2 = np.ones((2, 3)), np.arange(3.0)
    check(ns, ns.vecdot(ns.asarray(x1), ns.asarray(x2)), x1 @ x2)
    with pytest.raises(ValueError, match="axis -1 has size 3 in x1 and 1 in x2"):
        ns.vecdot(ns.asarray(x1), ns.asarray(np.ones((2, 1))))


def test_numpy_scalars_are_0d_arrays_where_a_function_takes_arrays():
    a = np.array([True, False])
    u = np.array([1, 2], dtype=np.int32)
    assert xp.empty_like(a[0]).shape == () and xp.empty_like(a[0]).dtype == a.dtype
    np.testing.assert_array_equal(xp.full_like(a[1], True), np.array(True))
    got = xp.broadcast_arrays(a[0], a)
    np.testing.assert_array_equal(got[0], [True, True])
    np.testing.assert_array_equal(xp.stack([u[0], u[1]]), u)
    assert xp.stack([u[0], u[1]]).dtype == u.dtype
    assert float(xp.linalg.vector_norm(np.float32(-3.0))) == 3.0
    np.testing.assert_array_equal(xp.full(2, np.int64(3)), np.full(2, 3))
    assert xp.astype(a[0], xp.int64).dtype == np.int64
    np.testing.assert_array_equal(xp.where(a[0], u[0], np.int32(5)), np.int32(1))
    assert xp.tensordot(u[0], u[1], axes=0).dtype == np.int32
    np.testing.assert_array_equal(xp.unique_values(u[1]), [2])


def test_from_dlpack_reads_on_the_host_and_moves_to_the_device_asked(ns, accel):
    a = np.arange(4.0)
    shared = ns.from_dlpack(a)  # x's device, the CPU: NumPy's view of a's memory
    assert isinstance(shared, np.ndarray) and np.shares_memory(shared, a)
    assert not np.shares_memory(ns.from_dlpack(a, copy=True), a)
    moved = ns.from_dlpack(a, device=accel.device)
    assert moved.device == accel.device
    np.testing.assert_array_equal(np.asarray(moved), a)
    with pytest.raises(ValueError, match="copy=False"):
        ns.from_dlpack(a, device=accel.device, copy=False)
    t = xp.namespace("Native").asarray(a)
    assert ns.from_dlpack(t) is t
    assert ns.from_dlpack(t, device=accel.device).device == accel.device
