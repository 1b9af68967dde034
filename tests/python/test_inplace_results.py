"""An in-place or out= result keeps its argument's shape and dtype: a kernel that returns (or
leaves) one of another shape or dtype is a KernelError naming the operator and the argument,
and the argument is unchanged. A keyword-only out= argument may be resized,
except a NumPy array, which cannot be resized in place."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest


@pytest.fixture(scope="module", params=["native", "copying", "shared"])
def make(request, backend_factory):
    if request.param == "native":
        yield bf.native.tensor
        return
    backend = backend_factory("InPl", shares_memory=request.param == "shared")
    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, backend.name)
    yield backend.tensor
    fb.close()


@pytest.mark.parametrize(
    "result",
    [lambda s: np.zeros((2, 2)), lambda s: s.astype(np.float32), lambda s: np.zeros(4)],
    ids=["shape", "dtype", "length"],
)
def test_an_inplace_result_that_does_not_fit_is_refused(ns, lib, make, result):
    lib.define("sq_(Tensor(a!) self) -> Tensor(a!)")
    lib.impl("sq_", lambda self: result(self), "CPU")
    x = make(np.arange(3.0))
    with pytest.raises(bf.KernelError) as info:
        getattr(bf.ops, ns).sq_(x)
    text = str(info.value)
    assert f"'{ns}::sq_'" in text and "'self'" in text and "float64[3]" in text, text
    assert x.shape == (3,) and x.dtype == np.float64
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0))
    stats = bf.metrics.op_stats(f"{ns}::sq_")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)


def test_an_inplace_result_that_fits_is_written(ns, lib, make):
    lib.define("sq_(Tensor(a!) self) -> Tensor(a!)")
    lib.impl("sq_", lambda self: self * self, "CPU")
    x = make(np.arange(3.0))
    assert getattr(bf.ops, ns).sq_(x) is x
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0) ** 2)


def test_a_keyword_only_out_may_be_resized_but_not_retyped(ns, lib, make):
    lib.define("m.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("m.out", lambda x, *, out: x * 2, "CPU")
    op = getattr(bf.ops, ns).m.out
    out = make(np.zeros(1))
    assert op(make(np.ones(3)), out=out) is out
    assert out.shape == (3,)
    np.testing.assert_array_equal(out.numpy(), np.full(3, 2.0))
    with pytest.raises(bf.KernelError, match="'out'.*dtype"):
        op(make(np.ones(3, dtype=np.float32)), out=out)
    np.testing.assert_array_equal(out.numpy(), np.full(3, 2.0))


def test_a_boxed_kernel_that_resizes_its_copy_is_refused(ns, lib):
    lib.define("r_(Tensor(a!) self) -> Tensor(a!)")

    def boxed(op, keys, stack):
        stack[0].resize((5,), refcheck=False)
        stack[0][...] = 1.0

    lib.impl("r_", boxed, "CPU", boxed=True)
    x = bf.native.tensor(np.arange(3.0))
    with pytest.raises(bf.KernelError, match=r"'self'.*float64\[5\].*float64\[3\]"):
        getattr(bf.ops, ns).r_(x)
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0))


def test_a_numpy_out_cannot_be_resized_in_place(ns, lib):
    lib.define("m.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("m.out", lambda x, *, out: x * 2, "CPU")
    out = np.zeros(1)
    with pytest.raises(bf.KernelError, match="'out'.*cannot change its shape"):
        getattr(bf.ops, ns).m.out(bf.native.tensor(np.ones(3)), out=out)
    np.testing.assert_array_equal(out, np.zeros(1))


def test_a_python_kernel_of_a_device_key_writing_its_argument(ns, lib):
    # Its written argument is a bf.Tensor, which it writes through operators: nothing is
    # copied back (this once failed, trying to read the bf.Tensor as a NumPy array).
    lib.define("z_(Tensor(a!) self) -> Tensor(a!)")
    lib.impl("z_", lambda self: self, "Native")
    x = bf.native.tensor(np.ones(2))
    assert getattr(bf.ops, ns).z_(x) is x
