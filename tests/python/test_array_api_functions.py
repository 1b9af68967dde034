"""``boxfall.array_api``'s chapters on the three kinds of device: NumPy
arrays on the CPU, ``namespace("Native")`` through Native's CPU fallback, and a backend written
in Python with the three copy hooks through ``bf.cpu_fallback``; every result is compared with
NumPy's own."""

from __future__ import annotations

import functools

import array_checks
import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall.array_api import _elementwise_functions as ew


def host(x) -> np.ndarray:
    return np.asarray(x)


# Each function is NumPy's own through the fallback or Native's kernel: all but equal, NaN where
# NumPy gives NaN.
check = functools.partial(array_checks.check, rtol=1e-12, equal_nan=True)


INT_ONLY = {n for n in ew.BINARY if n.startswith("bitwise")} | {"bitwise_invert"}
BOOL_ONLY = {n for n in [*ew.UNARY, *ew.BINARY] if n.startswith("logical")}


def sample(name: str, seed: int) -> np.ndarray:
    """An input in every function's domain: ints for bitwise ones, bools for logical ones,
    floats in (0.1, 0.9) (inside acos's, atanh's and log's; (1.1, 1.9) for acosh) for the rest."""
    rng = np.random.default_rng(seed)
    if name in INT_ONLY:
        return rng.integers(0, 7, size=(2, 3)).astype(np.int64)
    if name in BOOL_ONLY:
        return rng.integers(0, 2, size=(2, 3)).astype(bool)
    return rng.uniform(0.1, 0.9, size=(2, 3)) + (1.0 if name == "acosh" else 0.0)


@pytest.mark.parametrize("name", sorted(ew.UNARY))
def test_unary_functions_match_numpy(any_xp, name):
    x = sample(name, 0)
    check(any_xp, getattr(any_xp, name)(any_xp.asarray(x)), ew.UNARY[name](x))


@pytest.mark.parametrize("name", sorted(ew.BINARY))
def test_binary_functions_match_numpy(any_xp, name):
    x1, x2 = sample(name, 1), sample(name, 2)
    check(
        any_xp,
        getattr(any_xp, name)(any_xp.asarray(x1), any_xp.asarray(x2)),
        ew.BINARY[name](x1, x2),
    )


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "pow", "maximum"])
def test_a_python_scalar_on_either_side_keeps_the_arrays_dtype(any_xp, name):
    x = np.array([0.5, 1.5, 2.5], dtype=np.float32)
    f = getattr(any_xp, name)
    check(any_xp, f(any_xp.asarray(x), 2), ew.BINARY[name](x, np.float32(2)))
    check(any_xp, f(2.0, any_xp.asarray(x)), ew.BINARY[name](np.float32(2), x))
    i = np.array([1, 2, 3], dtype=np.int32)
    if name != "divide":  # int / int is floating
        assert f(any_xp.asarray(i), 2).dtype == np.dtype("int32")


def test_a_complex_scalar_becomes_an_array_of_the_arrays_dtype():
    x = np.array([1.0, 2.0], dtype=np.complex64)
    got = xp.add(x, 1j)
    assert got.dtype == np.complex64
    np.testing.assert_array_equal(got, x + np.complex64(1j))


def test_two_python_scalars_are_a_type_error():
    with pytest.raises(TypeError, match="add"):
        xp.add(1, 2)


def test_clip_takes_scalar_and_array_bounds(any_xp):
    x = np.array([-2.0, 0.5, 3.0])
    check(any_xp, any_xp.clip(any_xp.asarray(x), 0.0, 1.0), np.clip(x, 0, 1))
    check(
        any_xp,
        any_xp.clip(any_xp.asarray(x), max=any_xp.asarray(np.array(1.0))),
        np.clip(x, None, 1),
    )
    check(any_xp, any_xp.clip(any_xp.asarray(x)), x)


CREATIONS = [
    ("zeros", lambda m: m.zeros((2, 3))),
    ("ones", lambda m: m.ones(3, dtype=m.int32)),
    ("full", lambda m: m.full((2,), 7.5)),
    ("arange", lambda m: m.arange(1, 7, 2)),
    ("linspace", lambda m: m.linspace(0.0, 1.0, 5)),
    ("eye", lambda m: m.eye(3, 4, k=1)),
    ("asarray", lambda m: m.asarray([[1, 2], [3, 4]])),
]


@pytest.mark.parametrize(("name", "make"), CREATIONS, ids=[c[0] for c in CREATIONS])
def test_creation_functions_land_on_the_namespaces_device(any_xp, name, make):
    check(any_xp, make(any_xp), make(np))


def test_creation_functions_count_a_fallback_on_the_device(accel):
    bf.metrics.reset()
    z = xp.zeros(3, device=accel.device)
    assert isinstance(z, bf.Tensor) and z.device == accel.device
    assert bf.metrics.counters() == {"array_api::zeros": 1}


def test_the_like_functions_follow_their_array_or_the_device_given(any_xp, accel):
    x = any_xp.asarray(np.arange(6.0).reshape(2, 3))
    check(any_xp, any_xp.zeros_like(x), np.zeros((2, 3)))
    check(any_xp, any_xp.ones_like(x, dtype=any_xp.int64), np.ones((2, 3), dtype=np.int64))
    check(any_xp, any_xp.full_like(x, 2.0), np.full((2, 3), 2.0))
    assert any_xp.empty_like(x).shape == (2, 3)
    moved = any_xp.zeros_like(x, device=accel.device)
    assert isinstance(moved, bf.Tensor) and moved.device == accel.device


def test_empty_and_tril_triu_and_meshgrid(any_xp):
    assert any_xp.empty((2, 2)).shape == (2, 2)
    m = np.arange(9.0).reshape(3, 3)
    check(any_xp, any_xp.tril(any_xp.asarray(m), k=-1), np.tril(m, -1))
    check(any_xp, any_xp.triu(any_xp.asarray(m)), np.triu(m))
    a, b = any_xp.meshgrid(
        any_xp.asarray([1.0, 2.0]), any_xp.asarray([3.0, 4.0, 5.0]), indexing="ij"
    )
    check(any_xp, b, np.meshgrid([1.0, 2.0], [3.0, 4.0, 5.0], indexing="ij")[1])


X = np.arange(1.0, 13.0).reshape(3, 4)
REDUCTIONS = [
    ("sum", {}, lambda: np.sum(X)),
    ("sum", {"axis": 1, "keepdims": True}, lambda: np.sum(X, axis=1, keepdims=True)),
    ("sum", {"axis": (0, 1)}, lambda: np.sum(X, axis=(0, 1))),
    ("sum", {"dtype": xp.float32}, lambda: np.sum(X, dtype=np.float32)),
    ("prod", {"axis": 0}, lambda: np.prod(X, axis=0)),
    ("mean", {"axis": -1}, lambda: np.mean(X, axis=-1)),
    ("max", {"axis": 0, "keepdims": True}, lambda: np.max(X, axis=0, keepdims=True)),
    ("min", {}, lambda: np.min(X)),
    ("std", {"correction": 1}, lambda: np.std(X, ddof=1)),
    ("var", {"axis": 1, "correction": 0.5}, lambda: np.var(X, axis=1, ddof=0.5)),
    ("cumulative_sum", {"axis": 1}, lambda: np.cumsum(X, axis=1)),
    ("cumulative_prod", {"axis": 0}, lambda: np.cumprod(X, axis=0)),
]


@pytest.mark.parametrize(
    ("name", "kwargs", "want"), REDUCTIONS, ids=[f"{r[0]}-{r[1]}" for r in REDUCTIONS]
)
def test_statistical_functions_match_numpy(any_xp, name, kwargs, want):
    check(any_xp, getattr(any_xp, name)(any_xp.asarray(X), **kwargs), want())


def test_sums_of_small_integers_accumulate_in_int64(any_xp):
    x = any_xp.asarray(np.array([1, 2, 3], dtype=np.int32))
    assert any_xp.sum(x).dtype == np.dtype("int64")
    assert any_xp.cumulative_sum(x, include_initial=True).dtype == np.dtype("int64")
    check(any_xp, any_xp.cumulative_sum(x, include_initial=True), np.array([0, 1, 3, 6]))


MANIPULATIONS = [
    ("reshape", lambda m, x: m.reshape(x, (4, 3)), lambda: X.reshape(4, 3)),
    ("permute_dims", lambda m, x: m.permute_dims(x, (1, 0)), lambda: X.T),
    ("flip", lambda m, x: m.flip(x, axis=0), lambda: np.flip(X, 0)),
    ("expand_dims", lambda m, x: m.expand_dims(x, axis=1), lambda: X[:, None]),
    ("squeeze", lambda m, x: m.squeeze(m.expand_dims(x, axis=0), 0), lambda: X),
    ("roll", lambda m, x: m.roll(x, 1, axis=1), lambda: np.roll(X, 1, axis=1)),
    ("concat", lambda m, x: m.concat([x, x], axis=1), lambda: np.concatenate([X, X], 1)),
    ("stack", lambda m, x: m.stack([x, x]), lambda: np.stack([X, X])),
    ("tile", lambda m, x: m.tile(x, (1, 2)), lambda: np.tile(X, (1, 2))),
    ("repeat", lambda m, x: m.repeat(x, 2, axis=0), lambda: np.repeat(X, 2, 0)),
    (
        "broadcast_to",
        lambda m, x: m.broadcast_to(x, (2, 3, 4)),
        lambda: np.broadcast_to(X, (2, 3, 4)),
    ),
    ("moveaxis", lambda m, x: m.moveaxis(x, 0, 1), lambda: np.moveaxis(X, 0, 1)),
    ("matmul", lambda m, x: m.matmul(x, m.matrix_transpose(x)), lambda: X @ X.T),
    ("vecdot", lambda m, x: m.vecdot(x, x), lambda: np.sum(X * X, axis=-1)),
    ("tensordot", lambda m, x: m.tensordot(x, x, axes=([1], [1])), lambda: X @ X.T),
    ("astype", lambda m, x: m.astype(x, m.int64), lambda: X.astype(np.int64)),
]


@pytest.mark.parametrize(("name", "run", "want"), MANIPULATIONS, ids=[m[0] for m in MANIPULATIONS])
def test_manipulation_and_linear_algebra_functions_match_numpy(any_xp, name, run, want):
    check(any_xp, run(any_xp, any_xp.asarray(X)), want())


def test_unstack_and_broadcast_arrays_return_sequences(any_xp):
    parts = any_xp.unstack(any_xp.asarray(X), axis=1)
    assert isinstance(parts, tuple) and len(parts) == 4
    check(any_xp, parts[2], X[:, 2])
    a, b = any_xp.broadcast_arrays(
        any_xp.asarray(X), any_xp.asarray(np.array([1.0, 2.0, 3.0, 4.0]))
    )
    check(any_xp, b, np.broadcast_to([1.0, 2.0, 3.0, 4.0], (3, 4)))


def test_the_namespace_has_the_standards_names_and_values():
    assert xp.__array_api_version__ == "2024.12"
    assert xp.float64 == np.dtype("float64") and xp.uint8 == np.dtype("uint8")
    assert (xp.e, xp.pi, xp.newaxis) == (np.e, np.pi, None)
    assert np.isinf(xp.inf) and np.isnan(xp.nan)
    info = xp.__array_namespace_info__()
    assert info.default_device() == "cpu" and info.default_dtypes()["indexing"] == xp.int64
    every = {d.name for d in (xp.bool, xp.int8, xp.int16, xp.int32, xp.int64, xp.uint8,
             xp.uint16, xp.uint32, xp.uint64, xp.float32, xp.float64, xp.complex64,
             xp.complex128)}  # fmt: skip
    assert set(xp.namespace("Native").__array_namespace_info__().dtypes()) == every
    for name in every:  # Native holds each of them
        assert xp.namespace("Native").ones(2, dtype=getattr(xp, name)).dtype == np.dtype(name)
    assert xp.namespace("native") is xp.namespace("Native:0")
    assert xp.namespace("cpu") is xp
    with pytest.raises(ValueError, match="no device 'Nowhere'"):
        xp.namespace("Nowhere")


def test_every_function_but_creation_is_the_same_object_in_every_namespace():
    nx = xp.namespace("Native")
    assert nx.add is xp.add and nx.sum is xp.sum and nx.zeros_like is xp.zeros_like
    assert nx.zeros is not xp.zeros


def test_data_type_functions_answer_from_dtypes():
    assert xp.isdtype(xp.int8, "signed integer") and not xp.isdtype(xp.uint8, "signed integer")
    assert xp.isdtype(xp.float32, ("integral", "real floating"))
    assert xp.result_type(xp.int8, xp.int16) == xp.int16
    assert xp.result_type(np.ones(2, np.float32), 1.0) == xp.float32
    assert xp.can_cast(xp.int8, xp.int64) and not xp.can_cast(xp.float64, xp.int64)
    assert xp.finfo(xp.float32).eps == np.finfo(np.float32).eps
    assert xp.iinfo(xp.int8).max == 127


def test_finfo_and_iinfo_fields_are_python_numbers():
    # The standard's types: `eps * x` is then a Python scalar beside x, on x's device.
    f = xp.finfo(xp.complex64)
    assert type(f.eps) is float and f.eps == np.finfo(np.float32).eps
    assert (f.bits, f.dtype) == (32, xp.float32)
    assert type(f.smallest_normal) is float and f.min == -f.max
    i = xp.iinfo(xp.uint64)
    assert type(i.max) is int and (i.bits, i.min, i.max) == (64, 0, 2**64 - 1)
    bf.metrics.reset()
    x = xp.namespace("Native").ones(2)
    y = x * xp.finfo(x.dtype).eps
    assert y.device == x.device and y.dtype == x.dtype
    np.testing.assert_array_equal(y.numpy(), np.finfo(np.float64).eps)
    # array_api::multiply.Tensor_Scalar, which Native runs with its Rust kernel (no fallback).
    assert bf.ops.array_api.multiply.Tensor_Scalar.dispatch_table()["Native"] == "kernel"
    assert bf.metrics.counter_value("array_api::multiply.Tensor_Scalar") == 0


def test_a_numpy_scalar_is_taken_as_a_0d_array():
    assert xp.all(np.float64(1.0) == np.float64(1.0)).shape == ()
    assert float(xp.sum(np.float32(2.5))) == 2.5


def test_utility_functions(any_xp):
    x = any_xp.asarray(np.array([[True, False], [True, True]]))
    check(any_xp, any_xp.all(x, axis=1), [False, True])
    check(any_xp, any_xp.any(x), True)
    check(any_xp, any_xp.diff(any_xp.asarray(X), axis=0), np.diff(X, axis=0))


@pytest.mark.parametrize("k", [2**70, -(2**70), 3, -4, 5], ids=str)
def test_eye_takes_any_diagonal_python_int(any_xp, k):
    # The suite draws k beyond int64; NumPy's eye gives zeros past the matrix, and so does this.
    check(any_xp, any_xp.eye(4, 3, k=k), np.eye(4, 3, k=k))
