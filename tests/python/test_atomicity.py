"""Failure atomicity of the fallback's write-back: a copy_from_cpu hook that writes part of its
target and raises is rolled back (the failing tensor included, and every tensor written before
it), and a NumPy argument written in place during a fallback is changed only when the kernel
succeeds."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest


class Buf:
    def __init__(self, array):
        self.data = np.array(array, copy=True)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)


class HalfWrite(Exception):
    pass


@pytest.fixture
def half():
    """A backend whose copy_from_cpu writes element 0 and raises on the calls listed in
    ``state["fail"]`` (0-based), or on every call if it is ``"always"``."""
    state = {"calls": 0, "fail": set()}

    def copy_from_cpu(buf, arr):
        n = state["calls"]
        state["calls"] += 1
        if state["fail"] == "always" or n in state["fail"]:
            buf.data[0] = arr[0]
            raise HalfWrite(f"call {n}")
        buf.data[...] = arr

    name = "Half"
    backend = bf.register_backend(
        name,
        replace=True,
        to_cpu=lambda b: b.data.copy(),
        from_cpu=Buf,
        copy_from_cpu=copy_from_cpu,
    )
    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, name)
    yield backend, state
    fb.close()


@pytest.fixture
def ops(ns, lib):
    lib.define("neg_(Tensor(a!) self) -> Tensor(a!)")
    lib.define("neg2_(Tensor(a!) a, Tensor(b!) b) -> ()")

    def neg_(self):
        np.negative(self, out=self)
        return self

    def neg2_(a, b):
        np.negative(a, out=a)
        np.negative(b, out=b)

    lib.impl("neg_", neg_, "CPU")
    lib.impl("neg2_", neg2_, "CPU")
    return getattr(bf.ops, ns)


def test_a_half_written_tensor_is_restored(ops, half):
    backend, state = half
    x = backend.tensor(np.array([1.0, 2.0]))
    buf = x.payload
    state["fail"] = {0}
    with pytest.raises(HalfWrite):
        ops.neg_(x)
    np.testing.assert_array_equal(x.payload.data, [1.0, 2.0])
    assert x.payload is buf  # put back through the hook, in the same payload


def test_two_written_tensors_the_second_failing_are_both_restored(ops, half):
    backend, state = half
    a, b = backend.tensor(np.array([1.0, 2.0])), backend.tensor(np.array([3.0, 4.0]))
    state["fail"] = {1}
    with pytest.raises(HalfWrite):
        ops.neg2_(a, b)
    np.testing.assert_array_equal(a.payload.data, [1.0, 2.0])
    np.testing.assert_array_equal(b.payload.data, [3.0, 4.0])


def test_a_hook_that_keeps_failing_still_leaves_the_old_values(ops, half):
    backend, state = half
    x = backend.tensor(np.array([1.0, 2.0]))
    state["fail"] = "always"
    with pytest.raises(HalfWrite):
        ops.neg_(x)
    # The hook cannot put the values back: the tensor gets a new payload holding them.
    np.testing.assert_array_equal(x.payload.data, [1.0, 2.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])


def test_a_numpy_argument_written_in_a_native_fallback_is_unchanged_if_the_kernel_fails(ns, lib):
    lib.define("f_(Tensor(a!) out, Tensor x, bool fail) -> Tensor(a!)")

    def f_(out, x, fail):
        out[0] = 999.0
        if fail:
            raise ValueError("boom")
        return out

    lib.impl("f_", f_, "CPU")
    op = getattr(bf.ops, ns).f_
    o = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="boom"):
        op(o, bf.native.tensor(np.ones(2)), True)
    np.testing.assert_array_equal(o, [1.0, 2.0])
    assert op(o, bf.native.tensor(np.ones(2)), False) is o
    np.testing.assert_array_equal(o, [999.0, 2.0])


def test_a_new_array_returned_for_a_numpy_out_is_written_into_it(ns, lib):
    # The caller's NumPy array gets the values (it once kept its old ones).
    lib.define("m.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("m.out", lambda x, *, out: x * 2, "CPU")
    o = np.zeros(3)
    assert getattr(bf.ops, ns).m.out(bf.native.tensor(np.ones(3)), out=o) is o
    np.testing.assert_array_equal(o, np.full(3, 2.0))


def test_a_numpy_argument_written_by_a_failing_boxed_kernel_is_unchanged(ns, lib):
    lib.define("g_(Tensor(a!) out, Tensor x) -> Tensor(a!)")

    def boxed(op, keys, stack):
        stack[0][...] = -1.0
        raise ValueError("no")

    lib.impl("g_", boxed, "CPU", boxed=True)
    o = np.array([1.0, 2.0])
    with pytest.raises(ValueError):
        getattr(bf.ops, ns).g_(o, bf.native.tensor(np.ones(2)))
    np.testing.assert_array_equal(o, [1.0, 2.0])
