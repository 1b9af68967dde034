"""The ``linalg`` extension of ``boxfall.array_api`` (operators ``array_api::linalg_<name>``) on
the CPU, on Native and on a Python backend through ``bf.cpu_fallback``: every result against
NumPy's, decompositions as the standard's named tuples, and calls counted per operator."""

from __future__ import annotations

import functools

import array_checks
import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest

# The decompositions and solvers are NumPy's own on every device: as close as the same LAPACK
# calls on copies of the same values give.
check = functools.partial(array_checks.check, rtol=1e-10, atol=1e-12)


RNG = np.random.default_rng(7)
A = RNG.standard_normal((5, 3))
SQUARE = RNG.standard_normal((2, 3, 3))
SPD = A.T @ A + np.eye(3)
V = RNG.standard_normal(3)


def test_xp_linalg_is_one_module_in_every_namespace(any_xp):
    assert any_xp.linalg is xp.linalg
    assert xp.linalg.matmul is xp.matmul and xp.linalg.vecdot is xp.vecdot


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "want"),
    [
        ("cholesky", (SPD,), {}, np.linalg.cholesky(SPD)),
        ("cholesky", (SPD,), {"upper": True}, np.linalg.cholesky(SPD).T),
        ("cross", (V, V[::-1]), {}, np.cross(V, V[::-1])),
        ("det", (SQUARE,), {}, np.linalg.det(SQUARE)),
        ("diagonal", (SQUARE,), {"offset": 1}, np.diagonal(SQUARE, 1, -2, -1)),
        ("eigvalsh", (SPD,), {}, np.linalg.eigvalsh(SPD)),
        ("inv", (SQUARE,), {}, np.linalg.inv(SQUARE)),
        ("matrix_norm", (A,), {}, np.linalg.norm(A, "fro")),
        ("matrix_norm", (SQUARE,), {"ord": "nuc"}, np.linalg.norm(SQUARE, "nuc", axis=(1, 2))),
        ("matrix_norm", (A,), {"ord": 2, "keepdims": True}, np.linalg.norm(A, 2, keepdims=True)),
        ("matrix_power", (SQUARE, 3), {}, np.linalg.matrix_power(SQUARE, 3)),
        ("matrix_rank", (A @ A.T,), {}, np.int64(3)),
        ("outer", (V, V), {}, np.outer(V, V)),
        ("pinv", (A,), {}, np.linalg.pinv(A)),
        ("solve", (SPD, V), {}, np.linalg.inv(SPD) @ V),
        ("solve", (SPD, A.T), {}, np.linalg.inv(SPD) @ A.T),
        ("svdvals", (A,), {}, np.linalg.svd(A, compute_uv=False)),
        ("trace", (SQUARE,), {"offset": -1}, np.trace(SQUARE, -1, -2, -1)),
        ("vector_norm", (A,), {}, np.sqrt(np.sum(A * A))),
        ("vector_norm", (A,), {"axis": 0, "ord": 1}, np.sum(np.abs(A), axis=0)),
        ("vector_norm", (SQUARE,), {"axis": (0, 2), "keepdims": True},
         np.sqrt(np.sum(SQUARE**2, axis=(0, 2), keepdims=True))),
        ("vector_norm", (A,), {"ord": float("inf")}, np.max(np.abs(A))),
    ],
)  # fmt: skip
def test_function_matches_numpy(any_xp, name, args, kwargs, want):
    args = tuple(any_xp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)
    check(any_xp, getattr(xp.linalg, name)(*args, **kwargs), want)


def test_trace_of_ints_is_the_default_integer(any_xp):
    got = xp.linalg.trace(any_xp.asarray(np.eye(3, dtype=np.int32)))
    check(any_xp, got, np.int64(3))


def test_decompositions_are_named_tuples_that_rebuild_the_input(any_xp):
    a, spd, square = any_xp.asarray(A), any_xp.asarray(SPD), any_xp.asarray(SQUARE)
    u, s, vh = svd = xp.linalg.svd(a, full_matrices=False)
    assert type(svd).__name__ == "SVDResult" and svd.S is s
    check(any_xp, u @ (any_xp.expand_dims(s, axis=-1) * vh), A)
    w, v = eigh = xp.linalg.eigh(spd)
    assert eigh.eigenvalues is w and eigh.eigenvectors is v
    check(any_xp, (v * any_xp.expand_dims(w, axis=0)) @ v.T, SPD)
    q, r = qr = xp.linalg.qr(a)
    assert qr.Q is q and q.shape == (5, 3) and r.shape == (3, 3)
    check(any_xp, q @ r, A)
    sign, logabsdet = xp.linalg.slogdet(square)
    check(any_xp, sign * any_xp.exp(logabsdet), np.linalg.det(SQUARE))


def test_linalg_calls_are_counted_as_their_operators(accel):
    bf.metrics.reset()
    xp.linalg.solve(accel.tensor(SPD), accel.tensor(V))
    xp.linalg.svd(accel.tensor(A))
    counts = bf.metrics.counters()
    assert counts["array_api::linalg_solve"] == 1
    assert counts["array_api::linalg_svd"] == 1
