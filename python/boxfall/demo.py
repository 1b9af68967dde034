"""The boxfall demo: a transformer block on a simulated device, served mostly by the CPU fallback.

`python -m boxfall demo` defines 21 operators in the namespace `demo` with NumPy CPU kernels
(their schemas are PyTorch's own), registers a Python device backend `Accel` whose tensors live
in DeviceBuffer objects, gives Accel native kernels for only three operators (matmul,
add.Tensor, relu), and lets boxfall.cpu_fallback serve every other operator on Accel. It then
runs a transformer-style block and a small classifier head for --steps steps on Accel tensors,
checks every result against the same computation in plain NumPy, and prints the fallback
metrics.

`--workload array-api` runs instead k-means and a ridge fit written only with the array API
standard's functions on ``boxfall.array_api`` (see boxfall.demo_array_api); --steps is then
the number of k-means iterations.

Exit code: 0 when the results agree to 1e-9, 1 when they do not, 2 when --plot is asked for
without matplotlib installed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import boxfall as bf
from boxfall.demo_device import BACKEND as BACKEND
from boxfall.demo_device import DeviceBuffer as DeviceBuffer
from boxfall.demo_device import accel_backend as accel_backend
from boxfall.demo_device import device_data

NS = "demo"
"""The namespace the demo defines its operators in."""

SEQ = 8
"""Tokens per sequence of the demo's input (its shape is ``(batch, SEQ, hidden)``)."""

TOLERANCE = 1e-9
"""The largest absolute difference from plain NumPy that the float64 run accepts."""

NATIVE_OPS = ("matmul", "add.Tensor", "relu")
"""The operators that ``Accel`` implements itself; every other one reaches the CPU fallback."""

# --------------------------------------------------------------------------------------------
# CPU kernels: NumPy in, NumPy out


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_np(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU, exact (``erf``) or with PyTorch's ``tanh`` approximation."""
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _axes(dim: list[int] | None) -> tuple[int, ...] | None:
    """A reduction's ``int[1]? dim`` as NumPy axes: ``None`` or ``[]`` reduce over all."""
    return tuple(dim) if dim else None


CPU_OPS: dict[str, tuple[str, Callable[..., Any]]] = {}
"""Every operator of the demo: overload-qualified name -> (schema without namespace, CPU kernel)."""


def _cpu(schema: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: enter the function in :data:`CPU_OPS` as the CPU kernel of ``schema``."""

    def enter(kernel: Callable[..., Any]) -> Callable[..., Any]:
        CPU_OPS[schema.split("(", 1)[0]] = (schema, kernel)
        return kernel

    return enter


@_cpu("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
def _add(self, other, *, alpha=1):
    """``self + alpha * other``."""
    return self + alpha * other


@_cpu("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")
def _add_(self, other, *, alpha=1):
    """In place ``self += alpha * other``; returns ``self``."""
    self += alpha * other
    return self


@_cpu("sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
def _sub(self, other, *, alpha=1):
    """``self - alpha * other``."""
    return self - alpha * other


@_cpu("mul.Tensor(Tensor self, Tensor other) -> Tensor")
def _mul(self, other):
    """Elementwise product."""
    return self * other


@_cpu("mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)")
def _mul_out(self, other, *, out):
    """Elementwise product written into ``out``; returns ``out``."""
    np.multiply(self, other, out=out)
    return out


@_cpu("div.Tensor(Tensor self, Tensor other) -> Tensor")
def _div(self, other):
    """Elementwise quotient."""
    return self / other


@_cpu("matmul(Tensor self, Tensor other) -> Tensor")
def _matmul(self, other):
    """Matrix product, batched over leading dimensions."""
    return np.matmul(self, other)


@_cpu("relu(Tensor self) -> Tensor")
def _relu(self):
    """``max(self, 0)``."""
    return np.maximum(self, 0.0)


@_cpu('gelu(Tensor self, *, str approximate="none") -> Tensor')
def _gelu(self, *, approximate="none"):
    """GELU (see :func:`gelu_np`)."""
    return gelu_np(self, approximate)


@_cpu("exp(Tensor self) -> Tensor")
def _exp(self):
    """Elementwise ``e**self``."""
    return np.exp(self)


@_cpu("tanh(Tensor self) -> Tensor")
def _tanh(self):
    """Elementwise hyperbolic tangent."""
    return np.tanh(self)


@_cpu("sqrt(Tensor self) -> Tensor")
def _sqrt(self):
    """Elementwise square root."""
    return np.sqrt(self)


@_cpu("neg(Tensor self) -> Tensor")
def _neg(self):
    """``-self``."""
    return np.negative(self)


@_cpu(
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
    "ScalarType? dtype=None) -> Tensor"
)
def _sum(self, dim, keepdim=False, *, dtype=None):
    """Sum over ``dim`` (all dimensions if it is None or empty)."""
    return np.sum(self, axis=_axes(dim), keepdims=keepdim)


@_cpu("mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor")
def _mean(self, dim, keepdim=False, *, dtype=None):
    """Mean over ``dim`` (all dimensions if it is None or empty)."""
    return np.mean(self, axis=_axes(dim), keepdims=keepdim)


@_cpu("softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor")
def _softmax(self, dim, dtype=None):
    """Softmax along ``dim``, shifted by the maximum for stability."""
    e = np.exp(self - np.max(self, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


# PyTorch writes `SymInt[] normalized_shape`; the demo passes plain ints, so `int[]`.
@_cpu(
    "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, "
    "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor"
)
def _layer_norm(x, shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    """Normalise over the trailing ``len(shape)`` dimensions, then scale and shift."""
    axes = tuple(range(-len(shape), 0))
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.var(x, axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


# PyTorch's is a view, `transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)`, which
# the CPU fallback refuses (storage cannot be shared across devices): the demo's copies.
@_cpu("transpose.int(Tensor self, int dim0, int dim1) -> Tensor")
def _transpose(self, dim0, dim1):
    """``self`` with ``dim0`` and ``dim1`` swapped, as a new array."""
    return np.swapaxes(self, dim0, dim1).copy()


@_cpu("cat(Tensor[] tensors, int dim=0) -> Tensor")
def _cat(tensors, dim=0):
    """Concatenation along ``dim``."""
    return np.concatenate(tensors, axis=dim)


@_cpu("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor")
def _linear(x, weight, bias=None):
    """``x @ weight.T + bias``, with ``weight`` laid out ``(out, in)``."""
    out = np.matmul(x, weight.T)
    return out if bias is None else out + bias


@_cpu("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor")
def _addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """``beta * self + alpha * (mat1 @ mat2)``."""
    return beta * self + alpha * np.matmul(mat1, mat2)


def define_operators(lib: bf.Library) -> None:
    """Define every operator of :data:`CPU_OPS` in ``lib`` and register its CPU kernel."""
    for name, (schema, kernel) in CPU_OPS.items():
        lib.define(schema)
        lib.impl(name, kernel, "CPU")


# --------------------------------------------------------------------------------------------
# Accel's own kernels: bf.Tensor in, bf.Tensor out, working on the payloads


def register_accel_kernels(lib: bf.Library, backend: Any) -> None:
    """Give ``Accel`` native kernels for the operators of :data:`NATIVE_OPS`."""

    def matmul(self, other):
        """``matmul`` computed on the device."""
        return backend.tensor(np.matmul(device_data(self), device_data(other)))

    def add(self, other, *, alpha=1):
        """``add.Tensor`` computed on the device."""
        return backend.tensor(device_data(self) + alpha * device_data(other))

    def relu(self):
        """``relu`` computed on the device."""
        return backend.tensor(np.maximum(device_data(self), 0.0))

    kernels: dict[str, Callable[..., Any]] = {"matmul": matmul, "add.Tensor": add, "relu": relu}
    for name in NATIVE_OPS:
        lib.impl(name, kernels[name], BACKEND)


# --------------------------------------------------------------------------------------------
# The model


@dataclass
class Params:
    """The weights of the block and the head (NumPy on the host, or Accel tensors)."""

    ln1_w: Any
    ln1_b: Any
    wq: Any
    bq: Any
    wk: Any
    bk: Any
    wv: Any
    bv: Any
    wo: Any
    bo: Any
    ln2_w: Any
    ln2_b: Any
    w1: Any
    b1: Any
    gate: Any
    w2: Any
    b2: Any
    head_w: Any
    head_b: Any
    dim: Any  # the hidden size as a 1-element tensor, for the attention scale


def init_params(rng: np.random.Generator, hidden: int, classes: int, batch: int) -> Params:
    """Random float64 weights for a block of width ``hidden`` and a ``classes``-way head."""

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape) / math.sqrt(shape[-1])

    def b(*shape: int) -> np.ndarray:
        return 0.1 * rng.standard_normal(shape)

    mlp = 4 * hidden
    return Params(
        ln1_w=1.0 + b(hidden), ln1_b=b(hidden),
        wq=w(hidden, hidden), bq=b(hidden),
        wk=w(hidden, hidden), bk=b(hidden),
        wv=w(hidden, hidden), bv=b(hidden),
        wo=w(hidden, hidden), bo=b(hidden),
        ln2_w=1.0 + b(hidden), ln2_b=b(hidden),
        w1=w(mlp, hidden), b1=b(mlp), gate=1.0 + b(mlp),
        w2=w(hidden, mlp), b2=b(hidden),
        head_w=w(2 * hidden, classes), head_b=b(batch, classes),
        dim=np.full(1, float(hidden)),
    )  # fmt: skip


def to_device(params: Params, backend: Any) -> Params:
    """The same weights as Accel tensors."""
    return Params(**{k: backend.tensor(v) for k, v in vars(params).items()})


def forward_device(x: bf.Tensor, p: Params, sq_out: bf.Tensor) -> tuple[Any, Any, Any, Any]:
    """Run the block and the head through the dispatcher on Accel tensors.

    Returns ``(out, probs, sq, y)``: the block's output, the head's probabilities, their
    squares (written into ``sq_out`` by ``mul.out``) and the first residual (``add_`` updates
    ``x`` in place). The caller checks that ``y is x`` and ``sq is sq_out``.
    """
    o = bf.ops.demo
    hidden = x.shape[-1]
    h = o.layer_norm(x, [hidden], p.ln1_w, p.ln1_b)
    q, k, v = o.linear(h, p.wq, p.bq), o.linear(h, p.wk, p.bk), o.linear(h, p.wv, p.bv)
    scores = o.div(o.matmul(q, o.transpose(k, -2, -1)), o.sqrt(p.dim))
    ctx = o.matmul(o.softmax(scores, -1), v)
    y = o.add_(x, o.linear(ctx, p.wo, p.bo))
    h2 = o.layer_norm(y, [hidden], p.ln2_w, p.ln2_b)
    m = o.linear(o.mul(o.gelu(o.linear(h2, p.w1, p.b1)), p.gate), p.w2, p.b2)
    out = o.add(y, m)
    pooled = o.mean(out, [1])
    feats = o.cat([o.relu(pooled), o.tanh(o.neg(pooled))], 1)
    logits = o.addmm(p.head_b, feats, p.head_w)
    e = o.exp(o.sub(logits, o.mean(logits, [1], True)))
    probs = o.div(e, o.sum(e, [1], True))
    sq = o.mul.out(probs, probs, out=sq_out)
    return out, probs, sq, y


def forward_reference(x: np.ndarray, p: Params) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same computation in plain NumPy, for the check; ``x`` is not changed."""

    def ln(t, w, b, eps=1e-05):
        mu = t.mean(axis=-1, keepdims=True)
        return (t - mu) / np.sqrt(t.var(axis=-1, keepdims=True) + eps) * w + b

    def softmax(t):
        e = np.exp(t - t.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    h = ln(x, p.ln1_w, p.ln1_b)
    q, k, v = h @ p.wq.T + p.bq, h @ p.wk.T + p.bk, h @ p.wv.T + p.bv
    attn = softmax(q @ np.swapaxes(k, -2, -1) / np.sqrt(p.dim))
    y = x + ((attn @ v) @ p.wo.T + p.bo)
    h2 = ln(y, p.ln2_w, p.ln2_b)
    out = y + (gelu_np(h2 @ p.w1.T + p.b1) * p.gate) @ p.w2.T + p.b2
    pooled = out.mean(axis=1)
    feats = np.concatenate([np.maximum(pooled, 0.0), np.tanh(-pooled)], axis=1)
    logits = p.head_b + feats @ p.head_w
    probs = softmax(logits - logits.mean(axis=1, keepdims=True))
    return out, probs, probs * probs


# --------------------------------------------------------------------------------------------
# Running it


class DemoFailure(Exception):
    """The device run broke a guarantee of the dispatcher (not a numerical difference)."""


def run_steps(args: argparse.Namespace, backend: Any) -> float:
    """Run ``args.steps`` forward passes on the device; returns the largest error against NumPy.

    Raises :class:`DemoFailure` if an in-place or out= call does not hand back the caller's
    own device tensor, or a result is not on the device.
    """
    classes = 4
    rng = np.random.default_rng(args.seed)
    host = init_params(rng, args.hidden, classes, args.batch)
    device = to_device(host, backend)
    worst = 0.0
    for step in range(1, args.steps + 1):
        x_host = rng.standard_normal((args.batch, SEQ, args.hidden))
        x = backend.tensor(x_host)
        sq_out = backend.tensor(np.zeros((args.batch, classes)))
        *results, y = forward_device(x, device, sq_out)
        if y is not x:
            raise DemoFailure("add_ through the fallback did not return the caller's tensor")
        if results[2] is not sq_out:
            raise DemoFailure("mul.out through the fallback did not return its `out` tensor")
        if results[0].device != x.device:
            raise DemoFailure(f"the output is on {results[0].device}, not on {x.device}")
        expected = forward_reference(x_host, host)
        err = max(
            float(np.max(np.abs(r.numpy() - e))) for r, e in zip(results, expected, strict=True)
        )
        print(f"step {step}: max abs error {err:.3e}, output {results[0].device}")
        worst = max(worst, err)
    return worst


def _have_matplotlib() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _print_header(args: argparse.Namespace, backend_name: str, native_ops: list[str]) -> None:
    """What the demo runs, and where each operator is served from on the device."""
    print(
        f"boxfall demo: transformer block, batch={args.batch} seq={SEQ} "
        f"hidden={args.hidden}, {args.steps} steps, float64, on {backend_name}"
    )
    print(
        f"{backend_name} runs natively: {', '.join(native_ops)}; "
        f"the other {len(CPU_OPS) - len(native_ops)} operators reach the CPU fallback"
    )
    for name in ("matmul", "layer_norm"):
        table = getattr(bf.ops.demo, name).default.dispatch_table()
        print(f"  dispatch table of {NS}::{name} for {backend_name}: {table[backend_name]}")


def run(args: argparse.Namespace) -> int:
    """The ``demo`` subcommand; returns the exit code (0 ok, 1 wrong results, 2 no matplotlib)."""
    if args.plot and not _have_matplotlib():
        print(
            "boxfall demo: --plot needs matplotlib, which is not installed "
            "(pip install matplotlib)",
            file=sys.stderr,
        )
        return 2
    if args.workload == "array-api":
        from boxfall import demo_array_api

        return demo_array_api.run(args)
    with bf.Library(NS, "DEF") as lib, bf.Library("_", "IMPL") as fb:
        define_operators(lib)
        if args.backend == "native":
            # The built-in Rust backend: Rust kernels where a schema matches, and the CPU
            # fallback (registered at import) for the rest.
            backend = bf.native.backend
            backend_name = "Native"
            native_ops = bf.native.register_kernels(lib)
        else:
            backend = accel_backend()
            backend_name = BACKEND
            register_accel_kernels(lib, backend)
            fb.fallback(bf.cpu_fallback, BACKEND)
            native_ops = [f"{NS}::{n}" for n in NATIVE_OPS]
        bf.metrics.reset()
        _print_header(args, backend_name, native_ops)
        start = time.perf_counter()
        try:
            worst = run_steps(args, backend)
        except DemoFailure as e:
            print(f"boxfall demo: FAILED: {e}", file=sys.stderr)
            return 1
        print(f"wall time: {(time.perf_counter() - start) * 1e3:.1f} ms for {args.steps} steps")
        print(bf.metrics.report())
        ok = worst <= TOLERANCE
        print(f"max abs error: {worst:.3e} (tolerance {TOLERANCE:g}) {'OK' if ok else 'FAILED'}")
        if args.plot:
            bf.metrics.plot(args.plot)
            print(f"fallback time per operator plotted to {args.plot}")
    return 0 if ok else 1


def _positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of the ``demo`` subcommand to ``parser``."""
    parser.add_argument("--batch", type=_positive_int, default=4, help="sequences (default 4)")
    parser.add_argument("--hidden", type=_positive_int, default=32, help="width (default 32)")
    parser.add_argument("--steps", type=_positive_int, default=5, help="forward passes (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--backend",
        choices=("accel", "native"),
        default="accel",
        help="accel: a Python device with 3 kernels of its own (default); "
        "native: the built-in Rust backend with its Rust kernels",
    )
    parser.add_argument(
        "--workload",
        choices=("transformer", "array-api"),
        default="transformer",
        help="transformer: the block of this module's operators (default); array-api: k-means "
        "and a ridge fit written with boxfall.array_api, on Accel with 3 kernels of its own",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help="save a chart of where the fallback time goes (bf.metrics.plot; needs matplotlib)",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the demo as a program of its own: ``python -m boxfall.demo [options]``."""
    parser = argparse.ArgumentParser(prog="python -m boxfall demo", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
