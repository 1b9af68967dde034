"""The boxed CPU fallback: counting, mutation, devices, failures, policy, metrics, Native."""

from __future__ import annotations

import logging
import threading
import warnings

import boxfall as bf
import numpy as np
import pytest

ADD = "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
ADD_ = "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"
MUL_OUT = "mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"
STATS_KEYS = {
    "fallbacks",
    "failures",
    "fallback_ns",
    "to_cpu_ns",
    "kernel_ns",
    "from_cpu_ns",
    "bytes_to_cpu",
    "bytes_from_cpu",
    "kernel_calls",
    "kernel_call_ns",
    "narrowed",
    "last_failure",
    "backends",
}


def add_cpu(self, other, *, alpha=1):
    """NumPy CPU kernel of add.Tensor."""
    return self + alpha * other


def add_inplace_cpu(self, other, *, alpha=1):
    """NumPy CPU kernel of add_.Tensor: writes into ``self`` and returns it."""
    self += alpha * other
    return self


def mul_out_cpu(self, other, *, out):
    """NumPy CPU kernel of mul.out: writes into ``out`` and returns it."""
    np.multiply(self, other, out=out)
    return out


@pytest.fixture(scope="module")
def shared(backend_factory, accel):
    """A Python backend whose ``to_cpu`` returns the payload's own memory (shares_memory)."""
    backend = backend_factory("FbShared", shares_memory=True)
    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, backend.name)
    yield backend
    fb.close()


@pytest.fixture
def arith(ns, lib):
    """``bf.ops.<ns>`` with add.Tensor, add_.Tensor and mul.out defined, with CPU kernels."""
    lib.define(ADD)
    lib.define(ADD_)
    lib.define(MUL_OUT)
    lib.impl("add.Tensor", add_cpu, "CPU")
    lib.impl("add_.Tensor", add_inplace_cpu, "CPU")
    lib.impl("mul.out", mul_out_cpu, "CPU")
    return getattr(bf.ops, ns)


def define_unary(lib, name, fn=lambda self: self * 2):
    """Define ``name(Tensor self) -> Tensor`` with the CPU kernel ``fn``."""
    lib.define(f"{name}(Tensor self) -> Tensor")
    lib.impl(name, fn, "CPU")


# ---------------------------------------------------------------------------- counting


def test_two_operators_through_one_fallback_count_separately(ns, lib, accel):
    define_unary(lib, "foo")
    lib.define("bar.Tensor(Tensor self) -> Tensor")
    lib.impl("bar.Tensor", lambda self: self + 1, "CPU")
    o = getattr(bf.ops, ns)
    x = accel.tensor(np.ones(2))
    for _ in range(3):
        o.foo(x)
    for _ in range(2):
        o.bar.Tensor(x)
    assert bf.metrics.counter_value(f"{ns}::foo") == 3
    assert bf.metrics.counter_value(f"{ns}::bar.Tensor") == 2
    # The overload with the empty name, which is not defined: an error, not a silent 0.
    with pytest.raises(bf.UnknownOperatorError, match=rf"did you mean: {ns}::bar\.Tensor"):
        bf.metrics.counter_value(f"{ns}::bar")


def test_counter_of_an_operator_that_never_fell_back_is_zero(ns, lib):
    define_unary(lib, "foo")
    getattr(bf.ops, ns).foo(np.ones(1))  # plain CPU: no fallback
    assert bf.metrics.counter_value(f"{ns}::foo") == 0
    assert f"{ns}::foo" not in bf.metrics.counters()


def test_threads_count_exactly(ns, lib, accel):
    define_unary(lib, "foo")
    foo = getattr(bf.ops, ns).foo
    threads, calls = 4, 500
    start = threading.Barrier(threads)
    errors = []

    def work():
        x = accel.tensor(np.ones(4))
        start.wait()
        try:
            for _ in range(calls):
                foo(x)
        except Exception as e:  # reported below, in the test thread
            errors.append(e)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert bf.metrics.counter_value(f"{ns}::foo") == threads * calls
    assert bf.metrics.op_stats(f"{ns}::foo")["fallbacks"] == threads * calls


# ---------------------------------------------------------------------------- mutation


def test_inplace_operator_updates_the_device_tensor_and_returns_it(arith, accel):
    x = accel.tensor(np.arange(4.0))
    y = accel.tensor(np.ones(4))
    out = arith.add_.Tensor(x, y, alpha=2)
    assert out is x
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0) + 2)
    np.testing.assert_array_equal(y.numpy(), np.ones(4))


def test_inplace_through_the_packet(arith, accel):
    x = accel.tensor(np.zeros(2))
    assert arith.add_(x, accel.tensor(np.ones(2))) is x
    np.testing.assert_array_equal(x.numpy(), np.ones(2))


def test_inplace_kernel_returning_a_new_array_is_written_back(ns, lib, accel):
    lib.define(ADD_)
    lib.impl("add_.Tensor", add_cpu, "CPU")  # returns a new array, leaves `self`
    x = accel.tensor(np.arange(3.0))
    out = getattr(bf.ops, ns).add_.Tensor(x, accel.tensor(np.ones(3)))
    assert out is x
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0) + 1)


def test_out_variant_writes_into_out_and_returns_it(arith, accel):
    a = accel.tensor(np.arange(3.0))
    b = accel.tensor(np.full(3, 2.0))
    out = accel.tensor(np.zeros(3))
    result = arith.mul.out(a, b, out=out)
    assert result is out
    np.testing.assert_array_equal(out.numpy(), np.arange(3.0) * 2)
    np.testing.assert_array_equal(a.numpy(), np.arange(3.0))


def test_inplace_on_shared_memory_backend(arith, shared):
    x = shared.tensor(np.arange(3.0))
    assert arith.add_.Tensor(x, shared.tensor(np.ones(3))) is x
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0) + 1)


def test_mutable_arguments_that_are_not_returned_are_written_back(ns, lib, accel):
    lib.define("swap_(Tensor(a!) self, Tensor(b!) other) -> ()")

    def swap_(self, other):
        tmp = self.copy()
        self[...] = other
        other[...] = tmp

    lib.impl("swap_", swap_, "CPU")
    x, y = accel.tensor(np.zeros(2)), accel.tensor(np.ones(2))
    assert getattr(bf.ops, ns).swap_(x, y) is None
    np.testing.assert_array_equal(x.numpy(), np.ones(2))
    np.testing.assert_array_equal(y.numpy(), np.zeros(2))


def test_mutable_tensor_list_is_written_back_element_by_element(ns, lib, accel):
    lib.define("scale_(Tensor(a!)[] self, float factor) -> ()")

    def scale_(tensors, factor):
        for t in tensors:
            t *= factor

    lib.impl("scale_", scale_, "CPU")
    xs = [accel.tensor(np.ones(2)), accel.tensor(np.full(3, 2.0))]
    assert getattr(bf.ops, ns).scale_(xs, 3.0) is None
    np.testing.assert_array_equal(xs[0].numpy(), np.full(2, 3.0))
    np.testing.assert_array_equal(xs[1].numpy(), np.full(3, 6.0))


# ---------------------------------------------------------------------------- devices


def test_result_comes_back_on_the_device(arith, accel):
    x = accel.tensor(np.ones(3))
    out = arith.add(x, x, alpha=2)
    assert isinstance(out, bf.Tensor)
    assert out.device == accel.device
    assert isinstance(out.payload, accel.payload_type)
    np.testing.assert_array_equal(out.numpy(), np.full(3, 3.0))


def test_result_comes_back_on_the_device_index_of_the_first_input(arith, accel):
    x = accel.tensor(np.ones(2), index=1)
    assert x.device == f"{accel.name}:1"
    out = arith.add(x, np.ones(2))
    assert out.device == f"{accel.name}:1"
    np.testing.assert_array_equal(out.numpy(), np.full(2, 2.0))


def test_cpu_arguments_pass_unchanged(ns, lib, accel):
    seen = []

    def kernel(self, other, *, alpha=1):
        seen.append(other)
        return self + other

    lib.define(ADD)
    lib.impl("add.Tensor", kernel, "CPU")
    host = np.full(2, 5.0)
    out = getattr(bf.ops, ns).add(accel.tensor(np.ones(2)), host)
    assert seen[0] is host
    assert out.device == accel.device


def test_tensor_list_and_optional_tensor(ns, lib, accel):
    lib.define("cat(Tensor[] tensors, int dim=0) -> Tensor")
    lib.impl("cat", lambda tensors, dim=0: np.concatenate(tensors, axis=dim), "CPU")
    lib.define("scale(Tensor self, Tensor? weight=None) -> Tensor")
    lib.impl(
        "scale",
        lambda self, weight=None: self if weight is None else self * weight,
        "CPU",
    )
    o = getattr(bf.ops, ns)
    out = o.cat([accel.tensor(np.ones(2)), np.zeros(1), accel.tensor(np.full(1, 2.0))])
    assert out.device == accel.device
    np.testing.assert_array_equal(out.numpy(), [1.0, 1.0, 0.0, 2.0])
    x = accel.tensor(np.full(2, 3.0))
    np.testing.assert_array_equal(o.scale(x).numpy(), np.full(2, 3.0))
    np.testing.assert_array_equal(o.scale(x, accel.tensor(np.full(2, 2.0))).numpy(), [6.0, 6.0])


def test_several_returns_each_come_back_on_the_device(ns, lib, accel):
    lib.define("two(Tensor self) -> (Tensor, Tensor)")
    lib.impl("two", lambda self: (self + 1, self - 1), "CPU")
    a, b = getattr(bf.ops, ns).two(accel.tensor(np.zeros(2)))
    assert a.device == b.device == accel.device
    np.testing.assert_array_equal(a.numpy(), np.ones(2))
    np.testing.assert_array_equal(b.numpy(), -np.ones(2))


def test_device_argument_naming_the_backend_decides_the_result_device(ns, lib, accel):
    lib.define("full(int n, float value, *, Device? device=None) -> Tensor")
    lib.impl("full", lambda n, value, *, device=None: np.full(n, value), "CPU")
    full = getattr(bf.ops, ns).full
    for device, expected in [
        (accel.name, accel.device),
        (accel.name.lower(), accel.device),
        (f"{accel.name}:1", f"{accel.name}:1"),
    ]:
        out = full(2, 4.0, device=device)
        assert out.device == expected
        np.testing.assert_array_equal(out.numpy(), np.full(2, 4.0))
    assert isinstance(full(2, 4.0, device="cpu"), np.ndarray)


def test_tensors_of_two_devices_are_an_error_naming_both(arith, accel):
    with pytest.raises(bf.FallbackError) as info:
        arith.add(accel.tensor(np.ones(1)), bf.native.tensor(np.ones(1)))
    assert accel.name in str(info.value)
    assert "Native" in str(info.value)


def test_view_operator_is_refused(ns, lib, accel):
    lib.define("alias(Tensor(a) self) -> Tensor(a)")
    lib.impl("alias", lambda self: self, "CPU")
    with pytest.raises(bf.FallbackError) as info:
        getattr(bf.ops, ns).alias(accel.tensor(np.ones(1)))
    assert f"{ns}::alias" in str(info.value)
    # Refused: a fallback that failed, as every refusal is (docs/backend-authors.md, "What the
    # report says").
    stats = bf.metrics.op_stats(f"{ns}::alias")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)


def test_view_operator_with_copying_fallback_warns_and_copies(ns, lib, accel):
    lib.define("alias(Tensor(a) self) -> Tensor(a)")
    lib.impl("alias", lambda self: self, "CPU")
    op = getattr(bf.ops, ns).alias.default
    x = accel.tensor(np.arange(2.0))
    with pytest.warns(Warning):
        out = bf.call_fallback(bf.CpuFallback(views="copy"), op, x)
    assert out.device == accel.device
    np.testing.assert_array_equal(out.numpy(), np.arange(2.0))


# ---------------------------------------------------------------------------- failures


class KernelProblem(Exception):
    """An exception type of the test's own."""


def mutate_then_fail(self, other, *, alpha=1):
    """A CPU kernel of add_.Tensor that writes into ``self``, then raises."""
    self += 100
    raise KernelProblem("half done")


@pytest.mark.parametrize("backend_fixture", ["accel", "shared"])
def test_failing_kernel_leaves_the_device_tensor_unchanged(ns, lib, request, backend_fixture):
    backend = request.getfixturevalue(backend_fixture)
    lib.define(ADD_)
    lib.impl("add_.Tensor", mutate_then_fail, "CPU")
    x = backend.tensor(np.arange(3.0))
    with pytest.raises(KernelProblem) as info:
        getattr(bf.ops, ns).add_.Tensor(x, backend.tensor(np.ones(3)))
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0))
    notes = getattr(info.value, "__notes__", [])
    assert any(f"{ns}::add_.Tensor" in n for n in notes), notes
    stats = bf.metrics.op_stats(f"{ns}::add_.Tensor")
    assert stats["fallbacks"] == 1
    assert stats["failures"] == 1
    assert bf.metrics.counter_value(f"{ns}::add_.Tensor") == 1


# ---------------------------------------------------------------------------- policy


def test_warn_policy_warns_once_per_operator_and_backend(ns, lib, accel):
    define_unary(lib, "foo")
    define_unary(lib, "bar")
    o = getattr(bf.ops, ns)
    x = accel.tensor(np.ones(1))
    bf.set_fallback_policy("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            o.foo(x)
        o.foo(x)  # another call site
        o.bar(x)
    ours = [w for w in caught if issubclass(w.category, bf.FallbackWarning)]
    assert len(ours) == 2
    texts = [str(w.message) for w in ours]
    assert any(f"{ns}::foo" in t and accel.name in t for t in texts), texts
    assert any(f"{ns}::bar" in t and accel.name in t for t in texts), texts
    assert bf.metrics.counter_value(f"{ns}::foo") == 4  # warned, and ran


def test_warn_policy_warns_again_after_reset(ns, lib, accel):
    define_unary(lib, "foo")
    x = accel.tensor(np.ones(1))
    bf.set_fallback_policy("warn")
    with pytest.warns(bf.FallbackWarning):
        getattr(bf.ops, ns).foo(x)
    bf.metrics.reset()
    with pytest.warns(bf.FallbackWarning):
        getattr(bf.ops, ns).foo(x)


def test_error_policy_raises_and_counts_the_refusal(ns, lib, accel):
    """A refused fallback counts as a fallback that failed (fallbacks +1, failures +1)."""
    define_unary(lib, "foo")
    x = accel.tensor(np.ones(1))
    bf.set_fallback_policy("error")
    with pytest.raises(bf.FallbackError):
        getattr(bf.ops, ns).foo(x)
    stats = bf.metrics.op_stats(f"{ns}::foo")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)
    assert f"{ns}::foo" in bf.metrics.counter_names()
    bf.set_fallback_policy("allow")
    getattr(bf.ops, ns).foo(x)
    assert bf.metrics.counter_value(f"{ns}::foo") == 2
    assert bf.metrics.op_stats(f"{ns}::foo")["failures"] == 1


def test_fallback_error_is_not_implemented_error():
    assert issubclass(bf.FallbackError, NotImplementedError)
    assert issubclass(bf.FallbackError, bf.BoxfallError)


def test_error_policy_refuses_an_explicit_call_fallback_unless_the_operator_is_allowed(
    ns, lib, accel
):
    define_unary(lib, "foo")
    foo = getattr(bf.ops, ns).foo.default
    x = accel.tensor(np.ones(2))
    bf.set_fallback_policy("error")
    with pytest.raises(bf.FallbackError, match=rf"'{ns}::foo'.*'{accel.name}'.*\"error\""):
        bf.call_fallback(bf.cpu_fallback, foo, x)
    stats = bf.metrics.op_stats(f"{ns}::foo")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)
    bf.set_fallback_policy("allow", ops=[foo])
    out = bf.call_fallback(bf.cpu_fallback, foo, x)
    assert out.device == accel.device
    np.testing.assert_array_equal(out.numpy(), np.full(2, 2.0))


def test_error_policy_refuses_cpu_fallback_registered_as_a_kernel_too(ns, lib, accel):
    define_unary(lib, "foo")
    define_unary(lib, "bar")
    lib.impl("foo", bf.cpu_fallback, accel.name, boxed=True)
    o = getattr(bf.ops, ns)
    assert o.foo.default.dispatch_table()[accel.name] == "kernel"
    assert o.bar.default.dispatch_table()[accel.name] == "backend fallback"
    x = accel.tensor(np.ones(2))
    bf.set_fallback_policy("error")
    with pytest.raises(bf.FallbackError, match=rf"'{ns}::foo'"):
        o.foo(x)
    with pytest.raises(bf.FallbackError):
        o.bar(x)
    assert bf.metrics.op_stats(f"{ns}::foo")["failures"] == 1
    bf.set_fallback_policy("allow", ops=f"{ns}::foo")
    np.testing.assert_array_equal(o.foo(x).numpy(), np.full(2, 2.0))


def test_call_fallback_from_typed_code(arith, accel):
    x = accel.tensor(np.ones(2))
    out = bf.call_fallback(bf.cpu_fallback, arith.add.Tensor, x, x, alpha=3)
    assert out.device == accel.device
    np.testing.assert_array_equal(out.numpy(), np.full(2, 4.0))


# ---------------------------------------------------------------------------- metrics


def test_op_stats_fields(ns, lib, accel):
    define_unary(lib, "foo")
    # 32 bytes to the CPU; the result stays on the host (residency) until it is needed.
    bf.metrics.reset()
    y = getattr(bf.ops, ns).foo(accel.tensor(np.ones(4)))
    stats = bf.metrics.op_stats(f"{ns}::foo")
    assert set(stats) == STATS_KEYS
    assert stats["fallbacks"] == 1
    assert stats["failures"] == 0
    assert stats["bytes_to_cpu"] == 32
    assert stats["bytes_from_cpu"] == 0
    y.materialize()  # its 32 bytes cross now, counted as a transfer of their own
    assert bf.metrics.transfers()[accel.name]["bytes_materialized"] == 32
    assert isinstance(stats["fallback_ns"], int) and stats["fallback_ns"] > 0


def test_reset_counters_and_counter_names(ns, lib, accel):
    define_unary(lib, "foo")
    define_unary(lib, "bar")
    o = getattr(bf.ops, ns)
    x = accel.tensor(np.ones(1))
    o.foo(x)
    o.bar(x)
    assert {f"{ns}::foo", f"{ns}::bar"} <= set(bf.metrics.counter_names())
    bf.metrics.reset()
    assert bf.metrics.counter_value(f"{ns}::foo") == 0
    assert bf.metrics.op_stats(f"{ns}::foo")["fallbacks"] == 0
    assert bf.metrics.counters() == {}
    assert bf.metrics.counter_names() == []
    o.foo(x)
    o.foo(x)
    assert bf.metrics.counters() == {f"{ns}::foo": 2}
    assert bf.metrics.counter_names() == [f"{ns}::foo"]


def test_report_names_the_operators(ns, lib, accel):
    define_unary(lib, "foo")
    lib.define("bar.Tensor(Tensor self) -> Tensor")
    lib.impl("bar.Tensor", lambda self: self, "CPU")
    x = accel.tensor(np.ones(1))
    getattr(bf.ops, ns).foo(x)
    getattr(bf.ops, ns).bar.Tensor(x)
    report = bf.metrics.report()
    assert isinstance(report, str)
    assert f"{ns}::foo" in report
    assert f"{ns}::bar.Tensor" in report


def test_fallback_logs_at_debug(ns, lib, accel, caplog):
    define_unary(lib, "foo")
    caplog.set_level(logging.DEBUG, logger="boxfall")
    getattr(bf.ops, ns).foo(accel.tensor(np.ones(1)))
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("boxfall")]
    assert any(f"{ns}::foo" in m and accel.name in m for m in messages), messages


# ---------------------------------------------------------------------------- tensors


def test_tensor_properties_come_from_the_payload(accel):
    t = accel.tensor(np.zeros((2, 3), dtype=np.float32))
    assert tuple(t.shape) == (2, 3)
    assert "float32" in str(t.dtype)
    assert t.device == accel.device
    assert isinstance(t.payload, accel.payload_type)
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3)))


# ---------------------------------------------------------------------------- Native


def test_native_runs_a_cpu_only_operator_through_the_fallback(ns, lib):
    seen = []

    def double(self):
        seen.append(self)
        return self * 2

    define_unary(lib, "foo", double)
    x = bf.native.tensor(np.ones(3))
    assert x.device == "Native:0"
    out = getattr(bf.ops, ns).foo(x)
    assert isinstance(out, bf.Tensor)
    assert out.device == "Native:0"
    np.testing.assert_array_equal(out.numpy(), np.full(3, 2.0))
    assert isinstance(seen[0], np.ndarray) and not seen[0].flags.writeable
    assert bf.metrics.counter_value(f"{ns}::foo") == 1


def test_native_numpy_is_read_only_and_shares_memory():
    t = bf.native.tensor(np.arange(3.0))
    a, b = t.numpy(), t.numpy()
    assert not a.flags.writeable
    assert np.shares_memory(a, b)
    np.testing.assert_array_equal(a, np.arange(3.0))


def test_native_inplace_through_the_fallback(arith):
    x = bf.native.tensor(np.zeros(2))
    assert arith.add_.Tensor(x, bf.native.tensor(np.ones(2)), alpha=3) is x
    np.testing.assert_array_equal(x.numpy(), np.full(2, 3.0))


def test_native_failing_inplace_kernel_changes_nothing(ns, lib):
    lib.define(ADD_)
    lib.impl("add_.Tensor", mutate_then_fail, "CPU")
    x = bf.native.tensor(np.arange(2.0))
    with pytest.raises(KernelProblem):
        getattr(bf.ops, ns).add_.Tensor(x, bf.native.tensor(np.ones(2)))
    np.testing.assert_array_equal(x.numpy(), np.arange(2.0))
