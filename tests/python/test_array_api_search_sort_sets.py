"""The searching, sorting, set and indexing chapters of ``boxfall.array_api`` on the CPU, on
Native (through its CPU fallback) and on a Python backend, each result compared with NumPy's."""

from __future__ import annotations

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest

DEVICES = ["cpu", "Native", "accel"]
VALUES = np.array([[3.0, 1.0, 2.0], [1.0, 3.0, 3.0]])


@pytest.fixture(params=DEVICES)
def ns(request, accel):
    device = {"cpu": "cpu", "Native": "Native", "accel": accel.device}[request.param]
    return xp.namespace(device)


def check(ns, got, want) -> None:
    device = ns.__array_namespace_info__().default_device()
    if device == "cpu":
        assert isinstance(got, np.ndarray)
    else:
        assert isinstance(got, bf.Tensor) and got.device == device
    want = np.asarray(want)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_argmax_and_argmin_match_numpy(ns, axis):
    x = ns.asarray(VALUES)
    check(ns, xp.argmax(x, axis=axis), np.argmax(VALUES, axis=axis))
    check(
        ns,
        xp.argmin(x, axis=axis, keepdims=axis is not None),
        np.argmin(VALUES, axis=axis, keepdims=axis is not None),
    )


def test_count_nonzero_and_nonzero_match_numpy(ns):
    x = ns.asarray(VALUES - 1.0)
    check(ns, xp.count_nonzero(x), np.int64(np.count_nonzero(VALUES - 1.0)))
    check(ns, xp.count_nonzero(x, axis=(1,)), np.count_nonzero(VALUES - 1.0, axis=1))
    got = xp.nonzero(x)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, np.nonzero(VALUES - 1.0), strict=True):
        check(ns, g, w)


def test_nonzero_of_a_0d_array_is_an_error(ns):
    with pytest.raises(ValueError, match="0-d"):
        xp.nonzero(ns.asarray(1.0))


def test_where_takes_arrays_and_scalars_and_keeps_the_arrays_dtype(ns):
    x = ns.asarray(VALUES.astype(np.float32))
    cond = x > 1.5
    want = np.where(VALUES > 1.5, VALUES, -VALUES).astype(np.float32)
    check(ns, xp.where(cond, x, -x), want)
    check(ns, xp.where(cond, x, 0.5), np.where(VALUES > 1.5, VALUES, 0.5).astype(np.float32))
    check(ns, xp.where(cond, 7.0, x), np.where(VALUES > 1.5, 7.0, VALUES).astype(np.float32))


def test_searchsorted_matches_numpy(ns):
    sorted_ = np.array([1.0, 2.0, 3.0])
    for side in ("left", "right"):
        got = xp.searchsorted(ns.asarray(sorted_), ns.asarray(VALUES[0]), side=side)
        check(ns, got, np.searchsorted(sorted_, VALUES[0], side=side))


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sort_and_argsort_match_a_stable_sort(ns, axis, descending):
    x = ns.asarray(VALUES)
    want = np.sort(VALUES, axis=axis)
    check(
        ns,
        xp.sort(x, axis=axis, descending=descending),
        np.flip(want, axis) if descending else want,
    )
    order = xp.argsort(x, axis=axis, descending=descending)
    # Stable: equal values keep their order, ascending or descending.
    key = -VALUES if descending else VALUES
    check(ns, order, np.argsort(key, axis=axis, kind="stable"))


def test_a_device_fallback_of_the_searching_functions_is_counted(accel):
    bf.metrics.reset()
    ax = xp.namespace(accel.device)
    xp.sort(ax.asarray(VALUES))
    assert bf.metrics.counter_value("array_api::sort") == 1


def test_a_numpy_scalar_is_a_0d_array_in_a_binary_function():
    got = xp.floor_divide(np.asarray([3.0, 5.0], dtype=np.float32), np.float32(2.0))
    assert got.dtype == np.float32 and np.array_equal(got, [1.0, 2.0])
    assert xp.add(np.float64(1.0), np.asarray([1.0])).tolist() == [2.0]


def test_the_unique_functions_give_named_tuples_on_the_device(ns):
    values = np.array([[3.0, 1.0, np.nan], [3.0, np.nan, 1.0]])
    x = ns.asarray(values)
    r = xp.unique_all(x)
    assert r._fields == ("values", "indices", "inverse_indices", "counts")
    # NaNs are distinct, as the standard says.
    check(ns, r.values, np.array([1.0, 3.0, np.nan, np.nan]))
    check(ns, r.counts, np.array([2, 2, 1, 1]))
    assert r.inverse_indices.shape == values.shape
    flat = values.reshape(-1)
    for i, first in enumerate(np.asarray(r.indices)):
        assert np.array_equal(flat[first], np.asarray(r.values)[i], equal_nan=True)
    counts = xp.unique_counts(x)
    check(ns, counts.counts, np.array([2, 2, 1, 1]))
    inverse = xp.unique_inverse(x)
    rebuilt = np.asarray(inverse.values)[np.asarray(inverse.inverse_indices)]
    np.testing.assert_array_equal(rebuilt, values)
    check(ns, xp.unique_values(ns.asarray([2.0, 1.0, 2.0])), np.array([1.0, 2.0]))


def test_take_and_take_along_axis_match_numpy(ns):
    x = ns.asarray(VALUES)
    idx = np.array([2, 0])
    check(ns, xp.take(x, ns.asarray(idx), axis=1), np.take(VALUES, idx, axis=1))
    check(ns, xp.take(ns.asarray(VALUES[0]), ns.asarray(idx)), np.take(VALUES[0], idx))
    along = np.array([[1], [0]])
    check(
        ns,
        xp.take_along_axis(x, ns.asarray(along), axis=1),
        np.take_along_axis(VALUES, along, axis=1),
    )
    with pytest.raises(ValueError, match="axis is required"):
        xp.take(x, ns.asarray(idx))
