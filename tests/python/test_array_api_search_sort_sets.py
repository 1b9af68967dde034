"""The searching, sorting, set and indexing chapters of ``boxfall.array_api`` on the CPU, on
Native (through its CPU fallback) and on a Python backend, each result compared with NumPy's."""

from __future__ import annotations

import functools

import array_checks
import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest

VALUES = np.array([[3.0, 1.0, 2.0], [1.0, 3.0, 3.0]])


# Indices, sorted values and sets: NumPy's, element for element.
check = functools.partial(array_checks.check, exact=True)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_argmax_and_argmin_match_numpy(any_xp, axis):
    x = any_xp.asarray(VALUES)
    check(any_xp, xp.argmax(x, axis=axis), np.argmax(VALUES, axis=axis))
    check(
        any_xp,
        xp.argmin(x, axis=axis, keepdims=axis is not None),
        np.argmin(VALUES, axis=axis, keepdims=axis is not None),
    )


def test_count_nonzero_and_nonzero_match_numpy(any_xp):
    x = any_xp.asarray(VALUES - 1.0)
    check(any_xp, xp.count_nonzero(x), np.int64(np.count_nonzero(VALUES - 1.0)))
    check(any_xp, xp.count_nonzero(x, axis=(1,)), np.count_nonzero(VALUES - 1.0, axis=1))
    got = xp.nonzero(x)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, np.nonzero(VALUES - 1.0), strict=True):
        check(any_xp, g, w)


def test_nonzero_of_a_0d_array_is_an_error(any_xp):
    with pytest.raises(ValueError, match="0-d"):
        xp.nonzero(any_xp.asarray(1.0))


def test_where_takes_arrays_and_scalars_and_keeps_the_arrays_dtype(any_xp):
    x = any_xp.asarray(VALUES.astype(np.float32))
    cond = x > 1.5
    want = np.where(VALUES > 1.5, VALUES, -VALUES).astype(np.float32)
    check(any_xp, xp.where(cond, x, -x), want)
    check(any_xp, xp.where(cond, x, 0.5), np.where(VALUES > 1.5, VALUES, 0.5).astype(np.float32))
    check(any_xp, xp.where(cond, 7.0, x), np.where(VALUES > 1.5, 7.0, VALUES).astype(np.float32))


def test_searchsorted_matches_numpy(any_xp):
    sorted_ = np.array([1.0, 2.0, 3.0])
    for side in ("left", "right"):
        got = xp.searchsorted(any_xp.asarray(sorted_), any_xp.asarray(VALUES[0]), side=side)
        check(any_xp, got, np.searchsorted(sorted_, VALUES[0], side=side))


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sort_and_argsort_match_a_stable_sort(any_xp, axis, descending):
    x = any_xp.asarray(VALUES)
    want = np.sort(VALUES, axis=axis)
    check(
        any_xp,
        xp.sort(x, axis=axis, descending=descending),
        np.flip(want, axis) if descending else want,
    )
    order = xp.argsort(x, axis=axis, descending=descending)
    # Stable: equal values keep their order, ascending or descending.
    key = -VALUES if descending else VALUES
    check(any_xp, order, np.argsort(key, axis=axis, kind="stable"))


def test_a_device_fallback_of_the_searching_functions_is_counted(accel):
    bf.metrics.reset()
    ax = xp.namespace(accel.device)
    xp.sort(ax.asarray(VALUES))
    assert bf.metrics.counter_value("array_api::sort") == 1


def test_a_numpy_scalar_is_a_0d_array_in_a_binary_function():
    got = xp.floor_divide(np.asarray([3.0, 5.0], dtype=np.float32), np.float32(2.0))
    assert got.dtype == np.float32 and np.array_equal(got, [1.0, 2.0])
    assert xp.add(np.float64(1.0), np.asarray([1.0])).tolist() == [2.0]


def test_the_unique_functions_give_named_tuples_on_the_device(any_xp):
    values = np.array([[3.0, 1.0, np.nan], [3.0, np.nan, 1.0]])
    x = any_xp.asarray(values)
    r = xp.unique_all(x)
    assert r._fields == ("values", "indices", "inverse_indices", "counts")
    # NaNs are distinct, as the standard says.
    check(any_xp, r.values, np.array([1.0, 3.0, np.nan, np.nan]))
    check(any_xp, r.counts, np.array([2, 2, 1, 1]))
    assert r.inverse_indices.shape == values.shape
    flat = values.reshape(-1)
    for i, first in enumerate(np.asarray(r.indices)):
        assert np.array_equal(flat[first], np.asarray(r.values)[i], equal_nan=True)
    counts = xp.unique_counts(x)
    check(any_xp, counts.counts, np.array([2, 2, 1, 1]))
    inverse = xp.unique_inverse(x)
    rebuilt = np.asarray(inverse.values)[np.asarray(inverse.inverse_indices)]
    np.testing.assert_array_equal(rebuilt, values)
    check(any_xp, xp.unique_values(any_xp.asarray([2.0, 1.0, 2.0])), np.array([1.0, 2.0]))


def test_take_and_take_along_axis_match_numpy(any_xp):
    x = any_xp.asarray(VALUES)
    idx = np.array([2, 0])
    check(any_xp, xp.take(x, any_xp.asarray(idx), axis=1), np.take(VALUES, idx, axis=1))
    check(any_xp, xp.take(any_xp.asarray(VALUES[0]), any_xp.asarray(idx)), np.take(VALUES[0], idx))
    along = np.array([[1], [0]])
    check(
        any_xp,
        xp.take_along_axis(x, any_xp.asarray(along), axis=1),
        np.take_along_axis(VALUES, along, axis=1),
    )
    with pytest.raises(ValueError, match="axis is required"):
        xp.take(x, any_xp.asarray(idx))
