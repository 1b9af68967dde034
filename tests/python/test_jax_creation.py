"""The standard's creation functions on JAX: each has a JAX kernel (``from_dlpack`` reads host
memory: a transfer), gives NumPy's values and dtypes (the device's defaults) in eager and graph
mode, and no graph program holds a host callback without an operand: on a TPU one killed the
process (``linspace`` in graph mode). A creation node no JAX kernel serves is a constant of the
program, computed on the host while JAX traces it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402

F = np.float32 if not bj.X64 else np.float64
INT = np.int32 if not bj.X64 else np.int64

CREATION = [
    "arange", "asarray", "empty", "empty_like", "eye", "full", "full_like", "linspace",
    "meshgrid", "ones", "ones_like", "tril", "triu", "zeros", "zeros_like",
]  # fmt: skip
"""The standard's creation functions but ``from_dlpack``, whose data come from the host (the
namespace puts them on the device as a transfer the user asked for)."""


def test_every_creation_function_has_a_jax_kernel():
    missing = [name for name in CREATION if name not in bj.NATIVE_KERNELS]
    assert missing == []


# (name, call on a namespace, NumPy's result); the dtype NumPy gives is the device's default.
CASES = [
    ("linspace", lambda m: m.linspace(0.0, 1.0, 5), lambda: np.linspace(0.0, 1.0, 5, dtype=F)),
    ("linspace_ints", lambda m: m.linspace(-1, 1, 7), lambda: np.linspace(-1, 1, 7, dtype=F)),
    (
        "linspace_no_endpoint",
        lambda m: m.linspace(2.0, 3.0, 4, endpoint=False),
        lambda: np.linspace(2.0, 3.0, 4, endpoint=False, dtype=F),
    ),
    ("linspace_one", lambda m: m.linspace(2.0, 3.0, 1), lambda: np.linspace(2.0, 3.0, 1, dtype=F)),
    ("linspace_none", lambda m: m.linspace(2.0, 3.0, 0), lambda: np.linspace(2.0, 3.0, 0, dtype=F)),
    (
        "linspace_int32",
        lambda m: m.linspace(0, 10, 4, dtype=m.int32),
        lambda: np.linspace(0, 10, 4, dtype=np.int32),
    ),
    ("arange_float", lambda m: m.arange(0.0, 1.0, 0.1), lambda: np.arange(0.0, 1.0, 0.1, dtype=F)),
    (
        "arange_down",
        lambda m: m.arange(5.0, -1.0, -0.7),
        lambda: np.arange(5.0, -1.0, -0.7, dtype=F),
    ),
    (
        "arange_ints_as_float",
        lambda m: m.arange(5, dtype=m.float32),
        lambda: np.arange(5, dtype=np.float32),
    ),
    ("arange_int", lambda m: m.arange(2, 11, 3), lambda: np.arange(2, 11, 3, dtype=INT)),
    ("arange_uint8", lambda m: m.arange(5, dtype=m.uint8), lambda: np.arange(5, dtype=np.uint8)),
    ("zeros", lambda m: m.zeros((2, 3)), lambda: np.zeros((2, 3), F)),
    ("ones", lambda m: m.ones(3, dtype=m.int8), lambda: np.ones(3, np.int8)),
    ("full", lambda m: m.full((2,), 7), lambda: np.full((2,), 7, INT)),
    ("full_float", lambda m: m.full((2, 2), 1.5), lambda: np.full((2, 2), 1.5, F)),
    ("eye", lambda m: m.eye(3, 4, k=1), lambda: np.eye(3, 4, k=1, dtype=F)),
    ("asarray", lambda m: m.asarray([1.0, 2.0]), lambda: np.asarray([1.0, 2.0], F)),
    ("zeros_like", lambda m: m.zeros_like(m.ones((2, 2))), lambda: np.zeros((2, 2), F)),
    ("ones_like", lambda m: m.ones_like(m.zeros(3, dtype=m.int16)), lambda: np.ones(3, np.int16)),
    ("full_like", lambda m: m.full_like(m.ones((2, 3)), 3.5), lambda: np.full((2, 3), 3.5, F)),
    (
        "full_like_dtype",
        lambda m: m.full_like(m.ones(2), 3, dtype=m.uint8),
        lambda: np.full(2, 3, np.uint8),
    ),
    ("full_like_bool", lambda m: m.full_like(m.ones(2), True), lambda: np.full(2, True, F)),
    (
        "tril",
        lambda m: m.tril(m.reshape(m.arange(9.0), (3, 3))),
        lambda: np.tril(np.arange(9.0, dtype=F).reshape(3, 3)),
    ),
    (
        "triu",
        lambda m: m.triu(m.ones((2, 3, 3), dtype=m.int32), k=1),
        lambda: np.triu(np.ones((2, 3, 3), np.int32), k=1),
    ),
    (
        "tril_negative_k",
        lambda m: m.tril(m.ones((3, 4)), k=-1),
        lambda: np.tril(np.ones((3, 4), F), k=-1),
    ),
    (
        "meshgrid_xy",
        lambda m: m.meshgrid(m.arange(3), m.arange(2.0)),
        lambda: np.meshgrid(np.arange(3, dtype=INT), np.arange(2.0, dtype=F)),
    ),
    (
        "meshgrid_ij",
        lambda m: m.meshgrid(m.arange(3), m.arange(4), indexing="ij"),
        lambda: np.meshgrid(np.arange(3, dtype=INT), np.arange(4, dtype=INT), indexing="ij"),
    ),
]


def host(result):
    if isinstance(result, (list, tuple)):
        return [np.asarray(r.numpy()) for r in result]
    return [np.asarray(result.numpy())]


def assert_numpy(got, want):
    want = want if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        # float32 made on the device, NumPy's made in float64 and rounded: one rounding apart
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


@pytest.fixture
def operands(monkeypatch):
    """The operand count of every host callback a graph program is traced with."""
    counts: list[int] = []
    real = jax.pure_callback

    def spy(callback, shapes, *args, **kwargs):
        counts.append(len(args))
        return real(callback, shapes, *args, **kwargs)

    monkeypatch.setattr(jax, "pure_callback", spy)
    return counts


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_creation_is_numpys_and_runs_the_jax_kernel(case):
    _, make, numpy = case
    xp = bj.namespace()
    got = make(xp)
    for t in got if isinstance(got, (list, tuple)) else [got]:
        assert t.device == "JAX:0"
    assert_numpy(host(got), numpy())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_graph_creation_is_numpys_with_no_host_callback(case, operands):
    _, make, numpy = case
    xp = bj.namespace(graph=True)
    compiler = bj.graph_compiler()
    bf.sync()
    before = sum(compiler.host_callbacks.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a shape compiled anew is warned of, not the point
        got = make(xp)
        values = host(got)
    assert_numpy(values, numpy())
    assert sum(compiler.host_callbacks.values()) == before
    assert operands == []


@pytest.fixture(scope="module")
def without_kernels():
    """A graph backend whose programs run these creation functions' CPU kernels (no JAX
    kernel serves them there), and one with an operand (``tril``) for comparison."""
    ops = frozenset({"linspace", "zeros", "eye", "full", "arange", "tril"})
    return bj._graph_mode_without("JAXGraphNoCreation", ops)


def test_a_node_without_an_operand_is_a_constant_not_a_host_callback(without_kernels, operands):
    compiler, xp = without_kernels
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [
            xp.linspace(0.0, 1.0, 5),
            xp.zeros(3) + 1.0,
            xp.eye(2) * 2.0,
            xp.full(2, 7),
            xp.arange(0.0, 1.0, 0.25),
        ]
        values = [t.numpy() for t in got]
    want = [
        np.linspace(0.0, 1.0, 5, dtype=F),
        np.ones(3, F),
        np.eye(2, dtype=F) * 2,
        np.full(2, 7, INT),
        np.arange(0.0, 1.0, 0.25, dtype=F),
    ]
    assert_numpy(values, want)
    assert 0 not in operands
    for name in ("linspace", "zeros", "eye", "full", "arange"):
        assert compiler.host_constants[f"array_api::{name}"] >= 1
        assert compiler.host_callbacks[f"array_api::{name}"] == 0


def test_a_host_node_with_an_operand_is_still_a_host_callback(without_kernels, operands):
    compiler, xp = without_kernels
    x = xp.asarray(np.arange(9.0, dtype=np.float32).reshape(3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xp.tril(x + 1.0).numpy()
    np.testing.assert_array_equal(got, np.tril(np.arange(9.0, dtype=np.float32).reshape(3, 3) + 1))
    assert compiler.host_callbacks["array_api::tril"] >= 1
    assert operands and 0 not in operands
