"""The standard's ``fft`` extension (``xp.fft``, operators ``array_api::fft_<name>``) on the CPU,
Native and a Python backend, against ``numpy.fft``: values, dtypes (single precision kept),
the keyword arguments, and ``fftfreq``/``rfftfreq`` on the namespace's device."""

from __future__ import annotations

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest


@pytest.fixture(scope="module")
def accel(backend_factory):
    """A Python backend (DeviceBuffer payloads, three copy hooks) with the CPU fallback."""
    backend = backend_factory("ArrayApiAccel")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        yield backend


@pytest.fixture(params=["cpu", "Native", "accel"])
def ns(request, accel):
    return xp.namespace(accel.device if request.param == "accel" else request.param)


def holds_complex(ns) -> bool:
    try:
        ns.asarray(np.zeros(1, dtype=np.complex64))
    except bf.FallbackError as e:
        return "cannot hold dtype complex" not in str(e)
    return True


def check(ns, got, want) -> None:
    device = ns.__array_namespace_info__().default_device()
    assert (got.device if isinstance(got, bf.Tensor) else "cpu") == device
    want = np.asarray(want)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


RNG = np.random.default_rng(5)
REAL = RNG.standard_normal((4, 6))
COMPLEX = REAL + 1j * RNG.standard_normal((4, 6))

ONE_D = [
    ("fft", COMPLEX, {}),
    ("ifft", COMPLEX, {"n": 5, "axis": 0, "norm": "ortho"}),
    ("rfft", REAL, {"n": 8}),
    ("irfft", COMPLEX, {"axis": 0, "norm": "forward"}),
    ("hfft", COMPLEX, {"n": 7}),
    ("ihfft", REAL, {"axis": -1}),
    ("fftn", COMPLEX, {"s": (3, 4), "axes": (0, 1)}),
    ("ifftn", COMPLEX, {"norm": "ortho"}),
    ("rfftn", REAL, {"axes": [1]}),
    ("irfftn", COMPLEX, {"s": [4, 6], "axes": (0, 1)}),
]


@pytest.mark.parametrize(("name", "x", "kwargs"), ONE_D, ids=[c[0] for c in ONE_D])
@pytest.mark.parametrize("single", [False, True], ids=["double", "single"])
def test_transforms_match_numpy(ns, name, x, kwargs, single):
    if not holds_complex(ns):
        pytest.skip("this device holds no complex dtype (Native before its complex dtypes)")
    if single:
        x = x.astype(np.complex64 if x.dtype.kind == "c" else np.float32)
    bf.metrics.reset()
    got = getattr(ns.fft, name)(ns.asarray(x), **kwargs)
    check(ns, got, getattr(np.fft, name)(x, **kwargs))
    if ns is not xp:
        assert bf.metrics.counter_value(f"array_api::fft_{name}") == 1


def test_s_without_axes_transforms_the_last_len_s_axes(ns):
    if not holds_complex(ns):
        pytest.skip("this device holds no complex dtype (Native before its complex dtypes)")
    got = ns.fft.fftn(ns.asarray(COMPLEX), s=(3,))
    check(ns, got, np.fft.fftn(COMPLEX, s=(3,), axes=(-1,)))


@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
def test_shifts_match_numpy(ns, name):
    x = ns.asarray(REAL)
    check(ns, getattr(ns.fft, name)(x), getattr(np.fft, name)(REAL))
    check(ns, getattr(ns.fft, name)(x, axes=[1]), getattr(np.fft, name)(REAL, axes=(1,)))


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
def test_frequencies_are_made_on_the_namespaces_device(ns, name):
    check(ns, getattr(ns.fft, name)(7), getattr(np.fft, name)(7))
    got = getattr(ns.fft, name)(8, d=0.5, dtype=xp.float32)
    check(ns, got, getattr(np.fft, name)(8, d=0.5).astype(np.float32))
    assert isinstance(getattr(ns.fft, name)(4, device="cpu"), np.ndarray)


def test_fft_is_one_module_of_the_same_functions_in_every_namespace(accel):
    other = xp.namespace(accel.device).fft
    assert other.fft is xp.fft.fft and other.fftshift is xp.fft.fftshift
    assert other.fftfreq is not xp.fft.fftfreq  # it defaults to the namespace's device
    assert sorted(other.__all__) == sorted(xp.fft.__all__)
