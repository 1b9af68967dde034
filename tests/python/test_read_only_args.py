"""A kernel reached through the fallback gets the tensors its schema does not mark as written
read-only, whatever the backend: a write fails with NumPy's ValueError ("assignment destination
is read-only") and notes naming the operator and the keys, and no device tensor changes. A plain
CPU call still gets the caller's own arrays."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest


class Buf:
    def __init__(self, array):
        self.data = np.array(array, copy=True)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)


def _copy_from_cpu(buf, arr):
    buf.data = np.array(arr, copy=True)


def _register(kind):
    name = f"RO{kind}"
    kwargs = {}
    if kind == "shared":
        kwargs["shares_memory"] = True
    if kind == "batched":
        kwargs["to_cpu_many"] = lambda bufs: [b.data.copy() for b in bufs]
    backend = bf.register_backend(
        name,
        replace=True,
        to_cpu=(lambda b: b.data) if kind == "shared" else (lambda b: b.data.copy()),
        from_cpu=Buf,
        copy_from_cpu=_copy_from_cpu,
        **kwargs,
    )
    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, name)
    return name, backend, fb


@pytest.fixture(scope="module", params=["native", "copying", "shared", "batched"])
def device(request):
    """(make a tensor of the backend, read its values, its key name)."""
    if request.param == "native":
        yield bf.native.tensor, lambda t: t.numpy().copy(), "Native"
        return
    name, backend, fb = _register(request.param)
    yield backend.tensor, lambda t: t.payload.data.copy(), name
    fb.close()


def writes_its_input(x):
    x[0] = 99.0
    return x + 0


def test_writing_a_read_only_argument_fails_alike_everywhere(ns, lib, device):
    make, read, key = device
    lib.define("w(Tensor x) -> Tensor")
    lib.impl("w", writes_its_input, "CPU")
    x = make(np.arange(3.0))
    with pytest.raises(ValueError, match="assignment destination is read-only") as info:
        getattr(bf.ops, ns).w(x)
    notes = "\n".join(info.value.__notes__)
    assert f"'CPU' kernel of '{ns}::w'" in notes and f"'{key}'" in notes, notes
    np.testing.assert_array_equal(read(x), np.arange(3.0))
    stats = bf.metrics.op_stats(f"{ns}::w")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)


def test_the_read_only_input_of_an_inplace_operator_is_read_only_too(ns, lib, device):
    make, read, _ = device
    lib.define("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)")

    def add_(self, other):
        other += 1.0  # `other` is not written in the schema
        self += other
        return self

    lib.impl("add_", add_, "CPU")
    x, y = make(np.zeros(2)), make(np.ones(2))
    with pytest.raises(ValueError, match="read-only"):
        getattr(bf.ops, ns).add_(x, y)
    np.testing.assert_array_equal(read(x), np.zeros(2))
    np.testing.assert_array_equal(read(y), np.ones(2))


def test_a_boxed_cpu_kernel_gets_read_only_arrays_too(ns, lib, device):
    make, read, _ = device
    lib.define("w(Tensor x) -> Tensor")

    def boxed(op, keys, stack):
        stack[0][0] = 5.0
        stack[:] = [stack[0] + 0]

    lib.impl("w", boxed, "CPU", boxed=True)
    x = make(np.zeros(2))
    with pytest.raises(ValueError, match="read-only"):
        getattr(bf.ops, ns).w(x)
    np.testing.assert_array_equal(read(x), np.zeros(2))


def test_reading_still_works_and_gives_the_values(ns, lib, device):
    make, _, _ = device
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    out = getattr(bf.ops, ns).twice(make(np.arange(3.0)))
    np.testing.assert_array_equal(out.numpy(), np.arange(3.0) * 2)


def test_a_plain_cpu_call_still_gets_the_callers_own_arrays(ns, lib):
    lib.define("w(Tensor x) -> Tensor")
    seen = []

    def w(x):
        seen.append(x)
        x[0] = 99.0
        return x + 0

    lib.impl("w", w, "CPU")
    a = np.arange(3.0)
    getattr(bf.ops, ns).w(a)
    assert seen[0] is a and a.flags.writeable
    assert a[0] == 99.0  # the caller's own array: a CPU kernel gets it without a copy


def test_numpy_of_a_python_backend_is_still_what_to_cpu_returns():
    name, backend, fb = _register("shared")
    try:
        x = backend.tensor(np.zeros(2))
        arr = x.numpy()
        assert arr is x.payload.data and arr.flags.writeable
    finally:
        fb.close()
