"""``bf.register_backend(view=)``: a backend's kernel reads a view (``x.T``, ``x[1]``,
``expand_dims``) made on the device from its base's payload by the backend's ``view`` hook, so
that nothing its base holds on the device crosses again; a base whose values are on the host
only gets its payload once, for all its views; a hook that returns None leaves the view to
``from_cpu``; a kernel that writes a device view writes its base, whether the view shares the
base's memory (nothing moves) or is a copy (``(payload, False)``: boxfall writes the copy's
values into the base after the kernel, the base then on the host only, all or nothing); a
payload of the wrong shape or dtype is a ``bf.KernelError`` naming the hook, the view's
operators and the backend.

Every backend here is the one-test backend "Scratch" (registered again with ``replace=True``)."""

from __future__ import annotations

from collections import Counter

import boxfall as bf
import numpy as np
import pytest
from conftest import DeviceBuffer, unique
from scratch_backend import ScratchBackend, gathered_view, shared_view


class Scratch(ScratchBackend):
    """The backend "Scratch" with counting hooks, ``view`` as given, the CPU fallback, and a
    kernel of its own for ``negative`` (recording the payloads it reads) and for an in-place
    ``scale_`` of an operator of the test's own."""

    def __init__(self, view):
        self.calls: Counter[str] = Counter()
        self.seen: list[DeviceBuffer] = []
        self.broken_to_cpu = False

        def to_cpu(b):
            self.calls["to_cpu"] += 1
            if self.broken_to_cpu:
                raise OSError("the device is gone")
            return b.data.copy()

        def from_cpu(a):
            self.calls["from_cpu"] += 1
            return DeviceBuffer(a)

        def copy_from_cpu(b, a):
            self.calls["copy_from_cpu"] += 1
            b.data = np.array(a, copy=True)

        def counted_view(payload, shape, strides, offset):
            self.calls["view"] += 1
            return view(payload, shape, strides, offset)

        super().__init__(
            to_cpu=to_cpu,
            from_cpu=from_cpu,
            copy_from_cpu=copy_from_cpu,
            view=counted_view if view is not None else None,
        )

    def __enter__(self):
        super().__enter__()
        ns = unique("viewhook")
        defs = self.library(ns, "DEF")
        defs.define("scale_(Tensor(a!) x, float f) -> ()")
        defs.impl("scale_", lambda x, f: np.multiply(x, f, out=x), "CPU")

        def negative(x):
            self.seen.append(x.payload)
            return self.handle.tensor_from_payload(DeviceBuffer(-x.payload.data))

        def scale_(x, f):
            x.payload.data *= f

        self.lib.impl("negative", negative, "Scratch")
        self.library(ns, "IMPL").impl("scale_", scale_, "Scratch")
        self.scale_ = getattr(bf.ops, ns).scale_
        return self


def materialized():
    return bf.metrics.transfers().get("Scratch", {}).get("bytes_materialized", 0)


def to_host():
    return bf.metrics.transfers().get("Scratch", {}).get("bytes_to_host", 0)


def test_a_view_of_a_device_base_is_made_from_its_payload_and_shares_it():
    with Scratch(shared_view) as s:
        x = s.handle.tensor(np.arange(6.0).reshape(2, 3))
        base = x.payload
        bf.metrics.reset()
        s.calls.clear()
        got = [-x.T, -x[1, ::-2]]
        assert (s.calls["to_cpu"], s.calls["from_cpu"], s.calls["view"]) == (0, 0, 2)
        assert materialized() == 0
        assert all(np.shares_memory(seen.data, base.data) for seen in s.seen)
        np.testing.assert_array_equal(np.asarray(got[0]), -np.arange(6.0).reshape(2, 3).T)
        np.testing.assert_array_equal(np.asarray(got[1]), [-5.0, -3.0])


def test_a_host_only_base_gets_its_payload_once_for_all_its_views():
    with Scratch(shared_view) as s:
        x = s.handle.tensor(np.arange(6.0).reshape(2, 3))
        y = s.xp.add(x, 1.0)  # the CPU fallback's result: on the host only
        assert y.residency == "host"
        bf.metrics.reset()
        s.calls.clear()
        np.testing.assert_array_equal(np.asarray(-y.T), -(np.arange(6.0).reshape(2, 3).T + 1))
        np.testing.assert_array_equal(np.asarray(-y[0]), [-1.0, -2.0, -3.0])
        np.testing.assert_array_equal(np.asarray(-s.xp.expand_dims(y, axis=0)), -(y.numpy()[None]))
        assert s.calls["from_cpu"] == 1  # the base's payload, once
        assert materialized() == 6 * 8  # the base's bytes, not each view's
        assert y.residency == "both"


def test_a_hook_that_returns_none_leaves_the_view_to_from_cpu():
    with Scratch(lambda *a: None) as s:
        y = s.xp.add(s.handle.tensor(np.arange(6.0).reshape(2, 3)), 1.0)
        bf.metrics.reset()
        s.calls.clear()
        np.testing.assert_array_equal(np.asarray(-y.T), -(np.arange(6.0).reshape(2, 3).T + 1))
        # The hook was asked with the base's payload, which the base got first (it stays, for
        # the base's later readers), then the view's values moved by from_cpu.
        assert s.calls["view"] == 1 and s.calls["from_cpu"] == 2
        assert s.seen[-1].data.flags.c_contiguous  # from_cpu gets a view's values in C order
        assert materialized() == 2 * 6 * 8
        assert y.residency == "both"


def test_without_a_hook_a_view_moves_its_values():
    with Scratch(None) as s:
        y = s.xp.add(s.handle.tensor(np.arange(6.0).reshape(2, 3)), 1.0)
        bf.metrics.reset()
        np.testing.assert_array_equal(np.asarray(-y.T), -(np.arange(6.0).reshape(2, 3).T + 1))
        assert s.seen[-1].data.flags.c_contiguous
        assert materialized() == 6 * 8


@pytest.mark.parametrize(
    "hook",
    [shared_view, lambda *a: (shared_view(*a), True)],
    ids=["payload", "said-shared"],
)
def test_a_kernel_that_writes_a_device_view_writes_its_base(hook):
    with Scratch(hook) as s:
        x = s.handle.tensor(np.arange(6.0).reshape(2, 3))
        assert float(s.xp.sum(x)) == 15.0  # the fallback read x: its host copy is kept
        row = x[1]
        col = x[:, 0]
        np.testing.assert_array_equal(col.numpy(), [0.0, 3.0])
        s.calls.clear()
        bf.metrics.reset()
        s.scale_(row, 10.0)  # the kernel of Scratch, on the row's device view
        # The write was the base's, where it is: nothing moved for it.
        assert (s.calls["to_cpu"], s.calls["from_cpu"]) == (0, 0)
        assert to_host() == 0 and materialized() == 0
        assert x.residency == "device"
        np.testing.assert_array_equal(x.numpy(), [[0.0, 1.0, 2.0], [30.0, 40.0, 50.0]])
        assert float(s.xp.sum(x)) == 123.0  # the host copy was stale: read again
        np.testing.assert_array_equal(col.numpy(), [0.0, 30.0])  # the other view sees it


def test_a_kernel_that_writes_a_copied_view_of_a_device_base_writes_its_base():
    with Scratch(gathered_view) as s:
        a = np.arange(6.0).reshape(2, 3)
        x = s.handle.tensor(a)  # on the device only: no host copy
        col = x[:, 0]
        bf.metrics.reset()
        s.scale_(x[1, ::-1], 10.0)  # the kernel writes a gathered copy of the row
        # Written into the base: the copy's 3 values and the base's 6 to the host, the base
        # then on the host only (its payload stale until a kernel needs it).
        assert x.residency == "host"
        assert to_host() == (3 + 6) * 8 and materialized() == 0
        want = a.copy()
        want[1] *= 10.0
        np.testing.assert_array_equal(x.numpy(), want)
        np.testing.assert_array_equal(col.numpy(), want[:, 0])  # another view sees it
        s.scale_(x.T, 0.5)  # a transposed copy: the whole base
        want *= 0.5
        np.testing.assert_array_equal(x.numpy(), want)
        np.testing.assert_array_equal(np.asarray(-x), -want)  # the device payload made again


def test_a_kernel_that_writes_a_copied_view_of_a_host_only_base_writes_its_base():
    with Scratch(gathered_view) as s:
        a = np.arange(6.0).reshape(2, 3)
        y = s.xp.add(s.handle.tensor(a), 1.0)  # the CPU fallback's result: on the host only
        assert y.residency == "host"
        bf.metrics.reset()
        s.calls.clear()
        s.scale_(y[:, 1], 10.0)
        # The base's payload was made for the hook (once); its host values were current, so
        # only the copy's 2 values came back.
        assert s.calls["from_cpu"] == 1 and materialized() == 6 * 8
        assert to_host() == 2 * 8
        want = a + 1.0
        want[:, 1] *= 10.0
        np.testing.assert_array_equal(y.numpy(), want)
        assert float(s.xp.sum(y)) == want.sum()


def test_a_copied_view_that_cannot_be_written_back_leaves_its_base_as_it_was():
    with Scratch(gathered_view) as s:
        a = np.arange(6.0).reshape(2, 3)
        x = s.handle.tensor(a)
        row = x[1]
        s.broken_to_cpu = True
        with pytest.raises(OSError, match="the device is gone") as e:
            s.scale_(row, 10.0)
        notes = " ".join(e.value.__notes__)
        for part in ("'view' hook of backend 'Scratch'", "getitem", "copy", "unchanged"):
            assert part in notes, notes
        s.broken_to_cpu = False
        # Neither the base nor the view holds the lost write.
        np.testing.assert_array_equal(x.numpy(), a)
        np.testing.assert_array_equal(row.numpy(), a[1])
        np.testing.assert_array_equal(np.asarray(-row), -a[1])


def test_a_view_hook_tuple_must_say_whether_it_shares():
    with Scratch(lambda *a: (shared_view(*a), 0)) as s:
        x = s.handle.tensor(np.arange(6.0).reshape(2, 3))
        with pytest.raises(bf.KernelError, match=r"\(payload, shares_memory\)") as e:
            -x.T  # noqa: B018
        assert "'Scratch'" in str(e.value) and "permute_dims" in str(e.value)
        assert s.seen == []


@pytest.mark.parametrize(
    ("hook", "said"),
    [
        (lambda p, shape, strides, offset: DeviceBuffer(np.zeros(7)), "shape (7,)"),
        (
            lambda p, shape, strides, offset: DeviceBuffer(np.zeros(shape, np.float32)),
            "dtype float32",
        ),
    ],
    ids=["shape", "dtype"],
)
def test_a_view_of_the_wrong_shape_or_dtype_is_a_kernel_error(hook, said):
    with Scratch(hook) as s:
        x = s.handle.tensor(np.arange(6.0).reshape(2, 3))
        with pytest.raises(bf.KernelError) as e:
            -s.xp.matrix_transpose(x)  # noqa: B018
        text = str(e.value)
        for part in ("'view' hook", "'Scratch'", "matrix_transpose", said, "(3, 2)"):
            assert part in text, text
        assert s.seen == []  # the kernel did not run


def test_a_hook_that_raises_is_named_in_the_error():
    def broken(*a):
        raise ValueError("no views today")

    with Scratch(broken) as s:
        x = s.handle.tensor(np.arange(6.0).reshape(2, 3))
        with pytest.raises(ValueError, match="no views today") as e:
            -x[0]  # noqa: B018
        assert any("'view' hook of backend 'Scratch'" in n for n in e.value.__notes__)


def test_a_view_hook_must_be_callable():
    with pytest.raises(TypeError, match="'view' hook of backend 'Scratch' must be callable"):
        bf.register_backend(
            "Scratch",
            to_cpu=np.asarray,
            from_cpu=np.asarray,
            copy_from_cpu=np.copyto,
            view=42,
            replace=True,
        )
