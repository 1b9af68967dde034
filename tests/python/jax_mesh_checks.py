"""``boxfall.jax`` on a mesh of 8 devices in one process: sharded tensors, the workload in eager
and graph mode, and the CPU fallback per shard. Run by ``test_jax_mesh.py`` in a process of its
own where JAX's CPU shows 8 devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``,
read when JAX starts); on a host of 8 accelerators, ``python -m pytest
tests/python/jax_mesh_checks.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
from boxfall import workload  # noqa: E402

if len(jax.devices()) < 8:
    pytest.skip("JAX shows fewer than 8 devices here", allow_module_level=True)

from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

MESH = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
ROWS = P("data", None)


@bf.custom_op("meshtest::twice", mutates_args=())
def twice(x: np.ndarray) -> np.ndarray:
    """A user's operator with a CPU kernel only, declared element-wise."""
    return x * 2


bj.register_sharding_rule(twice, "elementwise")


@bf.custom_op("meshtest::plus", mutates_args=())
def plus(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x + y


bj.register_sharding_rule(plus, "elementwise")


@bf.custom_op("meshtest::running", mutates_args=())
def running(x: np.ndarray) -> np.ndarray:
    """A CPU kernel only, and no sharding rule: each row needs the rows before it."""
    return np.cumsum(x, axis=0)


@bf.custom_op("meshtest::row_sum", mutates_args=())
def row_sum(x: np.ndarray, axis: int) -> np.ndarray:
    return x.sum(axis=axis)


bj.register_sharding_rule(row_sum, "reduction")


def host(n: int = 16, d: int = 3) -> np.ndarray:
    return np.arange(n * d, dtype=np.float32).reshape(n, d)


@pytest.fixture(params=[False, True], ids=["eager", "graph"])
def xp(request: Any) -> Any:
    return bj.namespace(mesh=MESH, graph=request.param)


def moved(op: Any) -> dict[str, Any]:
    return bj.mesh_stats().get(op.name, {})


def test_a_tensor_of_the_mesh_is_sharded_as_asked(xp):
    x = xp.asarray(host(), device=ROWS)
    assert x.device.endswith(":0") and x.device.startswith("JAXMesh")
    assert x.sharding == NamedSharding(MESH, ROWS)
    assert [s.data.shape for s in x.payload.addressable_shards] == [(2, 3)] * 8
    np.testing.assert_array_equal(x.numpy(), host())
    # A NamedSharding of the mesh does as its spec; the default is replicated.
    y = xp.asarray(host(), device=NamedSharding(MESH, P(None, None)))
    assert y.sharding.is_fully_replicated
    assert xp.asarray(host()).sharding.is_fully_replicated
    # The kernels run on the sharded array as it is: the result keeps the rows' sharding.
    assert (x + 1.0).sharding == NamedSharding(MESH, ROWS)
    # zeros on the tensor's device is replicated; to_device to its own device keeps it sharded.
    assert xp.zeros(5, device=x.device).sharding.is_fully_replicated
    assert xp.to_device(x, x.device).sharding == x.sharding
    z = xp.zeros((16, 2), device=P("data"))
    assert z.sharding.spec == P("data")
    r = xp.to_device(y, ROWS)
    assert r.sharding.spec == ROWS
    np.testing.assert_array_equal(r.numpy(), host())
    # *_like make their result with x's sharding (eagerly: graph mode would sync to read it),
    # or the one device= names.
    if not xp.device.startswith("JAXMeshGraph"):
        assert xp.zeros_like(x).sharding == x.sharding
        assert xp.full_like(x, 2.0).sharding == x.sharding
    np.testing.assert_array_equal(xp.full_like(x, 2.0).numpy(), np.full((16, 3), 2, np.float32))
    assert xp.ones_like(x, device=P()).sharding.is_fully_replicated
    assert xp.zeros_like(x, device=ROWS).sharding == x.sharding
    # A jax.Array already on the mesh is wrapped as it is.
    assert xp.asarray(x.payload).payload is x.payload


def test_graph_mode_compiles_with_the_inputs_shardings():
    gx = bj.namespace(mesh=MESH, graph=True)
    for spec in (ROWS, P(None, "data"), ROWS):
        x = gx.asarray(host(16, 8), device=spec)
        y = xp_sum = gx.sum(x * 2.0 + 1.0, axis=1)
        z = x * 2.0 + 1.0
        np.testing.assert_array_equal(z.numpy(), host(16, 8) * 2 + 1)
        np.testing.assert_array_equal(y.numpy(), (host(16, 8) * 2 + 1).sum(1))
        # XLA propagated the input's sharding through the program.
        assert z.sharding == NamedSharding(MESH, spec), spec
        assert xp_sum.device == x.device


def test_a_mesh_of_explicit_axes_is_refused_naming_axis_types():
    explicit = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    with pytest.raises(ValueError, match=r"axis_types=\(jax.sharding.AxisType.Auto,\)"):
        bj.namespace(mesh=explicit)


def test_a_dimension_the_mesh_axis_does_not_divide_is_refused(xp):
    # 10 % 8 != 0: refused (boxfall pads nothing), the error naming the dimension and the axis.
    with pytest.raises(ValueError, match=r"dimension 0 .* 10 elements.*mesh axis 'data'"):
        xp.asarray(host(10), device=ROWS)
    with pytest.raises(ValueError, match=r"dimension 0 .* 12 elements.*mesh axis 'data'"):
        xp.zeros(12, device=P("data"))
    with pytest.raises(ValueError, match=r"10 elements.*'data'"):
        bj.from_process_local(xp, host(10), ROWS)
    with pytest.raises(ValueError, match=r"axis 'rows', which the namespace's mesh does not"):
        xp.asarray(host(), device=P("rows"))
    # Replicated, any size is fine.
    assert xp.asarray(host(10)).shape == (10, 3)


def test_tensors_of_two_meshes_or_a_mesh_and_a_device_are_refused(xp):
    x = xp.asarray(host(), device=ROWS)
    single = bj.namespace().asarray(host())
    with pytest.raises(bf.FallbackError, match="two devices"):
        xp.add(x, single)
    other = jax.make_mesh((4,), ("data",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])
    xo = bj.namespace(mesh=other, graph=xp.device.startswith("JAXMeshGraph"))
    assert xo.device != xp.device
    y = xo.asarray(host(), device=ROWS)
    with pytest.raises(bf.FallbackError, match="two devices"):
        xp.add(x, y)
    with pytest.raises(ValueError, match="not this namespace's mesh"):
        xp.asarray(host(), device=NamedSharding(other, ROWS))


def test_the_workload_agrees_with_numpy_and_with_one_device(xp):
    jax.config.update("jax_default_matmul_precision", "highest")
    p = workload.Problem(n=1000, d=8, k=4, iterations=3)
    x, y = workload.make_data(p)
    want = workload.kmeans_ridge(np, x, y, p)
    x, y = x.astype(np.float32), y.astype(np.float32)
    one = bj.namespace()
    alone = workload.kmeans_ridge(one, one.asarray(x), one.asarray(y), p)
    xs, ys = xp.asarray(x, device=ROWS), xp.asarray(y, device=ROWS)
    got = workload.kmeans_ridge(xp, xs, ys, p)
    for g, w, a in zip(got, want, alone, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(g.numpy(), a.numpy(), rtol=1e-4, atol=1e-4)
    # The labels, one per point, stay sharded as the points are.
    assert got[1].sharding.is_equivalent_to(NamedSharding(MESH, ROWS), 2)
    if xp.device.startswith("JAXMeshGraph"):
        # In graph mode the whole workload is one program, as on one device.
        bf.metrics.reset()
        for t in workload.kmeans_ridge(xp, xs, ys, p):
            t.numpy()
        assert bf.metrics.graphs()["graphs_run"] == 1


def test_a_shard_wise_fallback_moves_each_shard_on_its_own_device(xp):
    bj.reset_mesh_stats()
    x = xp.asarray(host(), device=ROWS)
    out = twice(x)
    np.testing.assert_array_equal(out.numpy(), 2 * host())
    assert out.sharding == x.sharding
    stats = moved(twice)
    shard = 2 * 3 * 4  # two rows of three float32 per device
    assert stats["shard_runs"] == 8
    assert stats["bytes_to_cpu"] == {str(d): shard for d in MESH.devices.flat}
    assert stats["bytes_from_cpu"] == {str(d): shard for d in MESH.devices.flat}
    assert stats["gathers"] == 0 and stats["gathered_bytes"] == 0
    # Each result shard is on the device its input shard was on.
    for a, b in zip(x.payload.addressable_shards, out.payload.addressable_shards, strict=True):
        assert a.device == b.device and a.index == b.index


def test_a_replicated_tensor_falls_back_once_per_process(xp):
    bj.reset_mesh_stats()
    x = xp.asarray(host())
    out = twice(x)
    np.testing.assert_array_equal(out.numpy(), 2 * host())
    assert out.sharding.is_fully_replicated
    stats = moved(twice)
    assert stats["shard_runs"] == 1 and stats["gathers"] == 0
    assert sum(stats["bytes_to_cpu"].values()) == host().nbytes


def test_a_block_several_devices_hold_falls_back_once():
    # On a 4 x 2 mesh, rows cut over "data" alone: each block of rows is on the 2 devices of a
    # "model" column, and runs once, its result copied to the other device.
    grid = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    xg = bj.namespace(mesh=grid)
    for spec, runs in ((P("data", "model"), 8), (P("data", None), 4), (P(None, "model"), 2)):
        bj.reset_mesh_stats()
        x = xg.asarray(host(16, 6), device=spec)
        out = twice(x)
        np.testing.assert_array_equal(out.numpy(), 2 * host(16, 6))
        assert out.sharding == x.sharding
        stats = moved(twice)
        assert stats["shard_runs"] == runs and len(stats["bytes_to_cpu"]) == runs, spec
        # Each distinct block went to the host once: the array's bytes, whatever the spec.
        assert sum(stats["bytes_to_cpu"].values()) == host(16, 6).nbytes, spec


def test_a_reduction_along_an_unsharded_axis_runs_per_shard(xp):
    bj.reset_mesh_stats()
    x = xp.asarray(host(), device=ROWS)
    across = row_sum(x, 1)
    np.testing.assert_array_equal(across.numpy(), host().sum(1))
    assert across.sharding.spec == P("data")
    assert moved(row_sum)["shard_runs"] == 8 and moved(row_sum)["gathers"] == 0
    down = row_sum(x, 0)  # along the sharded axis: gathered
    np.testing.assert_array_equal(down.numpy(), host().sum(0))
    assert moved(row_sum)["gathers"] == 1
    assert moved(row_sum)["gathered_bytes"] == host().nbytes


def test_a_gathering_fallback_is_counted_and_resharded(xp):
    bj.reset_mesh_stats()
    x = xp.asarray(host(), device=ROWS)
    out = running(x)
    np.testing.assert_array_equal(out.numpy(), np.cumsum(host(), axis=0))
    # The result has the sharding of the sharded input of its shape.
    assert out.sharding == x.sharding
    stats = moved(running)
    assert stats["gathers"] == 1 and stats["gathered_bytes"] == host().nbytes
    assert stats["shard_runs"] == 0
    # An element-wise operator whose operands are sharded differently gathers too.
    rows = xp.asarray(host(16, 8), device=ROWS)
    cols = xp.asarray(host(16, 8), device=P(None, "data"))
    bj.reset_mesh_stats()
    np.testing.assert_array_equal(plus(rows, cols).numpy(), 2 * host(16, 8))
    assert moved(plus)["gathers"] == 1 and moved(plus)["shard_runs"] == 0
    np.testing.assert_array_equal(plus(rows, rows).numpy(), 2 * host(16, 8))
    assert moved(plus)["gathers"] == 1 and moved(plus)["shard_runs"] == 8


def test_process_local_parts_round_trip(xp):
    x = bj.from_process_local(xp, host(), ROWS)
    assert x.sharding.spec == ROWS and x.shape == (16, 3)  # one process: its rows are all
    np.testing.assert_array_equal(bj.to_process_local(x), host())
    np.testing.assert_array_equal(bj.to_process_local(xp.asarray(host())), host())


@bf.custom_op("meshtest::triple", mutates_args=())
def triple(x: np.ndarray) -> np.ndarray:
    """A CPU kernel only, a shape rule (graph mode records it) and the element-wise rule."""
    return x * 3


triple.register_shape_rule(lambda x: bf.TensorMeta(x.dtype, x.shape))
bj.register_sharding_rule(triple, "elementwise")


def test_graph_mode_runs_a_shard_wise_host_callback_once_per_shard():
    gx = bj.namespace(mesh=MESH, graph=True)
    x = gx.asarray(host(), device=ROWS)
    bj.reset_mesh_stats()
    breaks = dict(bf.metrics.graphs()["breaks"])
    y = triple(x + 1.0) - 1.0
    np.testing.assert_array_equal(y.numpy(), (host() + 1) * 3 - 1)
    stats = moved(triple)
    # One host callback per shard, inside the program (shard_map): no break, no eager fallback,
    # nothing gathered.
    assert stats["graph_shard_runs"] == 8
    assert stats["shard_runs"] == 0 and stats["gathers"] == 0
    assert dict(bf.metrics.graphs()["breaks"]) == breaks
    assert y.sharding.is_equivalent_to(NamedSharding(MESH, ROWS), 2)
    # The program runs again from the cache: 8 callbacks more.
    np.testing.assert_array_equal((triple(x + 1.0) - 1.0).numpy(), (host() + 1) * 3 - 1)
    assert moved(triple)["graph_shard_runs"] == 16


def test_scikit_learn_fits_on_row_sharded_float32_as_numpy_does():
    sklearn = pytest.importorskip("sklearn")
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    jax.config.update("jax_default_matmul_precision", "highest")
    xp = bj.namespace(mesh=MESH)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    y = (x @ rng.normal(size=5)).astype(np.float32)
    xs, ys = xp.asarray(x, device=ROWS), xp.asarray(y, device=P("data"))
    with sklearn.config_context(array_api_dispatch=True):
        scaled = StandardScaler().fit_transform(xs)
        pca = PCA(n_components=2, svd_solver="full").fit(xs)
        ridge = Ridge(alpha=1.0, solver="svd").fit(xs, ys)
    assert scaled.device == xs.device
    want = StandardScaler().fit_transform(x)
    np.testing.assert_allclose(scaled.numpy(), want, rtol=1e-4, atol=1e-4)
    want_pca = PCA(n_components=2, svd_solver="full").fit(x)
    np.testing.assert_allclose(
        np.abs(np.asarray(pca.components_)), np.abs(want_pca.components_), rtol=1e-3, atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(pca.explained_variance_), want_pca.explained_variance_, rtol=1e-3
    )
    want_coef = Ridge(alpha=1.0, solver="svd").fit(x, y).coef_
    np.testing.assert_allclose(np.asarray(ridge.coef_), want_coef, rtol=1e-3, atol=1e-4)


@bf.custom_op("meshtest::running_ruled", mutates_args=())
def running_ruled(x: np.ndarray) -> np.ndarray:
    """A CPU kernel only and a shape rule, but no sharding rule: not shard-wise."""
    return np.cumsum(x, axis=0)


running_ruled.register_shape_rule(lambda x: bf.TensorMeta(x.dtype, x.shape))


def test_graph_mode_breaks_at_an_operator_that_is_not_shard_wise():
    gx = bj.namespace(mesh=MESH, graph=True)
    x = gx.asarray(host(), device=ROWS)
    want = np.cumsum(host() + 1, axis=0)
    # The first program that has it runs it (a host callback); the sync refuses it from then on.
    np.testing.assert_array_equal(running_ruled(x + 1.0).numpy(), want)
    before = bf.metrics.graphs()["breaks"].get(running_ruled.name, 0)
    bj.reset_mesh_stats()
    np.testing.assert_array_equal(running_ruled(x + 1.0).numpy(), want)
    # A counted break, then the eager fallback's gather, counted too.
    assert bf.metrics.graphs()["breaks"].get(running_ruled.name, 0) == before + 1
    assert moved(running_ruled)["gathers"] == 1
    assert moved(running_ruled)["gathered_bytes"] == host().nbytes


def test_the_report_says_which_fallbacks_ran_per_shard_and_which_gathered(xp):
    bf.metrics.reset()  # the mesh's counts too
    assert bj.mesh_stats() == {}
    x = xp.asarray(host(), device=ROWS)
    twice(x)
    running(x)
    text = bf.metrics.report()
    assert "CPU fallback on a mesh" in text
    line = next(s for s in text.splitlines() if "meshtest::twice" in s and "per shard" in s)
    assert "8 runs" in line and "from 8 devices" in line and "gathered" not in line
    line = next(s for s in text.splitlines() if "meshtest::running:" in s)
    assert "1 gathered (192 B)" in line
