"""The Native backend through the CPU fallback: lent read-only memory, copied mutable memory."""

from __future__ import annotations

import gc

import boxfall as bf
import numpy as np
import pytest
from sample_data import ALL_DTYPES


def test_read_only_arguments_are_lent_without_copy(ns, lib):
    lib.define("peek(Tensor self) -> Tensor")
    seen = {}

    def peek(self):
        seen["array"] = self
        return self * 1.0

    lib.impl("peek", peek, "CPU")
    x = bf.native.tensor(np.arange(5.0))
    getattr(bf.ops, ns).peek(x)
    lent = seen["array"]
    assert np.shares_memory(lent, x.numpy())
    assert not lent.flags.writeable
    with pytest.raises(ValueError):
        lent[0] = 42.0


def test_one_tensor_passed_twice_reaches_the_kernel_as_one_array(ns, lib):
    lib.define("pair(Tensor self, Tensor other) -> Tensor")
    seen = []

    def pair(a, b):
        seen.append((a, b))
        return a + b

    lib.impl("pair", pair, "CPU")
    x, y = bf.native.tensor(np.ones(3)), bf.native.tensor(np.ones(3))
    op = getattr(bf.ops, ns).pair
    op(x, x)
    op(x, y)
    (a, b), (c, d) = seen
    # As for CPU arrays: the kernel sees the caller's aliasing, and nothing more.
    assert a is b
    assert c is not d
    assert np.shares_memory(a, x.numpy()) and np.shares_memory(d, y.numpy())


def test_a_lent_view_is_made_once_per_data_and_never_shows_stale_or_reshaped_data(ns, lib):
    lib.define("peek(Tensor self) -> Tensor")
    lib.define("fill_(Tensor(a!) self, float v) -> Tensor(a!)")
    seen = []

    def peek(a):
        seen.append((a, a.copy()))
        return a * 1.0

    def reshape_peek(a):
        seen.append((a, a.copy()))
        a.shape = (3, 1)  # legal NumPy on a view, and it must not reach the next call
        return a.reshape(3) * 1.0

    def fill_(a, v):
        a[...] = v
        return a

    lib.impl("peek", peek, "CPU")
    lib.impl("fill_", fill_, "CPU")
    ops = getattr(bf.ops, ns)
    x = bf.native.tensor(np.arange(3.0))
    ops.peek(x)
    ops.peek(x)
    assert seen[0][0] is seen[1][0], "lent again while unchanged: the same view"

    ops.fill_(x, 7.0)  # a write replaces the data: the old view is retired
    ops.peek(x)
    assert seen[2][0] is not seen[0][0]
    assert seen[2][1].tolist() == [7.0, 7.0, 7.0]
    assert seen[0][0].tolist() == [0.0, 1.0, 2.0], "a kept view keeps what it saw"

    lib.impl("peek", reshape_peek, "CPU", allow_override=True)
    ops.peek(x)
    lib.impl("peek", peek, "CPU", allow_override=True)
    ops.peek(x)
    reshaped, fresh = seen[3][0], seen[4][0]
    assert reshaped.shape == (3, 1)
    assert fresh is not reshaped and fresh.shape == (3,)
    assert fresh.tolist() == [7.0, 7.0, 7.0]


def test_lent_array_outlives_its_tensor(ns, lib):
    lib.define("keep(Tensor self) -> Tensor")
    kept = []

    def keep(self):
        kept.append(self)
        return self.copy()

    lib.impl("keep", keep, "CPU")
    x = bf.native.tensor(np.arange(1000.0))
    getattr(bf.ops, ns).keep(x)
    del x
    gc.collect()
    # The lent view keeps the Rust memory alive after the tensor is gone.
    assert kept[0].sum() == pytest.approx(sum(range(1000)))


def test_numpy_of_a_native_tensor_is_a_read_only_view():
    x = bf.native.tensor(np.ones(3))
    a, b = x.numpy(), x.numpy()
    assert np.shares_memory(a, b)
    assert not a.flags.writeable


def test_numpy_gives_the_caller_a_new_array_each_time(ns, lib):
    lib.define("peek(Tensor self) -> Tensor")
    lib.impl("peek", lambda a: a * 1.0, "CPU")
    x = bf.native.tensor(np.arange(3.0))
    getattr(bf.ops, ns).peek(x)  # a kernel's view is kept with the loan; the caller's is not
    a, b = x.numpy(), x.numpy()
    assert a is not b
    a.shape = (3, 1)
    assert b.shape == (3,) and x.numpy().shape == (3,)


def test_mutable_argument_gets_a_copy_written_back_on_success(ns, lib):
    lib.define("fill_(Tensor(a!) self, float value) -> Tensor(a!)")
    seen = {}

    def fill_(self, value):
        seen["shares"] = np.shares_memory(self, x.numpy())
        self[...] = value
        return self

    lib.impl("fill_", fill_, "CPU")
    x = bf.native.tensor(np.zeros(4))
    out = getattr(bf.ops, ns).fill_(x, 7.0)
    assert out is x
    assert seen["shares"] is False
    np.testing.assert_array_equal(x.numpy(), np.full(4, 7.0))


def test_mutable_argument_unchanged_when_the_kernel_raises(ns, lib):
    lib.define("half_(Tensor(a!) self) -> Tensor(a!)")

    def half_(self):
        self[...] = -1.0
        raise RuntimeError("kernel failed after writing")

    lib.impl("half_", half_, "CPU")
    x = bf.native.tensor(np.arange(3.0))
    with pytest.raises(RuntimeError, match="kernel failed"):
        getattr(bf.ops, ns).half_(x)
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0))
    stats = bf.metrics.op_stats(f"{ns}::half_")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)


def _extremes(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` holding its extreme and special values."""
    n = int(np.prod(shape))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        base = np.array([True, False, True])
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        base = np.array([info.min, info.max, 0, 1, info.max - 1], dtype=dt)
    else:
        real = np.float32 if dt in (np.float32, np.complex64) else np.float64
        fin = np.finfo(real)
        r = np.array([np.nan, np.inf, -np.inf, -0.0, fin.tiny, fin.max, fin.eps], dtype=real)
        base = r + 1j * r[::-1] if dt.kind == "c" else r
    return np.resize(base, n).astype(dt).reshape(shape)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3), (2, 1, 3), (1, 2, 2, 2, 3)])
def test_every_dtype_round_trips_exactly_at_every_rank(dtype, shape):
    a = _extremes(dtype, shape)
    x = bf.native.tensor(a)
    assert x.dtype == a.dtype and x.shape == a.shape and x.device == "Native:0"
    back = x.numpy()
    assert back.dtype == a.dtype and back.shape == a.shape
    assert back.tobytes() == a.tobytes()  # bit for bit: NaN payloads and signed zeros too


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_round_trips_from_strided_and_big_endian_arrays(dtype):
    a = _extremes(dtype, (4, 6))
    for view in (a[::2, ::-3], a.T, np.broadcast_to(a[:1], (3, 6)), a[:, 1:][:, ::2]):
        back = bf.native.tensor(view).numpy()
        assert back.dtype == a.dtype
        assert back.tobytes() == np.ascontiguousarray(view).tobytes()
    if a.dtype.itemsize > 1 and a.dtype.kind != "b":
        swapped = a.astype(a.dtype.newbyteorder(">" if np.little_endian else "<"))
        x = bf.native.tensor(swapped)
        assert x.dtype == a.dtype and x.dtype.isnative
        assert x.numpy().tobytes() == a.tobytes()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtypes_survive_the_round_trip(ns, lib, dtype):
    lib.define("same(Tensor self) -> Tensor")
    lib.impl("same", lambda self: self.copy(), "CPU")
    a = np.array([1, 0, 1], dtype=dtype)
    y = getattr(bf.ops, ns).same(bf.native.tensor(a))
    assert y.device == "Native:0"
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y.numpy(), a)


SHAPES = [(), (0,), (5,), (2, 3), (2, 1, 3), (1, 2, 2, 2), (2, 1, 1, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES)
def test_shapes_survive_the_round_trip(ns, lib, shape):
    lib.define("twice(Tensor self) -> Tensor")
    lib.impl("twice", lambda self: np.asarray(self * 2), "CPU")
    a = np.arange(int(np.prod(shape)), dtype="float64").reshape(shape)
    y = getattr(bf.ops, ns).twice(bf.native.tensor(a))
    assert y.device == "Native:0"
    assert y.shape == shape
    np.testing.assert_array_equal(y.numpy(), a * 2)
    # A Fortran-ordered result is copied in its logical order.
    lib.define("flip(Tensor self) -> Tensor")
    lib.impl("flip", lambda self: np.asfortranarray(self.T), "CPU")
    z = getattr(bf.ops, ns).flip(bf.native.tensor(a))
    np.testing.assert_array_equal(z.numpy(), a.T)


def test_dropping_a_kernel_that_registers_on_finalize_does_not_deadlock(ns):
    """A kernel is dropped outside the registry lock, so its finalizer may register."""
    other = f"{ns}_other"
    made = []

    class Kernel:
        def __call__(self, x):
            return x

        def __del__(self):
            made.append(bf.Library(other, "DEF"))

    lib = bf.Library(ns, "DEF")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", Kernel(), "CPU")
    lib.close()
    gc.collect()
    assert len(made) == 1
    made[0].close()


def test_fallback_warning_points_at_the_callers_line(ns, lib):
    import warnings

    lib.define("g(Tensor x) -> Tensor")
    lib.impl("g", lambda x: x * 1.0, "CPU")
    bf.set_fallback_policy("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(bf.ops, ns).g(bf.native.tensor(np.ones(1)))  # through the packet
    bf.set_fallback_policy("allow")
    (w,) = [w for w in caught if issubclass(w.category, bf.FallbackWarning)]
    assert w.filename == __file__
    assert f"{ns}::g" in str(w.message) and "Native" in str(w.message)


def test_mutable_tensor_list_on_native_is_written_back(ns, lib):
    lib.define("fill_all_(Tensor(a!)[] xs, float value) -> ()")

    def fill_all_(xs, value):
        for x in xs:
            x[...] = value

    lib.impl("fill_all_", fill_all_, "CPU")
    xs = [bf.native.tensor(np.zeros(2)), bf.native.tensor(np.zeros(3))]
    assert getattr(bf.ops, ns).fill_all_(xs, 4.0) is None
    np.testing.assert_array_equal(xs[0].numpy(), np.full(2, 4.0))
    np.testing.assert_array_equal(xs[1].numpy(), np.full(3, 4.0))


def test_boxed_cpu_kernel_writing_a_native_tensor_is_written_back(ns, lib):
    lib.define("zero_(Tensor(a!) self) -> Tensor(a!)")

    def zero_(op, keys, stack):
        stack[0][...] = 0.0  # the kernel writes its argument, which is also the return
        del stack[1:]

    lib.impl("zero_", zero_, "CPU", boxed=True)
    x = bf.native.tensor(np.arange(3.0))
    assert getattr(bf.ops, ns).zero_(x) is x
    np.testing.assert_array_equal(x.numpy(), np.zeros(3))


def test_metrics_to_dict_is_json_with_every_counted_operator(ns, lib):
    import json

    lib.define("h(Tensor x) -> Tensor")
    lib.impl("h", lambda x: x + 1.0, "CPU")
    bf.metrics.reset()
    for _ in range(3):
        getattr(bf.ops, ns).h(bf.native.tensor(np.ones(4)))
    data = json.loads(json.dumps(bf.metrics.to_dict()))
    entry = data[f"{ns}::h"]
    assert entry["fallbacks"] == 3 and entry["failures"] == 0
    assert entry["bytes_to_cpu"] == 3 * 32 and entry["bytes_from_cpu"] == 3 * 32
    assert list(entry["backends"]) == ["Native"]
    assert entry["backends"]["Native"]["fallbacks"] == 3
