"""Indexing of the array API standard: ``x[key]`` is the operator ``array_api::getitem`` (a
basic index of a ``bf.Tensor`` is a view instead, test_views.py) and ``x[key] = value`` is
``array_api::setitem``, on Native and on a Python backend through the CPU fallback, and on
NumPy arrays; every kind of index the standard defines gives NumPy's result, a failing
``setitem`` changes nothing, index errors are NumPy's with the operator named, and a backend
can take the operators natively."""

from __future__ import annotations

import functools

import array_checks
import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall.array_api import _indexing
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

A = np.arange(24.0).reshape(2, 3, 4)
MASK = A % 3 == 0

# (id, key): each a kind of index the standard defines, NumPy arrays standing for arrays on the
# device (key_on_device() puts them there); the CPU side indexes NumPy's A with the same key.
KEYS = [
    ("int", 1),
    ("negative int", -1),
    ("ints", (1, 2, 3)),
    ("negative ints", (-2, -3, -4)),
    ("slice", slice(1, 3)),
    ("slice with step", (slice(None), slice(None, None, 2))),
    ("negative step", (slice(None), slice(None, None, -1), slice(3, 0, -2))),
    ("empty slice", (slice(1, 1),)),
    ("ellipsis", Ellipsis),
    ("ellipsis in the middle", (0, Ellipsis, 1)),
    ("ellipsis last", (1, Ellipsis)),
    ("None", None),
    ("None between", (0, None, slice(None), None, 2)),
    ("None with ellipsis", (Ellipsis, None)),
    ("empty tuple", ()),
    ("integer array", np.array([1, 0, 1])),
    ("integer arrays zipped", (np.array([0, 1]), np.array([2, 0]), np.array([3, 1]))),
    ("integer arrays broadcast", (np.array([[0], [1]]), np.array([0, 2]), 1)),
    ("0-d integer array", (np.array(1), np.array(2))),
    ("integer array and slices", (slice(None), np.array([2, 0, 2]), slice(1, 3))),
    ("integer array of duplicates", (np.array([1, 1, 1]),)),
    ("boolean mask", MASK),
    ("boolean mask of the first axes", MASK[..., 0]),
    ("0-d boolean mask true", np.array(True)),
    ("0-d boolean mask false", np.array(False)),
    ("list", [1, 0]),
]


def key_on_device(device_xp, key, numpy_arrays=False):
    """``key`` with each NumPy array on ``device_xp``'s device (unless ``numpy_arrays``)."""

    def move(k):
        return device_xp.asarray(k) if isinstance(k, np.ndarray) and not numpy_arrays else k

    return tuple(move(k) for k in key) if isinstance(key, tuple) else move(key)


# An index picks or writes values: NumPy's, element for element, of NumPy's shape.
check = functools.partial(array_checks.check, exact=True)


@pytest.mark.parametrize("key", [k for _, k in KEYS], ids=[i for i, _ in KEYS])
@pytest.mark.parametrize("arrays", ["device", "numpy"])
def test_getitem_matches_numpy(device_xp, key, arrays):
    x = device_xp.asarray(A)
    bf.metrics.reset()
    got = x[key_on_device(device_xp, key, numpy_arrays=arrays == "numpy")]
    check(device_xp, got, A[key])
    # A basic index makes a view, as NumPy's does, with no operator; any other is one call of
    # the operator, through the fallback.
    view = isinstance(A[key], np.ndarray) and A[key].base is A.base
    assert bf.metrics.counter_value("array_api::getitem") == (0 if view else 1)


@pytest.mark.parametrize("key", [(), Ellipsis, None, np.array(True)], ids=repr)
def test_a_0d_array_indexes_to_an_array(device_xp, key):
    x = device_xp.asarray(np.array(7.0))
    check(device_xp, x[key_on_device(device_xp, key)], np.asarray(np.array(7.0)[key]))


def test_a_single_element_is_a_0d_array(device_xp):
    got = device_xp.asarray(A)[1, 2, 3]
    assert isinstance(got, bf.Tensor) and got.shape == ()
    assert float(got) == A[1, 2, 3]


def test_basic_getitem_is_a_view_and_advanced_getitem_a_copy(device_xp):
    x = device_xp.asarray(A)
    row = x[0]
    row[...] = -1.0
    want = A.copy()
    want[0] = -1.0
    np.testing.assert_array_equal(np.asarray(x), want)
    picked = x[device_xp.asarray(np.array([1]))]
    picked[...] = 5.0
    np.testing.assert_array_equal(np.asarray(x), want)


@pytest.mark.parametrize("key", [k for _, k in KEYS], ids=[i for i, _ in KEYS])
def test_setitem_of_a_scalar_matches_numpy(device_xp, key):
    x = device_xp.asarray(A)
    want = A.copy()
    want[key] = -5.0
    x[key_on_device(device_xp, key)] = -5.0
    check(device_xp, x, want)


VALUES = [
    ("array of the selection's shape", (slice(None), 1), np.arange(8.0).reshape(2, 4) * -1),
    ("array broadcast", (slice(None), slice(1, 3)), np.array([-1.0, -2.0, -3.0, -4.0])),
    ("0-d array", (0, Ellipsis), np.array(-9.0)),
    ("to a masked selection", MASK, -np.arange(float(MASK.sum()))),
    ("to integer arrays", (np.array([0, 1]), np.array([2, 0])), np.array([[-1.0], [-2.0]])),
    ("everything", Ellipsis, np.full((3, 4), -7.0)),
    ("int array into floats", 1, np.arange(12).reshape(3, 4)),
]


@pytest.mark.parametrize(("key", "value"), [v[1:] for v in VALUES], ids=[v[0] for v in VALUES])
@pytest.mark.parametrize("value_on", ["device", "numpy"])
def test_setitem_of_an_array_matches_numpy(device_xp, key, value, value_on):
    x = device_xp.asarray(A)
    want = A.copy()
    want[key] = value
    x[key_on_device(device_xp, key)] = device_xp.asarray(value) if value_on == "device" else value
    check(device_xp, x, want)


def test_setitem_writes_into_the_tensor_itself(device_xp):
    x = device_xp.asarray(A)
    same = x
    bf.metrics.reset()
    x[0, 0, 0] = 100.0
    assert same is x and float(x[0, 0, 0]) == 100.0
    assert bf.metrics.counter_value("array_api::setitem.Scalar") == 1


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ((0, 0), np.ones(5), ValueError),  # no broadcast of (5,) into (4,)
        ((5, 0), 1.0, IndexError),  # out of range
        ((np.array([0, 7]),), 1.0, IndexError),  # an array with one element out of range
        (1.5, 1.0, IndexError),  # a float index
        ((0, 0, 0, 0), 1.0, IndexError),  # too many indices
        (0, "text", ValueError),  # no float
    ],
    ids=["broadcast", "out of range", "array out of range", "float", "too many", "value"],
)
def test_a_failing_setitem_leaves_the_tensor_unchanged(device_xp, key, value, error):
    x = device_xp.asarray(A)
    bf.metrics.reset()
    with pytest.raises(error) as info:
        x[key_on_device(device_xp, key)] = value
    np.testing.assert_array_equal(np.asarray(x), A)
    with pytest.raises(error):  # NumPy's own error for the same assignment
        A.copy()[key] = value
    assert any("array_api::setitem" in note for note in info.value.__notes__)
    assert sum(s["failures"] for s in bf.metrics.to_dict().values()) == 1


@pytest.mark.parametrize(
    ("key", "error"),
    [
        (2, IndexError),
        ((0, -4), IndexError),
        ((np.array([0, 3]),), IndexError),
        (1.0, IndexError),
        ((0, 0, 0, 0), IndexError),
        ((Ellipsis, 0, Ellipsis), IndexError),
        (np.array([1.0]), IndexError),
        (MASK[0], IndexError),  # a mask of the wrong shape
        ({0: 1}, IndexError),
    ],
    ids=[
        "int",
        "negative int",
        "array",
        "float",
        "too many",
        "two ellipses",
        "float array",
        "mask shape",
        "dict",
    ],
)
def test_index_errors_are_numpys_with_the_operator_named(device_xp, key, error):
    x = device_xp.asarray(A)
    with pytest.raises(error) as info:
        x[key_on_device(device_xp, key)]
    with pytest.raises(error) as numpys:
        A[key]
    assert str(info.value) == str(numpys.value)
    assert any("array_api::getitem" in note for note in info.value.__notes__)


@pytest.mark.parametrize("value", [None, object()], ids=["None", "object"])
def test_a_value_of_no_number_is_numpys_type_error(device_xp, value):
    ints = np.arange(6).reshape(2, 3)
    x = device_xp.asarray(ints)
    with pytest.raises(TypeError) as info:
        x[0, 1] = value
    with pytest.raises(TypeError) as numpys:
        ints.copy()[0, 1] = value
    assert str(info.value) == str(numpys.value)
    assert any("array_api::setitem" in note for note in info.value.__notes__)
    np.testing.assert_array_equal(np.asarray(x), ints)


def test_a_string_in_an_index_is_numpys_index_error(device_xp):
    x = device_xp.asarray(A)
    with pytest.raises(IndexError, match="only integers, slices") as info:
        x["a"]
    assert any("array_api::getitem" in note for note in info.value.__notes__)
    with pytest.raises(IndexError, match="only integers, slices"):
        x[0, "a"] = 1.0
    np.testing.assert_array_equal(np.asarray(x), A)


def test_the_index_reaches_a_kernel_as_python_wrote_it(accel):
    """``Any`` keeps slices, ``...``, ``None``, ints, bools and tuples; arrays come as device
    tensors in ``arrays`` and the key holds the slot mark; a backend's own getitem kernel
    serves ``x[key]`` without the fallback."""
    seen = []

    def accel_getitem(x, key, arrays):
        seen.append((key, arrays))
        data = x.payload.data[_indexing.join_key(key, [a.payload.data for a in arrays])]
        return accel.tensor(np.array(data))

    x = accel.tensor(A)
    index = accel.tensor(np.array([2, 0]))
    key = (slice(1, None, -1), Ellipsis, None, index, np.int64(1), True)
    with bf.Library("array_api", "IMPL") as lib:
        lib.impl("getitem", accel_getitem, accel.name)
        bf.metrics.reset()
        got = x[key]
        assert bf.metrics.counters() == {}
    (passed, arrays), *_ = seen
    assert passed == (slice(1, None, -1), Ellipsis, None, _indexing.SLOT, np.int64(1), True)
    assert [a.device for a in arrays] == [accel.device]
    want = A[slice(1, None, -1), ..., None, np.array([2, 0]), np.int64(1), True]
    np.testing.assert_array_equal(np.asarray(got), want)
    assert got.device == accel.device


def test_the_operators_work_on_numpy_arrays():
    a = A.copy()
    key, arrays = _indexing.split_key((slice(None), np.array([2, 0])))
    got = bf.ops.array_api.getitem(a, key, arrays)
    np.testing.assert_array_equal(got, A[:, [2, 0]])
    assert not np.shares_memory(bf.ops.array_api.getitem(a, 0, []), a)
    bf.ops.array_api.setitem(a, key, arrays, np.zeros(4))
    want = A.copy()
    want[:, [2, 0]] = 0.0
    np.testing.assert_array_equal(a, want)


def test_arrays_of_two_devices_in_one_call_name_both(accel):
    native, other = bf.native.tensor(A), accel.tensor(A)
    index = accel.tensor(np.array([1, 0]))
    for call in (
        lambda: xp.add(native, other),
        lambda: native[index],
        lambda: native.__setitem__(0, other[0]),
    ):
        with pytest.raises(bf.FallbackError) as info:
            call()
        assert "Native:0" in str(info.value) and accel.device in str(info.value)
    np.testing.assert_array_equal(np.asarray(native), A)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)
def test_basic_and_integer_array_indices_match_numpy(accel, data, shape):
    a = np.arange(float(np.prod(shape))).reshape(shape)
    key = data.draw(
        hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True)
        | (hnp.integer_array_indices(shape) if shape and 0 not in shape else st.nothing()),
        label="key",
    )
    for device in ("Native", accel.device):
        device_xp = xp.namespace(device)
        x = device_xp.asarray(a)
        check(device_xp, x[key_on_device(device_xp, key)], np.asarray(a[key]))
        want = a.copy()
        want[key] = -1.0
        x[key_on_device(device_xp, key)] = -1.0
        check(device_xp, x, want)


def test_the_info_claims_boolean_indexing_and_data_dependent_shapes_which_work(device_xp):
    caps = device_xp.__array_namespace_info__().capabilities()
    assert caps["boolean indexing"] is True and caps["data-dependent shapes"] is True
    x = device_xp.asarray([3.0, -1.0, 2.0, -4.0])
    np.testing.assert_array_equal(np.asarray(x[x > 0]), [3.0, 2.0])
    np.testing.assert_array_equal(np.asarray(device_xp.nonzero(x < 0)[0]), [1, 3])
    np.testing.assert_array_equal(
        np.asarray(device_xp.unique_values(device_xp.abs(x) > 2)), [False, True]
    )


def test_an_element_takes_any_python_int_its_dtype_holds(device_xp):
    """``u[0] = 2**64 - 1`` in a uint64 array (an int beyond a 64-bit signed ``Scalar``), as
    NumPy; an int the dtype cannot hold is NumPy's ``OverflowError``; a float array takes it
    as a float."""
    u = device_xp.asarray(np.zeros(3, dtype=np.uint64))
    u[0] = 2**64 - 1
    assert u.numpy().tolist() == [2**64 - 1, 0, 0]
    with pytest.raises(OverflowError, match="out of bounds"):
        u[1] = 2**64
    with pytest.raises(OverflowError):
        device_xp.asarray(np.zeros(2, dtype=np.int64))[0] = 2**63
    assert u.numpy().tolist() == [2**64 - 1, 0, 0]
    f = device_xp.zeros(2)
    f[0] = 2**70
    assert f.numpy()[0] == 2.0**70
