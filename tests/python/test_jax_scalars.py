"""Python scalars on ``boxfall.jax``, eager and graph mode alike, follow NumPy 2 (NEP 50), not
``jax.numpy``: a comparison with an int outside the array's dtype is exact (int8 ``x < 200`` is
all True), an int the dtype holds computes (``uint32 + 2**31``, ``float32 * 2**40``), and
arithmetic with an int the dtype cannot hold raises ``OverflowError`` at the call. In graph
mode a program compiled for an int in range is never run with one outside it, no scalar the
recorder took fails when the program runs, and a program's scalars are packed into one input
per dtype. The expected values are NumPy's, computed on host arrays here.

Also run with ``JAX_ENABLE_X64=1`` (``.ci/run``): the cases hold with 64-bit types too, and
the narrowing ones (x64 off only) are skipped there."""

from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
from boxfall.jax import _graph  # noqa: E402

X64 = bool(jax.config.jax_enable_x64)

MODES = ["eager", "graph"]


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def xp(mode):
    bf.sync()
    yield bj.namespace(graph=mode == "graph")
    bf.sync()


def values(t):
    """A tensor's values on the host, and its dtype's name."""
    return np.asarray(t.numpy()), str(t.dtype)


def host(dtype):
    return np.array([0, 1, 7], dtype=dtype)


def check(got, want):
    a, dtype = values(got)
    assert dtype == str(want.dtype), (dtype, want.dtype)
    np.testing.assert_array_equal(a, want)


# -- comparisons with an int outside the dtype --------------------------------------------------

OUTSIDE = [
    # (dtype, operator, the int): NumPy compares exactly
    ("int8", operator.lt, 200),
    ("int8", operator.ge, 200),
    ("int8", operator.eq, 200),
    ("int8", operator.ne, 200),
    ("int8", operator.gt, -200),
    ("int8", operator.le, -129),
    ("uint8", operator.lt, -1),
    ("uint8", operator.gt, -1),
    ("uint32", operator.lt, -1),
    ("uint32", operator.ge, -1),
    ("int16", operator.lt, 40000),
    ("int16", operator.gt, 40000),
    ("int32", operator.lt, 2**40),
    ("int32", operator.eq, -(2**40)),
]


@pytest.mark.parametrize(("dtype", "op", "value"), OUTSIDE)
def test_a_comparison_with_an_int_outside_the_dtype_is_numpys(xp, dtype, op, value):
    a = host(dtype)
    x = xp.asarray(a)
    check(op(x, value), op(a, value))
    # the reflected form (`200 > x`: the scalar on the left)
    check(op(value, x), op(value, a))


@pytest.mark.parametrize("name", ["less", "greater_equal", "equal", "not_equal"])
def test_the_comparison_functions_with_an_int_outside_the_dtype_are_numpys(xp, name):
    a = host("int8")
    x = xp.asarray(a)
    check(getattr(xp, name)(x, 300), getattr(np, name)(a, 300))
    check(getattr(xp, name)(-300, x), getattr(np, name)(-300, a))


def test_a_program_compiled_for_an_int_in_range_is_not_run_with_one_outside(xp):
    # The same line with 100, then 200, then 100, then -200: each is NumPy's (graph mode once
    # cast 200 to int8's -56 in the program compiled for 100).
    a = host("int8")
    x = xp.asarray(a)
    for value in (100, 200, 100, -200, 5, 127, 128):
        check(x < value, a < value)
        check(x >= value, a >= value)
        bf.sync()


def test_a_changed_int_in_range_compiles_nothing(mode):
    if mode == "eager":
        pytest.skip("graph mode's compiles")
    gx = bj.namespace(graph=True)
    compiler = bj.graph_compiler()
    a = host("int8")
    x = gx.asarray(a)
    check(x < 100, a < 100)
    before = compiler.compiles
    for value in (3, -128, 127, 0):
        check(x < value, a < value)
    assert compiler.compiles == before


def test_comparisons_outside_the_dtype_run_on_the_device_in_eager_mode():
    # NumPy's answer is one bool for every element: made on the device, no CPU fallback.
    ex = bj.namespace()
    x = ex.asarray(host("int8"))
    bf.metrics.reset()
    check(x < 200, host("int8") < 200)
    check(-1 > ex.asarray(host("uint32")), -1 > host("uint32"))
    assert bf.metrics.op_stats("array_api::less.Tensor_Scalar")["fallbacks"] == 0
    assert bf.metrics.op_stats("array_api::greater.Scalar_Tensor")["fallbacks"] == 0


# -- ints the dtype holds, beyond JAX's weak int32 ------------------------------------------------

HELD = [
    # (dtype, the call on an array, a Python int)
    ("uint32", operator.add, 2**31),
    ("uint32", operator.add, 2**32 - 8),
    ("uint32", operator.eq, 2**31),
    ("uint32", operator.lt, 2**32 - 1),
    ("uint32", np.maximum, 2**31),
    ("uint32", np.minimum, 2**31),
    ("uint32", operator.sub, 2**31),
    ("float32", operator.add, 2**31),
    ("float32", operator.mul, 2**40),
    ("float32", operator.truediv, 2**62),
    ("float32", operator.gt, 2**40),
    ("int32", operator.add, -(2**31)),
]


def _call(xp, fn, x, value, reflected=False):
    if isinstance(fn, np.ufunc):
        f = getattr(xp, fn.__name__)
        return f(value, x) if reflected else f(x, value)
    return fn(value, x) if reflected else fn(x, value)


@pytest.mark.parametrize(("dtype", "fn", "value"), HELD)
@pytest.mark.parametrize("reflected", [False, True])
def test_an_int_the_dtype_holds_computes_as_in_numpy(xp, dtype, fn, value, reflected):
    a = host(dtype)
    with np.errstate(over="ignore", divide="ignore"):
        want = fn(value, a) if reflected else fn(a, value)
    check(_call(xp, fn, xp.asarray(a), value, reflected), want)


def test_an_in_place_write_with_an_int_the_dtype_holds(xp):
    a = host("uint32")
    x = xp.asarray(a)
    x += 2**31
    a += 2**31
    check(x, a)
    f = xp.asarray(host("float32"))
    f *= 2**40
    check(f, host("float32") * np.float32(2**40))


@pytest.mark.parametrize(
    ("value", "dtype"), [(2**31, "uint32"), (2**32 - 1, "uint32"), (2**40, "float32")]
)
def test_full_with_an_int_the_dtype_holds(xp, value, dtype):
    check(xp.full(2, value, dtype=getattr(xp, dtype)), np.full(2, value, dtype=dtype))


# -- ints the dtype cannot hold: OverflowError at the call ----------------------------------------

REFUSED = [
    ("int8", operator.add, 200),
    ("int8", operator.mul, -129),
    ("uint8", operator.add, -1),
    ("uint32", operator.sub, -1),
    ("int8", np.maximum, 200),
    ("int8", operator.and_, 200),
    ("int16", operator.floordiv, 40000),
    ("int32", operator.add, 2**40),
]


@pytest.mark.parametrize(("dtype", "fn", "value"), REFUSED)
def test_arithmetic_with_an_int_the_dtype_cannot_hold_raises_at_the_call(xp, dtype, fn, value):
    a = host(dtype)
    with pytest.raises(OverflowError):
        fn(a, value)  # NumPy's own
    x = xp.asarray(a)
    before = xp.add(x, 1)  # pending in graph mode, recorded before the refused call
    with pytest.raises(OverflowError):
        _call(xp, fn, x, value)
    after = xp.add(x, 2)
    check(before, a + 1)
    check(after, a + 2)


# -- a scalar the recorder took never fails when the program runs --------------------------------


def test_an_int_beyond_int32_poisons_no_pending_tensor(xp):
    # Graph mode once recorded `xi < 2**40` with a scalar input that failed to convert to int32
    # at the program's run, failing every pending tensor of the thread until it was dropped.
    a = np.array([1, 2, 3], dtype=np.int32)
    xi = xp.asarray(a)
    y = xi + 1
    b = xi < 2**40
    c = xi > -(2**40)
    z = xi * 2
    check(z, a * 2)
    check(y, a + 1)
    check(b, a < 2**40)
    check(c, a > -(2**40))
    bf.sync()


@pytest.mark.filterwarnings("ignore::boxfall.NarrowingWarning")
def test_a_bool_array_with_an_int_is_numpys(xp):
    b = np.array([True, False])
    t = xp.asarray(b)
    check(t < 2**40, b < 2**40)
    check(t == -1, b == -1)
    if X64:
        check(t + 2**40, b + 2**40)
    else:
        # NumPy's int64 result does not fit the device's int32: refused at the call (graph
        # mode leaves it to eager mode, which sees the values), never wrapped
        with pytest.raises(OverflowError):
            t + 2**40
        check(t + 5, (b + 5).astype(np.int32))


@pytest.mark.filterwarnings("ignore::boxfall.NarrowingWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_a_float_outside_float32s_normal_range_is_numpys(xp):
    # Graph mode packed every float as a float32 input: 3.5e38 was infinite before the
    # operator, and a subnormal was flushed to zero (bool `x == 1e-45` gave True).
    b = np.array([False, True])
    t = xp.asarray(b)
    check(t == 1e-45, b == 1e-45)
    check(t < 1e-45, b < 1e-45)
    i = np.array([-128, 3], np.int8)
    got = 3.5e38 / xp.asarray(i)
    np.testing.assert_allclose(got.numpy(), (3.5e38 / i).astype(got.dtype), rtol=1e-6)


@pytest.mark.filterwarnings("ignore::boxfall.NarrowingWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_a_scalar_of_each_kind_in_one_program_is_numpys(xp):
    # Scalars of several dtypes in one program (graph mode packs them one array a dtype),
    # on the device and in host callbacks (`floor_divide`, `remainder` of ints), reflected too.
    i8, u32, f32 = host("int8"), host("uint32"), np.array([0.5, -1.5, 3.0], np.float32)
    x, u, f = xp.asarray(i8), xp.asarray(u32), xp.asarray(f32)
    b = xp.asarray(np.array([True, False, True]))
    got = [
        x + 3,
        x // 3,
        100 - x,
        u * 2**31,
        u % 2**31,
        f * 0.25,
        f + 2**31,
        f // 2**40,
        x * 0.5,
        xp.logical_and(b, True),
        b + 2,
        f < 1e300,
        f * 1e300,
    ]
    with np.errstate(over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = [
            i8 + 3,
            i8 // 3,
            100 - i8,
            u32 * 2**31,
            u32 % 2**31,
            f32 * 0.25,
            f32 + 2**31,
            f32 // 2**40,
            i8 * 0.5,
            np.logical_and(np.array([True, False, True]), True),
            np.array([True, False, True]) + 2,
            f32 < 1e300,
            f32 * 1e300,
        ]
    for g, w in zip(got, want, strict=True):
        if not X64 and w.dtype.itemsize == 8 and w.dtype.kind in "iuf":
            w = w.astype(w.dtype.kind + "4")  # the device's narrowing
        check(g, w)


# -- packing: one input a dtype ------------------------------------------------------------------


def test_a_programs_scalars_are_one_input_a_dtype(monkeypatch):
    gx = bj.namespace(graph=True)
    bf.sync()
    runs = []
    of = _graph._LastScalars.of

    def spy(self, scalars):
        packs = of(self, scalars)
        runs.append((len(scalars), [p.shape for p in packs]))
        return packs

    monkeypatch.setattr(_graph._LastScalars, "of", spy)
    x = gx.asarray(np.zeros(4, np.float32))
    i = gx.asarray(np.zeros(4, np.int32))
    for k in range(300):
        x += float(k % 3)
        i += k % 5
    check(x, np.full(4, sum(k % 3 for k in range(300)), np.float32))
    check(i, np.full(4, sum(k % 5 for k in range(300)), np.int32))
    # 600 scalars, as two packs: 300 float32 and 300 int32
    assert runs[-1] == (600, [(300,), (300,)])


def test_changed_scalars_of_a_packed_program_compile_nothing_and_keep_their_bits():
    gx = bj.namespace(graph=True)
    compiler = bj.graph_compiler()
    a = np.ones(3, np.float32)
    x = gx.asarray(a)
    n = gx.asarray(np.arange(3, dtype=np.uint32))

    def step(s, k):
        return gx.divide(gx.asarray(a), x * s), n + k, (n + k) < k

    def numpy_step(s, k):
        with np.errstate(divide="ignore"):
            return (
                a / (a * np.float32(s)),
                np.arange(3, dtype=np.uint32) + k,
                (np.arange(3, dtype=np.uint32) + k) < k,
            )

    for got, want in zip(step(2.0, 1), numpy_step(2.0, 1), strict=True):
        check(got, want)
    before = compiler.compiles
    for s, k in ((0.0, 2**31), (-0.0, 7), (-0.0, 2**32 - 4), (0.5, 0)):
        for got, want in zip(step(s, k), numpy_step(s, k), strict=True):
            check(got, want)
    assert compiler.compiles == before


# -- asarray with an explicit 64-bit dtype on a device without 64-bit types ------------------------


@pytest.mark.skipif(X64, reason="the device holds int64 with x64: nothing is narrowed")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "make",
    [
        lambda xp: xp.asarray([2**40], dtype=xp.int64),
        lambda xp: xp.asarray([2**63 - 1], dtype=xp.int64),
        lambda xp: xp.asarray([-(2**40)], dtype=xp.int64),
        lambda xp: xp.asarray([2**40]),
        lambda xp: xp.asarray(np.array([1, 2**40], dtype=np.int64)),
        lambda xp: xp.asarray([2**32], dtype=xp.uint64),
    ],
)
def test_a_narrowed_int_the_device_cannot_hold_raises(mode, make):
    xp = bj.namespace(graph=mode == "graph")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bf.NarrowingWarning)
        with pytest.raises(OverflowError):
            make(xp).numpy()


@pytest.mark.parametrize(
    ("fill", "dtype"), [(2**31, "int64"), (-(2**40), "int64"), (1e10, "int64")]
)
def test_full_of_a_64_bit_dtype_is_numpys_or_refused_where_narrowed(xp, fill, dtype):
    want = np.full(2, fill, dtype=dtype)
    if X64:
        check(xp.full(2, fill, dtype=getattr(xp, dtype)), want)
        return
    # NumPy's value does not fit the device's int32: refused (at the call, or in graph mode
    # at the latest at the read), never wrapped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bf.NarrowingWarning)
        with pytest.raises(OverflowError):
            xp.full(2, fill, dtype=getattr(xp, dtype)).numpy()


@pytest.mark.skipif(X64, reason="the device holds int64 with x64: nothing is narrowed")
@pytest.mark.parametrize("mode", MODES)
def test_a_narrowed_int_the_device_holds_is_kept(mode):
    xp = bj.namespace(graph=mode == "graph")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bf.NarrowingWarning)
        check(
            xp.asarray([2**31 - 1, -(2**31)], dtype=xp.int64),
            np.array([2**31 - 1, -(2**31)], np.int32),
        )
        check(xp.asarray([2**32 - 1], dtype=xp.uint64), np.array([2**32 - 1], np.uint32))


@pytest.mark.skipif(not X64, reason="64-bit ints need x64")
def test_64_bit_ints_with_x64(xp):
    a = np.array([0, 1, 7], dtype=np.int64)
    u = np.array([0, 1, 7], dtype=np.uint64)
    x, v = xp.asarray(a), xp.asarray(u)
    check(x + 2**40, a + 2**40)
    check(x < 2**63 - 1, a < 2**63 - 1)
    check(v + (2**63 - 1), u + (2**63 - 1))
    check(v > -1, u > -1)
    check(xp.full(2, 2**63 - 1, dtype=xp.int64), np.full(2, 2**63 - 1, dtype=np.int64))
