"""Calling operators: binding, errors, overloads, boxed calls and kernels, keys, tables."""

from __future__ import annotations

import threading

import boxfall as bf
import numpy as np
import pytest
from paths import both

ADD = "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"


class Recorder:
    """A CPU kernel that records how it was called and returns a fixed array."""

    def __init__(self, result=None):
        self.calls = []
        self.result = np.zeros(1) if result is None else result

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


def split_stack(op, stack):
    """A boxed stack as (positional, keyword-only) arguments of ``op``'s schema."""
    args, kwargs = [], {}
    for argument, value in zip(op.schema.arguments, stack, strict=True):
        if argument.kwarg_only:
            kwargs[argument.name] = value
        else:
            args.append(value)
    return args, kwargs


@pytest.fixture(scope="module")
def bare_accel2(backend_factory, bare_accel):
    """A second backend, registered after ``bare_accel`` and so ranked above it."""
    return backend_factory("DispAccelB")


@pytest.fixture(scope="module")
def trace(unique_name):
    """A functionality key of this module."""
    name = unique_name("Trace")
    bf.register_functionality_key(name)
    return name


# ---------------------------------------------------------------------------- binding


def test_numpy_cpu_kernel_receives_the_callers_own_arrays(ns, lib):
    lib.define(ADD)
    k = Recorder()
    lib.impl("add.Tensor", k, "CPU")
    x, y = np.arange(3.0), np.ones(3)
    getattr(bf.ops, ns).add.Tensor(x, y)
    (args, _kwargs) = k.calls[0]
    assert args[0] is x
    assert args[1] is y


def test_positional_by_position_kwarg_only_by_keyword_defaults_filled(ns, lib):
    lib.define(ADD)
    k = Recorder()
    lib.impl("add.Tensor", k, "CPU")
    x, y = np.arange(3.0), np.ones(3)
    getattr(bf.ops, ns).add.Tensor(x, y)
    getattr(bf.ops, ns).add.Tensor(x, other=y, alpha=2.5)
    (args0, kwargs0), (args1, kwargs1) = k.calls
    assert len(args0) == 2 and kwargs0 == {"alpha": 1}
    assert type(kwargs0["alpha"]) is int
    assert len(args1) == 2 and args1[1] is y and kwargs1 == {"alpha": 2.5}


def test_positional_parameters_may_be_given_by_keyword(ns, lib):
    lib.define(ADD)
    k = Recorder()
    lib.impl("add.Tensor", k, "CPU")
    x, y = np.arange(3.0), np.ones(3)
    getattr(bf.ops, ns).add.Tensor(self=x, other=y)
    (args, kwargs) = k.calls[0]
    assert args[0] is x and args[1] is y and kwargs == {"alpha": 1}


def test_positional_defaults_are_filled_positionally(ns, lib):
    lib.define("red(Tensor self, int dim=0, bool keepdim=False, float eps=1e-05) -> Tensor")
    k = Recorder()
    lib.impl("red", k, "CPU")
    x = np.ones((2, 2))
    getattr(bf.ops, ns).red(x)
    getattr(bf.ops, ns).red(x, keepdim=True)
    (args0, kwargs0), (args1, kwargs1) = k.calls
    assert args0[1:] == (0, False, 1e-05) and kwargs0 == {}
    assert args1[1:] == (0, True, 1e-05) and kwargs1 == {}


def test_optional_tensor_and_list_arguments(ns, lib):
    lib.define("f(Tensor[] xs, Tensor? w=None, int[] dims=[0, 1]) -> Tensor")
    k = Recorder()
    lib.impl("f", k, "CPU")
    a, b = np.ones(2), np.zeros(2)
    getattr(bf.ops, ns).f([a, b])
    args, _ = k.calls[0]
    assert args[0][0] is a and args[0][1] is b
    assert args[1] is None
    assert list(args[2]) == [0, 1]


BIND_SCHEMA = "b(Tensor x, int i, float f, bool flag, Scalar s) -> Tensor"
GOOD = {"x": np.ones(1), "i": 1, "f": 1.0, "flag": True, "s": 1}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("i", np.int64(3)),
        ("i", np.int32(3)),
        ("f", 2),
        ("f", np.float32(2.0)),
        ("f", np.float64(2.0)),
        ("flag", np.bool_(False)),
        ("s", 2.5),
        ("s", True),
        ("x", np.ones((2, 2))),
    ],
)
def test_binding_accepts(ns, lib, name, value):
    lib.define(BIND_SCHEMA)
    k = Recorder()
    lib.impl("b", k, "CPU")
    getattr(bf.ops, ns).b(**{**GOOD, name: value})
    (args, kwargs) = k.calls[0]
    got = args[list(GOOD).index(name)]
    assert got is value if name == "x" else got == value


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (True, bool),
        (np.bool_(False), bool),
        (3, int),
        (np.int64(-3), int),
        (np.uint8(7), int),
        (2.5, float),
        (np.float32(0.5), float),
        (np.float64(1.5), float),
    ],
)
def test_a_scalar_becomes_the_bool_int_or_float_it_is(ns, lib, value, kind):
    """Through call_boxed a Scalar is converted (Python's scalars and NumPy's by their kind) and
    the kernel gets it back as a Python bool, int or float of the same value."""
    lib.define("s(Scalar s) -> ()")
    seen = []
    lib.impl("s", lambda s: seen.append(s), "CPU")
    getattr(bf.ops, ns).s.default.call_boxed([value])
    assert type(seen[0]) is kind and seen[0] == value


@pytest.mark.parametrize("value", [1j, np.complex64(1), "1", None, np.str_("1")])
def test_a_scalar_of_no_such_kind_is_refused(ns, lib, value):
    lib.define("s(Scalar s) -> ()")
    lib.impl("s", lambda s: None, "CPU")
    with pytest.raises(TypeError, match=r"expected a Scalar \(int, float or bool\)"):
        getattr(bf.ops, ns).s.default.call_boxed([value])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("i", True),
        ("i", 1.5),
        ("i", "1"),
        ("f", True),
        ("f", "1.0"),
        ("flag", 1),
        ("s", "1"),
        ("x", [1.0, 2.0]),
        ("x", 3.0),
    ],
)
def test_binding_rejects_with_type_error_naming_the_schema(ns, lib, name, value):
    lib.define(BIND_SCHEMA)
    k = Recorder()
    lib.impl("b", k, "CPU")
    op = getattr(bf.ops, ns).b.default
    with pytest.raises(TypeError) as info:
        op(**{**GOOD, name: value})
    assert str(op.schema) in str(info.value)
    assert k.calls == []


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((np.ones(1),), {}),  # missing `other`
        ((np.ones(1), np.ones(1), 2), {}),  # alpha is keyword-only
        ((np.ones(1), np.ones(1)), {"beta": 2}),  # no such argument
        ((np.ones(1), np.ones(1)), {"self": np.ones(1)}),  # given twice
    ],
)
def test_wrong_arguments_raise_type_error_naming_the_schema(ns, lib, args, kwargs):
    lib.define(ADD)
    lib.impl("add.Tensor", Recorder(), "CPU")
    op = getattr(bf.ops, ns).add.Tensor
    with pytest.raises(TypeError) as info:
        op(*args, **kwargs)
    assert str(op.schema) in str(info.value)


# ---------------------------------------------------------------------------- results


def test_several_returns_come_back_as_a_tuple(ns, lib):
    lib.define("two(Tensor self) -> (Tensor, Tensor)")
    lib.impl("two", lambda self: (self + 1, self - 1), "CPU")
    out = getattr(bf.ops, ns).two(np.zeros(2))
    assert isinstance(out, tuple) and len(out) == 2
    np.testing.assert_array_equal(out[0], np.ones(2))
    np.testing.assert_array_equal(out[1], -np.ones(2))


def test_empty_returns_give_none(ns, lib):
    lib.define("touch_(Tensor(a!) self) -> ()")
    seen = []
    lib.impl("touch_", lambda self: seen.append(self), "CPU")
    x = np.zeros(1)
    assert getattr(bf.ops, ns).touch_(x) is None
    assert seen[0] is x


def test_call_without_tensors_dispatches_on_cpu(ns, lib, bare_accel):
    # Kernels on other keys too, so that "the first key with a kernel" (in any order of the
    # keys) would pick another one than CPU for one of the two operators.
    ran = []
    lib.define("make(int n) -> Tensor")
    for key in ("CPU", "Native", bare_accel.name):
        lib.impl("make", lambda n, key=key: ran.append(key) or np.arange(float(n)), key)
    np.testing.assert_array_equal(getattr(bf.ops, ns).make(3), np.arange(3.0))
    assert ran == ["CPU"]
    lib.define("elsewhere(int n) -> Tensor")
    for key in ("Native", bare_accel.name):
        lib.impl("elsewhere", lambda n, key=key: ran.append(key) or np.arange(float(n)), key)
    with pytest.raises(bf.NoKernelError, match="from the 'CPU' backend"):
        getattr(bf.ops, ns).elsewhere(3)
    assert ran == ["CPU"]


def test_device_argument_decides_the_key(ns, lib, bare_accel):
    lib.define("full(int n, float value, *, Device? device=None) -> Tensor")
    lib.impl("full", lambda n, value, *, device=None: np.full(n, value), "CPU")
    full = getattr(bf.ops, ns).full
    np.testing.assert_array_equal(full(2, 3.0), np.full(2, 3.0))
    np.testing.assert_array_equal(full(2, 3.0, device="cpu"), np.full(2, 3.0))
    for device in (bare_accel.name, bare_accel.name.lower(), f"{bare_accel.name}:0"):
        with pytest.raises(bf.NoKernelError) as info:
            full(2, 3.0, device=device)
        assert f"'{bare_accel.name}' backend" in str(info.value)


# ---------------------------------------------------------------------------- errors


def test_no_kernel_error_text(ns, lib, bare_accel):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", Recorder(), "CPU")
    lib.impl("foo", Recorder(), "Native")
    with pytest.raises(bf.NoKernelError) as info:
        getattr(bf.ops, ns).foo(bare_accel.tensor(np.ones(2)))
    assert str(info.value) == (
        f"Could not run '{ns}::foo' with arguments from the '{bare_accel.name}' backend. "
        f"'{ns}::foo' is only available for these backends: [CPU, Native]."
    )


def test_no_kernel_error_on_cpu(ns, lib, bare_accel):
    lib.define("foo.Tensor(Tensor self) -> Tensor")
    lib.impl("foo.Tensor", Recorder(), bare_accel.name)
    with pytest.raises(bf.NoKernelError) as info:
        getattr(bf.ops, ns).foo.Tensor(np.ones(2))
    assert str(info.value) == (
        f"Could not run '{ns}::foo.Tensor' with arguments from the 'CPU' backend. "
        f"'{ns}::foo.Tensor' is only available for these backends: [{bare_accel.name}]."
    )


def test_no_kernel_error_is_not_implemented_error():
    assert issubclass(bf.NoKernelError, NotImplementedError)
    assert issubclass(bf.NoKernelError, bf.BoxfallError)


class KernelProblem(Exception):
    """An exception type of the test's own."""


def test_kernel_exception_keeps_its_type_and_gets_a_note(ns, lib):
    lib.define("foo(Tensor self) -> Tensor")

    def fails(self):
        raise KernelProblem("kernel says no")

    lib.impl("foo", fails, "CPU")
    with pytest.raises(KernelProblem, match="kernel says no") as info:
        getattr(bf.ops, ns).foo(np.ones(1))
    notes = getattr(info.value, "__notes__", [])
    assert any(f"{ns}::foo" in n and "CPU" in n for n in notes), notes


# ---------------------------------------------------------------------------- overloads


def test_packet_picks_the_first_overload_that_binds(ns, lib):
    lib.define("pick.Tensor(Tensor self, Tensor other) -> str")
    lib.define("pick.Scalar(Tensor self, Scalar other) -> str")
    lib.define("pick.int(Tensor self, int other) -> str")
    lib.define("pick.str(Tensor self, str other) -> str")
    for overload in ("Tensor", "Scalar", "int", "str"):
        lib.impl(f"pick.{overload}", lambda self, other, o=overload: o, "CPU")
    pick = getattr(bf.ops, ns).pick
    x = np.ones(1)
    assert pick(x, np.ones(1)) == "Tensor"
    assert pick(x, 2.0) == "Scalar"
    assert pick(x, 3) == "Scalar"  # Scalar comes before int in definition order
    assert pick(x, "s") == "str"
    assert pick.int(x, 3) == "int"
    # By keyword too (the packet's vectorcall passes the names on to the binding).
    assert pick(self=x, other="s") == "str" and pick(x, other=2.0) == "Scalar"


def test_packet_raises_the_first_binding_overload_s_kernel_error_and_tries_no_later_one(ns, lib):
    lib.define("pick.Tensor(Tensor self, Tensor other) -> Tensor")
    lib.define("pick.Scalar(Tensor self, Scalar other) -> Tensor")
    lib.define("pick.float(Tensor self, float other) -> Tensor")
    later = Recorder()

    def refuses(self, other):
        raise KernelProblem("the Scalar overload says no")

    lib.impl("pick.Tensor", Recorder(), "CPU")
    lib.impl("pick.Scalar", refuses, "CPU")
    lib.impl("pick.float", later, "CPU")
    pick = getattr(bf.ops, ns).pick
    for _ in range(3):  # the first call plans each overload's fast path; the later ones use it
        with pytest.raises(KernelProblem, match="says no"):
            pick(np.ones(1), 1.5)
    assert later.calls == []


def test_packet_with_no_binding_overload_is_a_type_error(ns, lib):
    lib.define("pick.Tensor(Tensor self, Tensor other) -> Tensor")
    lib.impl("pick.Tensor", Recorder(), "CPU")
    with pytest.raises(TypeError):
        getattr(bf.ops, ns).pick(np.ones(1), "nope")


def test_default_overload(ns, lib):
    lib.define("foo(Tensor self) -> Tensor")
    lib.define("foo.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("foo", lambda self: self * 2, "CPU")
    foo = getattr(bf.ops, ns).foo
    assert foo.default.name == f"{ns}::foo"
    assert foo.out.name == f"{ns}::foo.out"
    np.testing.assert_array_equal(foo.default(np.ones(2)), np.full(2, 2.0))


# ---------------------------------------------------------------------------- boxed


def test_call_boxed_leaves_the_list_and_returns_the_returns(ns, lib):
    lib.define(ADD)
    lib.impl("add.Tensor", lambda self, other, *, alpha=1: self + alpha * other, "CPU")
    op = getattr(bf.ops, ns).add.Tensor
    x, y = np.ones(2), np.full(2, 3.0)
    stack = [x, y, 2]
    out = op.call_boxed(stack)
    assert isinstance(out, list) and len(out) == 1
    np.testing.assert_array_equal(out[0], np.full(2, 7.0))
    assert len(stack) == 3
    assert stack[0] is x and stack[1] is y and stack[2] == 2
    assert out is not stack


def test_boxed_kernel_gets_op_keys_and_every_argument(ns, lib):
    lib.define(ADD)
    seen = []

    def boxed(op, keys, stack):
        seen.append((op.name, keys, list(stack)))
        self, other, alpha = stack
        stack.clear()
        stack.append(self + alpha * other)

    lib.impl("add.Tensor", boxed, "CPU", boxed=True)
    x, y = np.ones(2), np.ones(2)
    out = getattr(bf.ops, ns).add.Tensor(x, y)
    np.testing.assert_array_equal(out, np.full(2, 2.0))
    name, keys, stack = seen[0]
    assert name == f"{ns}::add.Tensor"
    assert isinstance(keys, bf.DispatchKeySet)
    assert stack[0] is x and stack[1] is y and stack[2] == 1


def test_boxed_kernel_with_several_returns(ns, lib):
    lib.define("two(Tensor self) -> (Tensor, Tensor)")

    def boxed(op, keys, stack):
        (x,) = stack
        stack[:] = [x + 1, x + 2]

    lib.impl("two", boxed, "CPU", boxed=True)
    two = getattr(bf.ops, ns).two
    a, b = two(np.zeros(1))
    assert (a[0], b[0]) == (1.0, 2.0)
    boxed_out = two.default.call_boxed([np.zeros(1)])
    assert [r[0] for r in boxed_out] == [1.0, 2.0]


# ---------------------------------------------------------------------------- keys


def test_backends_registered_later_rank_higher(ns, lib, bare_accel, bare_accel2):
    lib.define("name(Tensor self, Tensor other) -> str")
    lib.impl("name", lambda self, other: "first", bare_accel.name)
    lib.impl("name", lambda self, other: "second", bare_accel2.name)
    a, b = bare_accel.tensor(np.ones(1)), bare_accel2.tensor(np.ones(1))
    assert getattr(bf.ops, ns).name(a, b) == "second"
    assert getattr(bf.ops, ns).name(b, a) == "second"
    assert getattr(bf.ops, ns).name(a, a) == "first"


def test_python_backend_kernel_receives_bf_tensors(ns, lib, bare_accel):
    lib.define("neg(Tensor self) -> Tensor")
    seen = []

    def neg(self):
        seen.append(self)
        return bare_accel.tensor(-self.payload.data)

    lib.impl("neg", neg, bare_accel.name)
    x = bare_accel.tensor(np.arange(3.0))
    out = getattr(bf.ops, ns).neg(x)
    assert isinstance(seen[0], bf.Tensor)
    assert seen[0].payload is x.payload
    assert isinstance(out, bf.Tensor) and out.device == bare_accel.device
    np.testing.assert_array_equal(out.numpy(), -np.arange(3.0))


def trace_kernel(log):
    """A boxed kernel for a functionality key: logs the operator, then redispatches."""

    def kernel(op, keys, stack):
        log.append(op.name)
        args, kwargs = split_stack(op, stack)
        stack[:] = [op.redispatch(keys, *args, **kwargs)]

    return kernel


def test_a_backend_kernel_reached_by_a_redispatch_is_counted_once(ns, lib, trace, bare_accel):
    lib.define("neg(Tensor self) -> Tensor")
    lib.impl("neg", lambda self: bare_accel.tensor(-self.payload.data), bare_accel.name)
    log = []
    lib.impl("neg", trace_kernel(log), trace, boxed=True)
    op = getattr(bf.ops, ns).neg
    x = bare_accel.tensor(np.arange(3.0))
    bf.metrics.reset()
    with bf.include_keys(trace):
        # The fast path's redispatch, then the general path's (the core routes the call and
        # its redispatch), then the core's boxed call of the trace kernel.
        for out in both(lambda: op(x)):
            np.testing.assert_array_equal(out.numpy(), -np.arange(3.0))
        op.default.call_boxed([x])
    assert log == [f"{ns}::neg"] * 3
    stats = bf.metrics.op_stats(f"{ns}::neg")
    # The backend's kernel once a call; the functionality key's kernel is not a backend's own.
    assert stats["kernel_calls"] == stats["backends"][bare_accel.name]["kernel_calls"] == 3
    assert stats["backends"].get(trace, {}).get("kernel_calls", 0) == 0


def test_functionality_key_runs_only_when_included(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", lambda self: self + 1, "CPU")
    log = []
    lib.impl("foo", trace_kernel(log), trace, boxed=True)
    foo = getattr(bf.ops, ns).foo
    np.testing.assert_array_equal(foo(np.zeros(1)), [1.0])
    assert log == []
    with bf.include_keys(trace):
        np.testing.assert_array_equal(foo(np.zeros(1)), [1.0])
    assert log == [f"{ns}::foo"]
    np.testing.assert_array_equal(foo(np.zeros(1)), [1.0])
    assert log == [f"{ns}::foo"]


def test_functionality_key_ranks_above_backends(ns, lib, trace, bare_accel):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", lambda self: bare_accel.tensor(self.payload.data + 1), bare_accel.name)
    log = []
    lib.impl("foo", trace_kernel(log), trace, boxed=True)
    x = bare_accel.tensor(np.ones(1))
    with bf.include_keys(trace):
        out = getattr(bf.ops, ns).foo(x)
    assert log == [f"{ns}::foo"]
    assert out.device == bare_accel.device
    np.testing.assert_array_equal(out.numpy(), [2.0])


def test_exclude_keys_wins_over_include_keys(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", lambda self: self + 1, "CPU")
    log = []
    lib.impl("foo", trace_kernel(log), trace, boxed=True)
    with bf.include_keys(trace):
        with bf.exclude_keys(trace):
            getattr(bf.ops, ns).foo(np.zeros(1))
        assert log == []
        getattr(bf.ops, ns).foo(np.zeros(1))
    assert log == [f"{ns}::foo"]


def test_exclude_a_backend_key(ns, lib, bare_accel):
    lib.define("where(Tensor self, Tensor other) -> str")
    lib.impl("where", lambda self, other: "accel", bare_accel.name)
    lib.impl("where", lambda self, other: "cpu", "CPU")
    where = getattr(bf.ops, ns).where
    x = bare_accel.tensor(np.ones(1))
    assert where(x, np.ones(1)) == "accel"
    with bf.exclude_keys(bare_accel.name):
        assert where(x, np.ones(1)) == "cpu"
    assert where(x, np.ones(1)) == "accel"


def test_include_keys_is_thread_local(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", lambda self: self, "CPU")
    log = []
    lib.impl("foo", trace_kernel(log), trace, boxed=True)
    x = np.ones(1)
    results = []
    with bf.include_keys(trace):
        worker = threading.Thread(target=lambda: results.append(getattr(bf.ops, ns).foo(x)))
        worker.start()
        worker.join()
        assert len(results) == 1
        assert log == []
        getattr(bf.ops, ns).foo(x)
    assert log == [f"{ns}::foo"]


def test_fallthrough_kernel_skips_the_key(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", lambda self: self + 1, "CPU")
    lib.impl("foo", bf.fallthrough, trace)
    op = getattr(bf.ops, ns).foo.default
    assert op.dispatch_table()[trace] == "fallthrough"
    with bf.include_keys(trace):
        np.testing.assert_array_equal(op(np.zeros(1)), [1.0])


def test_fallthrough_fallback_skips_the_key_for_every_operator(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.define("bar(Tensor self) -> Tensor")
    lib.impl("foo", lambda self: self + 1, "CPU")
    lib.impl("bar", lambda self: self + 2, "CPU")
    o = getattr(bf.ops, ns)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.fallthrough, trace)
        with bf.include_keys(trace):
            np.testing.assert_array_equal(o.foo(np.zeros(1)), [1.0])
            np.testing.assert_array_equal(o.bar(np.zeros(1)), [2.0])


def test_python_boxed_fallback_serves_every_operator(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.define(ADD)
    lib.impl("foo", lambda self: self + 1, "CPU")
    lib.impl("add.Tensor", lambda self, other, *, alpha=1: self + alpha * other, "CPU")
    o = getattr(bf.ops, ns)
    log = []
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(trace_kernel(log), trace)
        assert o.foo.default.dispatch_table()[trace] == "backend fallback"
        with bf.include_keys(trace):
            np.testing.assert_array_equal(o.foo(np.zeros(1)), [1.0])
            np.testing.assert_array_equal(o.add(np.ones(1), np.ones(1), alpha=3), [4.0])
    assert log == [f"{ns}::foo", f"{ns}::add.Tensor"]


def test_redispatch_skips_the_current_key(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", lambda self: self + 1, "CPU")
    calls = []

    def twice(op, keys, stack):
        calls.append(op.name)
        (x,) = stack
        stack[:] = [op.redispatch(keys, op.redispatch(keys, x))]

    lib.impl("foo", twice, trace, boxed=True)
    with bf.include_keys(trace):
        np.testing.assert_array_equal(getattr(bf.ops, ns).foo(np.zeros(1)), [2.0])
    assert calls == [f"{ns}::foo"]


# ---------------------------------------------------------------------------- tables


def test_dispatch_table_sources(ns, lib, bare_accel, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", Recorder(), "CPU")
    lib.impl("foo", bf.fallthrough, trace)
    table = getattr(bf.ops, ns).foo.default.dispatch_table()
    assert isinstance(table, dict)
    assert table["CPU"] == "kernel"
    assert table["Native"] == "backend fallback"  # cpu_fallback is registered at import
    assert table[bare_accel.name] == "missing"
    assert table[trace] == "fallthrough"


def test_composite_implicit_serves_backends_without_a_kernel(ns, lib, bare_accel):
    lib.define("inner(Tensor self) -> Tensor")
    lib.define("outer(Tensor self) -> Tensor")
    lib.impl("inner", lambda self: bare_accel.tensor(self.payload.data * 2), bare_accel.name)
    lib.impl("outer", lambda self: self + 100, "CPU")
    used = []

    def composite(self):
        used.append(self)
        return getattr(bf.ops, ns).inner(self)

    lib.impl("outer", composite, "CompositeImplicit")
    table = getattr(bf.ops, ns).outer.default.dispatch_table()
    assert table["CPU"] == "kernel"
    assert table[bare_accel.name] == "composite kernel"
    assert table["Native"] == "composite kernel"  # before the backend fallback
    x = bare_accel.tensor(np.ones(1))
    out = getattr(bf.ops, ns).outer(x)
    assert len(used) == 1 and used[0].payload is x.payload
    assert out.device == bare_accel.device
    np.testing.assert_array_equal(out.numpy(), [2.0])
    np.testing.assert_array_equal(getattr(bf.ops, ns).outer(np.ones(1)), [101.0])


def test_no_kernel_error_lists_composite_implicit(ns, lib, trace):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", Recorder(), "CPU")
    lib.impl("foo", Recorder(), "CompositeImplicit")
    # A composite kernel serves backend keys only: the functionality key has nothing.
    assert getattr(bf.ops, ns).foo.default.dispatch_table()[trace] == "missing"
    with bf.include_keys(trace), pytest.raises(bf.NoKernelError) as info:
        getattr(bf.ops, ns).foo(np.ones(1))
    assert str(info.value) == (
        f"Could not run '{ns}::foo' with arguments from the '{trace}' backend. "
        f"'{ns}::foo' is only available for these backends: [CPU, CompositeImplicit]."
    )


def test_composite_kernel_calls_stay_on_the_device(ns, lib, bare_accel):
    lib.define("foo(Tensor self) -> Tensor")
    lib.impl("foo", Recorder(), "CPU")
    lib.impl("foo", lambda self: getattr(bf.ops, ns).bar(self), "CompositeImplicit")
    lib.define("bar(Tensor self) -> Tensor")
    with pytest.raises(bf.NoKernelError) as info:
        getattr(bf.ops, ns).foo(bare_accel.tensor(np.ones(1)))
    # The composite ran and the call reached `bar`, which has nothing for the backend.
    assert str(info.value) == (
        f"Could not run '{ns}::bar' with arguments from the '{bare_accel.name}' backend. "
        f"'{ns}::bar' is only available for these backends: []."
    )
