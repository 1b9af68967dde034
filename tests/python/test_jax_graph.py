"""Graph mode on JAX (``bj.namespace(graph=True)``): a graph's program is one ``jax.jit``
program, its values those of eager mode, a second run compiles nothing, and an operator with
no JAX kernel runs its CPU kernel inside the program (a host callback), not as a graph break.
On JAX's CPU here; ``benches/jax_device.py`` runs the same on a TPU."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
from boxfall import workload  # noqa: E402


@pytest.fixture
def gx():
    bf.sync()
    bf.metrics.reset()
    yield bj.namespace(graph=True)
    bf.sync()


def program(xp, x, y):
    z = xp.add(xp.multiply(x, y), 1.5)
    return xp.sum(xp.subtract(z, x), axis=0), xp.matmul(z, xp.asarray(np.eye(3, dtype=np.float32)))


def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((5, 3)).astype(
        np.float32
    )


def test_a_program_gives_the_eager_values_and_is_compiled_once(gx):
    compiler = bj.graph_compiler()
    a, b = data()
    ex = bj.namespace()
    want = [t.numpy() for t in program(ex, ex.asarray(a), ex.asarray(b))]
    before = compiler.compiles
    for run in range(2):
        got = program(gx, gx.asarray(a), gx.asarray(b))
        assert all(bf.graph.is_pending(t) for t in got)
        bf.sync()
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5)
            assert g.device == f"{bj.GRAPH_BACKEND_NAME}:0"
            assert isinstance(g.payload, jax.Array)
        if run == 0:
            compiled = compiler.compiles
            assert compiled > before
    assert compiler.compiles == compiled  # the second run: the cached program
    figures = bf.metrics.graphs()
    assert figures["cache_hits"] >= 1


def cumulative_of_ints(xp, x, y):
    """An int32 ``cumulative_sum``, whose JAX kernel leaves integers to the CPU kernel (NumPy
    accumulates them in the default integer dtype): a host node between device nodes."""
    ints = xp.astype(xp.multiply(xp.add(x, y), 10.0), xp.int32)
    return xp.multiply(xp.cumulative_sum(ints, axis=0), 2)


def numpy_cumulative_of_ints(a, b):
    return np.cumsum(((a + b) * np.float32(10.0)).astype(np.int32), axis=0) * 2


def test_a_case_no_jax_kernel_takes_runs_on_the_host_inside_the_program(gx):
    compiler = bj.graph_compiler()
    name = "array_api::cumulative_sum"
    a, b = data()
    x, y = gx.asarray(a), gx.asarray(b)
    got = cumulative_of_ints(gx, x, y)
    before = compiler.host_callbacks[name]
    np.testing.assert_array_equal(got.numpy(), numpy_cumulative_of_ints(a, b))
    assert compiler.host_callbacks[name] == before + 1
    assert name not in bf.metrics.graphs()["breaks"]


def test_the_workload_in_graph_mode_gives_the_eager_values(gx):
    p = workload.Problem(n=400, d=4, k=3, iterations=3)
    x, y = (a.astype(np.float32) for a in workload.make_data(p))
    ex = bj.namespace()
    want = workload.kmeans_ridge(ex, ex.asarray(x), ex.asarray(y), p)
    got = workload.kmeans_ridge(gx, gx.asarray(x), gx.asarray(y), p)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)


def test_the_workload_repeated_runs_ahead_and_gives_the_eager_values(gx):
    p = workload.Problem(n=300, d=4, k=3, iterations=2)
    x, y = (a.astype(np.float32) for a in workload.make_data(p))
    ex = bj.namespace()
    want = workload.kmeans_ridge(ex, ex.asarray(x), ex.asarray(y), p)
    for _ in range(4):
        got = workload.kmeans_ridge(gx, gx.asarray(x), gx.asarray(y), p)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)
    figures = bf.metrics.graphs()
    # The third and fourth calls' programs were launched while they were being recorded.
    assert (figures["ran_ahead"], figures["ahead_missed"]) == (2, 0)


def test_a_program_with_a_host_callback_never_runs_ahead(gx):
    compiler = bj.graph_compiler()
    name = "array_api::cumulative_sum"
    a, b = data()
    before = compiler.host_callbacks[name]
    for _ in range(4):
        x, y = gx.asarray(a), gx.asarray(b)
        got = cumulative_of_ints(gx, x, y)
        np.testing.assert_array_equal(got.numpy(), numpy_cumulative_of_ints(a, b))
    # Each run's CPU kernel ran once, at its sync: a run let go would count one more.
    assert compiler.host_callbacks[name] == before + 4
    assert bf.metrics.graphs()["ran_ahead"] == 0


def test_a_pending_tensor_has_the_dtype_its_value_will_have(gx):
    # Without JAX's 64-bit types the device narrows NumPy's int64 indices to int32: the
    # recorder says so before anything runs.
    b = gx.multiply(gx.asarray(np.ones((3, 4), dtype=np.float32)), 2.0)
    m = gx.argmin(b, axis=1)
    assert bf.graph.is_pending(m)
    said = m.dtype
    assert said == ("int64" if bj.X64 else "int32")
    assert m.numpy().dtype == np.dtype(said) and m.dtype == said


def test_a_changed_python_scalar_compiles_nothing_and_keeps_numpys_dtypes(gx):
    compiler = bj.graph_compiler()
    a, _ = data()
    x = gx.asarray(a)
    i = gx.asarray(np.arange(6, dtype=np.int32))
    before = compiler.compiles
    for rate in (0.5, 0.125, 3.0):
        y = xp_step(gx, x, i, rate)
        np.testing.assert_allclose(y[0].numpy(), a * rate - 2, rtol=1e-6)
        np.testing.assert_array_equal(y[1].numpy(), np.arange(6) * 7 + 1)
        assert y[1].dtype == gx.int32
        np.testing.assert_allclose(y[2].numpy(), np.arange(6) * rate, rtol=1e-6)
    assert compiler.compiles - before == 1


def test_a_repeated_scalar_is_the_same_device_value_and_a_zero_keeps_its_sign(gx):
    """A program's scalars as at its last run are reused (``_LastScalars``: their packs, one
    array a dtype), but only for the same values of the same types: -0.0 after 0.0 (equal in
    Python) is -0.0 on the device, 2 after 2.0 is packed again, and a NaN is a NaN."""
    from boxfall.jax._graph import _LastScalars, _Packing

    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    last = _LastScalars(_Packing([f32, i32]))
    first = last.of([2.0, 3])
    assert last.of([2.0, 3]) is first
    assert [p.dtype for p in first] == [f32, i32]
    assert [np.asarray(p).tolist() for p in first] == [[2.0], [3]]
    assert last.of([2, 3]) is not first
    one = _LastScalars(_Packing([f32]))
    assert np.signbit(np.asarray(one.of([0.0])[0])).tolist() == [False]
    assert np.signbit(np.asarray(one.of([-0.0])[0])).tolist() == [True]
    assert np.isnan(np.asarray(one.of([float("nan")])[0])).all()
    # Through a program: 1 / (x * s) sees the zero's sign of each run.
    a = np.ones((2,), np.float32)
    x = gx.asarray(a)
    for s, want in ((0.0, np.inf), (-0.0, -np.inf), (-0.0, -np.inf), (0.0, np.inf)):
        with np.errstate(divide="ignore"):
            got = gx.divide(gx.asarray(a), gx.multiply(x, s)).numpy()
        np.testing.assert_array_equal(got, np.full(2, want, np.float32))


def xp_step(xp, x, i, rate):
    """A float scalar on floats, an int on ints, a float on ints (NumPy: a float result)."""
    return (
        xp.subtract(xp.multiply(x, rate), 2),
        xp.add(xp.multiply(i, 7), 1),
        xp.multiply(i, rate),
    )


def test_threads_read_pending_tensors_and_record_their_own_graphs(gx):
    # A pending tensor read on any thread gets its value (the first reader computes its graph,
    # the others wait for it), while each thread records and reads graphs of its own.
    import threading

    a, b = data()
    shared = program(gx, gx.asarray(a), gx.asarray(b))
    want = [np.asarray(t) for t in program(bj.namespace(), bj.namespace().asarray(a), b)]
    errors = []
    barrier = threading.Barrier(4)

    def work(i):
        try:
            barrier.wait()
            for step in range(5):
                x = gx.asarray(a * (i + step))
                mine = gx.add(gx.multiply(x, 2.0), 1.0)
                for g, w in zip(shared, want, strict=True):
                    np.testing.assert_allclose(g.numpy(), w, rtol=1e-5)
                np.testing.assert_allclose(mine.numpy(), a * (i + step) * 2 + 1, rtol=1e-5)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_change_of_matmul_precision_compiles_again_and_names_the_setting(gx):
    m = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    x = gx.asarray(m)

    def run():
        return gx.matmul(gx.add(x, 0.5), gx.matrix_transpose(x)).numpy()

    first = run()
    compiled = bf.metrics.graphs()["compiled"]
    # Other modules set the process's precision (test_jax_backend.py: "highest"): another one.
    now = jax.config.jax_default_matmul_precision
    other = "float32" if now == "highest" else "highest"
    with jax.default_matmul_precision(other):
        np.testing.assert_allclose(run(), first, rtol=1e-2)
    figures = bf.metrics.graphs()
    assert figures["compiled"] == compiled + 1
    assert "the backend's settings" in figures["recompiles"][-1]
    assert f"matmul_precision={other}" in figures["recompiles"][-1]
    run()  # the first settings again: their program is cached
    assert bf.metrics.graphs()["compiled"] == compiled + 1


@pytest.mark.skipif(bj.X64, reason="JAX narrows only without x64")
def test_graph_mode_warns_and_counts_narrowing_as_eager_mode_does(gx):
    import warnings

    def narrowing(xp):
        bf.metrics.reset()
        i = xp.asarray(np.arange(3, dtype=np.int32))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = [xp.divide(i, xp.add(i, 1)), xp.multiply(i, 0.5), xp.sum(i)]
            values = [t.numpy() for t in out]
        warned = sorted(
            str(w.message).split("'")[1] for w in caught if w.category is bf.NarrowingWarning
        )
        counted = {
            op: bf.metrics.op_stats(op)["narrowed"]
            for op in ("array_api::divide", "array_api::multiply.Tensor_Scalar", "array_api::sum")
        }
        return warned, counted, values

    eager = narrowing(bj.namespace())
    graph = narrowing(gx)
    assert eager[0] == ["array_api::divide", "array_api::multiply.Tensor_Scalar"]
    assert graph[0] == eager[0]
    assert graph[1] == eager[1]
    for g, e in zip(graph[2], eager[2], strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6)


@pytest.mark.skipif(bj.X64, reason="JAX narrows only without x64")
def test_an_in_place_call_that_breaks_the_graph_counts_no_narrowing_it_did_not_record(gx):
    """``i /= 2`` of an int32 array: its functional form (``divide``, float64 in NumPy) would
    be narrowed, but the write cannot cast it back (NumPy refuses), so the call breaks the
    graph and runs eagerly, which raises: as in eager mode, nothing was narrowed."""
    import warnings

    def narrowing(xp):
        bf.metrics.reset()
        i = xp.asarray(np.arange(3, dtype=np.int32))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(TypeError):
                i /= 2
        warned = [w for w in caught if w.category is bf.NarrowingWarning]
        ops = ("array_api::divide.Tensor_Scalar", "array_api::divide_.Scalar")
        return len(warned), {op: bf.metrics.op_stats(op)["narrowed"] for op in ops}

    eager = narrowing(bj.namespace())
    assert eager == (0, dict.fromkeys(eager[1], 0))
    assert narrowing(gx) == eager


@pytest.mark.skipif(bj.X64, reason="JAX narrows only without x64")
def test_an_in_place_write_counts_no_narrowing_as_eager_mode_counts_none(gx):
    """``f /= i`` of float32 ``f`` and int32 ``i``: its functional form (``divide``) is float64
    in NumPy, float32 on the device, and the write ends in ``f``'s float32 in both modes:
    neither counts nor warns of a narrowing, and the values agree."""
    import warnings

    def divided(xp):
        bf.metrics.reset()
        f = xp.asarray(np.array([1.0, 2.0, 3.0], dtype=np.float32))
        i = xp.asarray(np.array([2, 4, 8], dtype=np.int32))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f /= i
            got = np.asarray(f)
        warned = [w for w in caught if w.category is bf.NarrowingWarning]
        ops = ("array_api::divide", "array_api::divide_")
        return len(warned), {op: bf.metrics.op_stats(op)["narrowed"] for op in ops}, got

    eager = divided(bj.namespace())
    graph = divided(gx)
    assert eager[:2] == (0, {"array_api::divide": 0, "array_api::divide_": 0})
    assert graph[:2] == eager[:2]
    assert graph[2].dtype == eager[2].dtype == np.float32
    np.testing.assert_array_equal(graph[2], eager[2])
