"""A device without the 64-bit dtypes (a TPU's usual state through JAX: no float64, int64,
uint64 or complex128; float32 and int32 the defaults), as the backend guide says: every function
of the array API standard works on it, the results whose dtype the standard lets the library
choose come in the device's defaults, ``register_backend(narrow=True)`` gives JAX's rule for
the 64-bit dtypes asked for or made by a CPU kernel, and extension dtypes NumPy knows
(``ml_dtypes.bfloat16``) can be declared.

The devices are plain Python backends (a NumPy array in a holder, ``bf.cpu_fallback`` for every
operator) whose ``to_cpu`` counts its calls, so that a refusal "before anything moves" is seen.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import boxfall as bf
import boxfall.array_api as xpa
import numpy as np
import pytest
from boxfall.testing import HostBuffer
from sample_data import ALL_DTYPES, sklearn_data

WIDE = ("int64", "uint64", "float64", "complex128")
HELD = [d for d in ALL_DTYPES if d not in WIDE]


class Device:
    """A backend without the 64-bit dtypes, its namespace and a count of its ``to_cpu``."""

    def __init__(self, name: str, narrow: bool, extra: tuple[Any, ...] = ()) -> None:
        self.reads = 0

        def to_cpu(b: HostBuffer) -> np.ndarray:
            self.reads += 1
            return b.data.copy()

        def copy_from_cpu(b: HostBuffer, a: np.ndarray) -> None:
            b.data = np.array(a, copy=True)

        self.backend = bf.register_backend(
            name,
            to_cpu=to_cpu,
            from_cpu=HostBuffer,
            copy_from_cpu=copy_from_cpu,
            dtypes=[*HELD, *extra],
            narrow=narrow,
            replace=True,
        )
        self.lib = bf.Library("_", "IMPL")
        self.lib.fallback(bf.cpu_fallback, name)
        self.xp = xpa.namespace(name)


def _ml_dtypes() -> Any:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


_DEVICES: dict[bool, Device] = {}


def _device(narrow: bool) -> Device:
    """The device that narrows, or the one that does not (which declares bfloat16 too where
    ml_dtypes is installed): two backends for the whole module, as backend keys are few."""
    if narrow not in _DEVICES:
        ml = _ml_dtypes()
        extra = (ml.bfloat16,) if ml is not None and not narrow else ()
        name = "No64Narrow" if narrow else "No64Strict"
        _DEVICES[narrow] = Device(name, narrow=narrow, extra=extra)
    return _DEVICES[narrow]


@pytest.fixture(scope="module", autouse=True)
def _fallbacks_closed_after_the_module():
    yield
    for d in _DEVICES.values():
        d.lib.close()
    _DEVICES.clear()


@pytest.fixture(scope="module", params=[False, True], ids=["strict", "narrow"])
def dev(request):
    return _device(request.param)


@pytest.fixture(scope="module")
def strict():
    return _device(False)


@pytest.fixture(scope="module")
def narrow():
    return _device(True)


def host(t: Any) -> np.ndarray:
    return np.asarray(t.numpy() if isinstance(t, bf.Tensor) else t)


def test_the_namespace_lists_only_held_dtypes_and_32_bit_defaults(dev):
    info = dev.xp.__array_namespace_info__()
    assert sorted(info.dtypes()) == sorted(HELD)
    assert info.default_dtypes() == {
        "real floating": np.float32,
        "complex floating": np.complex64,
        "integral": np.int32,
        "indexing": np.int32,
    }
    assert sorted(set(dev.backend.dtypes) - {"bfloat16"}) == sorted(HELD)
    assert dev.backend.narrow is (dev.backend.name == "No64Narrow")
    # The namespace's dtype objects stay dtype objects, held or not.
    assert dev.xp.int64 == np.dtype("int64") and dev.xp.float64 == np.dtype("float64")


X = sklearn_data()["X"].astype(np.float32)
LABELS = sklearn_data()["labels"].astype(np.int32)

CHOSEN = [
    ("argmax", lambda xp, x, i: xp.argmax(x, axis=0), lambda x, i: np.argmax(x, axis=0)),
    ("argmin", lambda xp, x, i: xp.argmin(x), lambda x, i: np.argmin(x)),
    ("argsort", lambda xp, x, i: xp.argsort(x, axis=0), lambda x, i: np.argsort(x, 0, "stable")),
    ("nonzero", lambda xp, x, i: xp.nonzero(i)[0], lambda x, i: np.nonzero(i)[0]),
    (
        "searchsorted",
        lambda xp, x, i: xp.searchsorted(xp.sort(x[:, 0]), x[:5, 1]),
        lambda x, i: np.searchsorted(np.sort(x[:, 0]), x[:5, 1]),
    ),
    ("unique_all.indices", lambda xp, x, i: xp.unique_all(i).indices, None),
    ("unique_all.counts", lambda xp, x, i: xp.unique_all(i).counts, None),
    ("unique_counts", lambda xp, x, i: xp.unique_counts(i).counts, None),
    ("unique_inverse", lambda xp, x, i: xp.unique_inverse(i).inverse_indices, None),
    ("count_nonzero", lambda xp, x, i: xp.count_nonzero(i), lambda x, i: np.count_nonzero(i)),
    ("sum.int32", lambda xp, x, i: xp.sum(i), lambda x, i: np.sum(i)),
    ("sum.bool", lambda xp, x, i: xp.sum(i > 0), lambda x, i: np.sum(i > 0)),
    ("prod.int32", lambda xp, x, i: xp.prod(i[:5] + 1), lambda x, i: np.prod(i[:5] + 1)),
    ("cumulative_sum", lambda xp, x, i: xp.cumulative_sum(i), lambda x, i: np.cumsum(i)),
    ("cumulative_prod", lambda xp, x, i: xp.cumulative_prod(i[:6] + 1), None),
    (
        "matrix_rank",
        lambda xp, x, i: xp.linalg.matrix_rank(x[:4]),
        lambda x, i: np.linalg.matrix_rank(x[:4]),
    ),
]


@pytest.mark.parametrize("name,run,want", CHOSEN, ids=[c[0] for c in CHOSEN])
def test_a_result_of_the_librarys_dtype_comes_in_the_devices_default(dev, name, run, want):
    x, i = dev.xp.asarray(X), dev.xp.asarray(LABELS)
    bf.metrics.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", bf.NarrowingWarning)  # none of this is narrowing
        got = run(dev.xp, x, i)
    assert isinstance(got, bf.Tensor) and got.device == f"{dev.backend.name}:0"
    assert got.dtype == np.int32, (name, got.dtype)
    expected = run(np, X, LABELS) if want is None else want(X, LABELS)
    np.testing.assert_array_equal(host(got), np.asarray(expected))
    assert all(s["narrowed"] == 0 for s in bf.metrics.to_dict().values())


def test_an_unsigned_sum_is_the_unsigned_dtype_of_the_default_integers_width(dev):
    u = dev.xp.asarray(np.array([1, 2, 250], dtype=np.uint8))
    got = dev.xp.sum(u)
    assert got.dtype == np.uint32 and int(got) == 253


@pytest.mark.parametrize("fn", ["fftfreq", "rfftfreq"])
def test_fft_frequencies_come_in_the_devices_default_float(dev, fn):
    got = getattr(dev.xp.fft, fn)(8, d=0.5)
    assert got.dtype == np.float32 and got.device == f"{dev.backend.name}:0"
    np.testing.assert_allclose(host(got), getattr(np.fft, fn)(8, d=0.5), rtol=1e-6)
    # The same through the CPU namespace's function given the device.
    got = getattr(xpa.fft, fn)(8, device=f"{dev.backend.name}:0")
    assert got.dtype == np.float32


def test_without_narrow_a_request_for_a_dtype_the_device_lacks_is_a_dtype_error(strict):
    xp = strict.xp
    with pytest.raises(bf.DTypeError, match=r"int64.*zeros|zeros.*int64"):
        xp.zeros(3, dtype=xp.int64)
    with pytest.raises(bf.DTypeError, match="float64"):
        xp.asarray(np.ones(2))  # a NumPy float64 array keeps its dtype, as the standard says
    with pytest.raises(bf.DTypeError, match=r"int64"):
        xp.asarray([1, 2], dtype=xp.int64)


def test_astype_and_sum_refuse_a_dtype_the_device_lacks_before_anything_moves(strict):
    xp = strict.xp
    x = xp.asarray(X)
    i = xp.asarray(LABELS)
    before = strict.reads
    with pytest.raises(bf.DTypeError, match=r"float64.*astype|astype.*float64") as e:
        xp.astype(x, xp.float64)
    assert "No64Strict" in str(e.value)
    with pytest.raises(bf.DTypeError, match=r"int64.*sum|sum.*int64"):
        xp.sum(i, dtype=xp.int64)
    with pytest.raises(bf.DTypeError, match="uint64"):
        xp.cumulative_sum(i, dtype=xp.uint64)
    assert strict.reads == before  # no to_cpu was called
    # To the CPU, where float64 exists, astype works.
    assert xp.astype(x, xp.float64, device="cpu").dtype == np.float64


def test_narrow_makes_a_requested_64_bit_dtype_32_bit_warned_once_and_counted(narrow):
    xp = narrow.xp
    bf.metrics.reset()
    with pytest.warns(bf.NarrowingWarning, match=r"'array_api::zeros'.*int64.*int32"):
        z = xp.zeros(3, dtype=xp.int64)
    assert z.dtype == np.int32 and host(z).tolist() == [0, 0, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", bf.NarrowingWarning)  # once per operator
        assert xp.zeros(2, dtype=xp.int64).dtype == np.int32
    assert bf.metrics.op_stats("array_api::zeros")["narrowed"] == 2
    backend = bf.metrics.op_stats("array_api::zeros")["backends"]["No64Narrow"]
    assert backend["narrowed"] == 2
    assert "narrowed" in bf.metrics.report() and "array_api::zeros: 2 results" in (
        bf.metrics.report()
    )


def test_narrow_applies_to_astype_asarray_sum_and_a_cpu_kernels_result(narrow):
    xp = narrow.xp
    x, i = xp.asarray(X), xp.asarray(LABELS)
    bf.metrics.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bf.NarrowingWarning)
        a = xp.astype(x, xp.float64)
        b = xp.asarray(np.ones(2))  # float64 host data
        c = xp.asarray([1, 2], dtype=xp.int64)
        d = xp.sum(i, dtype=xp.int64)
        e = xp.asarray(np.ones(2, dtype=np.complex128))
        f = xp.divide(i, i + 1)  # NumPy's int32 / int32 is float64: made by the CPU kernel
        u = xp.asarray(np.array([7], dtype=np.uint64))
    assert a.dtype == np.float32
    np.testing.assert_allclose(host(a), X)
    assert (b.dtype, c.dtype, d.dtype, e.dtype) == (np.float32, np.int32, np.int32, np.complex64)
    assert f.dtype == np.float32 and u.dtype == np.uint32
    assert int(d) == int(LABELS.sum())
    for op in ("astype", "asarray", "sum", "divide"):
        assert bf.metrics.op_stats(f"array_api::{op}")["narrowed"] >= 1, op
    with pytest.warns(bf.NarrowingWarning, match="asked for values of dtype int64"):
        assert bf.get_backend("No64Narrow").dtype_for("int64") == "int32"
    assert bf.get_backend("No64Narrow").dtype_for(np.float32) == "float32"
    with pytest.raises(bf.DTypeError, match="No64Strict"):
        bf.get_backend("No64Strict").dtype_for("float64")


def test_a_narrowing_warning_made_an_error_fails_the_call(narrow):
    with warnings.catch_warnings():
        warnings.simplefilter("error", bf.NarrowingWarning)
        bf.metrics.reset()  # forget the warnings given
        with pytest.raises(bf.NarrowingWarning):
            narrow.xp.ones(2, dtype=narrow.xp.float64)


def test_an_unknown_operator_tag_is_refused():
    with bf.Library("no64_tags", "DEF") as lib:
        with pytest.raises(bf.SchemaError, match="no_such_tag"):
            lib.define("f(Tensor x) -> Tensor", tags=["no_such_tag"])
        lib.define("g(Tensor x) -> Tensor", tags=["default_dtypes"])
        assert bf.ops.no64_tags.g.default.tags == ["default_dtypes"]
    assert xpa._registry.operator("argmax").tags == ["default_dtypes"]
    assert xpa._registry.operator("astype").tags == []


# -- Extension dtypes -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    return _device(False), np.dtype(ml_dtypes.bfloat16)


def test_bfloat16_can_be_declared_and_is_listed_by_the_backend_only(bf16):
    d, b16 = bf16
    assert d.backend.dtypes[-1] == "bfloat16"  # after the standard's
    assert sorted(d.backend.dtypes[:-1]) == sorted(HELD)
    assert "bfloat16" not in d.xp.__array_namespace_info__().dtypes()


def test_bfloat16_tensors_work_through_the_fallback_with_one_promotion_rule(bf16):
    d, b16 = bf16
    xp = d.xp
    a = np.array([1.0, 2.5, -3.0], dtype=b16)
    t = xp.asarray(a)
    assert t.dtype == b16 and t.payload.dtype == b16
    assert (t + t).dtype == b16  # bfloat16 with bfloat16: bfloat16
    assert (t * 2.0).dtype == b16  # a Python float is weak
    wide = t + xp.asarray(np.ones(3, dtype=np.float32))  # with float32: float32, as JAX
    assert wide.dtype == np.float32
    np.testing.assert_array_equal(host(wide), [2.0, 3.5, -2.0])
    assert xp.astype(xp.asarray(X[:2]), b16).dtype == b16
    assert xp.argmax(t).dtype == np.int32 and int(xp.argmax(t)) == 1
    assert xp.sum(t).dtype == b16 and float(xp.sum(t)) == 0.5


def test_a_dtype_numpy_cannot_hold_as_numbers_is_refused():
    with pytest.raises(TypeError, match="U4"):
        bf.register_backend(
            "No64Refused",
            to_cpu=np.asarray,
            from_cpu=HostBuffer,
            copy_from_cpu=lambda b, a: None,
            dtypes=["float32", "U4"],
        )
    with pytest.raises(bf.UnknownKeyError):
        bf.get_backend("No64Refused")


# -- Every function of the standard -----------------------------------------------------------

_ELEMENTWISE_INT = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert"}
_ELEMENTWISE_INT |= {"bitwise_left_shift", "bitwise_right_shift"}


def _calls(xp: Any, x: Any, sq: Any, i: Any, b: Any, c: Any) -> dict[str, Any]:
    """A call of each function of the standard that is not element-wise, by name, with inputs
    of held dtypes: ``x`` float32 (40, 4), ``sq`` a float32 symmetric positive definite
    (4, 4), ``i`` int32 labels, ``b`` bool, ``c`` complex64."""
    v = x[:, 0]
    return {
        "all": lambda: xp.all(b),
        "any": lambda: xp.any(b),
        "arange": lambda: xp.arange(5),
        "argmax": lambda: xp.argmax(x, axis=1),
        "argmin": lambda: xp.argmin(x),
        "argsort": lambda: xp.argsort(v),
        "asarray": lambda: xp.asarray([[1, 2], [3, 4]]),
        "astype": lambda: xp.astype(i, xp.float32),
        "broadcast_arrays": lambda: xp.broadcast_arrays(v, x[:1, :1]),
        "broadcast_to": lambda: xp.broadcast_to(v, (2, 40)),
        "can_cast": lambda: xp.can_cast(xp.int32, xp.float32),
        "clip": lambda: xp.clip(x, 0.0, 1.0),
        "concat": lambda: xp.concat([x, x]),
        "count_nonzero": lambda: xp.count_nonzero(i),
        "cumulative_prod": lambda: xp.cumulative_prod(i[:5] + 1),
        "cumulative_sum": lambda: xp.cumulative_sum(v),
        "diag": lambda: xp.diag(v[:3]),
        "diff": lambda: xp.diff(i),
        "empty": lambda: xp.empty(3),
        "empty_like": lambda: xp.empty_like(i),
        "expand_dims": lambda: xp.expand_dims(v, axis=0),
        "eye": lambda: xp.eye(3),
        "finfo": lambda: xp.finfo(xp.float32),
        "flip": lambda: xp.flip(x),
        "from_dlpack": lambda: xp.from_dlpack(np.arange(3, dtype=np.int32)),
        "full": lambda: xp.full(3, 7),
        "full_like": lambda: xp.full_like(x, 0.5),
        "iinfo": lambda: xp.iinfo(xp.int32),
        "isdtype": lambda: xp.isdtype(xp.int32, "integral"),
        "linspace": lambda: xp.linspace(0, 1, 5),
        "logspace": lambda: xp.logspace(0, 1, 5),
        "matmul": lambda: xp.matmul(x, sq),
        "matrix_transpose": lambda: xp.matrix_transpose(x),
        "max": lambda: xp.max(i),
        "mean": lambda: xp.mean(x, axis=0),
        "meshgrid": lambda: xp.meshgrid(v[:3], v[:2]),
        "min": lambda: xp.min(x),
        "moveaxis": lambda: xp.moveaxis(x, 0, 1),
        "nonzero": lambda: xp.nonzero(b),
        "ones": lambda: xp.ones(3),
        "ones_like": lambda: xp.ones_like(i),
        "permute_dims": lambda: xp.permute_dims(x, (1, 0)),
        "prod": lambda: xp.prod(i[:4] + 1),
        "repeat": lambda: xp.repeat(i[:3], 2),
        "reshape": lambda: xp.reshape(x, (4, 40)),
        "result_type": lambda: xp.result_type(xp.int32, xp.float32),
        "roll": lambda: xp.roll(i, 3),
        "searchsorted": lambda: xp.searchsorted(xp.sort(v), v[:4]),
        "sort": lambda: xp.sort(v),
        "squeeze": lambda: xp.squeeze(x[:1], axis=0),
        "stack": lambda: xp.stack([v, v]),
        "std": lambda: xp.std(x, axis=0),
        "sum": lambda: xp.sum(b),
        "take": lambda: xp.take(v, i[:5] + 1),
        "take_along_axis": lambda: xp.take_along_axis(x, xp.argsort(x, axis=0), axis=0),
        "tensordot": lambda: xp.tensordot(x, sq, axes=1),
        "tile": lambda: xp.tile(i[:2], (2,)),
        "tril": lambda: xp.tril(sq),
        "triu": lambda: xp.triu(sq),
        "unique_all": lambda: xp.unique_all(i),
        "unique_counts": lambda: xp.unique_counts(i),
        "unique_inverse": lambda: xp.unique_inverse(i),
        "unique_values": lambda: xp.unique_values(i),
        "unstack": lambda: xp.unstack(x[:2]),
        "var": lambda: xp.var(x),
        "vecdot": lambda: xp.vecdot(x, x),
        "where": lambda: xp.where(b, i, 0),
        "zeros": lambda: xp.zeros((2, 2)),
        "zeros_like": lambda: xp.zeros_like(x),
        # linalg
        "linalg.cholesky": lambda: xp.linalg.cholesky(sq),
        "linalg.cross": lambda: xp.linalg.cross(x[:, :3], x[:, 1:]),
        "linalg.det": lambda: xp.linalg.det(sq),
        "linalg.diagonal": lambda: xp.linalg.diagonal(sq),
        "linalg.eigh": lambda: xp.linalg.eigh(sq),
        "linalg.eigvalsh": lambda: xp.linalg.eigvalsh(sq),
        "linalg.inv": lambda: xp.linalg.inv(sq),
        "linalg.matmul": lambda: xp.linalg.matmul(sq, sq),
        "linalg.matrix_norm": lambda: xp.linalg.matrix_norm(sq),
        "linalg.matrix_power": lambda: xp.linalg.matrix_power(sq, 3),
        "linalg.matrix_rank": lambda: xp.linalg.matrix_rank(x),
        "linalg.matrix_transpose": lambda: xp.linalg.matrix_transpose(x),
        "linalg.outer": lambda: xp.linalg.outer(v[:3], v[:2]),
        "linalg.pinv": lambda: xp.linalg.pinv(x),
        "linalg.qr": lambda: xp.linalg.qr(x),
        "linalg.slogdet": lambda: xp.linalg.slogdet(sq),
        "linalg.solve": lambda: xp.linalg.solve(sq, x[:4]),
        "linalg.svd": lambda: xp.linalg.svd(x),
        "linalg.svdvals": lambda: xp.linalg.svdvals(x),
        "linalg.tensordot": lambda: xp.linalg.tensordot(x, sq, axes=1),
        "linalg.trace": lambda: xp.linalg.trace(sq),
        "linalg.vecdot": lambda: xp.linalg.vecdot(x, x),
        "linalg.vector_norm": lambda: xp.linalg.vector_norm(x),
        # fft
        "fft.fft": lambda: xp.fft.fft(c),
        "fft.fftfreq": lambda: xp.fft.fftfreq(6),
        "fft.fftn": lambda: xp.fft.fftn(c),
        "fft.fftshift": lambda: xp.fft.fftshift(v),
        "fft.hfft": lambda: xp.fft.hfft(c),
        "fft.ifft": lambda: xp.fft.ifft(c),
        "fft.ifftn": lambda: xp.fft.ifftn(c),
        "fft.ifftshift": lambda: xp.fft.ifftshift(v),
        "fft.ihfft": lambda: xp.fft.ihfft(v),
        "fft.irfft": lambda: xp.fft.irfft(c),
        "fft.irfftn": lambda: xp.fft.irfftn(c),
        "fft.rfft": lambda: xp.fft.rfft(v),
        "fft.rfftfreq": lambda: xp.fft.rfftfreq(6),
        "fft.rfftn": lambda: xp.fft.rfftn(x),
    }


def _functions(xp: Any) -> list[str]:
    """Every function of the namespace and its extensions, by name (``linalg.svd``)."""
    skip = {"namespace", "__array_namespace_info__", "fft", "linalg"}
    names = [
        n
        for n in xpa.__all__
        if n not in skip
        and callable(getattr(xp, n))
        and not isinstance(getattr(xp, n), type)
        and not isinstance(getattr(xp, n), np.dtype)
    ]
    for ext in ("linalg", "fft"):
        mod = getattr(xp, ext)
        names += [f"{ext}.{n}" for n in mod.__all__ if not isinstance(getattr(mod, n), type)]
    return names


def test_every_function_of_the_standard_runs_on_held_dtypes(dev):
    """No function given inputs of dtypes the device holds raises ``bf.DTypeError`` (or
    anything else), and none returns a tensor of a dtype the device lacks."""
    from boxfall.array_api import _elementwise_functions as ew

    xp = dev.xp
    data = sklearn_data()
    x = xp.asarray(data["X"].astype(np.float32))
    a = data["X"][:4].T @ data["X"][:4] + 4 * np.eye(4)
    sq = xp.asarray(a.astype(np.float32))
    i = xp.asarray(data["labels"].astype(np.int32) * 3 + 1)
    b = xp.asarray(data["labels"].astype(bool))
    c = xp.asarray((data["Y"][:, 0] + 1j * data["Y"][:, 1]).astype(np.complex64))
    # In (0.1, 0.9): inside every element-wise function's domain (acosh's: plus 1).
    small = xp.asarray((np.abs(np.sin(data["X"][:6, :2])) * 0.8 + 0.1).astype(np.float32))
    calls = _calls(xp, x, sq, i, b, c)
    held = {np.dtype(d) for d in HELD}
    failures, unknown = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bf.NarrowingWarning)
        for name in _functions(xp):
            if name in ew.UNARY or name in ew.BINARY:
                arg = i if name in _ELEMENTWISE_INT else b if name.startswith("logical") else small
                if name == "acosh":
                    arg = small + 1.0
                args = (arg,) if name in ew.UNARY else (arg, arg)
                call = functools.partial(getattr(xp, name), *args)
            elif name in calls:
                call = calls[name]
            else:
                unknown.append(name)
                continue
            try:
                out = call()
            except Exception as e:  # noqa: BLE001  (every failure is reported)
                failures.append(f"{name}: {type(e).__name__}: {e}")
                continue
            outs = out if isinstance(out, (tuple, list)) else [out]
            for o in outs:
                if isinstance(o, bf.Tensor) and o.dtype not in held:
                    failures.append(f"{name}: a result of dtype {o.dtype}")
    assert not unknown, f"functions the walk does not call: {unknown}"
    assert not failures, "\n".join(failures)
    assert len(_functions(xp)) > 150


# -- scikit-learn, as the issue met it -----------------------------------------------------------


def _estimators() -> list[Any]:
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    return [
        ("StandardScaler", lambda d: StandardScaler().fit_transform(d["X"])),
        ("MinMaxScaler", lambda d: MinMaxScaler().fit_transform(d["X"])),
        ("LDA", lambda d: LinearDiscriminantAnalysis().fit(d["X"], d["y"]).predict(d["X"])),
    ]


@pytest.mark.parametrize("which", ["StandardScaler", "MinMaxScaler", "LDA"])
def test_scikit_learn_estimators_run_in_float32_on_a_narrowing_device(narrow, which):
    """StandardScaler asks ``xp.zeros(..., dtype=xp.int64)`` and LDA ``unique_counts``: on a
    device that narrows, both agree with NumPy in float32."""
    import sklearn

    run = dict(_estimators())[which]
    data = sklearn_data()
    host_data = {"X": data["X"].astype(np.float32), "y": data["labels"].astype(np.int32)}
    on_device = {k: narrow.xp.asarray(v) for k, v in host_data.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bf.NarrowingWarning)
        with sklearn.config_context(array_api_dispatch=True):
            got = run(on_device)
    want = run(host_data)
    assert isinstance(got, bf.Tensor) and got.device == "No64Narrow:0"
    assert got.dtype == (np.float32 if want.dtype == np.float32 else np.int32)
    np.testing.assert_allclose(host(got), want, rtol=1e-4, atol=1e-5)


def test_a_backend_registered_again_with_fewer_dtypes_is_answered_afresh():
    """What a device holds is kept per device by the namespace functions (asked at every call):
    registering its backend again with other ``dtypes=`` must change the answers at once."""

    reads = []

    def to_cpu(b: HostBuffer) -> np.ndarray:
        reads.append(b)
        return b.data.copy()

    def register(dtypes: list[str] | None) -> Any:
        return bf.register_backend(
            "No64Again",
            to_cpu=to_cpu,
            from_cpu=HostBuffer,
            copy_from_cpu=lambda b, a: setattr(b, "data", np.array(a, copy=True)),
            dtypes=dtypes,
            replace=True,
        )

    register(None)
    lib = bf.Library("_", "IMPL")
    try:
        lib.fallback(bf.cpu_fallback, "No64Again")
        xp = xpa.namespace("No64Again")
        assert xp.arange(3).dtype == np.int64
        assert xp.ones(2, dtype=xp.float64).dtype == np.float64
        assert xp.astype(xp.ones(2, dtype=xp.float32), xp.float64).dtype == np.float64
        register(HELD)
        assert xp.arange(3).dtype == np.int32
        with pytest.raises(bf.DTypeError, match="float64"):
            xp.ones(2, dtype=xp.float64)
        x = xp.ones(2, dtype=xp.float32)
        reads.clear()
        with pytest.raises(bf.DTypeError, match="float64"):
            xp.astype(x, xp.float64)
        assert reads == [], "refused before the values moved"
    finally:
        lib.close()
