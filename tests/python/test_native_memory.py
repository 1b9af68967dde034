"""Native memory at its limits: results and copies that cannot be allocated raise MemoryError
(the process lives on, arguments and counters as they should be), tensors of every rank NumPy
supports, and dtypes Native cannot hold raise bf.DTypeError."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import boxfall as bf
import numpy as np
import pytest

# Run in a child whose address space is capped just above what it holds, so that a request
# fails at once, without touching memory (the cap is RLIMIT_AS: `ulimit -v`).
CHILD = textwrap.dedent(
    """
    import resource
    import boxfall as bf
    import numpy as np

    def vm_size():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024

    lib = bf.Library("oomchild", "DEF")
    lib.define("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor")
    lib.impl("add.Tensor", lambda self, other, alpha=1: self + alpha * other, "CPU")
    lib.define("matmul(Tensor self, Tensor other) -> Tensor")
    lib.impl("matmul", np.matmul, "CPU")
    lib.define("negative(Tensor self) -> Tensor")  # no Native kernel: NumPy's, through the fallback
    lib.impl("negative", np.negative, "CPU")
    lib.define("fill_(Tensor(a!) self, float value) -> Tensor(a!)")

    def fill_(self, value):
        self[...] = value
        return self

    lib.impl("fill_", fill_, "CPU")
    assert sorted(bf.native.register_kernels(lib)) == ["oomchild::add.Tensor", "oomchild::matmul"]
    ops = bf.ops.oomchild
    column = bf.native.tensor(np.ones((1 << 15, 1)))
    row = bf.native.tensor(np.ones((1, 1 << 14)))
    tall, wide = bf.native.tensor(np.ones((1 << 16, 1))), bf.native.tensor(np.ones((1, 1 << 16)))
    big = ops.add(bf.native.tensor(np.ones((1 << 13, 1))), bf.native.tensor(np.ones((1, 1 << 13))))
    assert big.shape == (1 << 13, 1 << 13)  # 512 MiB, in Rust memory

    cap = vm_size() + (64 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def memory_error(fn, *words):
        try:
            fn()
        except MemoryError as e:
            for w in words:
                assert w in str(e), (w, str(e))
        else:
            raise AssertionError("no MemoryError")

    # A Rust kernel's result (4 GiB, broadcast from two small tensors), and a matmul's (32 GiB).
    memory_error(lambda: ops.add(column, row), "oomchild::add.Tensor", "4294967296 bytes")
    memory_error(lambda: ops.matmul(tall, wide), "oomchild::matmul")
    # bf.native.tensor of a broadcast array: NumPy's own MemoryError for the C-ordered copy.
    memory_error(lambda: bf.native.tensor(np.broadcast_to(np.float64(0), (2**33,))))
    # A mutable argument's copy in the CPU fallback (Rust memory), and a NumPy kernel's result.
    memory_error(lambda: ops.fill_(big, 5.0), "oomchild::fill_")
    memory_error(lambda: ops.negative(big))
    # Nothing changed, and the counters say what failed.
    assert column.numpy().shape == (1 << 15, 1) and column.numpy().sum() == 1 << 15
    assert big.numpy()[0, :4].tolist() == [2.0] * 4 and big.numpy()[-1, -1] == 2.0
    assert bf.metrics.counter_value("oomchild::add.Tensor") == 0  # the Rust kernel: no fallback
    assert bf.metrics.counter_value("oomchild::matmul") == 0
    for name in ("oomchild::fill_", "oomchild::negative"):
        stats = bf.metrics.op_stats(name)
        assert (stats["fallbacks"], stats["failures"]) == (1, 1), (name, stats)
    # And the process goes on.
    small = bf.native.tensor(np.ones(2))
    assert ops.add(small, small).numpy().tolist() == [2.0, 2.0]
    print("OK")
    """
)


def test_allocations_that_fail_raise_memory_error_and_the_process_goes_on():
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("OK"), done.stdout


def test_a_result_whose_size_overflows_raises_memory_error(ns, lib):
    lib.define("matmul(Tensor self, Tensor other) -> Tensor")
    lib.impl("matmul", np.matmul, "CPU")
    assert bf.native.register_kernels(lib) == [f"{ns}::matmul"]
    a = bf.native.tensor(np.zeros((1 << 31, 0)))
    b = bf.native.tensor(np.zeros((0, 1 << 31)))
    # 2**62 float64s: more bytes than an address space holds; nothing is allocated.
    with pytest.raises(MemoryError, match=f"'{ns}::matmul'.*more bytes than the address space"):
        getattr(bf.ops, ns).matmul(a, b)
    assert a.shape == (1 << 31, 0) and b.shape == (0, 1 << 31)


# ------------------------------------------------------------------------------ ranks


@pytest.mark.parametrize("ndim", [32, 33, 40, 64])
def test_tensors_of_every_rank_numpy_supports(ns, lib, ndim):
    shape = (1,) * (ndim - 2) + (2, 3)
    a = np.arange(6.0).reshape(shape)
    x = bf.native.tensor(a)
    np.testing.assert_array_equal(x.numpy(), a)
    assert not x.numpy().flags.writeable
    # A strided one too (copied through NumPy).
    t = bf.native.tensor(np.swapaxes(a, -1, -2))
    np.testing.assert_array_equal(t.numpy(), np.swapaxes(a, -1, -2))

    lib.define("twice(Tensor self) -> Tensor")
    lib.define("bump_(Tensor(a!) self) -> Tensor(a!)")
    lib.define("bad(Tensor self) -> Tensor")
    lib.impl("twice", lambda self: self * 2, "CPU")

    def bump_(self):
        self += 1
        return self

    def bad(self):
        raise ValueError("no")

    lib.impl("bump_", bump_, "CPU")
    lib.impl("bad", bad, "CPU")
    ops = getattr(bf.ops, ns)
    y = ops.twice(x)  # the fallback lends x to NumPy
    np.testing.assert_array_equal(y.numpy(), a * 2)
    assert ops.bump_(x) is x  # a writable copy, written back
    np.testing.assert_array_equal(x.numpy(), a + 1)
    with pytest.raises(ValueError, match="no"):
        ops.bad(x)
    for name, failures in (("twice", 0), ("bump_", 0), ("bad", 1)):
        stats = bf.metrics.op_stats(f"{ns}::{name}")
        assert (stats["fallbacks"], stats["failures"]) == (1, failures), name


def test_native_kernels_take_every_rank(ns, lib):
    lib.define("neg(Tensor self) -> Tensor")
    lib.define(
        "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)"
        " -> Tensor"
    )
    bf.native.register_kernels(lib)
    a = np.arange(6.0).reshape((1,) * 38 + (2, 3))
    x = bf.native.tensor(a)
    np.testing.assert_array_equal(getattr(bf.ops, ns).neg(x).numpy(), -a)
    out = getattr(bf.ops, ns).sum.dim_IntList(x, [-1], True).numpy()
    np.testing.assert_array_equal(out, a.sum(axis=-1, keepdims=True))


# ------------------------------------------------------------------------------ dtypes

UNSUPPORTED = [
    "float16",
    "longdouble",
    "clongdouble",
    "object",
    "<U3",
    "M8[s]",
    "m8[ms]",
]


@pytest.mark.parametrize("dtype", UNSUPPORTED)
def test_a_dtype_native_cannot_hold_is_a_dtype_error(dtype):
    a = np.zeros(3, dtype=dtype)
    with pytest.raises(bf.DTypeError) as caught:
        bf.native.tensor(a)
    text = str(caught.value)
    assert str(a.dtype) in text
    assert "bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64" in text
    assert "float32, float64, complex64, complex128" in text
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, bf.BoxfallError)
    assert not isinstance(caught.value, bf.FallbackError)


def test_a_big_endian_array_of_a_supported_dtype_is_taken_in_native_byte_order():
    for dtype in (">f8", ">f4", ">i8", ">i4"):
        a = np.arange(6).reshape(2, 3).astype(dtype)
        x = bf.native.tensor(a)
        assert x.dtype == a.dtype.newbyteorder("=")
        assert x.dtype.isnative
        np.testing.assert_array_equal(x.numpy(), a)
    x = bf.native.tensor(np.array(2.5, dtype=">f8"))  # 0-d stays 0-d
    assert x.shape == () and float(x.numpy()) == 2.5


def test_unaligned_and_strided_arrays_are_copied_with_their_values():
    raw = np.zeros(8 * 4 + 1, dtype=np.uint8)
    unaligned = raw[1:].view(np.float64)
    unaligned[:] = [1.0, 2.0, 3.0, 4.0]
    assert not unaligned.flags.aligned
    np.testing.assert_array_equal(bf.native.tensor(unaligned).numpy(), [1.0, 2.0, 3.0, 4.0])
    strided = np.arange(12.0).reshape(3, 4)[::2, ::-1]
    np.testing.assert_array_equal(bf.native.tensor(strided).numpy(), strided)
