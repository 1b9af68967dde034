"""``bf.Tensor``'s operator methods call their operators directly for the operands whose type
alone decides the operator (another tensor, a NumPy array, a plain bool, int or float), and hand
every other operand to ``boxfall.array_api._array_methods``: both ways give what the Python
methods give, run the same operator (counted under its own name), and keep NotImplemented and
the errors."""

from __future__ import annotations

import operator

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall.array_api import _array_methods as methods

nx = xp.namespace("Native")

FORWARD = [
    ("__add__", operator.add),
    ("__sub__", operator.sub),
    ("__mul__", operator.mul),
    ("__truediv__", operator.truediv),
    ("__floordiv__", operator.floordiv),
    ("__mod__", operator.mod),
    ("__pow__", operator.pow),
    ("__eq__", operator.eq),
    ("__ne__", operator.ne),
    ("__lt__", operator.lt),
    ("__le__", operator.le),
    ("__gt__", operator.gt),
    ("__ge__", operator.ge),
]
INTEGER = [
    ("__and__", operator.and_),
    ("__or__", operator.or_),
    ("__xor__", operator.xor),
    ("__lshift__", operator.lshift),
    ("__rshift__", operator.rshift),
]


def _same(got, want):
    assert isinstance(got, bf.Tensor) and isinstance(want, bf.Tensor)
    assert got.device == want.device and got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(("name", "fn"), FORWARD)
@pytest.mark.parametrize("other", ["tensor", "ndarray", 2.5, 3, True])
def test_forward_operators_give_what_the_python_methods_give(name, fn, other):
    x = nx.asarray([1.5, -2.0, 4.0])
    y = {"tensor": nx.asarray([0.5, 3.0, 4.0]), "ndarray": np.array([0.5, 3.0, 4.0])}.get(
        other, other
    )
    if other == "ndarray":
        # A NumPy array beside a Native tensor: both ways reach the operator with two devices'
        # tensors, and the fallback's answer (a result or its error) is the same.
        try:
            want = getattr(methods, name)(x, y)
        except bf.BoxfallError as e:
            with pytest.raises(type(e)):
                fn(x, y)
            return
        _same(fn(x, y), want)
        return
    _same(fn(x, y), getattr(methods, name)(x, y))


@pytest.mark.parametrize(("name", "fn"), INTEGER)
@pytest.mark.parametrize("other", ["tensor", 3, True])
def test_integer_operators_give_what_the_python_methods_give(name, fn, other):
    x = nx.asarray(np.array([1, 6, 12], dtype=np.int64))
    y = nx.asarray(np.array([3, 1, 2], dtype=np.int64)) if other == "tensor" else other
    _same(fn(x, y), getattr(methods, name)(x, y))


@pytest.mark.parametrize(
    ("fn", "name"),
    [
        (operator.add, "__radd__"),
        (operator.sub, "__rsub__"),
        (operator.truediv, "__rtruediv__"),
        (operator.pow, "__rpow__"),
    ],
)
@pytest.mark.parametrize("scalar", [2.5, 3, False])
def test_reflected_operators_with_a_python_scalar_on_the_left(fn, name, scalar):
    x = nx.asarray([1.5, -2.0, 4.0])
    _same(fn(scalar, x), getattr(methods, name)(x, scalar))


def test_each_operand_reaches_its_own_overload():
    # On a Python backend every operator falls back, so the fallback counters name the
    # overload each operand reached (Native runs add and subtract with Rust kernels).
    px = bf.testing.python_backend_namespace("PyAccel")
    x, y = px.asarray([1.0, 2.0]), px.asarray([3.0, 4.0])
    bf.metrics.reset()
    x + y
    x + 1.0
    2 - x
    x @ y
    counters = bf.metrics.counters()
    assert counters.get("array_api::add") == 1
    assert counters.get("array_api::add.Tensor_Scalar") == 1
    assert counters.get("array_api::subtract.Scalar_Tensor") == 1
    assert counters.get("array_api::matmul") == 1


@pytest.mark.parametrize(
    ("fn", "op_name", "other"),
    [
        (operator.iadd, "array_api::add_", "tensor"),
        (operator.iadd, "array_api::add_.Scalar", 2.0),
        (operator.imul, "array_api::multiply_.Scalar", 3),
        (operator.isub, "array_api::subtract_", "tensor"),
    ],
)
def test_in_place_operators_write_the_tensor_itself(fn, op_name, other):
    x = nx.asarray([1.0, 2.0])
    y = nx.asarray([0.5, 0.25]) if other == "tensor" else other
    want = fn(np.array([1.0, 2.0]), y.numpy() if other == "tensor" else y)
    bf.metrics.reset()
    z = fn(x, y)
    assert z is x
    np.testing.assert_array_equal(x.numpy(), want)
    assert bf.metrics.counters().get(op_name) == 1


def test_operands_the_python_methods_convert_still_work():
    x = nx.asarray([1.0, 2.0])
    # A NumPy scalar is a 0-d array, a complex a 0-d array of x's dtype: the Python methods'.
    _same(x + np.float64(2.0), methods.__add__(x, np.float64(2.0)))
    _same(np.float64(2.0) + x, methods.__radd__(x, np.float64(2.0)))

    class MyFloat(float):
        pass

    _same(x + MyFloat(1.5), methods.__add__(x, MyFloat(1.5)))


def test_a_complex_scalar_goes_the_python_methods_way():
    try:
        c = nx.asarray(np.array([1.0 + 1.0j, 2.0]))
    except bf.FallbackError:
        pytest.skip("Native holds no complex dtype in this build")
    _same(c * (2 + 1j), methods.__mul__(c, 2 + 1j))


def test_an_operand_that_is_no_operand_is_refused_as_before():
    x = nx.asarray([1.0, 2.0])
    assert x.__add__("a") is NotImplemented
    assert x.__radd__(object()) is NotImplemented
    assert x.__matmul__(1.0) is NotImplemented
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        None - x


def test_a_scalar_the_operator_cannot_bind_raises_the_operators_error():
    x = nx.asarray([1, 2])
    with pytest.raises(Exception) as fast:
        x + 2**70
    with pytest.raises(Exception) as slow:
        methods.__add__(x, 2**70)
    assert type(fast.value) is type(slow.value)
    assert str(fast.value) == str(slow.value)


def test_array_kernel_gives_arrays_as_the_python_wrapper_did():
    from boxfall import _boxfall
    from boxfall.array_api._registry import _as_arrays

    out = np.ones(2)
    kernel = _boxfall.array_kernel(lambda *a, **k: (a, k, out)[2], _as_arrays)
    assert kernel(1, k=2) is out  # a NumPy array comes back as it is
    scalar = _boxfall.array_kernel(np.add, _as_arrays)(np.asarray(1.0), np.asarray(2.0))
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar == 3.0
    pair = _boxfall.array_kernel(lambda x: (x.sum(), x), _as_arrays)(np.ones(3))
    assert isinstance(pair, tuple) and all(isinstance(p, np.ndarray) for p in pair)
    seen = []
    _boxfall.array_kernel(lambda *a, **k: seen.append((a, k)) or out, _as_arrays)(1, 2, axis=0)
    assert seen == [((1, 2), {"axis": 0})]

    def fails(x):
        raise ZeroDivisionError("x")

    with pytest.raises(ZeroDivisionError):
        _boxfall.array_kernel(fails, _as_arrays)(1)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
def test_array_kernels_give_arrays_on_both_paths(fast):
    from boxfall import _boxfall

    before = _boxfall.set_fast_path(fast)
    try:
        # NumPy's 0-d add is a NumPy scalar: the operator's result is a 0-d array.
        out = xp.add(np.asarray(1.0), np.asarray(2.0))
        assert type(out) is np.ndarray and out.shape == () and out == 3.0
        a = np.array([1.0, 2.0])
        assert xp.multiply(a, a).tolist() == [1.0, 4.0]
        x = nx.asarray([1.0, 2.0])
        z = x * x
        assert z.device == "Native:0" and z.numpy().tolist() == [1.0, 4.0]
        zero_d = nx.asarray(2.0) + nx.asarray(3.0)
        assert zero_d.shape == () and float(zero_d) == 5.0
    finally:
        _boxfall.set_fast_path(before)
