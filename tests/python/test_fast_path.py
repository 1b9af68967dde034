"""The fast path of Python calls (a Python kernel called with the caller's objects) gives what
the general path (IValues through the core) gives: the same values, objects and errors.

``paths`` runs a test twice, with the fast path on and off (``_boxfall.set_fast_path``).
"""

from __future__ import annotations

import logging

import boxfall as bf
import numpy as np
import pytest
from paths import both, error_of

ADD = "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"


@pytest.fixture(scope="module")
def trace(unique_name):
    name = unique_name("FastTrace")
    bf.register_functionality_key(name)
    return name


def op_of(ns, name, overload="default"):
    return getattr(getattr(getattr(bf.ops, ns), name), overload)


# ---------------------------------------------------------------------------- arguments


def test_kernel_gets_the_callers_arrays_and_keyword_only_arguments(ns, lib, paths):
    lib.define(ADD)
    seen = []

    def kernel(self, other, *, alpha):  # no Python default: the schema's is filled in
        seen.append((self, other, alpha))
        return self

    lib.impl("add.Tensor", kernel, "CPU")
    a, b = np.ones(2), np.zeros(2)
    op = op_of(ns, "add", "Tensor")
    assert op(a, b) is a
    assert op(a, other=b, alpha=2.5) is a
    assert op(self=a, other=b) is a
    assert seen[0][0] is a and seen[0][1] is b and seen[0][2] == 1
    assert type(seen[0][2]) is int
    assert seen[1][2] == 2.5 and seen[2][1] is b


def test_arguments_reach_the_kernel_converted_as_the_schema_says(ns, lib):
    lib.define("f(int i, float x, bool b, Scalar s, str t, int? n=None, float y=2) -> Tensor")
    seen = []

    def kernel(*args):
        seen.append(args)
        return np.zeros(1)

    lib.impl("f", kernel, "CPU")
    op = op_of(ns, "f")

    class Str(str):
        pass

    calls = [
        (3, 1.5, True, 2, "a"),
        (np.int64(3), 1, np.bool_(False), np.float32(0.5), Str("b")),
        (2**40, np.float64(2.0), True, False, "c", 7, 4),
        (-1, 0.0, False, 3.25, "", None),
    ]
    for args in calls:
        seen.clear()
        both(lambda args=args: op(*args))
        fast, general = seen
        assert fast == general
        assert [type(v) for v in fast] == [type(v) for v in general]
    assert [type(v) for v in seen[0]] == [int, float, bool, float, str, type(None), float]


@pytest.mark.parametrize(
    "call",
    [
        lambda op, a: op(a),
        lambda op, a: op(a, a, a),
        lambda op, a: op(a, a, 1),
        lambda op, a: op(a, a, alpha="x"),
        lambda op, a: op(a, a, beta=1),
        lambda op, a: op(a, self=a, other=a),
        lambda op, a: op(a, 3),
        lambda op, a: op([1.0], a),
        lambda op, a: op(a, a, alpha=2**70),
        lambda op, a: op(a, None),
    ],
)
def test_binding_errors_are_the_same_on_both_paths(ns, lib, call):
    lib.define(ADD)
    lib.impl("add.Tensor", lambda self, other, alpha=1: self, "CPU")
    op = op_of(ns, "add", "Tensor")
    a = np.ones(1)
    fast, general = both(lambda: error_of(lambda: call(op, a)))
    assert fast == general
    assert fast[0] is bf.ArgumentError and issubclass(fast[0], TypeError)
    assert "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor" in fast[1]


def test_optional_tensor_and_defaults(ns, lib, paths):
    lib.define("g(Tensor x, Tensor? w=None, *, bool flag=False, str mode='sum') -> Tensor")
    seen = []

    def kernel(x, w, *, flag, mode):
        seen.append((x, w, flag, mode))
        return x

    lib.impl("g", kernel, "CPU")
    op = op_of(ns, "g")
    a = np.ones(1)
    assert op(a) is a
    assert op(a, a, flag=True, mode="mean") is a
    assert seen == [(a, None, False, "sum"), (a, a, True, "mean")]


# ---------------------------------------------------------------------------- returns


def test_returns_are_converted_as_the_general_path_converts_them(ns, lib):
    lib.define("two(Tensor x) -> (Tensor a, Tensor b)")
    lib.define("num(Tensor x) -> float")
    lib.define("nothing(Tensor x) -> ()")
    lib.define("maybe(Tensor x) -> Tensor?")
    out = np.zeros(1)
    lib.impl("two", lambda x: [x, out], "CPU")
    lib.impl("num", lambda x: np.float64(1.5), "CPU")
    lib.impl("nothing", lambda x: 42, "CPU")
    lib.impl("maybe", lambda x: None, "CPU")
    a = np.ones(1)
    fast, general = both(lambda: op_of(ns, "two")(a))
    assert type(fast) is tuple and fast[0] is a and fast[1] is out
    assert general[0] is a and general[1] is out
    fast, general = both(lambda: op_of(ns, "num")(a))
    assert fast == general == 1.5 and type(fast) is type(general) is float
    assert both(lambda: op_of(ns, "nothing")(a)) == (None, None)
    assert both(lambda: op_of(ns, "maybe")(a)) == (None, None)


@pytest.mark.parametrize(
    "schema,kernel",
    [
        ("r(Tensor x) -> Tensor", lambda x: 3),
        ("r(Tensor x) -> int", lambda x: 1.5),
        ("r(Tensor x) -> int", lambda x: 2**70),
        ("r(Tensor x) -> (Tensor, Tensor)", lambda x: x),
        ("r(Tensor x) -> (Tensor, Tensor)", lambda x: (x, x, x)),
        ("r(Tensor x) -> (Tensor, int)", lambda x: (x, "no")),
    ],
)
def test_bad_returns_raise_the_same_kernel_error(ns, lib, schema, kernel):
    lib.define(schema)
    lib.impl("r", kernel, "CPU")
    op = op_of(ns, "r")
    fast, general = both(lambda: error_of(lambda: op(np.ones(1))))
    assert fast == general
    assert fast[0] is bf.KernelError and f"{ns}::r" in fast[1]


def test_kernel_exceptions_keep_their_type_and_get_the_same_note(ns, lib):
    lib.define("boom(Tensor x) -> Tensor")

    def boom(x):
        raise ZeroDivisionError("inner")

    lib.impl("boom", boom, "CPU")
    fast, general = both(lambda: error_of(lambda: op_of(ns, "boom")(np.ones(1))))
    assert fast == general
    assert fast[0] is ZeroDivisionError
    assert fast[2] == [f"while running the 'CPU' kernel of '{ns}::boom'"]


def test_in_place_returns_the_same_object(ns, lib, paths):
    lib.define("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)")

    def add_(self, other, alpha=1):
        self += alpha * other
        return self

    lib.impl("add_.Tensor", add_, "CPU")
    a = np.ones(2)
    assert op_of(ns, "add_", "Tensor")(a, np.ones(2), alpha=2) is a
    assert a.tolist() == [3.0, 3.0]


# ---------------------------------------------------------------------------- device tensors


def test_device_tensors_reach_a_python_kernel_as_the_general_path_gives_them(ns, lib, bare_accel):
    lib.define("pair(Tensor x, Tensor y) -> (Tensor, Tensor, Tensor)")
    seen = []

    def kernel(x, y):
        seen.append((x, y))
        return x, y, bare_accel.tensor(np.zeros(1))

    lib.impl("pair", kernel, bare_accel.name)
    t = bare_accel.tensor(np.ones(1))
    u = bare_accel.tensor(np.ones(1))
    op = op_of(ns, "pair")
    for result in both(lambda: op(t, t)) + both(lambda: op(t, u)):
        assert result[0] is t and result[2].device == bare_accel.device
    for pair in seen:
        assert all(isinstance(v, bf.Tensor) and v.device == bare_accel.device for v in pair)
    # One tensor passed twice reaches the kernel as one object, on both paths.
    assert seen[0][0] is seen[0][1] and seen[1][0] is seen[1][1]
    assert seen[2][0] is not seen[2][1]


def test_native_tensors_still_go_through_the_counted_cpu_fallback(ns, lib, paths):
    lib.define("add(Tensor self, Tensor other) -> Tensor")
    lib.impl("add", lambda a, b: np.add(a, b), "CPU")
    x = bf.native.tensor(np.ones(2))
    bf.metrics.reset()
    y = op_of(ns, "add")(x, x)
    assert y.device == "Native:0" and y.numpy().tolist() == [2.0, 2.0]
    assert bf.metrics.counter_value(f"{ns}::add") == 1


# ---------------------------------------------------------------------------- keys


def test_a_python_boxed_fallback_hop_on_the_fast_path(ns, lib, trace, paths):
    lib.define(ADD)
    lib.impl("add.Tensor", lambda self, other, alpha=1: self + alpha * other, "CPU")
    seen = []

    def hop(op, keys, stack):
        seen.append((op.name, keys.highest(), list(stack)))
        op.redispatch_boxed(keys, stack)

    a = np.ones(1)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            r = op_of(ns, "add", "Tensor")(a, a, alpha=2)
    assert r.tolist() == [3.0]
    assert seen[0][0] == f"{ns}::add.Tensor" and seen[0][1] == trace
    assert seen[0][2][0] is a and seen[0][2][1] is a and seen[0][2][2] == 2


def test_a_boxed_kernel_that_leaves_other_values_fails_alike(ns, lib, trace):
    # A boxed kernel must leave the schema's returns: two values for `-> Tensor` are an error
    # on both paths (they were once returned as a tuple).
    lib.define("h(Tensor x) -> Tensor")
    lib.impl("h", lambda x: x, "CPU")

    def odd(op, keys, stack):
        stack[:] = [stack[0], 5]

    a = np.ones(1)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(odd, trace)
        with bf.include_keys(trace):
            fast, general = both(lambda: error_of(lambda: op_of(ns, "h")(a)))
    assert fast == general
    assert fast[0] is bf.KernelError
    assert f"{ns}::h" in fast[1] and trace in fast[1] and "left 2 values" in fast[1]


def test_redispatch_boxed_fast_and_general_agree(ns, lib, trace):
    lib.define(ADD)
    lib.impl("add.Tensor", lambda self, other, alpha=1: self * 10 + alpha, "CPU")

    def hop(op, keys, stack):
        op.redispatch_boxed(keys, stack)

    a = np.ones(1)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            fast, general = both(lambda: op_of(ns, "add", "Tensor")(a, a, alpha=3))
    assert fast.tolist() == general.tolist() == [13.0]


def test_the_documented_redispatch_hop_gives_the_same_on_both_paths(ns, lib, trace, paths):
    # `stack[:] = [op.redispatch(keys, *stack)]`, the form the docs show (every argument in the
    # stack, so none keyword-only), with a default in the stack and the caller's array coming
    # back as itself.
    lib.define("add.Tensor(Tensor self, Tensor other, Scalar alpha=1) -> Tensor")
    lib.impl("add.Tensor", lambda self, other, alpha=1: self * 10 + alpha * other, "CPU")
    lib.define("same(Tensor(a) x) -> Tensor(a)")
    lib.impl("same", lambda x: x, "CPU")
    seen = []

    def hop(op, keys, stack):
        seen.append(keys.names()[0])
        stack[:] = [op.redispatch(keys, *stack)]

    a, b = np.ones(1), np.full(1, 2.0)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            r = op_of(ns, "add", "Tensor")(a, b, alpha=3)
            same = op_of(ns, "same")(a)
    assert r.tolist() == [16.0]
    assert same is a
    assert seen == [trace, trace]


def test_redispatch_reaches_the_cpu_fallback_alike_on_both_paths(ns, lib, trace):
    # A redispatch whose next kernel is no Python function (here Native's CPU fallback) runs
    # it with the same counters and result on both paths.
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")

    def hop(op, keys, stack):
        stack[:] = [op.redispatch(keys, *stack)]

    x = bf.native.tensor(np.array([1.0, 2.0]))
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)

        def run():
            bf.metrics.reset()
            with bf.include_keys(trace):
                y = op_of(ns, "twice")(x)
            return y.device, y.numpy().tolist(), bf.metrics.counter_value(f"{ns}::twice")

        fast, general = both(run)
    assert fast == general == ("Native:0", [2.0, 4.0], 1)


def test_redispatch_binding_errors_are_the_same_on_both_paths(ns, lib, trace):
    lib.define(ADD)
    lib.impl("add.Tensor", lambda self, other, alpha=1: self, "CPU")

    def hop(op, keys, stack):
        op.redispatch(keys, stack[0], "not a tensor")

    a = np.ones(1)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            fast, general = both(lambda: error_of(lambda: op_of(ns, "add", "Tensor")(a, a)))
    assert fast == general
    assert "other" in fast[1] and f"{ns}::add.Tensor" in fast[1]


def test_fallthrough_and_excluded_keys_are_respected(ns, lib, trace, paths):
    lib.define("k(Tensor x) -> Tensor")
    lib.impl("k", lambda x: x, "CPU")
    seen = []

    def boxed(op, keys, stack):
        seen.append(keys.names())
        op.redispatch_boxed(keys, stack)

    lib.impl("k", boxed, trace, boxed=True)
    a = np.ones(1)
    op = op_of(ns, "k")
    with bf.include_keys(trace):
        assert op(a) is a
        with bf.exclude_keys(trace):
            assert op(a) is a
    assert seen == [[trace, "CPU"]]


def test_an_operator_redefined_with_another_schema(ns, paths):
    with bf.Library(ns, "DEF") as lib1:
        lib1.define("re(Tensor x) -> Tensor")
        lib1.impl("re", lambda x: x, "CPU")
        op = op_of(ns, "re")
        a = np.ones(1)
        assert op(a) is a
    with bf.Library(ns, "DEF") as lib2:
        lib2.define("re(Tensor x, int n=2) -> int")
        lib2.impl("re", lambda x, n: n, "CPU")
        assert op(a) == 2
        assert op(a, 5) == 5
    with pytest.raises(bf.UnknownOperatorError):
        op(a)


def test_a_kernel_registered_over_another_serves_the_next_call(ns, lib, paths):
    # Each registration publishes a new table; a call made before it (whose kernel the lean
    # path found) must not leave that kernel to the calls after it, nor after the closing.
    lib.define("k(Tensor x) -> int")
    lib.impl("k", lambda x: 1, "CPU")
    op = op_of(ns, "k")
    a = np.ones(1)
    assert [op(a), op(a)] == [1, 1]
    with bf.Library(ns, "IMPL") as over:
        over.impl("k", lambda x: 2, "CPU", allow_override=True)
        assert [op(a), op(a)] == [2, 2]
        with bf.Library(ns, "IMPL") as over2:
            over2.impl("k", lambda x: 3, "CPU", allow_override=True)
            assert op(a) == 3
        assert op(a) == 2
    assert op(a) == 1


def test_a_table_republished_while_a_call_is_cached_gives_the_new_kernel(ns, lib, paths):
    # The kernel itself registers a new kernel for its operator during its call: the call in
    # progress finishes with the old one, the next call gets the new one.
    lib.define("k(Tensor x) -> int")
    op = op_of(ns, "k")
    a = np.ones(1)
    kept = []

    def first(x):
        if not kept:
            over = bf.Library(ns, "IMPL")
            over.impl("k", lambda x: 2, "CPU", allow_override=True)
            kept.append(over)
        return 1

    lib.impl("k", first, "CPU")
    try:
        assert [op(a), op(a), op(a)] == [1, 2, 2]
    finally:
        kept[0].close()
    assert op(a) == 1


def test_an_operator_redefined_with_the_same_schema_gets_its_new_kernel(ns, paths):
    a = np.ones(1)
    with bf.Library(ns, "DEF") as lib1:
        lib1.define("same(Tensor x) -> int")
        lib1.impl("same", lambda x: 1, "CPU")
        op = op_of(ns, "same")
        assert [op(a), op(a)] == [1, 1]
    with bf.Library(ns, "DEF") as lib2:
        lib2.define("same(Tensor x) -> int")
        lib2.impl("same", lambda x: 2, "CPU")
        assert [op(a), op(a)] == [2, 2]


def test_the_documented_hop_reaches_a_kernel_registered_between_two_hops(ns, lib, trace, paths):
    lib.define("h(Tensor x) -> int")
    lib.impl("h", lambda x: 1, "CPU")
    op = op_of(ns, "h")
    a = np.ones(1)

    def documented(op, keys, stack):
        stack[:] = [op.redispatch(keys, *stack)]

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(documented, trace)
        with bf.include_keys(trace):
            assert [op(a), op(a)] == [1, 1]
            with bf.Library(ns, "IMPL") as over:
                over.impl("h", lambda x: 2, "CPU", allow_override=True)
                assert [op(a), op(a)] == [2, 2]
            assert op(a) == 1


def test_a_missing_kernel_is_the_same_error(ns, lib, bare_accel):
    lib.define("m(Tensor x) -> Tensor")
    lib.impl("m", lambda x: x, "CPU")
    t = bare_accel.tensor(np.ones(1))
    fast, general = both(lambda: error_of(lambda: op_of(ns, "m")(t)))
    assert fast == general and fast[0] is bf.NoKernelError


# ---------------------------------------------------------------------------- lent memory, logs


def test_lent_native_memory_is_read_only_for_the_kernel(ns, lib):
    lib.define("w(Tensor x) -> Tensor")

    def kernel(x):
        assert not x.flags.writeable
        with pytest.raises(ValueError):
            x[0] = 5.0
        return x + 1

    lib.impl("w", kernel, "CPU")
    x = bf.native.tensor(np.ones(3))
    assert op_of(ns, "w")(x).numpy().tolist() == [2.0, 2.0, 2.0]
    assert x.numpy().tolist() == [1.0, 1.0, 1.0]


def _native_fallback_op(ns, lib, name):
    """An operator with only a CPU kernel, and a Native tensor to call it on (so it falls back)."""
    lib.define(f"{name}(Tensor x) -> Tensor")
    lib.impl(name, lambda x: x + 1, "CPU")
    return op_of(ns, name), bf.native.tensor(np.ones(1)), logging.getLogger("boxfall")


def test_fallback_debug_logs_follow_level_changes(ns, lib, caplog):
    op, x, logger = _native_fallback_op(ns, lib, "lg")

    def records():
        return [r for r in caplog.records if r.name == "boxfall" and f"{ns}::lg" in r.getMessage()]

    caplog.set_level(logging.INFO, logger="boxfall")
    op(x)
    assert records() == []
    caplog.set_level(logging.DEBUG, logger="boxfall")
    op(x)
    assert len(records()) == 1 and records()[0].levelno == logging.DEBUG
    logger.disabled = True
    try:
        op(x)
    finally:
        logger.disabled = False
    assert len(records()) == 1
    op(x)
    assert len(records()) == 2


def test_a_remembered_debug_off_is_forgotten_when_any_level_changes(ns, lib, caplog):
    op, x, logger = _native_fallback_op(ns, lib, "lv")
    root = logging.getLogger()

    def count():
        return sum(1 for r in caplog.records if f"{ns}::lv" in r.getMessage())

    before = (logger.level, root.level)
    try:
        caplog.set_level(logging.DEBUG, logger="boxfall")  # the capturing handler takes DEBUG
        logger.setLevel(logging.INFO)
        op(x)
        op(x)  # "DEBUG is off" is remembered here
        assert count() == 0
        # Through the parent: boxfall's own level unset, the root's set to DEBUG.
        logger.setLevel(logging.NOTSET)
        root.setLevel(logging.DEBUG)
        op(x)
        assert count() == 1
        # logging.disable turns it off, and back on.
        logging.disable(logging.DEBUG)
        op(x)
        op(x)
        assert count() == 1
        logging.disable(logging.NOTSET)
        op(x)
        assert count() == 2
    finally:
        logging.disable(logging.NOTSET)
        logger.setLevel(before[0])
        root.setLevel(before[1])


# ---------------------------------------------------------------------------- other kernels


def test_a_rust_kernel_reached_from_python_gives_the_same_on_both_paths(ns, lib):
    lib.define(ADD)
    lib.impl("add.Tensor", lambda self, other, alpha=1: self + alpha * other, "CPU")
    assert bf.native.register_kernels(lib) == [f"{ns}::add.Tensor"]
    x = bf.native.tensor(np.arange(3.0))
    op = op_of(ns, "add", "Tensor")
    bf.metrics.reset()
    fast, general = both(lambda: op(x, x, alpha=2))
    assert fast.device == general.device == "Native:0"
    assert fast.numpy().tolist() == general.numpy().tolist() == [0.0, 3.0, 6.0]
    assert bf.metrics.counter_value(f"{ns}::add.Tensor") == 0  # Rust kernel: no fallback
    fast, general = both(lambda: error_of(lambda: op(x, x, alpha="no")))
    assert fast == general and fast[0] is bf.ArgumentError


def test_the_fallback_policy_and_counters_are_the_same_on_both_paths(ns, lib):
    lib.define("neg(Tensor x) -> Tensor")
    lib.impl("neg", lambda x: -x, "CPU")
    x = bf.native.tensor(np.ones(2))
    op = op_of(ns, "neg")
    bf.metrics.reset()
    bf.set_fallback_policy("error")
    fast, general = both(lambda: error_of(lambda: op(x)))
    assert fast == general and fast[0] is bf.FallbackError
    # A refused fallback counts as one that failed, on both paths.
    assert bf.metrics.op_stats(f"{ns}::neg")["failures"] == 2
    assert bf.metrics.counter_value(f"{ns}::neg") == 2
    bf.set_fallback_policy("allow")
    fast, general = both(lambda: op(x))
    assert fast.numpy().tolist() == general.numpy().tolist() == [-1.0, -1.0]
    assert bf.metrics.counter_value(f"{ns}::neg") == 4


def test_a_failing_cpu_kernel_through_the_fallback_changes_nothing(ns, lib, paths):
    lib.define("bad_(Tensor(a!) x) -> Tensor(a!)")

    def bad_(x):
        x += 1
        raise RuntimeError("half done")

    lib.impl("bad_", bad_, "CPU")
    x = bf.native.tensor(np.ones(2))
    bf.metrics.reset()
    with pytest.raises(RuntimeError, match="half done"):
        op_of(ns, "bad_")(x)
    assert x.numpy().tolist() == [1.0, 1.0]
    stats = bf.metrics.op_stats(f"{ns}::bad_")
    assert stats["fallbacks"] == 1 and stats["failures"] == 1


def test_a_stack_a_fallback_keeps_is_never_reused(ns, lib, trace):
    # The stack list of a boxed call is reused by the next call only when nobody else holds
    # it: one the fallback keeps must keep what it held, and the key set object it got must
    # still name the keys of its own call.
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    kept = []

    def hop(op, keys, stack):
        op.redispatch_boxed(keys, stack)
        if len(kept) < 2:
            kept.append((stack, keys))

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            results = [op_of(ns, "twice")(np.full(1, float(i))) for i in range(4)]
    assert [r.tolist() for r in results] == [[0.0], [2.0], [4.0], [6.0]]
    assert [s[0].tolist() for s, _ in kept] == [[0.0], [2.0]]
    assert kept[0][0] is not kept[1][0]
    assert all(trace in k.names() for _, k in kept)


def test_a_reused_stack_holds_only_its_own_call_s_arguments(ns, lib, trace):
    # The spare stack list keeps its length between calls (its items set to None): each call's
    # fallback sees exactly its own arguments, and the list keeps nothing of a past call alive.
    import weakref

    lib.define("pair(Tensor x, Tensor y) -> Tensor")
    lib.impl("pair", lambda x, y: x + y, "CPU")
    seen = []

    def hop(op, keys, stack):
        seen.append([s.tolist() for s in stack])
        stack[:] = [op.redispatch(keys, *stack)]

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            results = [
                op_of(ns, "pair")(np.full(1, float(i)), np.full(1, 10.0 * i)) for i in range(3)
            ]
            x = np.full(1, 5.0)
            out = op_of(ns, "pair")(x, np.full(1, 1.0))
            gone_x, gone_out = weakref.ref(x), weakref.ref(out)
            del x, out
    assert seen == [[[0.0], [0.0]], [[1.0], [10.0]], [[2.0], [20.0]], [[5.0], [1.0]]]
    assert [r.tolist() for r in results] == [[0.0], [11.0], [22.0]]
    assert gone_x() is None and gone_out() is None
