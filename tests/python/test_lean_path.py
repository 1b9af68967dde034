"""The lean path of the fast path (``fast.rs``, ``run_lean``): a call whose arguments all bind to
themselves (exact NumPy arrays, exact ``int``/``float``/``bool``, None for an optional argument,
every one by position) and whose schema has one return runs its Python kernel on the caller's
own argument array. Whatever it serves must come out as the general path gives it, and whatever
it does not serve (an array subclass, an ``int`` subclass, a keyword) must still be served alike.
"""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest
from paths import both, error_of


def op_of(ns, name):
    return getattr(getattr(bf.ops, ns), name).default


@pytest.fixture(scope="module")
def trace(unique_name):
    name = unique_name("LeanTrace")
    bf.register_functionality_key(name)
    return name


class Sub(np.ndarray):
    """An ndarray subclass: not an exact ndarray, so not lean."""


class MyInt(int):
    """An int subclass: converted by the binding, so not lean."""


@pytest.mark.parametrize(
    "args",
    [
        (np.ones(1), 2, 1.5, True, None),
        (np.ones(1), 2, 1.5, True, np.zeros(1)),
        (np.ones(1).view(Sub), 2, 1.5, True, None),
        (np.ones(1), MyInt(2), 1.5, True, None),
        (np.ones(1), 2, 3, True, None),
    ],
    ids=["lean", "lean-optional-given", "array-subclass", "int-subclass", "int-as-float"],
)
def test_the_kernel_sees_and_returns_what_the_general_path_gives(ns, lib, args):
    lib.define("mix(Tensor x, int n, float f, bool b, Tensor? y) -> Tensor")
    seen = []

    def mix(x, n, f, b, y):
        seen.append((x, type(n), n, type(f), f, type(b), b, y))
        return x

    lib.impl("mix", mix, "CPU")
    fast, general = both(lambda: op_of(ns, "mix")(*args))
    assert fast is general is args[0]
    assert seen[0][0] is seen[1][0] is args[0]
    assert seen[0][1:7] == seen[1][1:7]
    assert (seen[0][7] is None) == (seen[1][7] is None) == (args[4] is None)


def test_an_argument_that_does_not_bind_is_the_same_error(ns, lib):
    lib.define("n(Tensor x, int n) -> Tensor")
    lib.impl("n", lambda x, n: x, "CPU")
    for bad in (True, 2**70, "2"):
        fast, general = both(lambda bad=bad: error_of(lambda: op_of(ns, "n")(np.ones(1), bad)))
        assert fast == general and fast[0] is bf.ArgumentError and f"{ns}::n" in fast[1]


def test_a_returned_array_subclass_and_a_bad_return_are_the_general_path_s(ns, lib):
    lib.define("sub(Tensor x) -> Tensor")
    lib.define("bad(Tensor x) -> Tensor")
    lib.impl("sub", lambda x: x.view(Sub), "CPU")
    lib.impl("bad", lambda x: [1, 2], "CPU")
    fast, general = both(lambda: op_of(ns, "sub")(np.ones(2)))
    assert type(fast) is type(general) is Sub and fast.tolist() == general.tolist()
    fast, general = both(lambda: error_of(lambda: op_of(ns, "bad")(np.ones(1))))
    assert fast == general
    assert fast[0] is bf.KernelError and f"{ns}::bad" in fast[1] and "CPU" in fast[1]


def test_a_keyword_argument_is_served_alike(ns, lib):
    lib.define("kw(Tensor x, int n=3) -> Tensor")
    lib.impl("kw", lambda x, n=3: x * n, "CPU")
    fast, general = both(lambda: op_of(ns, "kw")(np.ones(1), n=5))
    assert fast.tolist() == general.tolist() == [5.0]
    fast, general = both(lambda: error_of(lambda: op_of(ns, "kw")(np.ones(1), m=5)))
    assert fast == general and fast[0] is bf.ArgumentError


def test_a_kernel_error_in_the_documented_hop_names_the_operator_and_backend(ns, lib, trace):
    lib.define("fail(Tensor x) -> Tensor")

    def fail(x):
        raise ValueError("inner")

    lib.impl("fail", fail, "CPU")

    def hop(op, keys, stack):
        stack[:] = [op.redispatch(keys, *stack)]

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            fast, general = both(lambda: error_of(lambda: op_of(ns, "fail")(np.ones(1))))
    assert fast == general
    assert fast[0] is ValueError
    assert f"while running the 'CPU' kernel of '{ns}::fail'" in fast[2]


def test_a_boxed_hop_that_leaves_a_bad_return_fails_alike(ns, lib, trace):
    lib.define("h(Tensor x) -> Tensor")
    lib.impl("h", lambda x: x, "CPU")

    def odd(op, keys, stack):
        stack[:] = ["not a tensor"]

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(odd, trace)
        with bf.include_keys(trace):
            fast, general = both(lambda: error_of(lambda: op_of(ns, "h")(np.ones(1))))
    assert fast == general
    assert fast[0] is bf.KernelError and f"{ns}::h" in fast[1] and trace in fast[1]


@pytest.mark.parametrize("schema,args", [("two(Tensor x, Tensor y)", 2), ("none()", 0)])
def test_redispatch_boxed_leaves_exactly_the_one_return(ns, lib, trace, schema, args):
    # The stack shrinks from two arguments to one return, or grows from none to one.
    name = schema.split("(")[0]
    lib.define(f"{schema} -> Tensor")
    out = np.full(1, 7.0)
    lib.impl(name, (lambda x, y: x + y) if args else (lambda: out), "CPU")
    stacks = []

    def hop(op, keys, stack):
        op.redispatch_boxed(keys, stack)
        stacks.append(list(stack))

    arrays = [np.ones(1) for _ in range(args)]
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, trace)
        with bf.include_keys(trace):
            fast, general = both(lambda: op_of(ns, name)(*arrays))
    assert fast.tolist() == general.tolist() == [float(args) if args else 7.0]
    assert [len(s) for s in stacks] == [1, 1]
    if not args:
        assert fast is out and stacks[0][0] is out


def test_a_kernel_that_calls_its_own_operator_forever_hits_the_recursion_guard(ns, lib):
    lib.define("deep(Tensor x) -> Tensor")
    op = op_of(ns, "deep")
    lib.impl("deep", lambda x: op(x), "CPU")
    with pytest.raises(RecursionError):
        op(np.ones(1))


def test_what_a_call_found_in_the_table_never_outlives_the_table(ns, lib, trace):
    # The lean path keeps the kernel it found for the operator's next call, and follows it only
    # while the operator's table is the same one: every registration and every closing in
    # between must show in the very next call (tables come and go at reused addresses, so the
    # loop runs many rounds).
    lib.define("k(Tensor x) -> Tensor")
    lib.impl("k", lambda x: x * 2, "CPU")
    op = op_of(ns, "k")
    a = np.ones(1)
    hops = []

    def hop(op, keys, stack):
        hops.append(1)
        stack[:] = [op.redispatch(keys, *stack)]

    for i in range(50):
        assert op(a).tolist() == [2.0]
        with bf.Library(ns, "IMPL") as over:
            over.impl("k", lambda x, i=i: x + i, "CPU", allow_override=True)
            assert op(a).tolist() == [1.0 + i]
        assert op(a).tolist() == [2.0]
        with bf.Library("_", "IMPL") as fb:
            fb.fallback(hop, trace)
            with bf.include_keys(trace):
                assert op(a).tolist() == [2.0]
        with bf.include_keys(trace), pytest.raises(bf.NoKernelError):
            op(a)
    assert len(hops) == 50


def test_a_closed_kernel_is_not_called_again(ns, lib):
    lib.define("gone(Tensor x) -> Tensor")
    op = op_of(ns, "gone")
    with bf.Library(ns, "IMPL") as impl:
        impl.impl("gone", lambda x: x, "CPU")
        assert op(np.ones(1)) is not None
    fast, general = both(lambda: error_of(lambda: op(np.ones(1))))
    assert fast == general and f"{ns}::gone" in fast[1]


def test_a_call_with_a_python_backend_s_tensor_leaves_no_lasting_detour_for_numpy_calls(
    ns, lib, unique_name
):
    """One call that the lean entry cannot serve (a Python backend's tensor, whose hooks are
    Python) sends the operator's next call the general way; a NumPy call the lean path serves
    there sets its calls back to the lean entry, instead of leaving every later one on the
    slower way."""
    backend = bf.register_backend(
        unique_name("LeanBack"),
        to_cpu=lambda p: p.copy(),
        from_cpu=lambda a: a.copy(),
        copy_from_cpu=lambda p, a: p.__setitem__(..., a),
    )
    fallback = bf.Library("_", "IMPL")
    fallback.fallback(bf.cpu_fallback, backend.name)
    policy = bf.get_fallback_policy()
    bf.set_fallback_policy("allow")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        op = getattr(bf.ops, ns).twice.default
        x = np.arange(3.0)
        np.testing.assert_array_equal(op(x), x * 2)
        assert bf._boxfall._tries_lean_entry(op)
        out = op(backend.tensor(x))
        np.testing.assert_array_equal(out.numpy(), x * 2)
        assert not bf._boxfall._tries_lean_entry(op)
        np.testing.assert_array_equal(op(x), x * 2)
        assert bf._boxfall._tries_lean_entry(op)
        np.testing.assert_array_equal(op(x), x * 2)
    finally:
        bf.set_fallback_policy(policy)
        fallback.close()
