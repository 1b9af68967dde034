"""The README's "A backend's own fallback": a backend's own boxed fallback that logs and counts,
then calls ``bf.cpu_fallback(op, keys, stack)``; ``bf.call_fallback`` from a kernel; and the
fallback policy on every way a call reaches the CPU fallback (README, same section)."""

from __future__ import annotations

import warnings

import boxfall as bf
import numpy as np
import pytest

ADD = "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
ADD_ = "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"
MUL_OUT = "mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"
COUNTS = ("fallbacks", "failures", "bytes_to_cpu", "bytes_from_cpu")


def add_cpu(self, other, *, alpha=1):
    return self + alpha * other


def add_inplace_cpu(self, other, *, alpha=1):
    self += alpha * other
    return self


def add_inplace_failing(self, other, *, alpha=1):
    self[...] = 99.0
    raise ArithmeticError("add_ fails after writing")


def mul_out_cpu(self, other, *, out):
    np.multiply(self, other, out=out)
    return out


class OwnFallback:
    """The backend's own boxed fallback: it records which operator and which devices, then
    calls the CPU fallback; it also records the stack a failed CPU fallback left."""

    def __init__(self, cpu: bf.CpuFallback = bf.cpu_fallback) -> None:
        self.cpu = cpu
        self.seen: list[tuple[str, list[str | None]]] = []
        self.left_after_failure: list[list[object]] = []

    def __call__(self, op, keys, stack):
        self.seen.append((op.name, [getattr(v, "device", None) for v in stack]))
        before = list(stack)
        try:
            self.cpu(op, keys, stack)
        except Exception:
            self.left_after_failure.append([a is b for a, b in zip(before, stack, strict=True)])
            raise


@pytest.fixture(scope="module")
def own(backend_factory):
    """A backend whose fallback is its own (``OwnFallback``), and that fallback."""
    backend = backend_factory("Accel")  # the name of bare_accel (conftest.py): no new key slot
    fallback = OwnFallback()
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(fallback, backend.name)
        yield backend, fallback


def arith(lib, add_inplace=add_inplace_cpu):
    lib.define(ADD)
    lib.define(ADD_)
    lib.define(MUL_OUT)
    lib.impl("add.Tensor", add_cpu, "CPU")
    lib.impl("add_.Tensor", add_inplace, "CPU")
    lib.impl("mul.out", mul_out_cpu, "CPU")
    return getattr(bf.ops, lib_ns(lib))


def lib_ns(lib) -> str:
    return repr(lib).split('"')[1]


def counts(name: str) -> tuple[int, ...]:
    stats = bf.metrics.op_stats(name)
    return tuple(stats[k] for k in COUNTS)


def run_all(o, backend):
    """add (with a keyword), add_ (in place), mul.out, and a mixed device/CPU add: what comes
    back, and whether returns that alias an argument are that argument."""
    x = backend.tensor(np.arange(3.0))
    y = backend.tensor(np.ones(3))
    out = backend.tensor(np.zeros(3))
    added = o.add(x, y, alpha=2)
    r_ = o.add_(y, x)
    r_out = o.mul.out(x, x, out=out)
    mixed = o.add(x, np.full(3, 10.0))
    return [
        (added.device.split(":")[1], added.numpy().tolist()),
        (r_ is y, y.numpy().tolist()),
        (r_out is out, out.numpy().tolist()),
        (mixed.device.split(":")[1], mixed.numpy().tolist()),
    ]


def test_cpu_fallback_objects_are_callable_boxed_kernels():
    assert callable(bf.cpu_fallback)
    assert callable(bf.CpuFallback(views="copy"))


def test_a_python_fallback_calling_cpu_fallback_gives_what_the_plain_registration_gives(
    unique_name, accel, own
):
    backend, fallback = own
    with bf.Library(unique_name("p"), "DEF") as lp, bf.Library(unique_name("o"), "DEF") as lo:
        p, o = arith(lp), arith(lo)
        by_plain = run_all(p, accel)
        by_own = run_all(o, backend)
        assert by_own == by_plain
        assert by_own[1] == (True, [1.0, 2.0, 3.0])
        for name in ("add.Tensor", "add_.Tensor", "mul.out"):
            assert counts(f"{lib_ns(lo)}::{name}") == counts(f"{lib_ns(lp)}::{name}"), name
        assert bf.metrics.counter_value(f"{lib_ns(lo)}::add.Tensor") == 2
        # The fallback of its own saw each call: which operator, which devices.
        device = backend.device
        on_cpu = getattr(np.zeros(0), "device", None)  # NumPy 2 says "cpu"
        assert fallback.seen[-4:] == [
            (f"{lib_ns(lo)}::add.Tensor", [device, device, None]),
            (f"{lib_ns(lo)}::add_.Tensor", [device, device, None]),
            (f"{lib_ns(lo)}::mul.out", [device, device, device]),
            (f"{lib_ns(lo)}::add.Tensor", [device, on_cpu, None]),
        ]


def test_a_failing_cpu_kernel_behind_a_python_fallback_changes_nothing_and_counts_a_failure(
    lib, own
):
    backend, fallback = own
    o = arith(lib, add_inplace=add_inplace_failing)
    y = backend.tensor(np.ones(2))
    with pytest.raises(ArithmeticError, match="add_ fails after writing"):
        o.add_(y, backend.tensor(np.ones(2)))
    np.testing.assert_array_equal(y.numpy(), np.ones(2))
    assert fallback.left_after_failure[-1] == [True, True, True], "the stack is as it was"
    stats = bf.metrics.op_stats(f"{lib_ns(lib)}::add_.Tensor")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)


def test_cpu_fallback_called_with_a_wrong_stack_raises_a_type_error_naming_the_schema(lib, accel):
    o = arith(lib)
    op = o.add.Tensor
    keys_seen = []

    def grab(op, keys, stack):
        keys_seen.append(keys)
        stack[:] = [stack[0]]

    lib.impl("add.Tensor", grab, accel.name, boxed=True)
    x = accel.tensor(np.ones(1))
    o.add(x, x)
    with pytest.raises(TypeError, match=r"add\.Tensor.*all 3 arguments"):
        bf.cpu_fallback(op, keys_seen[0], [x, x])
    with pytest.raises(TypeError, match="argument 'alpha'"):
        bf.cpu_fallback(op, keys_seen[0], [x, x, "two"])


def test_call_fallback_takes_keyword_only_arguments_of_any_name(lib, accel):
    lib.define("scaled(Tensor self, *, Tensor op, Scalar fallback=1, Scalar alpha=1) -> Tensor")
    lib.impl(
        "scaled",
        lambda self, *, op, fallback=1, alpha=1: self * alpha + op * fallback,
        "CPU",
    )
    scaled = getattr(bf.ops, lib_ns(lib)).scaled.default
    x = accel.tensor(np.ones(2))
    out = bf.call_fallback(bf.cpu_fallback, scaled, x, op=x, fallback=3, alpha=2)
    assert out.device == accel.device
    np.testing.assert_array_equal(out.numpy(), np.full(2, 5.0))
    np.testing.assert_array_equal(scaled(x, op=x, fallback=3, alpha=2).numpy(), np.full(2, 5.0))
    assert bf.metrics.counter_value(scaled.name) == 2


# ---------------------------------------------------------------------------- policy


def reach_by_own_fallback(o, x):
    return o.add(x, x)


def reach_by_registration(o, x):
    return o.add(x, x)


def reach_by_call_fallback(o, x):
    return bf.call_fallback(bf.cpu_fallback, o.add.Tensor, x, x, alpha=1)


def reach_by_own_kernel(o, x):
    return o.add(x, x)


PATHS = {
    "registered": ("plain", reach_by_registration),
    "own fallback": ("own", reach_by_own_fallback),
    # An explicit call, and an operator's own kernel, are what run on a backend that has a
    # fallback registered too.
    "explicit call_fallback": ("plain", reach_by_call_fallback),
    "cpu_fallback as the operator's kernel": ("plain", reach_by_own_kernel),
}


@pytest.fixture(params=list(PATHS))
def path(request, lib, accel, own):
    """``(ops, backend, reach)``: add.Tensor, reached on a backend in one of the four ways."""
    where, reach = PATHS[request.param]
    backend = {"plain": accel, "own": own[0]}[where]
    o = arith(lib)
    if reach is reach_by_own_kernel:
        lib.impl("add.Tensor", bf.cpu_fallback, backend.name, boxed=True)
    return o, backend, reach


def test_the_error_policy_refuses_every_path_and_an_operators_allow_exempts_it(path):
    o, backend, reach = path
    name = o.add.Tensor.name
    x = backend.tensor(np.ones(2))
    bf.set_fallback_policy("error")
    with pytest.raises(bf.FallbackError, match=rf"'{name}'.*'{backend.name}'.*\"error\""):
        reach(o, x)
    stats = bf.metrics.op_stats(name)
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)
    np.testing.assert_array_equal(x.numpy(), np.ones(2))
    bf.set_fallback_policy("allow", ops=[name])
    np.testing.assert_array_equal(reach(o, x).numpy(), np.full(2, 2.0))
    bf.set_fallback_policy(None, ops=[name])
    with pytest.raises(bf.FallbackError):
        reach(o, x)


def test_the_warn_policy_warns_once_on_every_path(path):
    o, backend, reach = path
    name = o.add.Tensor.name
    bf.set_fallback_policy("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            np.testing.assert_array_equal(
                reach(o, backend.tensor(np.ones(2))).numpy(), np.full(2, 2.0)
            )
    ours = [w for w in caught if issubclass(w.category, bf.FallbackWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert f"'{name}'" in str(ours[0].message) and f"'{backend.name}'" in str(ours[0].message)
    assert bf.metrics.counter_value(name) == 3


def test_a_cpu_fallback_object_runs_the_cpu_kernel_the_operator_has_at_the_call(lib, accel):
    """``bf.call_fallback`` runs the kernel a ``bf.CpuFallback`` made once, with the object,
    around the CPU kernel the operator's table holds at the call: one registered after the
    first call, and one taken away, are what the next calls run; each call counts once; with
    no CPU kernel, the error names the operator and the CPU, the backend that has nothing."""
    lib.define("neg(Tensor self) -> Tensor")
    ns = lib_ns(lib)
    neg = getattr(bf.ops, ns).neg.default
    cpu = bf.CpuFallback(views="copy")
    x = accel.tensor(np.array([1.0, 2.0]))
    with pytest.raises(bf.NoKernelError) as missing:
        bf.call_fallback(cpu, neg, x)
    assert neg.name in str(missing.value)
    assert "from the 'CPU' backend" in str(missing.value)
    lib.impl("neg", np.negative, "CPU")
    out = bf.call_fallback(cpu, neg, x)
    assert out.device == accel.device
    assert out.numpy().tolist() == [-1.0, -2.0]
    with bf.Library(ns, "IMPL") as twice:
        twice.impl("neg", lambda a: -2 * a, "CPU", allow_override=True)
        assert bf.call_fallback(cpu, neg, x).numpy().tolist() == [-2.0, -4.0]
    assert bf.call_fallback(cpu, neg, x).numpy().tolist() == [-1.0, -2.0]
    assert counts(neg.name)[:2] == (4, 1)
