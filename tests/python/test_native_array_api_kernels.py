"""Native's Rust kernels for the array API's operators: every dtype of the standard, every pair
of dtypes, the three overloads of the binary functions and the reductions give what the NumPy
kernels give (values and dtype), computed in Rust where covered (no fallback counted) and
through the CPU fallback where not; the same operators without the Rust kernels agree too."""

from __future__ import annotations

import itertools
import warnings
from functools import partial

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall.array_api import _statistical_functions as stats
from boxfall.array_api._elementwise_functions import BINARY
from boxfall.array_api._registry import _cpu_kernel
from sample_data import ALL_DTYPES

DTYPES = ALL_DTYPES
OPS = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
]
REDUCTIONS = {
    "sum": (stats._sum, "x, *, int[1]? axis=None, str? dtype=None, bool keepdims=False"),
    "prod": (stats._prod, "x, *, int[1]? axis=None, str? dtype=None, bool keepdims=False"),
    "mean": (stats._mean, "x, *, int[1]? axis=None, bool keepdims=False"),
    "max": (stats._max, "x, *, int[1]? axis=None, bool keepdims=False"),
    "min": (stats._min, "x, *, int[1]? axis=None, bool keepdims=False"),
}


def values(dtype: str, n: int = 12, seed: int = 0) -> np.ndarray:
    """``n`` values of ``dtype`` with its edge cases: extremes, zeros of both signs, NaN, inf."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        edge = [info.min, info.max, 0, 1, info.max - 1, 2][:n]
        rest = rng.integers(max(info.min, -100), min(info.max, 100), n - len(edge), endpoint=True)
        return np.array(edge + list(rest), dtype=dt)
    real = np.float32 if dt in (np.float32, np.complex64) else np.float64
    edge = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5], dtype=real)[:n]
    rest = rng.normal(size=n - len(edge)).astype(real) * 10
    r = np.concatenate([edge, rest])
    if dt.kind == "c":
        i = np.roll(r, 3)[::-1]
        return (r + 1j * i).astype(dt)
    return r.astype(dt)


@pytest.fixture
def both(ns, lib):
    """The operators under test in a namespace of their own, with Native's Rust kernels, and
    the same operators without them (Native runs them through the CPU fallback)."""
    plain = bf.Library(f"{ns}_plain", "DEF")
    for target in (lib, plain):
        for name in OPS:
            kernel = _cpu_kernel(BINARY[name])
            for schema in (
                f"{name}(Tensor x1, Tensor x2) -> Tensor",
                f"{name}.Tensor_Scalar(Tensor x1, Scalar x2) -> Tensor",
                f"{name}.Scalar_Tensor(Scalar x1, Tensor x2) -> Tensor",
            ):
                target.define(schema)
                target.impl(schema.split("(", 1)[0], kernel, "CPU")
        for name, (kernel, args) in REDUCTIONS.items():
            target.define(f"{name}(Tensor {args}) -> Tensor")
            target.impl(name, _cpu_kernel(kernel), "CPU")
    registered = bf.native.register_array_api_kernels(lib)
    assert len(registered) == 3 * len(OPS) + len(REDUCTIONS)
    yield getattr(bf.ops, ns), getattr(bf.ops, f"{ns}_plain"), ns
    plain.close()


def _outcome(f, *args, **kwargs):
    """``f(*args, **kwargs)``'s array, or the type of exception it raised."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            r = f(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (the exception's type is compared)
            return type(e)
    return r.numpy() if isinstance(r, bf.Tensor) else np.asarray(r)


def _same(got, want, what):
    if isinstance(want, type):
        assert got is want or (isinstance(got, type) and issubclass(got, want)), (what, got, want)
        return
    assert not isinstance(got, type), (what, got, want)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if what[0] in ("multiply", "divide") and want.dtype.kind == "c":
        # NumPy's SIMD loops multiply complex numbers with a fused multiply-add where the CPU
        # has one (its scalar loops do not): the last bit is the machine's, not the standard's.
        tol = 4e-7 if want.dtype == np.complex64 else 1e-15
        np.testing.assert_allclose(got, want, rtol=tol, atol=0, err_msg=str(what))
        return
    np.testing.assert_array_equal(got, want, err_msg=str(what))


def _covered(name: str, d1: str, d2: str) -> bool:
    """Whether the Rust kernel computes ``name`` of these dtypes (see ewise.rs)."""
    k1, k2 = np.dtype(d1).kind, np.dtype(d2).kind
    promoted = np.result_type(d1, d2)
    if name == "subtract" and promoted == np.bool_:
        return False
    if name not in ("add", "subtract", "multiply", "divide", "equal", "not_equal"):
        if promoted.kind == "c":
            return False
    if name not in ("add", "subtract", "multiply", "divide"):
        if promoted == np.float64 and k1 in "iub" and k2 in "iub":
            return False
    return True


@pytest.mark.parametrize("name", OPS)
def test_every_dtype_pair_gives_numpys_values_and_dtype(both, name):
    rust, plain, ns = both
    f = BINARY[name]
    for d1, d2 in itertools.product(DTYPES, DTYPES):
        a = values(d1, 12, seed=1).reshape(2, 6)
        b = values(d2, 6, seed=2)  # broadcast along the first axis
        want = _outcome(f, a, b)
        before = bf.metrics.counter_value(f"{ns}::{name}")
        x, y = bf.native.tensor(a), bf.native.tensor(b)
        got = _outcome(getattr(rust, name), x, y)
        _same(got, want, (name, d1, d2, "rust"))
        fell_back = bf.metrics.counter_value(f"{ns}::{name}") - before
        assert fell_back == (0 if _covered(name, d1, d2) else 1), (name, d1, d2, fell_back)
        _same(_outcome(getattr(plain, name), x, y), want, (name, d1, d2, "fallback"))


@pytest.mark.parametrize("name", OPS)
def test_python_scalars_are_weak_on_either_side(both, name):
    rust, _, _ = both
    f = BINARY[name]
    for d, s in itertools.product(DTYPES, [True, 0, 3, -2, 1000, 2.5, -0.0, float("nan")]):
        a = values(d, 12, seed=3).reshape(3, 4)
        x = bf.native.tensor(a)
        op = getattr(rust, name)
        right = _outcome(op.Tensor_Scalar, x, s)
        _same(right, _outcome(f, a, s), (name, "Tensor_Scalar", d, s))
        left = _outcome(op.Scalar_Tensor, s, x)
        _same(left, _outcome(f, s, a), (name, "Scalar_Tensor", d, s))


def test_same_dtype_arithmetic_runs_in_rust_for_every_dtype(both):
    rust, _, ns = both
    for d in DTYPES:
        a, b = values(d, 8, seed=4), values(d, 8, seed=5)
        x, y = bf.native.tensor(a), bf.native.tensor(b)
        for name in ("add", "multiply", "divide", "equal", "not_equal"):
            before = bf.metrics.counter_value(f"{ns}::{name}")
            _same(
                _outcome(getattr(rust, name), x, y),
                _outcome(BINARY[name], a, b),
                (name, d),
            )
            assert bf.metrics.counter_value(f"{ns}::{name}") == before, (name, d)


def test_strided_and_0d_operands(both):
    rust, _, _ = both
    for d in DTYPES:
        a = values(d, 24, seed=6).reshape(4, 6)[::2, ::-2]  # strided, reversed
        b = values(d, 1, seed=7).reshape(())
        x, y = bf.native.tensor(a), bf.native.tensor(b)
        for name in ("add", "multiply", "less_equal"):
            want = _outcome(BINARY[name], a, b)
            _same(_outcome(getattr(rust, name), x, y), want, (name, d))
            _same(
                _outcome(getattr(rust, name), y, x),
                _outcome(BINARY[name], b, a),
                (name, d),
            )


def test_shapes_that_do_not_broadcast_raise_numpys_error(both):
    # The Rust kernel hands them to the CPU kernel, whose error is NumPy's ValueError, as on
    # every backend (a KernelError of Native's own was another class than NumPy's).
    rust, _, _ = both
    x, y = bf.native.tensor(np.zeros((2, 3), "int8")), bf.native.tensor(np.zeros(4, "int8"))
    with pytest.raises(ValueError, match="could not be broadcast"):
        rust.add(x, y)


AXES = [None, (0,), (1,), (0, 1), (-1,), (0, 2), (1, 2)]


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_give_numpys_values_and_dtype_for_every_dtype(both, name):
    rust, plain, ns = both
    kernel = _cpu_kernel(REDUCTIONS[name][0])
    for d, axis, keepdims in itertools.product(DTYPES, AXES, (False, True)):
        a = values(d, 24, seed=8).reshape(2, 3, 4)
        if np.dtype(d).kind in "iu" and name == "prod":
            a = a % 7  # (products wrap as NumPy's do; small ones keep the test readable)
        if np.dtype(d).kind == "c" and name == "prod":
            # Products of complex infinities are NaN or infinite depending on whether the
            # machine's loop fuses the multiply-add (NumPy's SIMD loops do): finite values.
            a = np.where(np.isfinite(a), a, 1 + 1j).astype(d)
        x = bf.native.tensor(a)
        want = _outcome(kernel, a, axis=axis, keepdims=keepdims)
        before = bf.metrics.counter_value(f"{ns}::{name}")
        got = _outcome(getattr(rust, name), x, axis=axis, keepdims=keepdims)
        what = (name, d, axis, keepdims)
        if isinstance(want, type) or np.dtype(want.dtype).kind not in "fc":
            _same(got, want, what)
        else:
            # Floating-point sums along several axes may add in another order than NumPy's.
            assert got.dtype == want.dtype and got.shape == want.shape, what
            tol = 1e-5 if want.dtype in (np.float32, np.complex64) else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str(what))
        covered = not (name in ("max", "min") and np.dtype(d).kind == "c")
        fell_back = bf.metrics.counter_value(f"{ns}::{name}") - before
        assert fell_back == (0 if covered else 1), what
        _same(_outcome(getattr(plain, name), x, axis=axis, keepdims=keepdims), want, what)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("n", [5, 100, 1000, 100_003])
def test_a_contiguous_sum_is_numpys_pairwise_sum_to_the_bit(both, dtype, n):
    rust, _, _ = both
    a = values(dtype, n, seed=9)
    a = np.where(np.isfinite(a), a, 1).astype(dtype)
    got = rust.sum(bf.native.tensor(a)).numpy()
    assert got.dtype == np.sum(a).dtype
    assert got.tobytes() == np.asarray(np.sum(a)).tobytes()
    mean = rust.mean(bf.native.tensor(a)).numpy()
    assert mean.tobytes() == np.asarray(np.mean(a)).tobytes()


def test_reduction_dtypes_and_fallbacks(both):
    rust, _, ns = both
    a = np.arange(1, 9, dtype="int8").reshape(2, 4)
    x = bf.native.tensor(a)
    for dtype in ("int16", "int64", "float64", "float32"):
        before = bf.metrics.counter_value(f"{ns}::sum")
        got = rust.sum(x, axis=[1], dtype=dtype).numpy()
        _same(got, np.asarray(np.sum(a, axis=1, dtype=dtype)), dtype)
        assert bf.metrics.counter_value(f"{ns}::sum") == before
    # Not a safe cast, axis=(), empty max: the CPU kernel's, with its results and errors.
    for call, ref in (
        (partial(rust.sum, x, dtype="int8"), partial(np.sum, a, dtype="int8")),
        (partial(rust.sum, x, axis=[]), partial(np.sum, a, axis=(), dtype="int64")),
        (
            partial(rust.max, bf.native.tensor(np.zeros((0, 3)))),
            partial(np.max, np.zeros((0, 3))),
        ),
    ):
        _same(_outcome(call), _outcome(ref), "fallback")
    with pytest.raises(bf.KernelError, match="out of bounds"):
        rust.sum(x, axis=[2])


def test_the_namespaces_operators_use_the_rust_kernels():
    assert "array_api::add.Tensor_Scalar" in xp.NATIVE_KERNELS
    assert "array_api::sum" in xp.NATIVE_KERNELS
    before = bf.metrics.counter_value("array_api::add")
    x = bf.native.tensor(np.arange(6, dtype="uint16"))
    y = bf.native.tensor(np.arange(6, dtype="int8"))
    z = xp.add(x, y)
    assert z.dtype == np.int32 and z.device == "Native:0"
    np.testing.assert_array_equal(z.numpy(), np.arange(6) * 2)
    assert bf.metrics.counter_value("array_api::add") == before
    assert (x + 1).dtype == np.uint16
    assert (x / 2).dtype == np.float64
    assert xp.sum(y).dtype == np.int64


def test_large_inputs_from_several_threads_give_numpys_results():
    """Inputs above the blocking threshold (computed with the GIL released, results of 4 MiB
    and more in huge pages, loops in the CPU's widest vectors) from several threads at once."""
    import threading

    n = 1 << 20
    a = np.random.default_rng(10).normal(size=n)
    b = (np.arange(n) % 1000).astype("int16")
    x, y = bf.native.tensor(a), bf.native.tensor(b)
    want = (a + b, a < b, np.sum(a), b * 3, np.sum(b), np.max(a))
    results: list = []

    def work():
        results.append(
            (
                xp.add(x, y).numpy(),  # int16 cast to float64, then added
                xp.less(x, y).numpy(),
                xp.sum(x).numpy(),
                xp.multiply(y, 3).numpy(),
                xp.sum(y).numpy(),  # widened to int64 as it is read
                xp.max(x).numpy(),
            )
        )

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for got in results:
        for g, w in zip(got, want, strict=True):
            assert g.dtype == np.asarray(w).dtype
            assert g.tobytes() == np.asarray(w).tobytes()
