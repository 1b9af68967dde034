"""``bf.Tensor`` as the standard's array object: each operator method runs its
``array_api`` operator through the dispatcher (counted by the CPU fallback, taken natively by a
backend's own kernel), in-place operators write into the tensor itself, and the attributes and
conversions follow the standard."""

from __future__ import annotations

import operator

import array_checks
import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest

A = np.array([[1.0, 2.0], [3.0, 4.0]])
B = np.array([[0.5, -1.0], [2.0, 8.0]])
K = np.array([[1, 6], [3, 12]])
L = np.array([[3, 5], [1, 2]])

BINARY = [
    ("+", operator.add, A, B),
    ("-", operator.sub, A, B),
    ("*", operator.mul, A, B),
    ("/", operator.truediv, A, B),
    ("//", operator.floordiv, A, B),
    ("%", operator.mod, A, B),
    ("**", operator.pow, A, B),
    ("@", operator.matmul, A, B),
    ("&", operator.and_, K, L),
    ("|", operator.or_, K, L),
    ("^", operator.xor, K, L),
    ("<<", operator.lshift, K, L),
    (">>", operator.rshift, K, L),
    ("==", operator.eq, A, B),
    ("!=", operator.ne, A, B),
    ("<", operator.lt, A, B),
    ("<=", operator.le, A, B),
    (">", operator.gt, A, B),
    (">=", operator.ge, A, B),
]


# Operators and methods are the namespace's functions: NumPy's values (within 1e-7).
check = array_checks.check


@pytest.mark.parametrize(("sym", "op", "a", "b"), BINARY, ids=[b[0] for b in BINARY])
def test_operators_match_numpy(device_xp, sym, op, a, b):
    check(device_xp, op(device_xp.asarray(a), device_xp.asarray(b)), op(a, b))


@pytest.mark.parametrize(
    ("sym", "op", "a", "b"),
    [b for b in BINARY if b[0] != "@"],
    ids=[b[0] for b in BINARY if b[0] != "@"],
)
def test_operators_with_python_scalars_on_either_side(device_xp, sym, op, a, b):
    s = int(b.flat[0]) if a.dtype.kind == "i" else 2.0
    check(device_xp, op(device_xp.asarray(a), s), op(a, s))
    if sym not in ("==", "!=", "<", "<=", ">", ">="):
        check(device_xp, op(s, device_xp.asarray(a)), op(s, a))


def test_a_numpy_array_on_the_left_defers_to_the_tensor(device_xp):
    got = np.ones(2) + device_xp.asarray([1.0, 2.0])
    check(device_xp, got, [2.0, 3.0])


INPLACE = [
    ("+=", operator.iadd, A, B),
    ("-=", operator.isub, A, B),
    ("*=", operator.imul, A, B),
    ("/=", operator.itruediv, A, B),
    ("//=", operator.ifloordiv, A, B),
    ("%=", operator.imod, A, B),
    ("**=", operator.ipow, A, B),
    ("&=", operator.iand, K, L),
    ("|=", operator.ior, K, L),
    ("^=", operator.ixor, K, L),
    ("<<=", operator.ilshift, K, L),
    (">>=", operator.irshift, K, L),
]


@pytest.mark.parametrize(("sym", "op", "a", "b"), INPLACE, ids=[i[0] for i in INPLACE])
def test_in_place_operators_write_into_the_tensor_itself(device_xp, sym, op, a, b):
    x = device_xp.asarray(a)
    y = op(x, device_xp.asarray(b))
    assert y is x
    check(device_xp, x, op(a.copy(), b))
    op(x, 1)
    check(device_xp, x, op(op(a.copy(), b), 1))


def test_in_place_operators_are_their_own_operators():
    x = xp.namespace("Native").asarray([1.0, 2.0])
    bf.metrics.reset()
    x += x
    x *= 2
    assert bf.metrics.counters() == {"array_api::add_": 1, "array_api::multiply_.Scalar": 1}
    np.testing.assert_array_equal(np.asarray(x), [4.0, 8.0])


def test_an_in_place_operator_keeps_the_dtype(device_xp):
    x = device_xp.asarray(np.array([1, 2]))
    with pytest.raises(TypeError):
        x /= 2  # int64 /= float is no same-kind cast
    np.testing.assert_array_equal(np.asarray(x), [1, 2])


def test_unary_operators(device_xp):
    check(device_xp, -device_xp.asarray(B), -B)
    check(device_xp, +device_xp.asarray(B), B)
    check(device_xp, abs(device_xp.asarray(B)), abs(B))
    check(device_xp, ~device_xp.asarray(K), ~K)


def test_attributes_of_the_array_object(device_xp):
    x = device_xp.asarray(np.zeros((2, 3, 4), dtype=np.float32))
    assert x.shape == (2, 3, 4) and type(x.shape) is tuple
    assert all(type(d) is int for d in x.shape)
    assert (x.ndim, x.size, x.dtype) == (3, 24, xp.float32)
    assert x.mT.shape == (2, 4, 3)
    check(device_xp, device_xp.asarray(A).T, A.T)
    with pytest.raises(ValueError, match="2-d"):
        x.T  # noqa: B018
    assert x.__array_namespace__() is xp.namespace(x.device)


def test_scalar_conversions_of_a_0d_tensor(device_xp):
    assert float(device_xp.asarray(2.5)) == 2.5 and int(device_xp.asarray(7)) == 7
    assert bool(device_xp.asarray(0.0)) is False and complex(device_xp.asarray(1.5)) == 1.5 + 0j
    assert [10, 20, 30][device_xp.asarray(2)] == 30  # __index__
    with pytest.raises(TypeError, match="0-d"):
        float(device_xp.asarray([1.0, 2.0]))
    with pytest.raises(TypeError, match="integer"):
        [1][device_xp.asarray(0.0)]


def test_to_device_copies_and_np_asarray_is_the_tensors_memory(device_xp, accel):
    x = device_xp.asarray([1.0, 2.0])
    host = x.to_device("cpu")
    assert isinstance(host, np.ndarray) and host.flags.writeable
    assert x.to_device(x.device) is x
    other = x.to_device(accel.device if x.device.startswith("Native") else "Native")
    assert isinstance(other, bf.Tensor) and other.device != x.device
    np.testing.assert_array_equal(np.asarray(other), [1.0, 2.0])
    a = np.asarray(x)
    a[0] = 9.0
    # Native's memory, or the host memory the (lazy) backend's tensor moves to: NumPy's write
    # is the tensor's.
    np.testing.assert_array_equal(np.asarray(x), [9.0, 2.0])
    np.testing.assert_array_equal(np.asarray(other), [1.0, 2.0])  # to_device copied


def test_repr_shows_values_dtype_and_device():
    x = xp.namespace("Native").asarray([1.0, 2.5])
    assert repr(x) == "bf.Tensor([1. , 2.5], dtype=float64, device='Native:0')"


def test_a_tensor_is_hashable_by_identity():
    x = xp.namespace("Native").asarray([1.0])
    assert {x: 1}[x] == 1


def test_operators_count_their_fallbacks_per_operator(accel):
    ax = xp.namespace(accel.device)
    x, y = ax.asarray([1.0, 2.0]), ax.ones(2)
    bf.metrics.reset()
    z = x + y
    _ = 1 - z
    _ = xp.sum(z, axis=0)
    assert bf.metrics.counters() == {
        "array_api::add": 1,
        "array_api::subtract.Scalar_Tensor": 1,
        "array_api::sum": 1,
    }


def test_a_backend_takes_an_operator_natively(accel):
    ax = xp.namespace(accel.device)
    x, y = ax.asarray([1.0, 2.0]), ax.asarray([10.0, 20.0])
    seen = []

    def accel_add(x1, x2):
        seen.append((x1.device, x2.device))
        return accel.handle.tensor(x1.payload.data + x2.payload.data)

    with bf.Library("array_api", "IMPL") as lib:
        lib.impl("add", accel_add, accel.name)
        bf.metrics.reset()
        z = x + y
        assert seen == [(accel.device, accel.device)]
        assert bf.metrics.counters() == {}
    np.testing.assert_array_equal(np.asarray(z), [11.0, 22.0])
    _ = x + y  # the library closed: the fallback again
    assert bf.metrics.counters() == {"array_api::add": 1}


def test_a_creation_function_dispatches_on_its_device_to_the_backends_kernel(accel):
    def accel_zeros(shape, *, dtype=None, device=None):
        return accel.handle.tensor(np.full(tuple(shape), -1.0))  # recognisably its own

    with bf.Library("array_api", "IMPL") as lib:
        lib.impl("zeros", accel_zeros, accel.name)
        bf.metrics.reset()
        z = xp.namespace(accel.device).zeros(2)
        assert bf.metrics.counters() == {}
    np.testing.assert_array_equal(np.asarray(z), [-1.0, -1.0])


def test_the_fallback_policy_applies_to_array_operators(accel):
    x = xp.namespace(accel.device).asarray([1.0])
    bf.set_fallback_policy("error", ["array_api::multiply"])
    try:
        with pytest.raises(bf.FallbackError, match="array_api::multiply"):
            _ = x * x
        _ = x + x  # other operators still fall back
    finally:
        bf.set_fallback_policy(None, ["array_api::multiply"])
