"""Device views and residency that lose nothing (issue 38, the audit of its "Why" section):
each test names the audit item it covers. A kernel of a device that writes a view in place
reaches the base whatever made the view; a view of a base whose memory NumPy holds has a
payload for the device's kernels; threads writing disjoint views of one tensor never find a
payload missing; a kernel whose arguments fail to reach the device leaves every tensor as it
was; a written base is seen by its views on a ``lazy=False`` backend; a read-only view is
refused as NumPy refuses it.

Every backend here is the one-test backend "Scratch" (registered again with ``replace=True``)."""

from __future__ import annotations

import threading
from collections import Counter

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from conftest import DeviceBuffer, unique
from scratch_backend import ScratchBackend, gathered_view, shared_view


def declining(payload, shape, strides, offset):
    return None


HOOKS = {
    "none": None,
    "declining": declining,
    "sharing": shared_view,
    "gathering": gathered_view,
}


class Scratch(ScratchBackend):
    """The backend "Scratch": mutable ``DeviceBuffer`` payloads, the given ``view`` hook, the
    CPU fallback, and kernels of its own that write in place (``add_.Scalar``), read
    (``negative``), and take two tensors (``both``, an operator of the test's own)."""

    def __init__(self, view, *, lazy=True):
        self.calls: Counter[str] = Counter()
        self.refuse = lambda a: False
        self.in_from_cpu = None  # a hook of the test, called inside from_cpu

        def from_cpu(a):
            self.calls["from_cpu"] += 1
            if self.in_from_cpu is not None:
                self.in_from_cpu(a)
            if self.refuse(a):
                raise OSError("the device is full")
            return DeviceBuffer(a)

        def copy_from_cpu(b, a):
            self.calls["copy_from_cpu"] += 1
            b.data = np.array(a, copy=True)

        super().__init__(
            to_cpu=lambda b: b.data.copy(),
            from_cpu=from_cpu,
            copy_from_cpu=copy_from_cpu,
            view=view,
            lazy=lazy,
        )

    def __enter__(self):
        super().__enter__()
        self.in_kernel = None  # a hook of the test, called inside add_

        def add_(x, y):
            if self.in_kernel is not None:
                self.in_kernel()
            x.payload.data += y
            return x

        def negative(x):
            return self.handle.tensor_from_payload(DeviceBuffer(-x.payload.data))

        self.lib.impl("add_.Scalar", add_, "Scratch")
        self.lib.impl("negative", negative, "Scratch")
        ns = unique("audit")
        defs = self.library(ns, "DEF")
        defs.define("both(Tensor a, Tensor b) -> Tensor")
        defs.impl("both", lambda a, b: a + b, "CPU")
        self.library(ns, "IMPL").impl(
            "both",
            lambda a, b: self.handle.tensor_from_payload(
                DeviceBuffer(a.payload.data + b.payload.data)
            ),
            "Scratch",
        )
        self.both = getattr(bf.ops, ns).both
        return self


@pytest.mark.parametrize(
    ("hook", "lazy"),
    [("none", True), ("declining", True), ("gathering", False), ("none", False)],
)
def test_audit_1_a_kernel_writing_a_copied_view_writes_its_base(hook, lazy):
    with Scratch(HOOKS[hook], lazy=lazy) as s:
        x = s.handle.tensor(np.arange(6.0))
        x.materialize()
        v = x[1:4]
        v += 10.0  # the device's add_ on the view's own payload
        want = np.arange(6.0)
        want[1:4] += 10.0
        np.testing.assert_array_equal(v.numpy(), want[1:4])
        np.testing.assert_array_equal(x.numpy(), want)
        m = s.xp.reshape(x, (2, 3))
        for r in m:
            r += 1.0
        np.testing.assert_array_equal(x.numpy(), want + 1.0)
        np.testing.assert_array_equal(m.numpy(), (want + 1.0).reshape(2, 3))


@pytest.mark.parametrize("hook", ["none", "sharing", "gathering"])
def test_audit_2_a_view_of_a_base_numpy_holds_has_a_payload_for_the_device(hook):
    with Scratch(HOOKS[hook]) as s:
        x = s.handle.tensor(np.arange(6.0))
        arr = np.asarray(x)
        assert x.residency == "host"
        assert isinstance(x[1:4].payload, DeviceBuffer)
        np.testing.assert_array_equal(x[1:4].payload.data, [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(np.asarray(-x[1:4]), [-1.0, -2.0, -3.0])
        v = x[1:4]
        v += 10.0  # the device's kernel on the view: written into NumPy's memory
        np.testing.assert_array_equal(arr, [0.0, 11.0, 12.0, 13.0, 4.0, 5.0])
        arr[2] = 99.0  # NumPy's write is seen by the view's next payload
        np.testing.assert_array_equal(x[1:4].payload.data, [11.0, 99.0, 13.0])
        assert x.residency == "host"


@pytest.mark.parametrize("hook", ["sharing", "gathering"])
def test_audit_3_threads_writing_disjoint_views_never_find_a_payload_missing(hook):
    """Deterministic: thread A's ``from_cpu`` of the base (made for A's view) waits until
    thread B wrote its own view into the base, which left the base on the host only again."""
    with Scratch(HOOKS[hook]) as s:
        x = s.xp.add(s.handle.tensor(np.arange(8.0)), 0.0)  # on the host only
        assert x.residency == "host"
        a_inside, b_done = threading.Event(), threading.Event()
        a_thread = []

        def hold_a(arr):
            if threading.current_thread() in a_thread and not a_inside.is_set():
                a_inside.set()
                assert b_done.wait(10)

        s.in_from_cpu = hold_a
        errors = []

        def write(i, done=None):
            try:
                v = x[i::4]
                v += 1.0
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)
            finally:
                if done is not None:
                    done.set()

        a = threading.Thread(target=write, args=(0,))
        a_thread.append(a)
        a.start()
        assert a_inside.wait(10)
        b = threading.Thread(target=write, args=(1, b_done))
        b.start()
        b.join(10)
        a.join(10)
        total = []
        reader = threading.Thread(target=lambda: total.append(float(s.xp.sum(x))))
        reader.start()
        reader.join(10)
        assert errors == []
        want = np.arange(8.0)
        want[0::4] += 1.0
        want[1::4] += 1.0
        np.testing.assert_array_equal(x.numpy(), want)
        assert total == [want.sum()]


def test_audit_5_a_kernel_whose_argument_cannot_reach_the_device_changes_nothing():
    with Scratch(None) as s:
        a = s.handle.tensor(np.arange(3.0))
        arr = np.asarray(a)
        b = s.xp.add(s.handle.tensor(np.ones(1)), 0.0)  # on the host only
        assert (a.residency, b.residency) == ("host", "host")
        s.refuse = lambda v: v.shape == (1,)
        with pytest.raises(OSError, match="the device is full"):
            s.both(a, b)
        assert (a.residency, b.residency) == ("host", "host")
        arr[0] = 99.0
        np.testing.assert_array_equal(a.payload.data, [99.0, 1.0, 2.0])
        np.testing.assert_array_equal(a.numpy(), [99.0, 1.0, 2.0])


def test_audit_6_a_written_base_is_seen_by_its_views_on_a_backend_that_is_not_lazy():
    with Scratch(None, lazy=False) as s:
        x = s.handle.tensor(np.arange(4.0))
        v = x[0:2]
        np.testing.assert_array_equal(v.numpy(), [0.0, 1.0])
        x += 10.0  # the device's own add_, in place
        np.testing.assert_array_equal(v.numpy(), [10.0, 11.0])
        assert float(s.xp.sum(v)) == 21.0


@pytest.mark.parametrize("hook", ["none", "sharing"])
def test_audit_7_a_read_only_view_is_refused_as_numpy_refuses_it(hook):
    with Scratch(HOOKS[hook]) as s:
        x = s.handle.tensor(np.arange(3.0))
        b = s.xp.broadcast_to(x, (2, 3))
        with pytest.raises(ValueError, match="read-only") as e:
            b += 1.0
        assert "broadcast_to" in str(e.value)
        np.testing.assert_array_equal(x.numpy(), np.arange(3.0))
        with pytest.raises(ValueError, match="read-only"):
            np.broadcast_to(np.arange(3.0), (2, 3))[...] += 1.0


def test_audit_4_a_view_whose_values_cannot_be_made_raises_naming_its_operators(ns, lib):
    lib.define("m.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("m.out", lambda x, *, out: x * 2, "CPU")
    n = xp.namespace("Native")
    o = n.zeros(6)
    r = n.reshape(o, (2, 3))
    tail = o[4:]
    assert float(n.sum(r)) == 0.0 and tail.shape == (2,)
    getattr(bf.ops, ns).m.out(n.ones(4), out=o)  # resized: 4 elements
    assert o.shape == (4,)
    with pytest.raises(bf.BoxfallError, match="reshape") as e:
        float(n.sum(r))
    assert "cannot be made" in str(e.value)
    with pytest.raises(bf.BoxfallError, match="getitem"):
        tail.numpy()


def test_audit_8_errors_name_the_operator_and_nothing_moves_before_a_dtype_error():
    with Scratch(None) as s:
        x = s.handle.tensor(np.arange(3.0))
        y = s.xp.add(x, 1.0)  # on the host only
        s.refuse = lambda a: True
        with pytest.raises(OSError, match="the device is full") as e:
            y.materialize()
        notes = " ".join(e.value.__notes__)
        assert "'array_api::add" in notes and "'from_cpu' hook" in notes, notes
        assert y.residency == "host"
        np.testing.assert_array_equal(y.numpy(), [1.0, 2.0, 3.0])
    moved = []

    def to_cpu(b):
        moved.append(b)
        return b.data.copy()

    narrow = bf.register_backend(
        "Scratch",
        to_cpu=to_cpu,
        from_cpu=DeviceBuffer,
        copy_from_cpu=lambda b, a: setattr(b, "data", np.array(a)),
        dtypes=["float32", "int32", "uint64", "bool"],
        replace=True,
    )
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, "Scratch")
        sx = xp.namespace("Scratch")
        x = narrow.tensor(np.arange(3.0, dtype=np.float32))
        with pytest.raises(bf.DTypeError, match="int64"):
            sx.astype(x, sx.int64)
        assert moved == []  # refused before to_cpu
        u = narrow.tensor(np.zeros(3, np.uint64))
        u[0] = 2**64 - 1
        assert u.numpy()[0] == np.uint64(2**64 - 1)
        with pytest.raises(OverflowError):
            u[1] = 2**64


@pytest.mark.parametrize("hook", ["none", "sharing", "gathering"])
@pytest.mark.parametrize("lazy", [True, False])
def test_a_view_of_a_base_an_out_argument_resized_raises_on_a_python_backend(ns, lib, hook, lazy):
    # Issue 53: on a Python backend such a view read its old values or zeros ([0, 0, 0, 0, 0,
    # 0] for a view of shape (2,)) where Native raises; it raises as Native's does now.
    lib.define("m.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    lib.impl("m.out", lambda x, *, out: x * 2, "CPU")
    with Scratch(HOOKS[hook], lazy=lazy) as s:
        o = s.xp.zeros(6)
        r = s.xp.reshape(o, (2, 3))
        tail = o[4:]
        assert float(s.xp.sum(r)) == 0.0 and tail.numpy().shape == (2,)
        getattr(bf.ops, ns).m.out(s.xp.ones(4), out=o)  # resized: 4 elements
        np.testing.assert_array_equal(o.numpy(), [2.0, 2.0, 2.0, 2.0])
        for view, name in [(r, "reshape"), (tail, "getitem")]:
            with pytest.raises(bf.BoxfallError, match=name) as e:
                view.numpy()
            assert "cannot be made" in str(e.value)
            with pytest.raises(bf.BoxfallError, match=name):
                float(s.xp.sum(view))
