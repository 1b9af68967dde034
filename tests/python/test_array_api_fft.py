"""The ``fft`` extension of ``boxfall.array_api`` (operators ``array_api::fft_<name>``) on the
CPU, on Native and on a Python backend through ``bf.cpu_fallback``: every function against
``numpy.fft``, the standard's dtypes (single precision stays single), ``fftfreq``/``rfftfreq``
created on the namespace's device, and calls counted per operator."""

from __future__ import annotations

import array_checks
import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest


def holds(any_xp, *dtypes) -> None:
    """Skips when ``any_xp``'s device cannot hold one of ``dtypes`` (what its info says)."""
    info = any_xp.__array_namespace_info__()
    have = info.dtypes(device=info.default_device())
    lacking = [d for d in dtypes if np.dtype(d).name not in have]
    if lacking:
        pytest.skip(f"{info.default_device()} holds no {', '.join(map(str, lacking))} yet")


def fft_check(any_xp, got, want, dtype) -> None:
    """``array_checks.check`` at the transforms' tolerance: in single precision (float32,
    complex64) a transform's rounding error grows with its length, 1e-5 allows it."""
    tol = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    array_checks.check(any_xp, got, want, dtype, rtol=tol, atol=tol)


RNG = np.random.default_rng(11)
REAL = RNG.standard_normal((3, 8))
CPLX = REAL + 1j * RNG.standard_normal((3, 8))

ONE_D = ["fft", "ifft", "hfft"]  # complex in
ONE_D_REAL = ["rfft", "ihfft"]  # real in
ONE_D_TO_REAL = {"irfft", "hfft"}  # real out
N_D = ["fftn", "ifftn", "irfftn"]
N_D_REAL = ["rfftn"]


def out_dtype(name: str, in_dtype) -> np.dtype:
    """The standard's result dtype of ``name`` for ``in_dtype``."""
    single = np.dtype(in_dtype) in (np.float32, np.complex64)
    if name in ONE_D_TO_REAL or name == "irfftn":
        return np.dtype(np.float32 if single else np.float64)
    return np.dtype(np.complex64 if single else np.complex128)


@pytest.mark.parametrize("name", [*ONE_D, "irfft"])
@pytest.mark.parametrize("kwargs", [{}, {"n": 6, "axis": 0}, {"n": 12, "norm": "ortho"},
                                    {"axis": -1, "norm": "forward"}])  # fmt: skip
def test_one_dimensional_transforms_of_complex_input_match_numpy(any_xp, name, kwargs):
    holds(any_xp, "complex128")
    got = getattr(xp.fft, name)(any_xp.asarray(CPLX), **kwargs)
    fft_check(any_xp, got, getattr(np.fft, name)(CPLX, **kwargs), out_dtype(name, CPLX.dtype))


@pytest.mark.parametrize("name", ONE_D_REAL)
@pytest.mark.parametrize("kwargs", [{}, {"n": 5, "axis": 0}, {"norm": "ortho"}])
def test_one_dimensional_transforms_of_real_input_match_numpy(any_xp, name, kwargs):
    holds(any_xp, "complex128")
    got = getattr(xp.fft, name)(any_xp.asarray(REAL), **kwargs)
    fft_check(any_xp, got, getattr(np.fft, name)(REAL, **kwargs), out_dtype(name, REAL.dtype))


@pytest.mark.parametrize("name", N_D)
@pytest.mark.parametrize("kwargs", [{}, {"axes": (0,)}, {"s": (4, 6), "axes": (1, 0)},
                                    {"s": [2, 10], "axes": [0, 1], "norm": "forward"}])  # fmt: skip
def test_n_dimensional_transforms_match_numpy(any_xp, name, kwargs):
    holds(any_xp, "complex128")
    got = getattr(xp.fft, name)(any_xp.asarray(CPLX), **kwargs)
    fft_check(any_xp, got, getattr(np.fft, name)(CPLX, **kwargs), out_dtype(name, CPLX.dtype))


@pytest.mark.parametrize("kwargs", [{}, {"s": (2, 6), "axes": (0, 1)}, {"norm": "ortho"}])
def test_rfftn_matches_numpy(any_xp, kwargs):
    holds(any_xp, "complex128")
    fft_check(any_xp, xp.fft.rfftn(any_xp.asarray(REAL), **kwargs), np.fft.rfftn(REAL, **kwargs),
          np.complex128)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("fft", np.complex64), ("ifft", np.complex64), ("fftn", np.complex64),
     ("ifftn", np.complex64), ("irfft", np.complex64), ("irfftn", np.complex64),
     ("hfft", np.complex64), ("rfft", np.float32), ("rfftn", np.float32),
     ("ihfft", np.float32)],
)  # fmt: skip
def test_single_precision_stays_single(any_xp, name, dtype):
    holds(any_xp, "complex64", "float32")
    x = (CPLX if np.dtype(dtype).kind == "c" else REAL).astype(dtype)
    got = getattr(xp.fft, name)(any_xp.asarray(x))
    fft_check(any_xp, got, getattr(np.fft, name)(x.astype(np.result_type(x, np.float64))),
          out_dtype(name, dtype))  # fmt: skip


def test_a_transform_and_its_inverse_give_back_the_input(any_xp):
    holds(any_xp, "complex128")
    x = any_xp.asarray(REAL)
    fft_check(any_xp, xp.fft.irfft(xp.fft.rfft(x), n=8), REAL, np.float64)
    fft_check(any_xp, xp.fft.ifftn(xp.fft.fftn(any_xp.asarray(CPLX))), CPLX, np.complex128)


@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("axes", [None, 0, (1,), [0, 1]])
def test_shifts_match_numpy_and_keep_the_dtype(any_xp, name, axes):
    x = np.arange(15.0, dtype=np.float32).reshape(3, 5)
    got = getattr(xp.fft, name)(any_xp.asarray(x), axes=axes)
    fft_check(any_xp, got, getattr(np.fft, name)(x, axes=axes), np.float32)


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
@pytest.mark.parametrize("n", [1, 6, 7])
def test_frequencies_are_created_on_the_namespace_device(any_xp, name, n):
    fft_check(
        any_xp, getattr(any_xp.fft, name)(n, d=0.5), getattr(np.fft, name)(n, d=0.5), np.float64
    )
    fft_check(
        any_xp, getattr(any_xp.fft, name)(n, dtype=xp.float32), getattr(np.fft, name)(n), np.float32
    )


def test_frequencies_take_a_device_argument(accel):
    got = xp.fft.fftfreq(4, device=accel.device)
    assert isinstance(got, bf.Tensor) and got.device == accel.device
    assert isinstance(xp.namespace(accel.device).fft.rfftfreq(4, device="cpu"), np.ndarray)


def test_frequencies_refuse_a_dtype_that_is_not_real_floating():
    with pytest.raises(ValueError, match="real floating"):
        xp.fft.fftfreq(4, dtype=xp.int64)


def test_fft_of_every_namespace_has_the_same_transforms(any_xp):
    assert any_xp.fft.__name__.endswith("fft")
    for name in xp.fft.__all__:
        if name in ("fftfreq", "rfftfreq"):
            continue
        assert getattr(any_xp.fft, name) is getattr(xp.fft, name)
    if any_xp is xp:
        assert any_xp.fft is xp.fft
    assert sorted(any_xp.fft.__all__) == sorted(
        ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
         "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
    )  # fmt: skip


def test_fft_calls_are_counted_as_their_operators(accel):
    bf.metrics.reset()
    xp.fft.rfft(accel.tensor(REAL))
    xp.fft.fftshift(accel.tensor(REAL), axes=0)
    xp.fft.fftfreq(3, device=accel.device)
    counts = bf.metrics.counters()
    assert counts["array_api::fft_rfft"] == 1
    assert counts["array_api::fft_fftshift"] == 1
    assert counts["array_api::fft_fftfreq"] == 1


def test_s_and_axes_must_be_sequences():
    with pytest.raises(TypeError, match="sequences"):
        xp.fft.fftn(CPLX, axes=0)
