"""A boxed kernel (or a boxed fallback) must leave the schema's returns on its stack: any other
number of values is a KernelError naming the operator and the kernel's key, on the fast path
and on the general path alike, and changes no argument."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest


@pytest.fixture(scope="module")
def trace(unique_name):
    name = unique_name("RetTrace")
    bf.register_functionality_key(name)
    return name


@pytest.mark.parametrize(
    ("leave", "count"),
    [(lambda stack: [1, 2, 3], 3), (lambda stack: [], 0), (lambda stack: [stack[0]] * 2, 2)],
    ids=["three", "none", "two"],
)
def test_a_boxed_cpu_kernel_leaving_another_count_is_a_kernel_error(ns, lib, paths, leave, count):
    lib.define("f(Tensor x) -> Tensor")

    def boxed(op, keys, stack):
        stack[:] = leave(stack)

    lib.impl("f", boxed, "CPU", boxed=True)
    f = getattr(bf.ops, ns).f
    with pytest.raises(bf.KernelError) as info:
        f(np.ones(1))
    text = str(info.value)
    assert f"{ns}::f" in text and "'CPU'" in text
    assert f"left {count} value" in text and "returns 1 (Tensor)" in text
    with pytest.raises(bf.KernelError):
        f.default.call_boxed([np.ones(1)])


def test_a_fallback_that_forgets_to_redispatch_is_told_to(ns, lib, trace, paths):
    lib.define("g(Tensor x, Tensor y) -> Tensor")
    lib.impl("g", lambda x, y: x + y, "CPU")

    def forgetful(op, keys, stack):
        pass  # leaves the arguments where the returns should be

    a = np.ones(2)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(forgetful, trace)
        with bf.include_keys(trace), pytest.raises(bf.KernelError) as info:
            getattr(bf.ops, ns).g(a, a)
    text = str(info.value)
    assert f"{ns}::g" in text and trace in text and "redispatch" in text
    np.testing.assert_array_equal(a, np.ones(2))


def test_a_fallback_that_redispatches_returns_the_result(ns, lib, trace, paths):
    lib.define("g(Tensor x, Tensor y) -> Tensor")
    lib.impl("g", lambda x, y: x + y, "CPU")

    def passing(op, keys, stack):
        op.redispatch_boxed(keys, stack)

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(passing, trace)
        with bf.include_keys(trace):
            out = getattr(bf.ops, ns).g(np.ones(2), np.ones(2))
    np.testing.assert_array_equal(out, np.full(2, 2.0))


def test_a_boxed_kernel_with_no_returns_must_empty_its_stack(ns, lib, paths):
    lib.define("h(Tensor x) -> ()")
    lib.impl("h", lambda op, keys, stack: None, "CPU", boxed=True)
    with pytest.raises(bf.KernelError, match=r"left 1 value.*returns 0 \(\(\)\)"):
        getattr(bf.ops, ns).h(np.ones(1))


def test_a_boxed_kernel_with_wrong_returns_does_not_write_its_argument(ns, lib):
    # The kernel writes its (copied) argument, then leaves too many values: the write is not
    # copied back into the Native tensor.
    lib.define("w_(Tensor(a!) x) -> Tensor(a!)")

    def boxed(op, keys, stack):
        stack[0][...] = 7.0
        stack[:] = [stack[0], 1]

    lib.impl("w_", boxed, "CPU", boxed=True)
    x = bf.native.tensor(np.zeros(2))
    with pytest.raises(bf.KernelError):
        getattr(bf.ops, ns).w_(x)
    np.testing.assert_array_equal(x.numpy(), np.zeros(2))
