"""Native's Rust kernels: registered for matching schemas, results equal NumPy's, no fallback;
cases they do not cover go to the CPU fallback and still give the right result."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest

SCHEMAS = {
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor": (
        lambda self, other, alpha=1: self + alpha * other
    ),
    "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor": (
        lambda self, other, alpha=1: self - alpha * other
    ),
    "mul.Tensor(Tensor self, Tensor other) -> Tensor": np.multiply,
    "div.Tensor(Tensor self, Tensor other) -> Tensor": np.true_divide,
    "neg(Tensor self) -> Tensor": np.negative,
    "exp(Tensor self) -> Tensor": np.exp,
    "relu(Tensor self) -> Tensor": lambda self: np.maximum(self, 0),
    "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor": (
        lambda self, dtype=None: np.asarray(np.sum(self, dtype=dtype))
    ),
    "mean(Tensor self, *, ScalarType? dtype=None) -> Tensor": (
        lambda self, dtype=None: np.asarray(np.mean(self, dtype=dtype))
    ),
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)"
    " -> Tensor": (
        lambda self, dim, keepdim=False, dtype=None: np.asarray(
            np.sum(self, axis=None if dim is None else tuple(dim), keepdims=keepdim, dtype=dtype)
        )
    ),
    "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor": (
        lambda self, dim, keepdim=False, dtype=None: np.asarray(
            np.mean(self, axis=None if dim is None else tuple(dim), keepdims=keepdim, dtype=dtype)
        )
    ),
    "matmul(Tensor self, Tensor other) -> Tensor": np.matmul,
    "transpose.int(Tensor self, int dim0, int dim1) -> Tensor": (
        lambda self, dim0, dim1: np.swapaxes(self, dim0, dim1).copy()
    ),
}


@pytest.fixture
def ops(ns, lib):
    for schema, kernel in SCHEMAS.items():
        lib.define(schema)
        lib.impl(schema.split("(", 1)[0], kernel, "CPU")
    registered = bf.native.register_kernels(lib)
    assert sorted(registered) == sorted(f"{ns}::{s.split('(', 1)[0]}" for s in SCHEMAS)
    return getattr(bf.ops, ns)


def _check(ns, name, result, expected, *, fell_back=False):
    assert result.device == "Native:0"
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12)
    assert bf.metrics.counter_value(f"{ns}::{name}") == (1 if fell_back else 0)


def test_table_shows_native_kernels(ops, ns):
    assert ops.relu.default.dispatch_table()["Native"] == "kernel"
    assert ops.add.Tensor.dispatch_table()["Native"] == "kernel"


def test_elementwise_kernels_match_numpy(ops, ns):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4,)) + 2.0
    x, y = bf.native.tensor(a), bf.native.tensor(b)
    _check(ns, "add.Tensor", ops.add(x, y, alpha=2), a + 2 * b)
    _check(ns, "sub.Tensor", ops.sub(x, y), a - b)
    _check(ns, "mul.Tensor", ops.mul(x, y), a * b)
    _check(ns, "div.Tensor", ops.div(x, y), a / b)
    _check(ns, "neg", ops.neg(x), -a)
    _check(ns, "exp", ops.exp(x), np.exp(a))
    _check(ns, "relu", ops.relu(x), np.maximum(a, 0))


def test_reductions_match_numpy(ops, ns):
    a = np.arange(24.0).reshape(2, 3, 4)
    x = bf.native.tensor(a)
    _check(ns, "sum", ops.sum.default(x), a.sum())
    _check(ns, "mean", ops.mean.default(x), a.mean())
    _check(
        ns, "sum.dim_IntList", ops.sum.dim_IntList(x, [0, -1], True), a.sum((0, 2), keepdims=True)
    )
    _check(ns, "mean.dim", ops.mean.dim(x, [1]), a.mean(1))


def test_matmul_and_transpose_match_numpy(ops, ns):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(3, 2))
    _check(ns, "matmul", ops.matmul(bf.native.tensor(a), bf.native.tensor(b)), a @ b)
    _check(ns, "transpose.int", ops.transpose(bf.native.tensor(a), 0, 1), a.T)


def test_float32_and_int64_keep_their_dtype(ops, ns):
    f = bf.native.tensor(np.ones(3, dtype=np.float32))
    i = bf.native.tensor(np.arange(3, dtype=np.int64))
    assert ops.add(f, f).dtype == np.float32
    assert ops.add(i, i, alpha=3).dtype == np.int64
    np.testing.assert_array_equal(ops.add(i, i, alpha=3).numpy(), [0, 4, 8])


def test_uncovered_cases_fall_back_to_the_cpu_kernel(ops, ns):
    i = bf.native.tensor(np.arange(1, 4, dtype=np.int64))
    _check(ns, "div.Tensor", ops.div(i, i), np.ones(3), fell_back=True)
    batched = np.ones((2, 3, 4))
    _check(
        ns,
        "matmul",
        ops.matmul(bf.native.tensor(batched), bf.native.tensor(np.ones((4, 2)))),
        batched @ np.ones((4, 2)),
        fell_back=True,
    )


def test_bad_shapes_raise_naming_the_operator(ops, ns):
    with pytest.raises(bf.KernelError, match=f"{ns}::add.Tensor"):
        ops.add(bf.native.tensor(np.ones(3)), bf.native.tensor(np.ones(2)))
    with pytest.raises(bf.KernelError, match="cannot be multiplied"):
        ops.matmul(bf.native.tensor(np.ones((2, 3))), bf.native.tensor(np.ones((2, 3))))


def test_large_kernel_runs_with_the_gil_released(ops, ns):
    """A kernel above the blocking threshold runs through the GIL-releasing hook and still gives
    the right answer (other threads can run meanwhile)."""
    import threading

    a = np.arange(1 << 17, dtype=np.float64)
    x = bf.native.tensor(a)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(ops.neg(x).numpy())) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for r in results:
        np.testing.assert_array_equal(r, -a)


# ------------------------------------------------------------- the NumPy kernels' own checks


def _outcome(fn):
    """``("raises", exception type)`` or ``("returns", array)``."""
    try:
        return "returns", np.asarray(fn())
    except Exception as e:  # noqa: BLE001  (any exception NumPy raises counts)
        return "raises", type(e)


def _overload(ops, name):
    """``ops.add.Tensor`` for ``"add.Tensor"``, ``ops.neg.default`` for ``"neg"``."""
    base, _, overload = name.partition(".")
    return getattr(getattr(ops, base), overload or "default")


def _native(x):
    return bf.native.tensor(x) if isinstance(x, np.ndarray) else x


def _same_as_numpy(ops, ns, name, *args, **kwargs):
    """Calls the operator on Native tensors and its NumPy kernel on the arrays: both raise, or
    both give the same values and dtype without a fallback (the Rust kernel computed it)."""
    schema = next(s for s in SCHEMAS if s.split("(", 1)[0] == name)
    expected = _outcome(lambda: SCHEMAS[schema](*args, **kwargs))
    bf.metrics.reset()
    overload = _overload(ops, name)
    native_args = [_native(a) for a in args]
    got = _outcome(lambda: overload(*native_args, **kwargs).numpy())
    assert got[0] == expected[0], f"{name}{args}: NumPy {expected}, Native {got}"
    if expected[0] == "returns":
        np.testing.assert_array_equal(got[1], expected[1])
        assert got[1].dtype == expected[1].dtype
    assert bf.metrics.counter_value(f"{ns}::{name}") == 0, "the Rust kernel, not the fallback"
    return got


def test_reductions_refuse_repeated_and_out_of_range_axes_as_numpy_does(ops, ns):
    a = np.arange(6.0).reshape(2, 3)
    for name in ("sum.dim_IntList", "mean.dim"):
        for dims in ([0, 0], [1, -1], [2], [-3], [0, 1, 0]):
            kind, error = _same_as_numpy(ops, ns, name, a, dims)
            assert kind == "raises" and issubclass(error, bf.KernelError)
        for dims in ([0], [-1], [1, 0], None):
            _same_as_numpy(ops, ns, name, a, dims, True)
    with pytest.raises(bf.KernelError, match=rf"{ns}::sum.dim_IntList.*duplicate value in 'axis'"):
        ops.sum.dim_IntList(bf.native.tensor(a), [0, 0])
    # A 0-d array has no axis at all.
    kind, _ = _same_as_numpy(ops, ns, "sum.dim_IntList", np.array(2.0), [0])
    assert kind == "raises"
    _same_as_numpy(ops, ns, "sum.dim_IntList", np.array(2.0), None)


def test_transpose_refuses_out_of_range_axes_as_numpy_does(ops, ns):
    a = np.arange(6.0).reshape(2, 3)
    for dims in ((0, 2), (-3, 0), (5, 5)):
        assert _same_as_numpy(ops, ns, "transpose.int", a, *dims)[0] == "raises"
    assert _same_as_numpy(ops, ns, "transpose.int", np.array(1.0), 0, 0)[0] == "raises"
    for dims in ((0, -1), (1, 1), (-2, 1)):
        _same_as_numpy(ops, ns, "transpose.int", a, *dims)


def test_shapes_that_do_not_broadcast_or_multiply_raise_as_numpy_does(ops, ns):
    for name in ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"):
        assert _same_as_numpy(ops, ns, name, np.ones(3), np.ones(2))[0] == "raises"
        assert _same_as_numpy(ops, ns, name, np.ones((2, 3)), np.ones((3, 1)))[0] == "raises"
        _same_as_numpy(ops, ns, name, np.ones((2, 1)), np.ones(3) + 1)
        _same_as_numpy(ops, ns, name, np.ones((0, 3)), np.ones(3))
    assert _same_as_numpy(ops, ns, "matmul", np.ones((2, 3)), np.ones((2, 3)))[0] == "raises"
    _same_as_numpy(ops, ns, "matmul", np.ones((2, 0)), np.ones((0, 3)))


def test_values_are_numpys_where_rust_would_differ(ops, ns):
    big = np.array([np.iinfo(np.int64).max, 1], dtype=np.int64)
    # NumPy's integers wrap (a debug build of Rust would panic).
    _same_as_numpy(ops, ns, "add.Tensor", big, big)
    _same_as_numpy(ops, ns, "add.Tensor", big, big, alpha=3)
    _same_as_numpy(ops, ns, "sub.Tensor", -big, big)
    _same_as_numpy(ops, ns, "mul.Tensor", big, big)
    _same_as_numpy(ops, ns, "neg", np.array([np.iinfo(np.int64).min], dtype=np.int64))
    _same_as_numpy(ops, ns, "sum", big)
    _same_as_numpy(ops, ns, "sum.dim_IntList", np.stack([big, big]), [0])
    i32 = np.array([np.iinfo(np.int32).max], dtype=np.int32)
    _same_as_numpy(ops, ns, "add.Tensor", i32, i32)
    # np.maximum keeps NaN; empty reductions are 0 (sum) and NaN (mean).
    _same_as_numpy(ops, ns, "relu", np.array([np.nan, -1.0, 0.0, 2.0]))
    _same_as_numpy(ops, ns, "sum", np.zeros((0, 3)))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        _same_as_numpy(ops, ns, "mean", np.zeros(0))


# ----------------------------------------------------------------- whole-schema registration

WRONG_SCHEMAS = [
    # In place: the functional kernel would leave `self` as it was.
    "add.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
    # A view: Native's transpose returns a copy.
    "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
    # Returns Native's kernels do not leave.
    "neg(Tensor self) -> (Tensor, Tensor)",
    "relu(Tensor self) -> int",
    "exp(Tensor self) -> ()",
    "mul.Tensor(Tensor self, Tensor other) -> Tensor[]",
]


@pytest.mark.parametrize("schema", WRONG_SCHEMAS)
def test_a_schema_that_matches_in_argument_types_only_gets_no_native_kernel(ns, lib, schema):
    lib.define(schema)
    name = schema.split("(", 1)[0]
    assert bf.native.register_kernels(lib) == []
    overload = _overload(getattr(bf.ops, ns), name)
    assert overload.dispatch_table()["Native"] != "kernel"


def test_an_in_place_add_of_the_same_name_runs_its_own_kernel_on_native(ns, lib):
    lib.define(WRONG_SCHEMAS[0])

    def add_(self, other, alpha=1):
        self += alpha * other
        return self

    lib.impl("add.Tensor", add_, "CPU")
    assert bf.native.register_kernels(lib) == []
    x = bf.native.tensor(np.ones(2))
    y = getattr(bf.ops, ns).add.Tensor(x, bf.native.tensor(np.ones(2)), alpha=2)
    assert y is x
    np.testing.assert_array_equal(x.numpy(), [3.0, 3.0])  # self is written


# ------------------------------------------------ the fallback Native's kernels take inside


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("add.Tensor", (np.ones(2), np.ones(2, dtype=np.float32))),
        ("div.Tensor", (np.arange(1, 3), np.arange(1, 3))),
        ("matmul", (np.ones((2, 3, 4)), np.ones((4, 2)))),
        ("sum", (np.ones(2, dtype=np.int32),)),
    ],
)
def test_the_error_policy_refuses_a_native_kernels_own_fallback_and_counts_it(ops, ns, name, args):
    overload = _overload(ops, name)
    tensors = [bf.native.tensor(a) for a in args]
    bf.set_fallback_policy("error")
    with pytest.raises(bf.FallbackError, match=rf"'{ns}::{name}'.*'Native'"):
        overload(*tensors)
    stats = bf.metrics.op_stats(f"{ns}::{name}")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)
    # What the Rust kernel computes itself is no fallback and runs.
    same = [bf.native.tensor(np.ones_like(args[0], dtype=np.float64)) for _ in args]
    if name == "matmul":
        same = [bf.native.tensor(np.ones((2, 3))), bf.native.tensor(np.ones((3, 2)))]
    overload(*same)
    # An operator's own "allow" exempts it.
    bf.set_fallback_policy("allow", [f"{ns}::{name}"])
    bf.set_fallback_policy("error")
    assert overload(*tensors).device == "Native:0"
    assert bf.metrics.op_stats(f"{ns}::{name}")["fallbacks"] == 2


def test_the_warn_policy_warns_once_for_a_native_kernels_own_fallback(ops, ns):
    x, y = bf.native.tensor(np.ones(2)), bf.native.tensor(np.ones(2, dtype=np.float32))
    bf.set_fallback_policy("warn")
    with pytest.warns(bf.FallbackWarning, match=rf"'{ns}::add.Tensor'.*'Native'") as caught:
        for _ in range(3):
            np.testing.assert_array_equal(ops.add(x, y).numpy(), [2.0, 2.0])
    assert len([w for w in caught if issubclass(w.category, bf.FallbackWarning)]) == 1
    assert bf.metrics.counter_value(f"{ns}::add.Tensor") == 3
