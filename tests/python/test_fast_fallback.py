"""A Python call of backend tensors whose CPU kernel is a Python function runs the CPU fallback
without a stack (``fast.rs``, ``run_fallback``): it gives what the general path gives (the
values, the result's device and dtype, the errors with their notes, the counters and the
policy), for every case it takes and every case it hands on.

``both`` runs a call on the fast path and on the general path (``_boxfall.set_fast_path``).
"""

from __future__ import annotations

import warnings

import boxfall as bf
import numpy as np
import pytest
from boxfall import _boxfall
from paths import both

STAT_KEYS = ("fallbacks", "failures", "bytes_to_cpu", "bytes_from_cpu")


def outcome(fn):
    """What ``fn()`` gives: the result's device, dtype and values, or the exception's type,
    text and notes."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - any exception is the outcome here
        return ("error", type(e), str(e), tuple(getattr(e, "__notes__", [])))
    if isinstance(r, bf.Tensor):
        return ("tensor", r.device, str(r.dtype), r.numpy().tolist())
    return ("other", type(r), np.asarray(r).tolist())


def counted(name, fn):
    """``outcome(fn)`` and the counters it moved."""
    bf.metrics.reset()
    out = outcome(fn)
    stats = bf.metrics.op_stats(name)
    return out, {k: stats[k] for k in STAT_KEYS}


def same_on_both_paths(name, fn):
    fast, general = both(lambda: counted(name, fn))
    assert fast == general
    return fast


def op_of(ns, name):
    return getattr(getattr(bf.ops, ns), name).default


def test_a_binary_kernel_gives_the_same_result_and_counters(ns, lib):
    lib.define("add(Tensor a, Tensor b) -> Tensor")
    lib.impl("add", np.add, "CPU")
    x, y = bf.native.tensor(np.arange(3.0)), bf.native.tensor(np.ones(3))
    (out, stats) = same_on_both_paths(f"{ns}::add", lambda: op_of(ns, "add")(x, y))
    assert out == ("tensor", "Native:0", "float64", [1.0, 2.0, 3.0])
    assert stats == {"fallbacks": 1, "failures": 0, "bytes_to_cpu": 48, "bytes_from_cpu": 24}


def test_scalars_defaults_and_one_tensor_twice(ns, lib):
    lib.define("axpy(Tensor a, Tensor b, float s=2.0, int k=1) -> Tensor")
    seen = []

    def axpy(a, b, s, k):
        seen.append(a is b)
        return a * s + b * k

    lib.impl("axpy", axpy, "CPU")
    x = bf.native.tensor(np.arange(4.0))
    op = op_of(ns, "axpy")
    same_on_both_paths(f"{ns}::axpy", lambda: op(x, x))
    same_on_both_paths(f"{ns}::axpy", lambda: op(x, x, 0.5, 3))
    # One tensor passed twice reaches the kernel as one array, on both paths.
    assert seen and all(seen)


class MyInt(int):
    """An int subclass: converted by the binding, so not its own object."""


@pytest.mark.parametrize(
    "extra",
    [(2, 1.5, True, None), (MyInt(2), 1.5, True, None), (2, 3, True, None), (2, 1.5, False, "x")],
    ids=["exact", "int-subclass", "int-as-float", "optional-given"],
)
def test_the_lean_entry_binds_device_tensors_and_scalars_as_the_general_path(ns, lib, extra):
    # Every argument by position, the tensors Native ones: the lean entry runs the fallback on
    # the caller's argument array (run_device_lean) where each argument binds to itself, and
    # hands the rest to the binding; the kernel sees the same on both paths.
    lib.define("mix(Tensor x, int n, float f, bool b, Tensor? y) -> Tensor")
    seen = []

    def mix(x, n, f, b, y):
        seen.append((type(x), x.tolist(), type(n), n, type(f), f, type(b), b, y is None))
        return x * n * f + (0 if y is None else y)

    lib.impl("mix", mix, "CPU")
    x = bf.native.tensor(np.arange(2.0))
    args = (x, *extra[:3], x if extra[3] == "x" else extra[3])
    # A fresh overload each call, so the fast side is the lean entry's.
    out, stats = same_on_both_paths(f"{ns}::mix", lambda: op_of(ns, "mix")(*args))
    assert seen[0] == seen[1] and seen[0][0] is np.ndarray
    assert out[:2] == ("tensor", "Native:0") and stats["fallbacks"] == 1


def test_a_written_argument_takes_the_binding_and_is_written_back_alike(ns, lib):
    lib.define("scale_(Tensor(a!) self, float s) -> Tensor(a!)")

    def scale_(a, s):
        a *= s
        return a

    lib.impl("scale_", scale_, "CPU")
    results = []
    for on in (True, False):
        before = _boxfall.set_fast_path(on)
        try:
            x = bf.native.tensor(np.arange(3.0))
            r = op_of(ns, "scale_")(x, 2.0)
            results.append((r is x, x.numpy().tolist()))
        finally:
            _boxfall.set_fast_path(before)
    assert results[0] == results[1] == (True, [0.0, 2.0, 4.0])


def test_integer_and_bool_results_come_back_in_their_dtypes(ns, lib):
    lib.define("lt(Tensor a, Tensor b) -> Tensor")
    lib.define("floor(Tensor a) -> Tensor")
    lib.impl("lt", np.less, "CPU")
    lib.impl("floor", lambda a: np.floor(a).astype(np.int32), "CPU")
    x = bf.native.tensor(np.array([1.0, 5.0]))
    y = bf.native.tensor(np.array([2.0, 3.0]))
    out, _ = same_on_both_paths(f"{ns}::lt", lambda: op_of(ns, "lt")(x, y))
    assert out == ("tensor", "Native:0", "bool", [True, False])
    out, _ = same_on_both_paths(f"{ns}::floor", lambda: op_of(ns, "floor")(x))
    assert out == ("tensor", "Native:0", "int32", [1, 5])


def test_a_strided_or_big_endian_result_is_copied_in_order(ns, lib):
    lib.define("rev(Tensor a) -> Tensor")
    lib.define("swap(Tensor a) -> Tensor")
    lib.impl("rev", lambda a: (a * 2)[::-1], "CPU")
    lib.impl("swap", lambda a: (a * 2).astype(">f8"), "CPU")
    x = bf.native.tensor(np.arange(4.0))
    out, _ = same_on_both_paths(f"{ns}::rev", lambda: op_of(ns, "rev")(x))
    assert out[3] == [6.0, 4.0, 2.0, 0.0]
    out, _ = same_on_both_paths(f"{ns}::swap", lambda: op_of(ns, "swap")(x))
    assert out[3] == [0.0, 2.0, 4.0, 6.0]


def test_a_kernel_returning_its_argument(ns, lib):
    lib.define("ident(Tensor a) -> Tensor")
    lib.impl("ident", lambda a: a, "CPU")
    x = bf.native.tensor(np.arange(2.0))
    fast, general = both(lambda: op_of(ns, "ident")(x))
    assert (fast is x) == (general is x)
    assert fast.numpy().tolist() == general.numpy().tolist() == [0.0, 1.0]
    same_on_both_paths(f"{ns}::ident", lambda: op_of(ns, "ident")(x))


def test_kernel_exceptions_keep_their_type_text_and_notes(ns, lib):
    lib.define("boom(Tensor a) -> Tensor")

    def boom(a):
        raise KeyError("nope")

    lib.impl("boom", boom, "CPU")
    x = bf.native.tensor(np.ones(1))
    out, stats = same_on_both_paths(f"{ns}::boom", lambda: op_of(ns, "boom")(x))
    assert out[0] == "error" and out[1] is KeyError and out[3]
    assert stats["fallbacks"] == 1 and stats["failures"] == 1


def test_a_lent_argument_stays_read_only(ns, lib):
    lib.define("scribble(Tensor a) -> Tensor")

    def scribble(a):
        a[0] = 7.0
        return a

    lib.impl("scribble", scribble, "CPU")
    x = bf.native.tensor(np.ones(2))
    out, _ = same_on_both_paths(f"{ns}::scribble", lambda: op_of(ns, "scribble")(x))
    assert out[0] == "error" and out[1] is ValueError
    assert x.numpy().tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "result",
    [
        pytest.param(lambda a: [1.0], id="a list"),
        pytest.param(lambda a: "text", id="a string"),
        pytest.param(lambda a: None, id="None"),
        pytest.param(lambda a: np.array(["a"]), id="an unsupported dtype"),
    ],
)
def test_a_bad_return_is_the_same_error(ns, lib, result):
    lib.define("bad(Tensor a) -> Tensor")
    lib.impl("bad", result, "CPU")
    x = bf.native.tensor(np.ones(1))
    out, stats = same_on_both_paths(f"{ns}::bad", lambda: op_of(ns, "bad")(x))
    assert out[0] == "error"
    assert stats["failures"] == 1


def test_a_numpy_scalar_return_is_a_0d_tensor_on_both_paths(ns, lib):
    # NumPy's reductions return NumPy scalars for 0-d results; a Tensor return takes them as
    # 0-d arrays (as a Tensor argument does), on the fast path as on the general one.
    lib.define("total(Tensor a) -> Tensor")
    lib.impl("total", lambda a: np.float64(a.sum()), "CPU")
    x = bf.native.tensor(np.arange(4.0))
    out, stats = same_on_both_paths(f"{ns}::total", lambda: op_of(ns, "total")(x))
    assert out == ("tensor", "Native:0", "float64", 6.0)
    assert stats["failures"] == 0


def test_the_policy_refuses_and_warns_alike(ns, lib):
    lib.define("neg(Tensor a) -> Tensor")
    lib.impl("neg", np.negative, "CPU")
    x = bf.native.tensor(np.ones(2))
    op = op_of(ns, "neg")
    bf.set_fallback_policy("error")
    try:
        out, stats = same_on_both_paths(f"{ns}::neg", lambda: op(x))
    finally:
        bf.set_fallback_policy("allow")
    assert out[0] == "error" and out[1] is bf.FallbackError
    assert stats == {"fallbacks": 1, "failures": 1, "bytes_to_cpu": 0, "bytes_from_cpu": 0}
    caught = []
    for on in (True, False):
        before = _boxfall.set_fast_path(on)
        bf.set_fallback_policy("warn")
        bf.metrics.reset()  # forgets which operators warned
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                op(x)
                op(x)
            caught.append([(type(m.message), str(m.message)) for m in w])
        finally:
            bf.set_fallback_policy("allow")
            _boxfall.set_fast_path(before)
    assert caught[0] == caught[1] and len(caught[0]) == 1


def test_a_python_backend_and_mixed_devices_give_the_same(ns, lib, backend_factory):
    # Eager: each path's run moves what the other's did (residency would serve the second
    # run from the host copy the first kept).
    accel = backend_factory("FastFbAccel", lazy=False)
    lib.define("add(Tensor a, Tensor b) -> Tensor")
    lib.impl("add", np.add, "CPU")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, accel.name)
        a = accel.tensor(np.arange(2.0))
        out, _ = same_on_both_paths(f"{ns}::add", lambda: op_of(ns, "add")(a, a))
        assert out[1] == accel.device and out[3] == [0.0, 2.0]
        x = bf.native.tensor(np.ones(2))
        out, _ = same_on_both_paths(f"{ns}::add", lambda: op_of(ns, "add")(x, a))
        assert out[0] == "error" and out[1] is bf.FallbackError
    # A NumPy array beside a Native tensor: the general way serves it, as before.
    same_on_both_paths(f"{ns}::add", lambda: op_of(ns, "add")(x, np.ones(2)))


def test_one_operator_falls_back_for_native_and_a_python_backend_in_turn(ns, lib, backend_factory):
    # The entry that holds no PyO3 count of the GIL serves Native's fallback (Rust hooks)
    # and passes a Python backend's (hooks that call Python) to PyO3's entry: one operator,
    # called in turn with both, falls back for each, as the general path does. Eager, so that
    # every call moves its bytes (the figures compared below).
    accel = backend_factory("FastFbAccel", lazy=False)
    lib.define("add(Tensor a, Tensor b) -> Tensor")
    lib.impl("add", np.add, "CPU")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, accel.name)
        x = bf.native.tensor(np.arange(2.0))
        a = accel.tensor(np.arange(2.0))
        # Called as a user calls it (the fast path on, no switching, which would take the
        # operator off that entry), in an order that reaches both entries.
        for t, device in [(x, "Native:0"), (a, accel.device), (x, "Native:0")]:
            out, stats = counted(f"{ns}::add", lambda t=t: op_of(ns, "add")(t, t))
            assert out == ("tensor", device, "float64", [0.0, 2.0])
            assert stats == {
                "fallbacks": 1,
                "failures": 0,
                "bytes_to_cpu": 32,
                "bytes_from_cpu": 16,
            }


class _Sub(np.ndarray):
    """An ndarray subclass: its object has the array's fields, read as a plain array's."""


RESULTS = {
    "bool": lambda: np.array([True, False, True]),
    "int8": lambda: np.array([-3, 0, 5], dtype=np.int8),
    "int16": lambda: np.array([-300, 7], dtype=np.int16),
    "int32": lambda: np.arange(-2, 4, dtype=np.int32).reshape(2, 3),
    "int64": lambda: np.array(-(2**40), dtype=np.int64),  # 0-d
    "uint8": lambda: np.array([255, 1], dtype=np.uint8),
    "uint16": lambda: np.array([65535], dtype=np.uint16),
    "uint32": lambda: np.array([2**32 - 1, 3], dtype=np.uint32),
    "uint64": lambda: np.array([2**64 - 1], dtype=np.uint64),
    "float64-one": lambda: np.array([2.5]),  # one element: shape and strides kept, not built
    "bool-0d": lambda: np.array(True),
    "complex128-0d": lambda: np.array(1 - 2j),
    "float32": lambda: np.linspace(0, 1, 24, dtype=np.float32).reshape(2, 3, 4),
    "float64": lambda: np.empty((0, 3)),  # empty
    "complex64": lambda: np.array([1 + 2j, -3j], dtype=np.complex64),
    "complex128": lambda: np.array([[1 - 1j]], dtype=np.complex128),
    "big-endian": lambda: np.arange(4.0).astype(">f8"),
    "strided": lambda: np.arange(10.0)[::3],
    "fortran": lambda: np.asfortranarray(np.arange(6).reshape(2, 3)),
    "subclass": lambda: np.arange(5.0).view(_Sub),
    "subclass-strided": lambda: np.arange(8.0).view(_Sub)[::2],
}


@pytest.mark.parametrize("make", list(RESULTS.values()), ids=list(RESULTS))
def test_a_kernel_result_of_every_dtype_and_layout_comes_back_as_it_was(ns, lib, make):
    # The result's copy into Native memory reads a C-ordered array's fields directly
    # (`plain_to_host`, subclasses too) and hands any other array to NumPy first: the values,
    # dtype (in native byte order) and shape are the kernel's either way, on both paths.
    lib.define("make(Tensor a) -> Tensor")
    lib.impl("make", lambda a: make(), "CPU")
    x = bf.native.tensor(np.ones(1))
    expected = make()
    for out in both(lambda: op_of(ns, "make")(x)):
        assert isinstance(out, bf.Tensor) and out.device == "Native:0"
        got = out.numpy()
        assert got.dtype == expected.dtype.newbyteorder("=")
        assert got.shape == expected.shape
        assert got.tolist() == expected.tolist()


def test_a_one_element_result_is_a_whole_c_ordered_array_that_goes_on_being_used(ns, lib):
    # A one-element result of no or one dimension gets its shape and strides as copies of
    # kept ones (`array_from_vec`): its array must be the one element, C-ordered, in a tensor
    # that serves as an argument again.
    lib.define("add(Tensor a, Tensor b) -> Tensor")
    lib.impl("add", np.add, "CPU")
    add = op_of(ns, "add")
    for a in (np.array([1.5]), np.array(1.5), np.array([[1.5]])):
        x = bf.native.tensor(a)
        for out in both(lambda x=x: add(x, x)):
            got = out.numpy()
            assert got.shape == a.shape and got.flags.c_contiguous
            assert got.strides == np.array(a, order="C").strides
            assert add(out, out).numpy().tolist() == (4 * a).tolist()


def test_a_lent_argument_kept_in_its_tensor_follows_every_write(ns, lib):
    # A small loan's view is kept in the `bf.Tensor` (`lent_array`) and lent again while the
    # data is unchanged; a write through the fallback, or one a Native kernel makes, retires
    # it, and the next call sees the new values.
    lib.define("peek(Tensor a, Tensor b) -> Tensor")
    lib.define("fill_(Tensor(a!) self, float v) -> Tensor(a!)")
    seen = []

    def peek(a, b):
        seen.append((a, a.tolist(), b.tolist()))
        return a + b

    def fill_(a, v):
        a[...] = v
        return a

    lib.impl("peek", peek, "CPU")
    lib.impl("fill_", fill_, "CPU")
    ops = getattr(bf.ops, ns)
    x, y = bf.native.tensor(np.arange(2.0)), bf.native.tensor(np.ones(2))
    assert ops.peek(x, y).numpy().tolist() == [1.0, 2.0]
    assert ops.peek(x, y).numpy().tolist() == [1.0, 2.0]
    assert seen[0][0] is seen[1][0], "unchanged: the kept view is lent again"
    ops.fill_(x, 5.0)
    assert ops.peek(x, y).numpy().tolist() == [6.0, 6.0]
    assert seen[2][0] is not seen[0][0] and seen[2][1] == [5.0, 5.0]
    assert seen[0][0].tolist() == [0.0, 1.0], "an old view keeps what it saw"
    x[0] = 9.0  # `__setitem__`: another way in, through the tensor's own write
    assert ops.peek(x, y).numpy().tolist() == [10.0, 6.0]
    assert seen[3][1] == [9.0, 5.0]


def test_every_call_counts_its_moves_whether_the_loan_is_new_or_kept(ns, lib):
    # The first call makes each argument's loan; later ones borrow the kept loan (no handle
    # is made for it): each call counts the same bytes, on both paths, and a tensor whose
    # loan is kept and one lent for the first time together count both.
    lib.define("add(Tensor a, Tensor b) -> Tensor")
    lib.impl("add", np.add, "CPU")
    op = op_of(ns, "add")
    x, y = bf.native.tensor(np.arange(3.0)), bf.native.tensor(np.ones(3))
    per_call = {"fallbacks": 1, "failures": 0, "bytes_to_cpu": 48, "bytes_from_cpu": 24}
    for _ in range(3):
        out, stats = same_on_both_paths(f"{ns}::add", lambda: op(x, y))
        assert out == ("tensor", "Native:0", "float64", [1.0, 2.0, 3.0])
        assert stats == per_call
    z = bf.native.tensor(np.full(3, 2.0))  # never lent: its loan is made in this call
    fast, _ = both(lambda: counted(f"{ns}::add", lambda: op(x, z)))
    assert fast == (("tensor", "Native:0", "float64", [2.0, 3.0, 4.0]), per_call)
