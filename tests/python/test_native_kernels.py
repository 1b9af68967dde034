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
