"""What the array API standard's own test suite (``.ci/conformance``) found on the CPU
namespace, each against NumPy: a NumPy scalar is a 0-d array wherever an array goes,
``vecdot`` keeps its dtype and refuses sizes that differ along its axis, ``diff`` takes
``prepend``/``append``, and ``pinv``/``matrix_rank`` take an array ``rtol``."""

from __future__ import annotations

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest


@pytest.mark.parametrize("scalar", [np.False_, np.float32(1.5), np.uint8(7), np.complex64(1j)])
def test_a_numpy_scalar_is_a_0d_array_where_an_array_goes(scalar):
    got = xp.zeros_like(scalar)
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == scalar.dtype
    (b,) = xp.broadcast_arrays(scalar)
    assert b.shape == () and b.dtype == scalar.dtype
    stacked = xp.stack([scalar, scalar])
    np.testing.assert_array_equal(stacked, np.stack([scalar, scalar]))


def test_a_numpy_scalar_moves_to_a_device_as_a_0d_array():
    t = xp.namespace("Native").asarray([1.0, 2.0])
    got = xp.where(np.bool_(True), t, np.float64(0.0))
    assert isinstance(got, bf.Tensor) and got.device == "Native:0"
    np.testing.assert_array_equal(got.numpy(), [1.0, 2.0])


def test_something_that_is_no_array_is_still_refused():
    with pytest.raises(bf.ArgumentError, match="expected a Tensor"):
        xp.zeros_like("not an array")


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float32", "complex64"])
def test_vecdot_keeps_the_dtype_of_its_inputs(dtype):
    a = np.arange(1, 7).reshape(2, 3).astype(dtype)
    b = np.arange(3).astype(dtype)
    got = xp.vecdot(a, b)
    want = np.sum(np.conj(a) * b, axis=-1, dtype=np.dtype(dtype))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


def test_vecdot_refuses_sizes_that_differ_along_its_axis():
    with pytest.raises(ValueError, match="differ"):
        xp.vecdot(np.ones((2, 1)), np.ones((2, 3)))


@pytest.mark.parametrize(
    "kwargs",
    [{"prepend": np.array([10])}, {"append": np.array([1, 2])},
     {"prepend": np.array([5]), "append": np.array([0]), "n": 2}],
)  # fmt: skip
def test_diff_takes_prepend_and_append(kwargs):
    x = np.array([1, 4, 9, 16])
    np.testing.assert_array_equal(xp.diff(x, **kwargs), np.diff(x, **kwargs))


def test_diff_with_prepend_along_an_axis():
    x = np.arange(6.0).reshape(2, 3)
    got = xp.diff(x, axis=0, prepend=np.zeros((1, 3)))
    np.testing.assert_array_equal(got, np.diff(x, axis=0, prepend=np.zeros((1, 3))))


def test_pinv_and_matrix_rank_take_an_rtol_per_matrix():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 4))
    x[1, :, 3] = x[1, :, 0]  # the second matrix has rank 3
    rtol = np.array([1e-12, 1e-12])
    np.testing.assert_array_equal(xp.linalg.matrix_rank(x, rtol=rtol), [4, 3])
    np.testing.assert_allclose(
        xp.linalg.pinv(x, rtol=rtol), np.linalg.pinv(x, rcond=rtol), rtol=1e-10, atol=1e-12
    )
    bf.metrics.reset()
    xp.linalg.pinv(xp.namespace("Native").asarray(x), rtol=xp.namespace("Native").asarray(rtol))
    assert bf.metrics.counters()["array_api::linalg_pinv.Tensor"] == 1


class _Capsule:
    """An object whose ``__dlpack__`` gives a capsule made earlier, for ``np.from_dlpack``."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "float32", "complex64"])
@pytest.mark.parametrize("max_version", [None, (0, 0)])
def test_a_native_tensor_exports_without_a_copy_to_an_old_dlpack_capsule(dtype, max_version):
    # The suite (300 examples) found `x.__dlpack__(copy=False)` of a Native tensor raising
    # BufferError for a capsule older than DLPack 1.0, which cannot say read-only: copy=False
    # forbids the copy, so the tensor's own memory is shared (writable, as np.asarray(t) is).
    t = xp.namespace("Native").asarray(np.zeros(3, dtype))
    kwargs = {} if max_version is None else {"max_version": max_version}
    a = np.from_dlpack(_Capsule(t.__dlpack__(copy=False, **kwargs)))
    t[1] = 1
    assert a.dtype == np.dtype(dtype) and a[1] == 1  # the tensor's memory, not a copy


@pytest.mark.parametrize("dtype", ["bool", "float32"])
def test_a_native_tensor_exports_read_only_to_a_versioned_capsule(dtype):
    t = xp.namespace("Native").asarray(np.ones(3, dtype))
    a = np.from_dlpack(_Capsule(t.__dlpack__(copy=False, max_version=(1, 0))))
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, np.ones(3, dtype))


def test_a_dlpack_copy_stays_a_copy():
    t = xp.namespace("Native").asarray(np.zeros(3, np.float32))
    for kwargs in (
        {},
        {"copy": True},
        {"max_version": (0, 0)},
        {"copy": True, "max_version": (1, 0)},
    ):
        a = np.from_dlpack(_Capsule(t.__dlpack__(**kwargs)))
        t[0] += 1
        if kwargs.get("copy") or kwargs.get("max_version") == (0, 0):
            assert a[0] != t[0].numpy()  # a copy does not see the later write
