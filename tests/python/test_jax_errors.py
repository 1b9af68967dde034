"""NumPy's errors on JAX: ``linalg.solve`` and ``linalg.inv`` of a singular matrix and
``linalg.cholesky`` of one that is not positive definite raise ``LinAlgError``, and ``take``
with an index out of range ``IndexError``, where JAX's functions give infinities, NaNs or a
clamped value. Eager mode raises NumPy's error at the call; graph mode at the sync that
computes the tensor, never as numbers. The cases NumPy computes stay on the device."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.array_api as bxp  # noqa: E402
import boxfall.jax as bj  # noqa: E402

F = np.float32
SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]], F)
NOT_PD = np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]], F)
V = np.arange(3.0, dtype=F)

ERRORS = [
    ("solve", lambda m: m.linalg.solve(m.asarray(SINGULAR), m.asarray(np.ones(2, F)))),
    ("solve_matrix", lambda m: m.linalg.solve(m.asarray(SINGULAR), m.asarray(np.eye(2, dtype=F)))),
    ("inv", lambda m: m.linalg.inv(m.asarray(SINGULAR))),
    ("inv_zeros", lambda m: m.linalg.inv(m.asarray(np.zeros((3, 3), F)))),
    ("cholesky", lambda m: m.linalg.cholesky(m.asarray(NOT_PD))),
    ("cholesky_negative", lambda m: m.linalg.cholesky(m.asarray(-np.eye(2, dtype=F)))),
    ("take", lambda m: m.take(m.asarray(V), m.asarray(np.array([5], np.int32)))),
    ("take_negative", lambda m: m.take(m.asarray(V), m.asarray(np.array([-4], np.int32)))),
    (
        "take_axis",
        lambda m: m.take(
            m.asarray(np.ones((2, 3), F)), m.asarray(np.array([0, 3], np.int32)), axis=1
        ),
    ),
]

EYE2 = np.eye(2, dtype=F)
SPD = np.array([[4.0, 2.0], [2.0, 3.0]], F)


def ints(*values):
    return np.array(values, np.int32)


FINE = [
    ("solve", lambda m: m.linalg.solve(m.asarray(EYE2 * 2), m.asarray(np.ones(2, F)))),
    ("inv", lambda m: m.linalg.inv(m.asarray(SPD))),
    ("cholesky", lambda m: m.linalg.cholesky(m.asarray(SPD))),
    ("take", lambda m: m.take(m.asarray(V), m.asarray(ints(-3, 2, 0)))),
    ("take_axis", lambda m: m.take(m.asarray(np.ones((2, 3), F)), m.asarray(ints(2, -1)), axis=1)),
    # NaN in, NaN out: NumPy's numbers, not an error
    ("solve_nan_b", lambda m: m.linalg.solve(m.asarray(EYE2), m.asarray(np.array([np.nan, 1], F)))),
]


def numpy_error(make):
    with pytest.raises((np.linalg.LinAlgError, IndexError)) as info:
        make(bxp)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_eager_mode_raises_numpys_error_at_the_call(case):
    _, make = case
    error, message = numpy_error(make)
    with pytest.raises(error) as info:
        make(bj.namespace())
    assert message in str(info.value)


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_graph_mode_raises_numpys_error_at_the_sync_not_numbers(case):
    _, make = case
    error, _ = numpy_error(make)
    gx = bj.namespace(graph=True)
    bf.sync()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = make(gx)
        assert bf.graph.is_pending(t)
        # NumPy's error, or the sync's error that names it (the program's check failed)
        with pytest.raises((error, bf.FallbackError)) as info:
            t.numpy()
    assert isinstance(info.value, error) or error.__name__ in str(info.value)
    del t
    bf.sync()


@pytest.mark.parametrize("case", FINE, ids=[c[0] for c in FINE])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_what_numpy_computes_is_computed_on_the_device(case, graph):
    _, make = case
    want = np.asarray(make(bxp))
    xp = bj.namespace(graph=graph)
    bf.sync()  # what other tests left pending runs before the count is taken
    before = sum(bj.graph_compiler().host_callbacks.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = make(xp)
        values = got.numpy()
    np.testing.assert_allclose(values, want, rtol=1e-5, atol=1e-6)
    if graph:
        assert sum(bj.graph_compiler().host_callbacks.values()) == before
    else:
        assert got.device == "JAX:0"


def test_the_kernels_serve_these_operators():
    for name in ("linalg_solve", "linalg_inv", "linalg_cholesky", "take"):
        assert name in bj.NATIVE_KERNELS


def test_a_nan_in_is_numpys_to_decide_in_eager_mode():
    # NumPy raises for this one (LAPACK meets a NaN pivot); graph mode gives JAX's NaNs
    nan = np.array([[np.nan, 1.0], [1.0, 1.0]], F)
    with pytest.raises(np.linalg.LinAlgError):
        bj.namespace().linalg.inv(bj.namespace().asarray(nan))


def test_a_checked_program_still_runs_ahead_and_its_check_holds_there():
    # The checks are read when the sync commits a run's results, not in the run: a program
    # with a solve runs ahead of its recording, and a singular matrix met by a run ahead
    # still raises at the sync.
    gx = bj.namespace(graph=True)
    bf.sync()
    bf.metrics.reset()
    rng = np.random.default_rng(5)
    b = np.ones(3, F)
    mats = [rng.standard_normal((3, 3)).astype(F) + 3 * np.eye(3, dtype=F) for _ in range(4)]
    for m in mats:
        a = gx.asarray(m)
        got = gx.linalg.solve(a + 0.0, gx.asarray(b)) * 2.0
        np.testing.assert_allclose(got.numpy(), np.linalg.solve(m, b) * 2, rtol=1e-4, atol=1e-5)
    assert bf.metrics.graphs()["ran_ahead"] >= 1
    a = gx.asarray(np.zeros((3, 3), F))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = gx.linalg.solve(a + 0.0, gx.asarray(b)) * 2.0
        with pytest.raises((np.linalg.LinAlgError, bf.FallbackError), match="[Ss]ingular"):
            got.numpy()
    del got
    bf.sync()


def test_checks_off_give_jax_numbers_and_compile_anew():
    # The compiler's `checks` trades NumPy's error for the flag's read at each sync.
    gx = bj.namespace(graph=True)
    compiler = bj.graph_compiler()
    bf.sync()
    try:
        compiler.checks = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = gx.linalg.inv(gx.asarray(SINGULAR)).numpy()
        assert not np.isfinite(got).all()  # JAX's numbers, unchecked
    finally:
        compiler.checks = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = gx.linalg.inv(gx.asarray(SINGULAR))
        with pytest.raises((np.linalg.LinAlgError, bf.FallbackError), match="Singular"):
            t.numpy()
    del t
    bf.sync()
