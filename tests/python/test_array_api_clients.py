"""What real clients (SciPy, scikit-learn, code written against NumPy) need from a device array
beyond the standard's letter, on Native and on a backend written in Python alike: the namespace
a tensor reports is its device's; ``"Native"`` is ``"Native:0"``; NumPy's functions and ufuncs
take tensors; Python scalars of any size and kind combine as NumPy 2 combines them; and the
small gaps (iteration, strings, DLPack's ``copy``, an axis too large)."""

from __future__ import annotations

import re

import array_api_compat
import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest


def values(t):
    return np.asarray(t)


# 1. The namespace of a tensor is its device's.


def test_a_tensor_reports_the_namespace_of_its_device(device_xp):
    t = device_xp.asarray([1.0, 2.0])
    assert t.__array_namespace__() is device_xp is xp.namespace(t.device)
    assert array_api_compat.array_namespace(t) is device_xp
    # So a client's `xp.asarray(numpy_result)` comes back where its arguments live.
    back = t.__array_namespace__().asarray(np.array([3.0]))
    assert isinstance(back, bf.Tensor) and back.device == t.device


def test_native_and_native_0_are_one_device_everywhere():
    assert xp.namespace("Native") is xp.namespace("Native:0") is xp.namespace("native")
    t = xp.namespace("Native").asarray([1.0, 2.0])
    assert t.device == "Native" and t.device == "native:0" and t.device == "Native:0"
    assert not (t.device != "Native") and t.device != "cpu"
    assert xp.asarray(t, device="Native", copy=False) is t
    assert xp.asarray(t, device="Native:0", copy=False) is t
    assert xp.from_dlpack(t, device="Native", copy=False) is t
    assert t.to_device("Native") is t and t.to_device("NATIVE:0") is t
    # An array of the CPU lands on one device whatever the spelling.
    assert xp.asarray([1.0], device="Native").device == "Native:0"


def test_an_index_that_no_device_has_is_an_error():
    with pytest.raises(ValueError, match="no device"):
        xp.namespace("Native:1")
    with pytest.raises(ValueError, match="no device"):
        xp.asarray([1.0], device="Native:7")
    with pytest.raises(ValueError, match="no device"):
        xp.zeros(2, device="NoSuchBackend")


def test_a_python_backends_device_index_reads_the_same(accel):
    name = accel.device.split(":")[0]
    assert xp.namespace(name) is xp.namespace(accel.device)
    t = xp.namespace(name).zeros(2)
    assert t.device == name and t.device == accel.device


# 3. NumPy's functions and ufuncs given tensors.


def test_np_asarray_gives_the_values_on_every_backend(device_xp):
    t = device_xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    a = np.asarray(t)
    assert isinstance(a, np.ndarray) and a.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_a_numpy_ufunc_gives_numpys_values_on_the_tensors_device(device_xp):
    t = device_xp.asarray([1.0, 4.0, 9.0])
    r = np.sqrt(t)
    assert isinstance(r, bf.Tensor) and r.device == t.device
    assert values(r).tolist() == [1.0, 2.0, 3.0]
    s = np.add.reduce(t)
    assert float(s) == 14.0
    c = np.multiply.outer(t, t)
    assert isinstance(c, bf.Tensor) and c.device == t.device and c.shape == (3, 3)
    # NumPy's values where the standard's operator would not be NumPy's: a ufunc with kwargs.
    w = np.add(t, 1.0, where=np.array([True, False, True]), out=np.zeros(3))
    assert isinstance(w, np.ndarray) and w.tolist() == [2.0, 0.0, 10.0]


def test_a_numpy_function_gives_numpys_values_on_the_tensors_device(device_xp):
    t, u = device_xp.asarray([3.0, 4.0]), device_xp.asarray([[1.0, 2.0]])
    cat = np.concatenate([t, u[0]])
    assert isinstance(cat, bf.Tensor) and cat.device == t.device
    assert values(cat).tolist() == [3.0, 4.0, 1.0, 2.0]
    assert float(np.linalg.norm(t)) == 5.0
    q, r = np.linalg.qr(device_xp.asarray(np.eye(2)))
    assert q.device == t.device and r.device == t.device
    assert np.shape(t) == (2,)  # a non-array result as NumPy gives it


def test_a_numpy_function_writes_into_a_tensor_it_is_given_to_write(device_xp):
    t = device_xp.asarray([1.0, 2.0])
    out = np.add(t, 1.0, out=t)
    assert out is t and values(t).tolist() == [2.0, 3.0]
    np.copyto(t, np.array([7.0, 8.0]))
    assert values(t).tolist() == [7.0, 8.0]
    np.negative.at(t, [0])
    assert values(t).tolist() == [-7.0, 8.0]


def test_a_numpy_array_on_the_left_runs_on_the_tensors_device(device_xp):
    r = np.array([1.0, 2.0]) * device_xp.asarray([3.0, 4.0])
    assert isinstance(r, bf.Tensor) and values(r).tolist() == [3.0, 8.0]


def test_numpy_calls_on_a_device_are_counted_as_fallbacks(accel):
    bf.metrics.reset()
    np.cumsum(xp.namespace(accel.device).asarray([1.0, 2.0, 3.0]))
    assert bf.metrics.counter_value("numpy::cumsum") == 1
    np.add.accumulate(xp.namespace(accel.device).asarray([1.0, 2.0]))
    assert bf.metrics.counter_value("numpy::add.accumulate") == 1


def test_scipy_computes_on_tensors_and_returns_them_on_their_device(device_xp):
    special = pytest.importorskip("scipy.special")
    r = special.ndtr(device_xp.asarray([0.0, 0.5]))
    assert isinstance(r, bf.Tensor) and r.device == device_xp.asarray(0.0).device
    assert np.allclose(values(r), special.ndtr(np.array([0.0, 0.5])))


# 4. Python scalars of any kind and size, 0-d arrays where a scalar goes.


def test_a_complex_scalar_promotes_as_numpy_2_does(device_xp):
    b = device_xp.asarray([True, False])
    assert (b + 1j).dtype == xp.complex128 and values(b + 1j).tolist() == [1 + 1j, 1j]
    assert (device_xp.asarray([1.0], dtype=xp.float32) * 1j).dtype == xp.complex64
    assert (1j * device_xp.asarray([2])).dtype == xp.complex128
    assert values(device_xp.asarray([1.0]) * 1j).tolist() == [1j]


def test_a_python_int_past_64_bits_works_where_numpy_2s_does(device_xp):
    u = device_xp.asarray([1, 2**64 - 1], dtype=xp.uint64)
    assert values(u == 2**64 - 1).tolist() == [False, True]
    assert values(2**64 - 1 == u).tolist() == [False, True]
    s = device_xp.asarray([1, 2], dtype=xp.uint64) + 2**63
    assert s.dtype == xp.uint64 and values(s).tolist() == [2**63 + 1, 2**63 + 2]
    assert values(xp.add(2**63, device_xp.asarray([1], dtype=xp.uint64))).tolist() == [2**63 + 1]
    i = device_xp.asarray([-5, 5])
    assert values(i < 2**70).tolist() == [True, True]
    assert values(2**70 > i).tolist() == [True, True]
    assert values(i > -(2**70)).tolist() == [True, True]
    assert values(i == 2**64).tolist() == [False, False]
    assert values(device_xp.asarray([1.0]) + 2**70).tolist() == [1.0 + 2**70]
    u += 2**63
    assert values(u).tolist() == [2**63 + 1, (2**64 - 1 + 2**63) % 2**64]


def test_a_python_int_that_fits_no_dtype_of_the_operation_overflows(device_xp):
    with pytest.raises(OverflowError):
        device_xp.asarray([1], dtype=xp.uint64) + 2**64
    with pytest.raises(OverflowError):
        device_xp.asarray([1]) + 2**63  # int64 holds no 2**63
    with pytest.raises(OverflowError):
        device_xp.asarray([True]) * 2**63


def test_0d_arrays_go_where_a_scalar_goes(device_xp):
    r = device_xp.linspace(device_xp.asarray(0.0), device_xp.asarray(1.0), 3)
    assert values(r).tolist() == [0.0, 0.5, 1.0] and r.device == device_xp.asarray(0.0).device
    assert values(device_xp.arange(device_xp.asarray(3))).tolist() == [0, 1, 2]
    assert values(xp.linspace(np.asarray(0.0), np.float64(2.0), 3)).tolist() == [0.0, 1.0, 2.0]


# 5. Small gaps.


def test_iterating_a_tensor_yields_its_rows(device_xp):
    t = device_xp.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    rows = list(t)
    assert len(rows) == 3 and all(isinstance(r, bf.Tensor) for r in rows)
    assert all(r.device == t.device for r in rows)
    assert [values(r).tolist() for r in rows] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    with pytest.raises(TypeError, match="0-d"):
        iter(device_xp.asarray(1.0))


def test_the_rows_iteration_yields_are_views_on_every_backend(device_xp):
    # NumPy's rows are views: SciPy's tanhsinh unpacks `fr, fl = reshape(fj, ...)` and writes
    # `fr[mask] = ...`, expecting fj to change.
    t = device_xp.reshape(device_xp.arange(6.0), (3, 2))
    a, b, c = t
    b[device_xp.asarray([True, False])] = -1.0
    c += 10.0
    expect = np.arange(6.0).reshape(3, 2)
    ra, rb, rc = expect
    rb[np.asarray([True, False])] = -1.0
    rc += 10.0
    assert values(t).tolist() == expect.tolist()
    t[0, 1] = 7.0  # and the base's writes are seen through them
    assert values(a).tolist() == [0.0, 7.0]


def test_iterating_a_1d_device_tensor_copies_it_to_the_host_once():
    copies = []

    def to_cpu(payload):
        copies.append(payload.shape)
        return payload.copy()

    def copy_from_cpu(payload, array):
        payload[...] = array

    bf.register_backend(
        "IterCount", to_cpu=to_cpu, from_cpu=np.array, copy_from_cpu=copy_from_cpu, replace=True
    )
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, "IterCount")
        t = xp.namespace("IterCount").asarray(np.arange(4.0))
        copies.clear()
        items = list(t)
    assert [float(r) for r in items] == [0.0, 1.0, 2.0, 3.0]
    assert copies.count((4,)) == 1  # the whole tensor once, not once an element


def test_asarray_of_strings_or_objects_is_a_type_error(device_xp):
    for bad in (["a"], "abc", [object()], np.array(["x"])):
        with pytest.raises(TypeError):
            device_xp.asarray(bad)
    with pytest.raises(TypeError):
        xp.asarray(["a"])


def test_dlpack_copy_takes_only_true_false_or_none(device_xp):
    t = device_xp.asarray([1.0])
    with pytest.raises(ValueError, match="True, False or None"):
        t.__dlpack__(copy="yes")
    assert np.from_dlpack(t).tolist() == [1.0]


def test_an_axis_that_fits_no_index_says_so(device_xp):
    with pytest.raises(TypeError, match="fits no index"):
        xp.sum(device_xp.asarray([1.0]), axis=2**70)


def test_len_format_and_truth_as_numpys(device_xp):
    t = device_xp.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert len(t) == 3
    with pytest.raises(TypeError, match="0-d"):
        len(device_xp.asarray(1.0))
    assert f"{device_xp.asarray(1.5):.2f}" == "1.50" and f"{device_xp.asarray(7):>3}" == "  7"
    with pytest.raises(TypeError, match="spec"):
        f"{t:.2f}"  # noqa: B018
    assert bool(device_xp.asarray([1.0])) is True and bool(device_xp.asarray([[0]])) is False
    with pytest.raises(TypeError, match="0-d"):
        bool(device_xp.asarray([1.0, 2.0]))


def test_a_tensor_pickles_and_deep_copies_onto_its_device(device_xp):
    import copy
    import pickle

    t = device_xp.asarray([[1.0, 2.0], [3.0, 4.0]])
    for again in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):
        assert isinstance(again, bf.Tensor) and again is not t
        assert again.device == t.device and values(again).tolist() == values(t).tolist()
    again[0, 0] = 9.0
    assert values(t)[0, 0] == 1.0  # a copy


# 6. NumPy's methods that client code calls on arrays (SciPy's paths for NumPy, CuPy and
# PyTorch), each the namespace's operator on the tensor's device.


def test_numpys_reductions_as_methods(device_xp):
    host = np.arange(12.0).reshape(3, 4) - 5.0
    t = device_xp.asarray(host)
    for got, want in [
        (t.sum(), host.sum()),
        (t.sum(axis=-1), host.sum(axis=-1)),
        (t.sum(0, keepdims=True), host.sum(0, keepdims=True)),
        (t.sum(axis=(0, 1), dtype=np.float32), host.sum(axis=(0, 1), dtype=np.float32)),
        ((t > 0).all(axis=1), (host > 0).all(axis=1)),
        ((t > 0).any(), (host > 0).any()),
        ((t > 0).any(0, keepdims=True), (host > 0).any(0, keepdims=True)),
        (t.max(), host.max()),
        (t.min(axis=0), host.min(axis=0)),
        (t.max(1, keepdims=True), host.max(1, keepdims=True)),
    ]:
        assert isinstance(got, bf.Tensor) and got.device == t.device
        assert got.dtype == want.dtype and values(got).tolist() == np.asarray(want).tolist()
    # An int array's sum is the standard's int64 (NumPy's too on 64-bit Linux).
    assert device_xp.asarray([True, True]).sum().dtype == np.bool_(True).sum().dtype


def test_reshape_ravel_and_astype_as_methods(device_xp):
    host = np.arange(6.0)
    t = device_xp.asarray(host)
    for got, want in [
        (t.reshape(2, 3), host.reshape(2, 3)),
        (t.reshape((3, -1)), host.reshape((3, -1))),
        (t.reshape(2, 3).T.ravel(), host.reshape(2, 3).T.ravel()),
        (t.astype(int), host.astype(int)),
        (t.astype("f4"), host.astype("f4")),
        (t.astype(np.complex64), host.astype(np.complex64)),
    ]:
        assert got.device == t.device and got.shape == want.shape and got.dtype == want.dtype
        assert values(got).tolist() == want.tolist()
    # reshape and ravel make views where the data allow it, as NumPy's: writes reach t.
    r = t.reshape(2, 3)
    r[1, 0] = -1.0
    flat = r.ravel()
    flat[0] = -2.0
    assert values(t).tolist() == [-2.0, 1.0, 2.0, -1.0, 4.0, 5.0]


def test_view_of_the_same_dtype_is_a_view_and_of_another_reinterprets(device_xp):
    host = np.array([[1 + 2j, 3 + 4j], [5 + 6j, 7 + 8j]])
    t = device_xp.asarray(host)
    same = t.view()
    same[0, 0] = 0.0
    assert values(t)[0, 0] == 0.0
    assert t.view(np.complex128)[1, 1].__complex__() == 7 + 8j
    # SciPy's RBFInterpolator: complex data viewed as float with twice the columns, and back.
    host[0, 0] = 0.0
    as_float = t.view(float)
    assert as_float.device == t.device and as_float.shape == (2, 4)
    assert values(as_float).tolist() == host.view(float).tolist()
    back = as_float.view(np.complex128)
    assert back.shape == (2, 2) and values(back).tolist() == host.tolist()
    assert device_xp.asarray(np.arange(3, dtype=np.int32)).view(np.uint8).shape == (12,)
    # It shares nothing with t, so a write to it raises rather than being lost.
    with pytest.raises(ValueError, match="read-only"):
        as_float[0, 0] = 1.0


def test_logspace_is_numpys(device_xp):
    got = device_xp.logspace(-3, 0, 10)
    assert got.device == device_xp.zeros(1).device and got.dtype == np.float64
    np.testing.assert_allclose(values(got), np.logspace(-3, 0, 10), rtol=1e-15)
    got = device_xp.logspace(0, 3, 4, base=2.0, endpoint=False, dtype=np.float32)
    want = np.logspace(0, 3, 4, base=2.0, endpoint=False, dtype=np.float32)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(values(got), want, rtol=1e-6)


@pytest.mark.parametrize("x1, x2", [(-0.5, 0), (0, 1.5), (1, 2), (True, False), (1j, 0), (True, 2)])
def test_where_of_two_python_scalars_is_numpys(device_xp, x1, x2):
    # SciPy's nsum: `xp.where(x == 0, math.log(0.5), 0)`.
    cond = [True, False, True]
    got = device_xp.where(device_xp.asarray(cond), x1, x2)
    want = np.where(np.asarray(cond), x1, x2)
    assert got.device == device_xp.zeros(1).device
    assert got.dtype == want.dtype and values(got).tolist() == want.tolist()


def test_numpys_testing_takes_a_tensor_tolerance(device_xp):
    # np.testing.assert_allclose(..., atol=tensor) makes tensors and calls .ravel().all().
    a = device_xp.asarray([1.0, 2.0], dtype=device_xp.float32)
    atol = 1e-2 * device_xp.abs(device_xp.min(a))
    np.testing.assert_allclose(values(a), values(a) + 1e-3, atol=atol)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(values(a), values(a) + 1.0, atol=atol)


@pytest.mark.parametrize("k", [0, 2, -1])
def test_diag_is_numpys(device_xp, k):
    # SciPy's RBFInterpolator adds `xp.diag(smoothing)` to its matrix.
    for host in (np.arange(1.0, 4.0), np.arange(12, dtype=np.int32).reshape(3, 4)):
        got = device_xp.diag(device_xp.asarray(host), k)
        want = np.diag(host, k)
        assert got.device == device_xp.zeros(1).device and got.dtype == want.dtype
        assert values(got).tolist() == want.tolist()


@pytest.mark.parametrize("dtype", ["complex128", "float32", "int64"])
def test_real_and_imag_properties_are_numpys(device_xp, dtype):
    host = (np.array([1 + 2j, 3 - 4j]) if dtype == "complex128" else np.arange(2)).astype(dtype)
    t = device_xp.asarray(host)
    for got, want in [(t.real, host.real), (t.imag, host.imag)]:
        assert got.device == t.device and got.dtype == want.dtype
        assert values(got).tolist() == want.tolist()


def test_a_namespaces_name_is_a_dotted_name_that_matches_itself(device_xp):
    # SciPy's and scikit-learn's tests match their messages with `xp.__name__` as a regex.
    assert re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", device_xp.__name__)
    assert re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", device_xp.fft.__name__)
    assert device_xp.__name__.startswith("boxfall.array_api.")
    message = f"Array API dispatch to namespace {device_xp.__name__} only supports solver 'svd'."
    assert re.match(f"Array API dispatch to namespace {device_xp.__name__} only", message)
    assert xp.namespace("Native").__name__ == "boxfall.array_api.Native_0"
