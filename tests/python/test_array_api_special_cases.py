"""Where the standard's special cases differ from NumPy's own functions, ``boxfall.array_api``
follows the standard (its conformance suite found these), on the CPU, Native and a Python
backend: ``floor_divide`` (and ``//``, ``//=``) with one infinite float, and ``expm1`` of
complex numbers that are not finite or are zero, ``tanh`` of complex numbers of an infinite real
part."""

from __future__ import annotations

import math

import boxfall as bf
import numpy as np
import pytest

INF = math.inf


def same(got, want) -> None:
    """Equal values, NaN where NaN, and the same sign of every zero."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype
    for part in (np.real, np.imag) if want.dtype.kind == "c" else (np.real,):
        g, w = part(got), part(want)
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


# floor(x1 / x2) is the standard's floor_divide where one float is infinite (x1 / x2 is then
# exact: an infinity or a signed zero); NumPy's floor_divide gives NaN and -1 there.
X1 = [INF, -INF, INF, -INF, 1.0, -1.0, 1.0, -1.0, 7.0, -7.5]
X2 = [2.0, 2.0, -2.0, -3.0, INF, INF, -INF, -INF, 2.0, 2.0]


def test_floor_divide_with_one_infinite_float_follows_the_standard(any_xp):
    x1, x2 = any_xp.asarray(X1), any_xp.asarray(X2)
    with np.errstate(all="ignore"):
        numpys = np.floor_divide(X1, X2)
    want = np.where(np.isinf(X1) | np.isinf(X2), np.floor(np.divide(X1, X2)), numpys)
    assert not np.array_equal(numpys, want, equal_nan=True)  # NumPy's differ
    same(any_xp.floor_divide(x1, x2), want)
    same(any_xp.floor_divide(x1, 2.0), np.floor(np.divide(X1, 2.0)))
    if isinstance(x1, bf.Tensor):  # on the CPU, // is NumPy's own operator
        same(x1 // x2, want)
        x1 //= x2
        same(x1, want)


def test_floor_divide_of_finite_numbers_is_numpys(any_xp):
    a, b = np.array([7.0, -7.0, 0.5, 9]), np.array([2.0, 2.0, 0.1, -4])
    same(any_xp.asarray(a) // any_xp.asarray(b), np.floor_divide(a, b))
    same(any_xp.asarray([7, -7]) // 2, np.floor_divide([7, -7], 2))
    x = any_xp.asarray([7, 9])
    if not isinstance(x, bf.Tensor):
        return  # NumPy's own //= on the CPU
    with pytest.raises(TypeError):  # NumPy's same_kind casting refuses int //= float
        x //= 2.5
    same(x, [7, 9])


def holds_complex(any_xp) -> bool:
    try:
        any_xp.asarray(np.zeros(1, dtype=np.complex128))
    except bf.FallbackError as e:
        return "cannot hold dtype complex128" not in str(e)
    return True


def test_expm1_of_complex_infinities_and_zeros_follows_the_standard(any_xp):
    if not holds_complex(any_xp):
        pytest.skip("this device holds no complex128 (Native before its complex dtypes)")
    z = np.array([complex(-INF, INF), complex(INF, INF), complex(INF, 0.0), complex(-0.0, 0.0)])
    z = np.concatenate([z, np.array([0.5 + 0.25j, complex(-INF, 1.0)])])
    with np.errstate(all="ignore"):
        want = np.exp(z) - 1  # exact at these points: an infinity, NaN or -1
    want[3] = 0.0  # the standard: expm1(-0 + 0j) is +0 + 0j
    want[4] = np.expm1(z[4])
    same(any_xp.expm1(any_xp.asarray(z)), want)
    same(any_xp.expm1(any_xp.asarray([0.0, -0.0, 1.0])), np.expm1([0.0, -0.0, 1.0]))


def test_tanh_of_an_infinite_real_part_keeps_the_sign_of_the_imaginary_one(any_xp):
    if not holds_complex(any_xp):
        pytest.skip("this device holds no complex128 (Native before its complex dtypes)")
    z = np.array([complex(INF, 2.0), complex(-INF, -1.0), complex(INF, 3.0), 0.5 + 0.5j])
    want = np.tanh(z)
    assert np.signbit(want[0].imag)  # NumPy's: the sign of sin(2 * 2.0)
    want[:3] = [complex(1.0, 0.0), complex(-1.0, -0.0), complex(1.0, 0.0)]
    same(any_xp.tanh(any_xp.asarray(z)), want)
