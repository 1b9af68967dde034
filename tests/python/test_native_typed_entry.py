"""A call of two Native ``bf.Tensor``s that a Native kernel of two arrays serves runs the
kernel's typed entry (no stack of the arguments): it gives what the general path (the boxed
kernel) gives, results, dtypes and errors, including the cases the kernel hands to the CPU
fallback (a broadcast, a promotion, int64 against uint64 comparisons)."""

from __future__ import annotations

import operator

import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall import _boxfall

nx = xp.namespace("Native")

FUNCTIONS = [
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
]

OPERANDS = [
    # Equal shapes and dtypes: the kernel computes in place of the operands' dtype.
    (np.array([1.5, -2.0, 3.0]), np.array([0.5, 4.0, 3.0])),
    # A promotion and a broadcast.
    (np.array([[1, 2], [3, 4]], dtype=np.int32), np.array([0.5, 2.0])),
    # int64 against uint64: the comparisons go to the CPU fallback.
    (np.array([1, -2], dtype=np.int64), np.array([1, 3], dtype=np.uint64)),
    # bools: subtract goes to the CPU fallback (which refuses it as NumPy does).
    (np.array([True, False]), np.array([True, True])),
]


def _both(fn, a, b):
    """`fn` of the Native tensors of `a` and `b`, on the fast path and on the general path:
    each a result as (dtype, device, values) or the error's type and message."""
    out = []
    for fast in (True, False):
        before = _boxfall.set_fast_path(fast)
        try:
            z = fn(nx.asarray(a), nx.asarray(b))
            out.append(("ok", z.dtype, z.device, z.numpy().tolist()))
        except Exception as e:  # noqa: BLE001 - compared between the two paths
            out.append(("error", type(e), str(e)))
        finally:
            _boxfall.set_fast_path(before)
    return out


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("operands", OPERANDS, ids=["same", "promote", "int64_uint64", "bool"])
def test_typed_entry_gives_what_the_boxed_kernel_gives(fn, operands):
    fast, general = _both(fn, *operands)
    assert fast == general


def test_typed_entry_result_is_numpys():
    a, b = np.array([1.0, 2.0]), np.array([3.0, -4.0])
    z = nx.asarray(a) + nx.asarray(b)
    assert z.device == "Native:0" and z.dtype == xp.float64
    np.testing.assert_array_equal(z.numpy(), a + b)


def test_typed_entry_raises_numpys_broadcast_error():
    fast, general = _both(operator.add, np.ones(3), np.ones(2))
    assert fast == general and fast[0] == "error"
    assert issubclass(fast[1], ValueError) and "could not be broadcast" in fast[2]


def test_typed_entry_result_is_a_new_tensor():
    x = nx.asarray([1.0])
    z = x + x
    assert z is not x and z.numpy().tolist() == [2.0] and x.numpy().tolist() == [1.0]
