"""The array API cases that ``boxfall.jax`` is checked with against NumPy: each a function of a
namespace and a dict of its arrays, run once on ``bj.namespace()`` and once on
``boxfall.array_api`` (NumPy's kernels), grouped by the standard's chapters.

The same table serves the tests on JAX's CPU (test_jax_backend.py, in CI) and a run on a TPU
(``python tests/python/test_jax_backend.py`` there prints how many cases agree).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Case = Callable[[Any, dict[str, Any]], Any]


def data(x64: bool) -> dict[str, np.ndarray]:
    """Small arrays of the device's default dtypes (float32/int32 without x64)."""
    f = np.float64 if x64 else np.float32
    i = np.int64 if x64 else np.int32
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3)).astype(f)
    a = rng.standard_normal((3, 3)).astype(f)
    return {
        "x": x,
        "y": rng.standard_normal((4, 3)).astype(f),
        "p": (np.abs(x) + 0.5).astype(f),  # positive: logs, roots
        "u": rng.uniform(-0.9, 0.9, (4, 3)).astype(f),  # inside (-1, 1): asin, atanh
        "v": rng.standard_normal(5).astype(f),
        "w": rng.standard_normal(5).astype(f),
        "m": (a @ a.T + 3 * np.eye(3)).astype(f),  # symmetric positive definite
        "r": rng.standard_normal((3, 2)).astype(f),
        "i": np.array([3, -1, 4, 1, -5, 9], dtype=i),
        "j": np.array([2, 7, 1, 8, 2, 8], dtype=i),
        "b": np.array([True, False, True, True, False, False]),
        "s": np.sort(rng.standard_normal(5)).astype(f),
        "k": np.array([0, 2, 1], dtype=i),
        "c": (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(
            np.complex128 if x64 else np.complex64
        ),
    }


def _round_trip_qr(xp: Any, d: dict[str, Any], mode: str = "reduced") -> Any:
    q, r = xp.linalg.qr(d["x"], mode=mode)
    return q @ r


def _round_trip_svd(xp: Any, d: dict[str, Any]) -> Any:
    u, s, vh = xp.linalg.svd(d["x"], full_matrices=False)
    return (u * s) @ vh


def _round_trip_eigh(xp: Any, d: dict[str, Any]) -> Any:
    vals, vecs = xp.linalg.eigh(d["m"])
    return (vecs * vals) @ xp.matrix_transpose(vecs)


def _in_place(op: str) -> Case:
    def case(xp: Any, d: dict[str, Any]) -> Any:
        z = d["x"] * 1.0  # a kernel's result: its values on the device
        if op == "+=":
            z += d["y"]
        elif op == "-=":
            z -= 2.0
        elif op == "*=":
            z *= d["y"]
        else:
            z /= 4.0
        return z

    return case


def _updated(x: Any, op: str, value: Any) -> Any:
    """``x`` (copied: a kernel's result) updated in place by ``op`` (``"//="``)."""
    z = x * 1
    if op == "//=":
        z //= value
    elif op == "%=":
        z %= value
    else:
        z <<= value
    return z


def _setitem(xp: Any, d: dict[str, Any]) -> Any:
    z = d["x"] * 1.0
    z[1:3, 0] = -7.0
    return z


def _view_write(xp: Any, d: dict[str, Any]) -> Any:
    z = d["x"] * 1.0
    v = z[:, 1]
    v += 100.0
    return z


CASES: dict[str, dict[str, Case]] = {
    "creation": {
        "zeros": lambda xp, d: xp.zeros((2, 3)),
        "ones_int": lambda xp, d: xp.ones(4, dtype=d["i"].dtype),
        "full": lambda xp, d: xp.full((2, 2), 1.5),
        "full_int": lambda xp, d: xp.full(3, 7),
        "arange": lambda xp, d: xp.arange(5),
        "arange_step": lambda xp, d: xp.arange(2, 11, 3),
        "eye": lambda xp, d: xp.eye(3, 4, k=1),
        "linspace": lambda xp, d: xp.linspace(0.0, 1.0, 5),
        "zeros_like": lambda xp, d: xp.zeros_like(d["x"]),
        "full_like": lambda xp, d: xp.full_like(d["i"], 2),
        "tril": lambda xp, d: xp.tril(d["m"]),
        "meshgrid": lambda xp, d: xp.meshgrid(d["v"], d["s"])[0],
    },
    "elementwise": {
        "add": lambda xp, d: xp.add(d["x"], d["y"]),
        "subtract": lambda xp, d: d["x"] - d["y"],
        "multiply_scalar": lambda xp, d: d["x"] * 3.0,
        "divide": lambda xp, d: d["x"] / d["p"],
        "rdivide_scalar": lambda xp, d: 1.0 / d["p"],
        "pow": lambda xp, d: xp.pow(d["p"], 1.5),
        "maximum": lambda xp, d: xp.maximum(d["x"], d["y"]),
        "minimum_broadcast": lambda xp, d: xp.minimum(d["x"], d["v"][:3]),
        "exp": lambda xp, d: xp.exp(d["x"]),
        "log": lambda xp, d: xp.log(d["p"]),
        "log1p": lambda xp, d: xp.log1p(d["p"]),
        "sqrt": lambda xp, d: xp.sqrt(d["p"]),
        "sin": lambda xp, d: xp.sin(d["x"]),
        "tanh": lambda xp, d: xp.tanh(d["x"]),
        "asin": lambda xp, d: xp.asin(d["u"]),
        "atanh": lambda xp, d: xp.atanh(d["u"]),
        "abs_int": lambda xp, d: xp.abs(d["i"]),
        "negative": lambda xp, d: -d["x"],
        "square": lambda xp, d: xp.square(d["x"]),
        "round": lambda xp, d: xp.round(d["x"] * 3),
        "floor": lambda xp, d: xp.floor(d["x"]),
        "sign": lambda xp, d: xp.sign(d["x"]),
        "equal": lambda xp, d: xp.equal(d["i"], d["j"]),
        "less_scalar": lambda xp, d: d["x"] < 0.25,
        "greater_equal": lambda xp, d: xp.greater_equal(d["x"], d["y"]),
        "logical_and": lambda xp, d: xp.logical_and(d["b"], d["i"] > 0),
        "bitwise_and": lambda xp, d: xp.bitwise_and(d["i"], d["j"]),
        "floor_divide_int": lambda xp, d: xp.floor_divide(d["j"], 3),
        "remainder": lambda xp, d: xp.remainder(d["x"], 0.7),
        "atan2": lambda xp, d: xp.atan2(d["x"], d["y"]),
        "hypot": lambda xp, d: xp.hypot(d["x"], d["y"]),
        "logaddexp": lambda xp, d: xp.logaddexp(d["x"], d["y"]),
        "isnan": lambda xp, d: xp.isnan(d["x"] / d["x"]),
        "clip": lambda xp, d: xp.clip(d["x"], -0.5, 0.5),
        "int_plus_int": lambda xp, d: d["i"] + d["j"],
        "int_times_scalar": lambda xp, d: d["i"] * 3,
        "complex_abs": lambda xp, d: xp.abs(d["c"]),
        "complex_multiply": lambda xp, d: d["c"] * d["c"],
        "real": lambda xp, d: xp.real(d["c"]),
        "imag": lambda xp, d: xp.imag(d["c"]),
        "conj": lambda xp, d: xp.conj(d["c"]),
        "reciprocal": lambda xp, d: xp.reciprocal(d["p"]),
        "nextafter": lambda xp, d: xp.nextafter(d["x"], d["y"]),
        "floor_divide": lambda xp, d: xp.floor_divide(d["x"], d["y"]),
        "floor_divide_int_by_zero": lambda xp, d: d["i"] // (d["j"] - 2),
        "rfloor_divide_scalar": lambda xp, d: 2.5 // d["x"],
        "remainder_int": lambda xp, d: xp.remainder(d["i"], d["j"] - 2),
        "remainder_signed_zero": lambda xp, d: xp.remainder(d["x"] * 0.0, -d["p"]),
        "left_shift": lambda xp, d: xp.bitwise_left_shift(d["i"], d["j"] - 1),
        "right_shift_wide": lambda xp, d: d["i"] >> 40,
        "clip_tensors": lambda xp, d: xp.clip(d["x"], d["y"], d["y"] + 1.0),
        "clip_int_scalar": lambda xp, d: xp.clip(d["i"], max=2),
        "where_scalar_first": lambda xp, d: xp.where(d["b"], 7, d["j"]),
    },
    "in_place": {
        "iadd": _in_place("+="),
        "isub_scalar": _in_place("-="),
        "imul": _in_place("*="),
        "idiv_scalar": _in_place("/="),
        "ifloordiv": lambda xp, d: _updated(d["x"], "//=", d["p"]),
        "imod_scalar": lambda xp, d: _updated(d["x"], "%=", 0.75),
        "ilshift": lambda xp, d: _updated(d["i"], "<<=", 3),
        "setitem": _setitem,
        "view_write": _view_write,
    },
    "statistical": {
        "sum": lambda xp, d: xp.sum(d["x"]),
        "sum_axis": lambda xp, d: xp.sum(d["x"], axis=0, keepdims=True),
        "sum_int": lambda xp, d: xp.sum(d["i"]),
        "prod": lambda xp, d: xp.prod(d["p"], axis=1),
        "mean": lambda xp, d: xp.mean(d["x"], axis=1),
        "std": lambda xp, d: xp.std(d["x"], correction=1),
        "var": lambda xp, d: xp.var(d["x"], axis=0),
        "max": lambda xp, d: xp.max(d["x"], axis=1),
        "min_int": lambda xp, d: xp.min(d["i"]),
        "cumulative_sum": lambda xp, d: xp.cumulative_sum(d["x"], axis=1),
        "cumulative_sum_initial": lambda xp, d: xp.cumulative_sum(d["v"], include_initial=True),
        "cumulative_prod": lambda xp, d: xp.cumulative_prod(d["v"]),
        "cumulative_prod_axis": lambda xp, d: xp.cumulative_prod(d["x"], axis=0),
    },
    "searching": {
        "argmax": lambda xp, d: xp.argmax(d["x"], axis=1),
        "argmin_flat": lambda xp, d: xp.argmin(d["x"]),
        "argmax_keepdims": lambda xp, d: xp.argmax(d["x"], axis=0, keepdims=True),
        "nonzero": lambda xp, d: xp.nonzero(d["i"] > 0)[0],
        "where": lambda xp, d: xp.where(d["x"] > 0, d["x"], d["y"]),
        "where_scalar": lambda xp, d: xp.where(d["x"] > 0, d["x"], 0.0),
        "searchsorted": lambda xp, d: xp.searchsorted(d["s"], d["v"]),
        "count_nonzero": lambda xp, d: xp.count_nonzero(d["i"]),
        "count_nonzero_axis": lambda xp, d: xp.count_nonzero(d["x"] > 0, axis=1, keepdims=True),
        "searchsorted_right": lambda xp, d: xp.searchsorted(d["s"], d["s"], side="right"),
    },
    "sorting": {
        "sort": lambda xp, d: xp.sort(d["x"], axis=1),
        "sort_descending": lambda xp, d: xp.sort(d["v"], descending=True),
        "argsort": lambda xp, d: xp.argsort(d["v"]),
        "argsort_descending": lambda xp, d: xp.argsort(d["x"], axis=0, descending=True),
        "sort_int": lambda xp, d: xp.sort(d["j"]),
    },
    "sets": {
        "unique_values": lambda xp, d: xp.unique_values(d["j"]),
        "unique_counts": lambda xp, d: xp.unique_counts(d["j"]).counts,
        "unique_inverse": lambda xp, d: xp.unique_inverse(d["j"]).inverse_indices,
        "unique_all": lambda xp, d: xp.unique_all(d["j"]).indices,
    },
    "manipulation": {
        "concat": lambda xp, d: xp.concat([d["x"], d["y"]], axis=0),
        "concat_none": lambda xp, d: xp.concat([d["x"], d["y"]], axis=None),
        "stack": lambda xp, d: xp.stack([d["v"], d["w"]], axis=1),
        "reshape": lambda xp, d: xp.reshape(d["x"], (3, 4)),
        "reshape_of_transpose": lambda xp, d: xp.reshape(d["x"].T, (-1,)),
        "flip": lambda xp, d: xp.flip(d["x"], axis=0),
        "roll": lambda xp, d: xp.roll(d["v"], 2),
        "expand_dims": lambda xp, d: xp.expand_dims(d["v"], axis=0) + 0.0,
        "permute_dims": lambda xp, d: xp.permute_dims(d["x"], (1, 0)) * 1.0,
        "squeeze": lambda xp, d: xp.squeeze(xp.expand_dims(d["v"], axis=1), axis=1) + 0.0,
        "broadcast_to": lambda xp, d: xp.broadcast_to(d["v"], (2, 5)) * 1.0,
        "tile": lambda xp, d: xp.tile(d["v"], (2,)),
        "repeat": lambda xp, d: xp.repeat(d["v"], 2),
        "moveaxis": lambda xp, d: xp.moveaxis(d["x"], 0, 1) + 0.0,
        "take": lambda xp, d: xp.take(d["x"], d["k"], axis=1),
        "take_along_axis": lambda xp, d: xp.take_along_axis(
            d["x"], xp.argsort(d["x"], axis=0), axis=0
        ),
        "astype_int": lambda xp, d: xp.astype(d["x"] * 10, d["i"].dtype),
        "astype_bool": lambda xp, d: xp.astype(d["i"], xp.bool),
        "unstack": lambda xp, d: xp.unstack(d["x"])[1] + 0.0,
        "flip_all": lambda xp, d: xp.flip(d["x"]),
        "roll_axes": lambda xp, d: xp.roll(d["x"], (1, -1), axis=(0, 1)),
        "repeat_axis": lambda xp, d: xp.repeat(d["x"], 3, axis=1),
        "broadcast_arrays": lambda xp, d: xp.broadcast_arrays(d["x"], d["x"][:1])[1] * 1.0,
        "moveaxis_many": lambda xp, d: xp.moveaxis(xp.reshape(d["x"], (2, 2, 3)), (0, 1), (2, 0)),
        "take_along_axis_negative": lambda xp, d: xp.take_along_axis(d["v"], -d["k"] - 1, axis=0),
    },
    "linear_algebra": {
        "matmul": lambda xp, d: d["x"] @ d["r"],
        "matmul_transposed": lambda xp, d: d["x"].T @ d["y"],
        "matvec": lambda xp, d: xp.matmul(d["x"], d["r"][:, 0]),
        "tensordot": lambda xp, d: xp.tensordot(d["x"], d["y"], axes=([0], [0])),
        "vecdot": lambda xp, d: xp.vecdot(d["x"], d["y"]),
        "matrix_transpose": lambda xp, d: xp.matrix_transpose(d["x"]) + 0.0,
    },
    "linalg": {
        "solve": lambda xp, d: xp.linalg.solve(d["m"], d["r"]),
        "solve_vector": lambda xp, d: xp.linalg.solve(d["m"], d["r"][:, 0]),
        "inv": lambda xp, d: xp.linalg.inv(d["m"]),
        "det": lambda xp, d: xp.linalg.det(d["m"]),
        "slogdet": lambda xp, d: xp.linalg.slogdet(d["m"]).logabsdet,
        "cholesky": lambda xp, d: xp.linalg.cholesky(d["m"]),
        "cholesky_upper": lambda xp, d: xp.linalg.cholesky(d["m"], upper=True),
        "eigvalsh": lambda xp, d: xp.linalg.eigvalsh(d["m"]),
        "eigh": _round_trip_eigh,
        "qr": _round_trip_qr,
        "svd": _round_trip_svd,
        "svdvals": lambda xp, d: xp.linalg.svdvals(d["x"]),
        "vector_norm": lambda xp, d: xp.linalg.vector_norm(d["x"], axis=1),
        "matrix_norm": lambda xp, d: xp.linalg.matrix_norm(d["m"]),
        "pinv": lambda xp, d: xp.linalg.pinv(d["x"]),
        "trace": lambda xp, d: xp.linalg.trace(d["m"]),
        "outer": lambda xp, d: xp.linalg.outer(d["v"], d["w"]),
        "matrix_rank": lambda xp, d: xp.linalg.matrix_rank(d["m"]),
        "matrix_rank_rtol": lambda xp, d: xp.linalg.matrix_rank(d["x"], rtol=0.5),
        "pinv_rtol": lambda xp, d: xp.linalg.pinv(d["m"], rtol=0.2),
        "matrix_norm_2": lambda xp, d: xp.linalg.matrix_norm(d["x"], ord=2),
        "matrix_norm_nuc": lambda xp, d: xp.linalg.matrix_norm(d["x"], ord="nuc"),
        "matrix_norm_inf": lambda xp, d: xp.linalg.matrix_norm(d["x"], ord=float("inf")),
        "matrix_power": lambda xp, d: xp.linalg.matrix_power(d["m"], 3),
        "matrix_power_inverse": lambda xp, d: xp.linalg.matrix_power(d["m"], -2),
        "trace_offset": lambda xp, d: xp.linalg.trace(d["x"], offset=1),
        "diagonal": lambda xp, d: xp.linalg.diagonal(d["x"], offset=-1),
        "cross": lambda xp, d: xp.linalg.cross(d["x"], d["y"]),
        "qr_complete": lambda xp, d: _round_trip_qr(xp, d, "complete"),
        "svd_full": lambda xp, d: xp.linalg.svd(d["x"]).S,
    },
    "fft": {
        "fft": lambda xp, d: xp.fft.fft(d["v"]),
        "rfft": lambda xp, d: xp.fft.rfft(d["v"]),
        "irfft": lambda xp, d: xp.fft.irfft(xp.fft.rfft(d["v"]), n=5),
        "fftfreq": lambda xp, d: xp.fft.fftfreq(8),
        "rfftfreq": lambda xp, d: xp.fft.rfftfreq(8, d=0.5),
        "fftshift": lambda xp, d: xp.fft.fftshift(d["v"]),
        "ifft": lambda xp, d: xp.fft.ifft(d["c"], norm="ortho"),
        "fftn": lambda xp, d: xp.fft.fftn(d["x"], s=(4, 4), axes=(0, 1)),
        "ifftn": lambda xp, d: xp.fft.ifftn(d["x"]),
        "rfftn": lambda xp, d: xp.fft.rfftn(d["x"], norm="forward"),
        "irfftn": lambda xp, d: xp.fft.irfftn(xp.fft.rfftn(d["x"]), s=(4, 3), axes=(0, 1)),
        "hfft": lambda xp, d: xp.fft.hfft(d["c"]),
        "ihfft": lambda xp, d: xp.fft.ihfft(d["v"]),
        "ifftshift": lambda xp, d: xp.fft.ifftshift(d["x"], axes=(0,)),
    },
    "indexing": {
        "basic": lambda xp, d: d["x"][1:, ::2] + 0.0,
        "integer_array": lambda xp, d: d["x"][d["k"]],
        "boolean_mask": lambda xp, d: d["v"][d["v"] > 0],
        "negative_step": lambda xp, d: d["v"][::-1] * 1.0,
    },
    "utility": {
        "all": lambda xp, d: xp.all(d["b"]),
        "any_axis": lambda xp, d: xp.any(d["x"] > 1.0, axis=0),
        "diff": lambda xp, d: xp.diff(d["v"]),
        "diff_prepend": lambda xp, d: xp.diff(d["x"], axis=0, n=2, prepend=d["y"][:1]),
    },
}


def all_cases() -> list[tuple[str, str, Case]]:
    """Every case as (group, name, function)."""
    return [(group, name, fn) for group, cases in CASES.items() for name, fn in cases.items()]


def expected_dtype(want: np.dtype, x64: bool) -> np.dtype:
    """The dtype a device gives for NumPy's ``want``: the same with x64; without, a 64-bit
    dtype narrowed to the 32-bit one of its kind (JAX's rule)."""
    if x64:
        return want
    narrow = {"int64": "int32", "uint64": "uint32", "float64": "float32", "complex128": "complex64"}
    return np.dtype(narrow.get(want.name, want.name))


def compare(got: Any, want: Any, x64: bool) -> None:
    """Asserts that the device's result ``got`` is NumPy's ``want``: its dtype (narrowed
    without x64) and its values (float32: rtol 1e-4, atol 1e-5; float64: rtol 1e-10;
    integers and booleans exactly)."""
    got_np = np.asarray(got)
    want_np = np.asarray(want)
    assert got_np.shape == want_np.shape, (got_np.shape, want_np.shape)
    assert got_np.dtype == expected_dtype(want_np.dtype, x64), (got_np.dtype, want_np.dtype)
    if want_np.dtype.kind in "fc":
        wide = got_np.dtype in (np.float64, np.complex128)
        rtol, atol = (1e-10, 1e-12) if wide else (1e-4, 1e-5)
        np.testing.assert_allclose(got_np, want_np, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got_np, want_np)
