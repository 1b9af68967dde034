"""Every function of the array API standard, once, on a JAX device, in eager and in graph mode,
in one process: graph mode's values against eager mode's (rtol 1e-5 by default: the same
device, the same kernels), and each against NumPy's (``boxfall.array_api`` on NumPy arrays) by
the per-function tolerances below, which name a device's precision where it is coarser than
NumPy's (a TPU's float32 transcendental functions and factorizations).

    python benches/jax_every_function.py            # on the default JAX device (a TPU there)
    python benches/jax_every_function.py --x64      # with JAX's 64-bit types
    python benches/jax_every_function.py --only linspace,sort

It prints one line per function (``ok``, or what differed), then the counts, and exits 1 when
a function fails in graph mode where it runs eagerly, or differs beyond its tolerance. Each
function's name is printed and flushed before it runs, so a run the device kills shows where.
On a TPU run it when graph mode or ``boxfall.jax`` changes (one process at a time holds the
chip); on JAX's CPU it runs anywhere.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

Case = Callable[[Any, dict[str, Any]], Any]


sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
)
import jax_cases  # noqa: E402 - the JAX tests' arrays, beside which these few more are made


def data(x64: bool) -> dict[str, np.ndarray]:
    """The JAX tests' small arrays (``tests/python/jax_cases.py``, the device's default dtypes)
    and a few more that functions here need."""
    d = jax_cases.data(x64)
    f, i = d["x"].dtype, d["i"].dtype
    rng = np.random.default_rng(11)
    d.update(
        g=(np.abs(d["x"]) + 1.5).astype(f),  # above 1: acosh
        a=rng.standard_normal((3, 3)).astype(f),
        t=rng.standard_normal((2, 3, 4)).astype(f),
        sh=np.array([1, 2, 0, 3, 1, 2], dtype=i),  # shift counts
        e=np.array([True, True, False, False, True, False]),
        dup=np.array([3, 1, 3, 2, 1, 3], dtype=i),
        sig=rng.standard_normal(8).astype(f),
        img=rng.standard_normal((4, 4)).astype(f),
    )
    return d


UNARY = {
    "abs": "x", "acos": "u", "acosh": "g", "asin": "u", "asinh": "x", "atan": "x", "atanh": "u",
    "ceil": "x", "cos": "x", "cosh": "x", "exp": "x", "expm1": "x", "floor": "x",
    "isfinite": "x", "isinf": "x", "isnan": "x", "log": "p", "log10": "p", "log1p": "p",
    "log2": "p", "negative": "x", "positive": "x", "reciprocal": "p", "round": "x",
    "sign": "x", "signbit": "x", "sin": "x", "sinh": "x", "sqrt": "p", "square": "x",
    "tan": "u", "tanh": "x", "trunc": "x", "conj": "c", "real": "c", "imag": "c",
    "bitwise_invert": "i", "logical_not": "b",
}  # fmt: skip
"""Element-wise functions of one array, and the array (of ``data``) each is called on."""

BINARY = {
    "add": "xy", "atan2": "xy", "copysign": "xy", "divide": "xp", "equal": "ij",
    "floor_divide": "xp", "greater": "xy", "greater_equal": "xy", "hypot": "xy", "less": "xy",
    "less_equal": "xy", "logaddexp": "xy", "maximum": "xy", "minimum": "xy", "multiply": "xy",
    "nextafter": "xy", "not_equal": "ij", "pow": "px", "remainder": "xp", "subtract": "xy",
    "bitwise_and": "ij", "bitwise_or": "ij", "bitwise_xor": "ij", "bitwise_left_shift": "i",
    "bitwise_right_shift": "i", "logical_and": "be", "logical_or": "be", "logical_xor": "be",
}  # fmt: skip
"""Element-wise functions of two arrays, and the arrays (``"i"`` alone: ``i`` and ``sh``)."""


def _unstack(xp: Any, d: dict[str, Any]) -> Any:
    return xp.stack(xp.unstack(d["x"], axis=1), axis=0)


def _unique(which: str) -> Case:
    def run(xp: Any, d: dict[str, Any]) -> Any:
        return tuple(getattr(xp, which)(d["dup"]))

    return run


OTHER: dict[str, Case] = {
    # creation
    "arange": lambda xp, d: xp.arange(2, 11, 3),
    "asarray": lambda xp, d: xp.asarray([[1.0, 2.0], [3.0, 4.0]]),
    "empty": lambda xp, d: xp.empty((2, 3)).shape,
    "empty_like": lambda xp, d: xp.empty_like(d["x"]).shape,
    "eye": lambda xp, d: xp.eye(3, 4, k=1),
    "full": lambda xp, d: xp.full((2, 2), 1.5),
    "full_like": lambda xp, d: xp.full_like(d["i"], 2),
    "linspace": lambda xp, d: xp.linspace(0.0, 1.0, 5),
    "meshgrid": lambda xp, d: tuple(xp.meshgrid(d["v"], d["s"])),
    "ones": lambda xp, d: xp.ones((2, 3)),
    "ones_like": lambda xp, d: xp.ones_like(d["x"]),
    "tril": lambda xp, d: xp.tril(d["m"]),
    "triu": lambda xp, d: xp.triu(d["m"], k=1),
    "zeros": lambda xp, d: xp.zeros((2, 3)),
    "zeros_like": lambda xp, d: xp.zeros_like(d["x"]),
    "from_dlpack": lambda xp, d: xp.from_dlpack(np.arange(4.0, dtype=d["x"].dtype)),
    # data types
    "astype": lambda xp, d: xp.astype(d["x"], d["i"].dtype),
    "can_cast": lambda xp, d: xp.can_cast(d["i"].dtype, d["x"].dtype),
    "finfo": lambda xp, d: float(xp.finfo(d["x"].dtype).eps),
    "iinfo": lambda xp, d: int(xp.iinfo(d["i"].dtype).max),
    "isdtype": lambda xp, d: xp.isdtype(d["x"].dtype, "real floating"),
    "result_type": lambda xp, d: str(xp.result_type(d["i"], d["x"])),
    # element-wise with more arguments
    "clip": lambda xp, d: xp.clip(d["x"], -0.5, 0.5),
    # indexing
    "take": lambda xp, d: xp.take(d["x"], d["k"], axis=1),
    "take_along_axis": lambda xp, d: xp.take_along_axis(d["x"], xp.argsort(d["x"], axis=1), axis=1),
    # linear algebra
    "matmul": lambda xp, d: xp.matmul(d["x"], d["m"]),
    "matrix_transpose": lambda xp, d: xp.matrix_transpose(d["x"]),
    "tensordot": lambda xp, d: xp.tensordot(d["x"], d["y"], axes=([0], [0])),
    "vecdot": lambda xp, d: xp.vecdot(d["x"], d["y"]),
    # manipulation
    "broadcast_arrays": lambda xp, d: tuple(xp.broadcast_arrays(d["x"], d["v"][:3])),
    "broadcast_to": lambda xp, d: xp.broadcast_to(d["v"], (2, 5)),
    "concat": lambda xp, d: xp.concat([d["x"], d["y"]], axis=0),
    "expand_dims": lambda xp, d: xp.expand_dims(d["x"], axis=1),
    "flip": lambda xp, d: xp.flip(d["x"], axis=0),
    "moveaxis": lambda xp, d: xp.moveaxis(d["t"], 0, -1),
    "permute_dims": lambda xp, d: xp.permute_dims(d["t"], (2, 0, 1)),
    "repeat": lambda xp, d: xp.repeat(d["v"], 2),
    "reshape": lambda xp, d: xp.reshape(d["x"], (3, 4)),
    "roll": lambda xp, d: xp.roll(d["x"], 1, axis=0),
    "squeeze": lambda xp, d: xp.squeeze(xp.expand_dims(d["x"], axis=0), axis=0),
    "stack": lambda xp, d: xp.stack([d["x"], d["y"]]),
    "tile": lambda xp, d: xp.tile(d["v"], (2,)),
    "unstack": _unstack,
    # searching
    "argmax": lambda xp, d: xp.argmax(d["x"], axis=0),
    "argmin": lambda xp, d: xp.argmin(d["x"]),
    "count_nonzero": lambda xp, d: xp.count_nonzero(d["i"]),
    "nonzero": lambda xp, d: tuple(xp.nonzero(d["i"] > 0)),
    "searchsorted": lambda xp, d: xp.searchsorted(d["s"], d["w"]),
    "where": lambda xp, d: xp.where(d["x"] > 0, d["x"], d["y"]),
    # sets
    "unique_all": _unique("unique_all"),
    "unique_counts": _unique("unique_counts"),
    "unique_inverse": _unique("unique_inverse"),
    "unique_values": lambda xp, d: xp.unique_values(d["dup"]),
    # sorting
    "argsort": lambda xp, d: xp.argsort(d["v"]),
    "sort": lambda xp, d: xp.sort(d["x"], axis=0, descending=True),
    # statistics
    "cumulative_prod": lambda xp, d: xp.cumulative_prod(d["p"], axis=0),
    "cumulative_sum": lambda xp, d: xp.cumulative_sum(d["x"], axis=1),
    "max": lambda xp, d: xp.max(d["x"], axis=1),
    "mean": lambda xp, d: xp.mean(d["x"], axis=0),
    "min": lambda xp, d: xp.min(d["x"]),
    "prod": lambda xp, d: xp.prod(d["p"], axis=0),
    "std": lambda xp, d: xp.std(d["x"], correction=1),
    "sum": lambda xp, d: xp.sum(d["x"], axis=0),
    "var": lambda xp, d: xp.var(d["x"], axis=1),
    # utility
    "all": lambda xp, d: xp.all(d["b"]),
    "any": lambda xp, d: xp.any(d["x"] > 1, axis=0),
    "diff": lambda xp, d: xp.diff(d["x"], axis=0),
    # linalg extension
    "linalg.cholesky": lambda xp, d: xp.linalg.cholesky(d["m"]),
    "linalg.cross": lambda xp, d: xp.linalg.cross(d["x"], d["y"]),
    "linalg.det": lambda xp, d: xp.linalg.det(d["m"]),
    "linalg.diagonal": lambda xp, d: xp.linalg.diagonal(d["m"]),
    "linalg.eigh": lambda xp, d: jax_cases._round_trip_eigh(xp, d),
    "linalg.eigvalsh": lambda xp, d: xp.linalg.eigvalsh(d["m"]),
    "linalg.inv": lambda xp, d: xp.linalg.inv(d["m"]),
    "linalg.matmul": lambda xp, d: xp.linalg.matmul(d["x"], d["m"]),
    "linalg.matrix_norm": lambda xp, d: xp.linalg.matrix_norm(d["m"]),
    "linalg.matrix_power": lambda xp, d: xp.linalg.matrix_power(d["m"], 3),
    "linalg.matrix_rank": lambda xp, d: xp.linalg.matrix_rank(d["m"]),
    "linalg.matrix_transpose": lambda xp, d: xp.linalg.matrix_transpose(d["x"]),
    "linalg.outer": lambda xp, d: xp.linalg.outer(d["v"], d["w"]),
    "linalg.pinv": lambda xp, d: xp.linalg.pinv(d["x"]),
    "linalg.qr": lambda xp, d: jax_cases._round_trip_qr(xp, d),
    "linalg.slogdet": lambda xp, d: tuple(xp.linalg.slogdet(d["m"])),
    "linalg.solve": lambda xp, d: xp.linalg.solve(d["m"], d["r"]),
    "linalg.svd": lambda xp, d: jax_cases._round_trip_svd(xp, d),
    "linalg.svdvals": lambda xp, d: xp.linalg.svdvals(d["x"]),
    "linalg.tensordot": lambda xp, d: xp.linalg.tensordot(d["x"], d["y"], axes=([0], [0])),
    "linalg.trace": lambda xp, d: xp.linalg.trace(d["m"]),
    "linalg.vecdot": lambda xp, d: xp.linalg.vecdot(d["x"], d["y"]),
    "linalg.vector_norm": lambda xp, d: xp.linalg.vector_norm(d["x"], ord=3),
    # fft extension
    "fft.fft": lambda xp, d: xp.fft.fft(d["c"]),
    "fft.ifft": lambda xp, d: xp.fft.ifft(d["c"]),
    "fft.fftn": lambda xp, d: xp.fft.fftn(xp.astype(d["img"], d["c"].dtype)),
    "fft.ifftn": lambda xp, d: xp.fft.ifftn(xp.astype(d["img"], d["c"].dtype)),
    "fft.rfft": lambda xp, d: xp.fft.rfft(d["sig"]),
    "fft.irfft": lambda xp, d: xp.fft.irfft(d["c"]),
    "fft.rfftn": lambda xp, d: xp.fft.rfftn(d["img"]),
    "fft.irfftn": lambda xp, d: xp.fft.irfftn(xp.astype(d["img"], d["c"].dtype)),
    "fft.hfft": lambda xp, d: xp.fft.hfft(d["c"]),
    "fft.ihfft": lambda xp, d: xp.fft.ihfft(d["sig"]),
    "fft.fftfreq": lambda xp, d: xp.fft.fftfreq(8, d=0.5),
    "fft.rfftfreq": lambda xp, d: xp.fft.rfftfreq(8),
    "fft.fftshift": lambda xp, d: xp.fft.fftshift(d["sig"]),
    "fft.ifftshift": lambda xp, d: xp.fft.ifftshift(d["sig"]),
    # NumPy's errors hold whichever serves the call (eager: at the call; graph: by the sync)
    "error: linalg.solve singular": lambda xp, d: xp.linalg.solve(d["x"][:2, :2] * 0, d["r"][:2]),
    "error: linalg.inv singular": lambda xp, d: xp.linalg.inv(d["x"][:2, :2] * 0),
    "error: linalg.cholesky not PD": lambda xp, d: xp.linalg.cholesky(-d["m"]),
    "error: take out of range": lambda xp, d: xp.take(d["v"], d["k"] + 10),
}
"""Every other function, with a call that exercises it (a factorization through a product that
undoes it, whose value does not depend on the signs a device picks)."""


def cases() -> dict[str, Case]:
    every: dict[str, Case] = {}
    for name, arg in UNARY.items():
        every[name] = lambda xp, d, name=name, arg=arg: getattr(xp, name)(d[arg])
    for name, (a, b) in ((n, (p[0], p[1] if len(p) > 1 else "sh")) for n, p in BINARY.items()):
        every[name] = lambda xp, d, name=name, a=a, b=b: getattr(xp, name)(d[a], d[b])
    every.update(OTHER)
    return every


DEFAULT_RTOL = {32: 1e-5, 64: 1e-12}
"""Against NumPy, by the float width of the result: what a function is held to unless named
below."""

TPU_RTOL: dict[str, float] = {
    # A TPU's float32 transcendental functions are within a few ulps, not one.
    **dict.fromkeys(
        "acos acosh asin asinh atan atanh atan2 cos cosh exp expm1 log log10 log1p log2 "
        "logaddexp sin sinh tan tanh hypot pow std var".split(),
        1e-4,
    ),
    # Factorizations and what is made of them: a TPU's float32 linear algebra.
    **dict.fromkeys(
        "linalg.cholesky linalg.det linalg.eigh linalg.eigvalsh linalg.inv linalg.matrix_power "
        "linalg.matrix_norm linalg.pinv linalg.qr linalg.slogdet linalg.solve linalg.svd "
        "linalg.svdvals linalg.vector_norm".split(),
        1e-3,
    ),
}
"""Against NumPy on a TPU (float32): the functions whose precision there is coarser, each named
with its tolerance, so that a coarse result is said, not hidden."""

GRAPH_RTOL = 1e-5
"""Graph mode against eager mode on one device: the same kernels, so 1e-5 holds."""


def as_numpy(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(as_numpy(e) for e in v)
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return np.asarray(v)
    return v


def differs(got: Any, want: Any, rtol: float, atol: float) -> str | None:
    """What differs between two results (arrays, tuples of them, scalars), or None."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return f"{type(got).__name__} where {type(want).__name__} of {len(want)}"
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            why = differs(g, w, rtol, atol)
            if why:
                return f"[{k}] {why}"
        return None
    if not isinstance(want, np.ndarray):
        return None if got == want else f"{got!r} != {want!r}"
    if not isinstance(got, np.ndarray):
        return f"{type(got).__name__} where an array is due"
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind in "biu":
        return None if np.array_equal(got, want) else f"values differ: {got} vs {want}"
    if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        return None
    err = np.max(np.abs(got - want) / (np.abs(want) + atol))
    return f"values differ (max rel {err:.2e} > {rtol:.0e})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--x64", action="store_true", help="JAX's 64-bit types on")
    parser.add_argument("--only", help="a comma-separated list of functions")
    args = parser.parse_args()
    if args.x64:
        os.environ["JAX_ENABLE_X64"] = "1"
    import boxfall as bf
    import boxfall.array_api as npx
    import boxfall.jax as bj
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    device = jax.devices()[0]
    on_tpu = device.platform == "tpu"
    print(f"jax {jax.__version__} on {device.device_kind} ({device.platform}), x64={bj.X64}")
    eager, graph = bj.namespace(), bj.namespace(graph=True)
    host = data(bj.X64)
    every = cases()
    if args.only:
        every = {n: every[n] for n in args.only.split(",")}
    width = 64 if bj.X64 else 32
    counts = {"ok": 0, "graph failed": 0, "graph != eager": 0, "!= numpy": 0, "all raise": 0}
    failures: list[str] = []
    start = time.monotonic()
    for name, case in every.items():
        print(f"{name:26s}", end=" ", flush=True)
        want_err = got_err = None
        try:
            want = as_numpy(case(npx, dict(host)))
        except Exception as e:  # noqa: BLE001 - NumPy's own error is the expectation
            want, want_err = None, e
        try:
            on_eager = {k: eager.asarray(v) for k, v in host.items()}
            eager_value = as_numpy(case(eager, on_eager))
        except Exception as e:  # noqa: BLE001
            eager_value, got_err = None, e
        graph_err = None
        try:
            on_graph = {k: graph.asarray(v) for k, v in host.items()}
            graph_value = as_numpy(case(graph, on_graph))
            bf.sync()
        except Exception as e:  # noqa: BLE001
            graph_value, graph_err = None, e
            if got_err is None:
                counts["graph failed"] += 1
                failures.append(f"{name}: graph mode raised {type(e).__name__}: {e}")
                print(f"GRAPH FAILED {type(e).__name__}: {str(e)[:200]}")
                continue
        if want_err is not None or got_err is not None:
            # An error: NumPy's, eager mode's and graph mode's are of one class.
            kinds = {type(e) for e in (want_err, got_err, graph_err)}
            same = None not in kinds and len(kinds) == 1
            counts["all raise" if same else "!= numpy"] += 1
            status = (
                "all raise " + type(want_err).__name__
                if same
                else (f"NumPy {want_err!r}, eager {got_err!r}, graph {graph_err!r}")
            )
            print(status)
            if not same:
                failures.append(f"{name}: {status}")
            continue
        why = differs(graph_value, eager_value, GRAPH_RTOL, 1e-6)
        if why:
            counts["graph != eager"] += 1
            failures.append(f"{name}: graph != eager: {why}")
            print(f"GRAPH != EAGER {why}")
            continue
        rtol = TPU_RTOL.get(name, DEFAULT_RTOL[width]) if on_tpu else DEFAULT_RTOL[width]
        want_narrowed = narrowed(want, bj.X64)
        why = differs(eager_value, want_narrowed, rtol, 10 * rtol)
        if why:
            counts["!= numpy"] += 1
            failures.append(f"{name}: != NumPy (rtol {rtol:g}): {why}")
            print(f"!= NUMPY {why}")
            continue
        counts["ok"] += 1
        print("ok" + (f" (rtol {rtol:g})" if rtol != DEFAULT_RTOL[width] else ""))
    seconds = time.monotonic() - start
    print(f"\n{len(every)} functions in {seconds:.0f} s: " + ", ".join(
        f"{n} {k}" for k, n in counts.items()
    ))  # fmt: skip
    compiler = bj.graph_compiler()
    print(
        f"graph mode: {compiler.compiles} compiles; host callbacks {dict(compiler.host_callbacks)}"
    )
    for line in failures:
        print("  " + line)
    return 1 if failures else 0


def narrowed(value: Any, x64: bool) -> Any:
    """NumPy's result as a device without x64 gives it: 64-bit dtypes as the 32-bit ones."""
    if x64:
        return value
    if isinstance(value, tuple):
        return tuple(narrowed(v, x64) for v in value)
    if isinstance(value, np.ndarray) and value.dtype.itemsize == 8 and value.dtype.kind in "iuf":
        return value.astype(value.dtype.kind + "4")
    if isinstance(value, np.ndarray) and value.dtype == np.complex128:
        return value.astype(np.complex64)
    return value


if __name__ == "__main__":
    sys.exit(main())
