"""A real device: the OpenCL backend of examples/opencl_backend.py (pyopencl on whatever OpenCL
platform is installed; pocl's CPU device in CI), with its native OpenCL kernels (add, subtract,
multiply, exp, sum, matmul) and the CPU fallback for the rest of the standard.

A quick subset of the array API functions and scikit-learn's estimators and functions agree
with NumPy on it: in float64 and float32 on a device that holds float64, and in float32 on the
same device declared without float64 (``dtypes=`` without float64 and complex128), where
scikit-learn reads the namespace's dtypes and picks float32 itself.

The module skips, saying why, where pyopencl cannot be imported or no OpenCL platform has a
device (``pip install pyopencl mako pocl-binary-distribution`` gives one on Linux).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boxfall as bf
import boxfall.array_api as xp_cpu
import numpy as np
import pytest
from sample_data import sklearn_data

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "opencl_backend.py"


def _why_no_opencl() -> str | None:
    try:
        import pyopencl as cl
    except Exception as e:  # noqa: BLE001 - any import failure means no OpenCL here
        return f"pyopencl cannot be imported ({type(e).__name__}: {e})"
    try:
        if not any(p.get_devices() for p in cl.get_platforms()):
            return "no OpenCL platform has a device"
    except Exception as e:  # noqa: BLE001 - an ICD loader without platforms raises
        return f"no OpenCL platform ({type(e).__name__}: {e})"
    return None


_WHY = _why_no_opencl()
if _WHY is not None:
    print(f"test_opencl_backend.py skipped: {_WHY}", file=sys.stderr)
    pytest.skip(
        f"{_WHY}; pip install pyopencl mako pocl-binary-distribution", allow_module_level=True
    )


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("opencl_backend", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ocl = _load_example()
DEVICE = ocl.OpenCLDevice()


@pytest.fixture(scope="module")
def full(unique_name):
    """The OpenCL device as it is (float64 where the device has it)."""
    return ocl.register(unique_name("OpenCL"), device=DEVICE)


@pytest.fixture(scope="module")
def no64(unique_name):
    """The same device declared without float64 and complex128."""
    return ocl.register(unique_name("OpenCL32"), float64=False, device=DEVICE)


# (the backend fixture's name, the dtype of the test data)
CONFIGS = [
    pytest.param(("full", "float64"), id="float64"),
    pytest.param(("full", "float32"), id="float32"),
    pytest.param(("no64", "float32"), id="no-float64-device"),
]


@pytest.fixture(params=CONFIGS)
def case(request):
    name, dtype = request.param
    if name == "full" and dtype == "float64" and not DEVICE.has_float64:
        pytest.skip("the OpenCL device has no float64")
    backend = request.getfixturevalue(name)
    return xp_cpu.namespace(backend.name), np.dtype(dtype)


def tol(dtype: np.dtype) -> dict[str, float]:
    return {"rtol": 1e-12, "atol": 1e-12} if dtype == np.float64 else {"rtol": 2e-5, "atol": 2e-5}


def test_the_example_declares_what_the_device_holds(full, no64):
    info = xp_cpu.namespace(no64.name).__array_namespace_info__()
    assert "float64" not in info.dtypes(device=f"{no64.name}:0")
    assert "complex128" not in info.dtypes(device=f"{no64.name}:0")
    assert info.default_dtypes(device=f"{no64.name}:0")["real floating"] == np.float32
    full_info = xp_cpu.namespace(full.name).__array_namespace_info__()
    want = np.float64 if DEVICE.has_float64 else np.float32
    assert full_info.default_dtypes()["real floating"] == want


def test_payloads_are_opencl_arrays(full):
    import pyopencl.array as cla

    t = full.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert isinstance(t.payload.array, cla.Array)
    assert t.shape == (2, 3) and t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), np.arange(6.0, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "exp", "sum", "matmul"])
def test_native_kernels_run_on_the_device_without_falling_back(case, name):
    xp, dtype = case
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 5)).astype(dtype)
    b = rng.standard_normal((5, 5)).astype(dtype)
    x, y = xp.asarray(a), xp.asarray(b)
    fn = getattr(xp, name)
    bf.metrics.reset()
    got = fn(x) if name in ("exp", "sum") else fn(x, y)
    assert bf.metrics.counter_value(f"array_api::{name}") == 0, bf.metrics.counters()
    want = getattr(np, name)(a) if name in ("exp", "sum") else getattr(np, name)(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), want, **tol(dtype))


@pytest.mark.parametrize(
    ("name", "f"),
    [
        ("transpose", lambda xp, x: xp.matmul(x.T, x)),
        ("rows", lambda xp, x: xp.add(x[1:], x[:-1])),
        ("reversed", lambda xp, x: xp.subtract(x[::-1, ::2], x[:, 1::2])),
        ("reshape", lambda xp, x: xp.multiply(xp.reshape(x, (4, 3)), xp.reshape(x, (4, 3)))),
        ("expand_dims", lambda xp, x: xp.add(xp.expand_dims(x[0], 0), x[:1])),
    ],
)
def test_a_view_a_kernel_reads_is_made_on_the_device(case, name, f):
    """The example's ``view`` hook: the views an OpenCL kernel reads (a reshape shares the
    buffer; a transpose, a slice or a reversed view is gathered on the device) cross nothing."""
    xp, dtype = case
    a = np.arange(12.0, dtype=dtype).reshape(3, 4)
    x = xp.asarray(a)
    bf.metrics.reset()
    got = f(xp, x)
    assert sum(bf.metrics.counters().values()) == 0, bf.metrics.counters()  # no fallback
    moved = bf.metrics.transfers().get(x.device.split(":")[0], {})
    assert moved.get("bytes_materialized", 0) == 0, moved
    np.testing.assert_allclose(np.asarray(got), f(np, a), **tol(dtype))


def test_a_host_base_crosses_once_for_all_the_views_kernels_read(full):
    xp = xp_cpu.namespace(full.name)
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = xp.asarray(a)
    y = xp.negative(x)  # the CPU fallback's result: on the host only
    bf.metrics.reset()
    got = xp.add(xp.matmul(y.T, x), xp.matmul(xp.matrix_transpose(y), x))
    assert bf.metrics.transfers()[full.name]["bytes_materialized"] == a.nbytes
    np.testing.assert_allclose(np.asarray(got), 2 * (-a).T @ a, rtol=1e-5)


@pytest.mark.parametrize(
    ("name", "view"),
    [
        ("reshape", lambda xp, x: xp.reshape(x, (4, 3))),
        ("rows", lambda xp, x: x[1:]),
        ("transpose", lambda xp, x: x.T),
    ],
)
def test_an_in_place_kernel_writing_a_view_writes_its_base(full, name, view):
    """An in-place OpenCL kernel (this test's ``add_``) writing a view writes its base: a
    reshape shares the buffer and is written where it is (nothing moves); a slice or a
    transpose is gathered into a copy, whose write boxfall writes into the base."""
    xp = xp_cpu.namespace(full.name)
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = xp.asarray(a)
    ones = xp.asarray(np.ones(view(np, a).shape, np.float32))

    def add_(x1: Any, x2: Any) -> Any:
        x1.payload.array += x2.payload.array
        return x1

    with bf.Library("array_api", "IMPL") as lib:
        lib.impl("add_", add_, full.name)
        bf.metrics.reset()
        bf.ops.array_api.add_(view(xp, x), ones)
        assert bf.metrics.counter_value("array_api::add_") == 0  # the OpenCL kernel ran
        moved = bf.metrics.transfers().get(full.name, {}).get("bytes_to_host", 0)
    want = a.copy()
    view(np, want)[...] += 1.0
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(np.asarray(view(xp, x)), view(np, want))
    if name == "reshape":
        assert moved == 0
    else:
        assert moved > 0 and x.residency == "host"


def _quick_subset(dtype: np.dtype) -> list[tuple[str, Callable[[Any, Any], Any]]]:
    """(name, f(namespace, arrays)) for a quick subset of the standard: creation, element-wise,
    statistics, linear algebra, manipulation, searching, sorting, sets and indexing."""

    def setitem(xp, d):
        y = xp.asarray(d["a"], copy=True)
        y[0, :] = 2.0
        y[y > 1.5] = 0.5
        return y

    def in_place(xp, d):
        y = xp.asarray(d["a"], copy=True)
        y += d["b"]
        y *= 2.0
        return y

    return [
        ("zeros", lambda xp, d: xp.zeros((2, 3), dtype=dtype)),
        ("ones_default", lambda xp, d: xp.ones(3) + xp.zeros(3, dtype=dtype)),
        ("arange", lambda xp, d: xp.arange(0, 5, dtype=dtype)),
        ("linspace", lambda xp, d: xp.linspace(0.0, 1.0, 7, dtype=dtype)),
        ("eye", lambda xp, d: xp.eye(3, 4, k=1, dtype=dtype)),
        ("full_like", lambda xp, d: xp.full_like(d["a"], 3.0)),
        ("add", lambda xp, d: d["a"] + d["b"]),
        ("add_scalar", lambda xp, d: d["a"] + 1.5),
        ("subtract", lambda xp, d: d["a"] - d["b"]),
        ("multiply_broadcast", lambda xp, d: d["a"] * d["b"][0]),
        ("divide", lambda xp, d: d["a"] / (xp.abs(d["b"]) + 1.0)),
        ("exp", lambda xp, d: xp.exp(d["a"])),
        ("log1p", lambda xp, d: xp.log1p(xp.abs(d["a"]))),
        ("sqrt", lambda xp, d: xp.sqrt(xp.abs(d["a"]))),
        ("sin", lambda xp, d: xp.sin(d["a"])),
        ("tanh", lambda xp, d: xp.tanh(d["a"])),
        ("clip", lambda xp, d: xp.clip(d["a"], -0.5, 0.5)),
        ("where", lambda xp, d: xp.where(d["a"] > 0, d["a"], d["b"])),
        ("sum", lambda xp, d: xp.sum(d["a"])),
        ("sum_axis", lambda xp, d: xp.sum(d["a"], axis=0)),
        ("mean", lambda xp, d: xp.mean(d["a"], axis=1)),
        ("std", lambda xp, d: xp.std(d["a"], correction=1)),
        ("max", lambda xp, d: xp.max(d["a"], axis=0)),
        ("argmax", lambda xp, d: xp.argmax(d["a"], axis=1)),
        ("cumulative_sum", lambda xp, d: xp.cumulative_sum(d["a"], axis=1)),
        ("matmul", lambda xp, d: d["a"] @ d["b"]),
        ("matmul_vector", lambda xp, d: d["a"] @ d["b"][0]),
        ("matrix_transpose", lambda xp, d: xp.matrix_transpose(d["a"]) @ d["a"]),
        ("tensordot", lambda xp, d: xp.tensordot(d["a"], d["b"], axes=1)),
        ("vecdot", lambda xp, d: xp.vecdot(d["a"], d["b"])),
        ("linalg_norm", lambda xp, d: xp.linalg.vector_norm(d["a"])),
        ("linalg_solve", lambda xp, d: xp.linalg.solve(d["spd"], d["a"])),
        ("linalg_cholesky", lambda xp, d: xp.linalg.cholesky(d["spd"])),
        ("reshape", lambda xp, d: xp.reshape(d["a"], (-1,))),
        ("concat", lambda xp, d: xp.concat([d["a"], d["b"]], axis=0)),
        ("stack", lambda xp, d: xp.stack([d["a"], d["b"]])),
        ("flip", lambda xp, d: xp.flip(d["a"], axis=1)),
        ("sort", lambda xp, d: xp.sort(d["a"], axis=1)),
        ("argsort", lambda xp, d: xp.argsort(d["a"][0])),
        ("unique_values", lambda xp, d: xp.unique_values(xp.round(d["a"]))),
        ("nonzero", lambda xp, d: xp.nonzero(d["a"] > 0)[0]),
        ("take", lambda xp, d: xp.take(d["a"], xp.asarray([2, 0]), axis=0)),
        ("getitem", lambda xp, d: d["a"][1:3, ::2]),
        ("getitem_mask", lambda xp, d: d["a"][d["a"] > 0]),
        ("setitem", setitem),
        ("in_place", in_place),
        ("astype", lambda xp, d: xp.astype(d["a"] * 10, xp.int32)),
        ("isnan_any", lambda xp, d: xp.any(xp.isnan(d["a"]))),
        ("equal_all", lambda xp, d: xp.all(d["a"] == d["a"])),
    ]


QUICK = [name for name, _ in _quick_subset(np.dtype("float64"))]


@pytest.mark.parametrize("name", QUICK)
def test_array_api_quick_subset_agrees_with_numpy(case, name):
    xp, dtype = case
    fn = dict(_quick_subset(dtype))[name]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 4)).astype(dtype)
    b = rng.standard_normal((4, 4)).astype(dtype)
    spd = (a @ a.T + 4 * np.eye(4, dtype=dtype)).astype(dtype)
    data = {"a": a, "b": b, "spd": spd}
    on_device = {k: xp.asarray(v) for k, v in data.items()}
    got = fn(xp, on_device)
    want = fn(xp_cpu, {k: np.array(v) for k, v in data.items()})
    assert isinstance(got, bf.Tensor)
    assert got.device == xp.device
    want = np.asarray(want)
    if name == "ones_default":  # the device's default float, not NumPy's
        want = want.astype(xp.__array_namespace_info__().default_dtypes()["real floating"])
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(np.asarray(got), want, **tol(dtype))


def test_creation_without_a_dtype_uses_the_devices_defaults(no64):
    xp = xp_cpu.namespace(no64.name)
    assert xp.ones(3).dtype == np.float32
    assert xp.zeros((2, 2)).dtype == np.float32
    assert xp.asarray([1.0, 2.0]).dtype == np.float32
    assert xp.asarray([1, 2]).dtype == np.int64
    assert xp.full(2, 1.5).dtype == np.float32
    assert xp.arange(0.0, 1.0, 0.25).dtype == np.float32
    assert xp.linspace(0, 1, 3).dtype == np.float32
    assert xp.eye(2).dtype == np.float32
    assert xp.asarray([1j]).dtype == np.complex64
    # The CPU namespace and devices holding float64 keep the standard's defaults.
    assert xp_cpu.ones(3, device=None).dtype == np.float64


def test_a_float64_result_on_a_device_without_it_is_a_dtype_error(no64):
    xp = xp_cpu.namespace(no64.name)
    x = xp.asarray(np.ones(3, dtype=np.float32))
    with pytest.raises(bf.DTypeError) as e:
        xp.astype(x, xp.float64)
    text = str(e.value)
    assert "float64" in text and "array_api::astype" in text and no64.name in text
    assert isinstance(e.value, TypeError)
    with pytest.raises(bf.DTypeError):
        no64.tensor(np.ones(2))  # float64 data asked onto the device


sklearn = pytest.importorskip("sklearn")

from sklearn.decomposition import PCA  # noqa: E402
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.metrics import r2_score  # noqa: E402
from sklearn.metrics.pairwise import euclidean_distances  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

SKLEARN: list[Any] = [
    pytest.param(lambda d: StandardScaler().fit_transform(d["X"]), id="StandardScaler"),
    pytest.param(lambda d: PCA(n_components=2, svd_solver="full").fit_transform(d["X"]), id="PCA"),
    pytest.param(
        lambda d: Ridge(alpha=1.0, solver="svd").fit(d["X"], d["target"]).predict(d["X"]),
        id="Ridge",
    ),
    pytest.param(
        lambda d: LinearDiscriminantAnalysis().fit(d["X"], d["labels"]).predict(d["X"]),
        id="LDA",
    ),
    pytest.param(lambda d: euclidean_distances(d["X"], d["Y"]), id="euclidean_distances"),
    pytest.param(lambda d: r2_score(d["target"], d["predicted"]), id="r2_score"),
]


@pytest.mark.parametrize("fn", SKLEARN)
def test_sklearn_agrees_with_numpy(case, fn):
    xp, dtype = case
    data = {k: v if k == "labels" else v.astype(dtype) for k, v in sklearn_data().items()}
    on_device = {k: xp.asarray(v) for k, v in data.items()}
    with sklearn.config_context(array_api_dispatch=True):
        got = fn(on_device)
    want = fn(data)
    if isinstance(got, float):
        assert got == pytest.approx(float(want), **{"rel": tol(dtype)["rtol"] * 10})
        return
    assert isinstance(got, bf.Tensor) and got.device == xp.device
    want = np.asarray(want)
    if want.dtype.kind == "f":
        assert got.dtype == dtype, got.dtype
    np.testing.assert_allclose(np.asarray(got), want.astype(got.dtype), **tol(dtype))
