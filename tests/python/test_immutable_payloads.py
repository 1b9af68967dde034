"""Immutable device memory: a device whose arrays cannot be written where
they are (a ``jax.Array``) writes a tensor by making a new payload. ``copy_from_cpu`` and a
backend's in-place kernels (a return aliasing a ``Tensor(a!)`` argument) may return one, and
boxfall puts it in the tensor's place as a write (the version moves on, its views see it);
None keeps the rule of a payload written where it is. ``view_write=`` writes a view that a
kernel wrote as a copy into its base on the device (a scatter), so that nothing crosses to
the host; without it the view's values reach the base through the host.

Every backend here is the one-test backend "Scratch" (registered again with ``replace=True``),
whose payload is a read-only NumPy array in a holder: a write where it is would raise."""

from __future__ import annotations

from collections import Counter

import boxfall as bf
import numpy as np
import pytest
from scratch_backend import ScratchBackend, strided


class Frozen:
    """An immutable device array: its values can be read, never written."""

    def __init__(self, data):
        self.data = np.array(data, copy=True)
        self.data.flags.writeable = False

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype


class Immutable(ScratchBackend):
    """The backend "Scratch" of ``Frozen`` payloads: hooks that count their calls, views
    gathered into copies (an immutable device can share nothing it could write), an optional
    scatter ``view_write``, the CPU fallback, and in-place ``add_`` kernels that return a new
    payload (``returns="payload"``), a new ``bf.Tensor`` (``"tensor"``) or a payload of the
    wrong shape (``"wrong"``)."""

    def __init__(self, *, view_write=True, view=True, returns="payload", lazy=True):
        self.calls: Counter[str] = Counter()
        self.returns = returns

        def to_cpu(p):
            self.calls["to_cpu"] += 1
            return p.data.copy()

        def from_cpu(a):
            self.calls["from_cpu"] += 1
            return Frozen(a)

        def copy_from_cpu(p, a):
            self.calls["copy_from_cpu"] += 1
            return Frozen(a)

        def gather(p, shape, strides, offset):
            self.calls["view"] += 1
            return Frozen(strided(p.data, shape, strides, offset)), False

        def scatter(base, values, shape, strides, offset):
            self.calls["view_write"] += 1
            new = base.data.copy()
            strided(new, shape, strides, offset)[...] = values.data
            return Frozen(new)

        super().__init__(
            to_cpu=to_cpu,
            from_cpu=from_cpu,
            copy_from_cpu=copy_from_cpu,
            view=gather if view else None,
            view_write=scatter if view_write else None,
            lazy=lazy,
        )

    def __enter__(self):
        super().__enter__()

        def add_(x, y):
            self.calls["add_"] += 1
            other = y.payload.data if isinstance(y, bf.Tensor) else y
            new = Frozen(x.payload.data + other)
            if self.returns == "tensor":
                return self.handle.tensor_from_payload(new)
            if self.returns == "wrong":
                return Frozen(np.zeros(7))
            return new

        self.lib.impl("add_", add_, "Scratch")
        self.lib.impl("add_.Scalar", add_, "Scratch")
        return self


def transfers():
    t = bf.metrics.transfers().get("Scratch", {})
    return t.get("bytes_to_host", 0), t.get("bytes_materialized", 0)


def test_copy_from_cpu_may_return_a_new_payload_which_takes_the_tensors_place():
    with Immutable() as s:
        x = s.handle.tensor(np.arange(4.0))
        first = x.payload
        row = x[1:3]
        np.testing.assert_array_equal(row.numpy(), [1.0, 2.0])
        x *= 2.0  # multiply_ through the CPU fallback: written back by copy_from_cpu
        assert s.calls["copy_from_cpu"] == 1
        assert x.payload is not first
        np.testing.assert_array_equal(first.data, np.arange(4.0))  # never written
        np.testing.assert_array_equal(x.numpy(), np.arange(4.0) * 2)
        np.testing.assert_array_equal(row.numpy(), [2.0, 4.0])  # the view sees the write
        assert float(s.xp.sum(x)) == 12.0  # the host copy read before the write is stale


def test_copy_from_cpu_returning_a_payload_of_another_shape_writes_nothing():
    with Immutable():
        bad = bf.register_backend(
            "Scratch",
            to_cpu=lambda p: p.data.copy(),
            from_cpu=Frozen,
            copy_from_cpu=lambda p, a: Frozen(np.zeros(9)),
            replace=True,
        )
        x = bad.tensor(np.arange(4.0))
        with pytest.raises(bf.KernelError) as e:
            x *= 2.0
        text = str(e.value)
        assert "'copy_from_cpu' hook" in text and "'Scratch'" in text and "(9,)" in text, text
        np.testing.assert_array_equal(x.numpy(), np.arange(4.0))


@pytest.mark.parametrize("returns", ["payload", "tensor"])
def test_an_inplace_kernel_may_return_a_new_payload_for_its_argument(returns):
    with Immutable(returns=returns) as s:
        x = s.handle.tensor(np.arange(4.0))
        alias = x
        first = x.payload
        view = x[::2]
        np.testing.assert_array_equal(view.numpy(), [0.0, 2.0])
        x += 10.0
        assert s.calls["add_"] == 1 and x is alias
        assert x.payload is not first
        np.testing.assert_array_equal(x.numpy(), np.arange(4.0) + 10)
        np.testing.assert_array_equal(view.numpy(), [10.0, 12.0])
        # The operator's own result is the argument, as the caller passed it.
        assert bf.ops.array_api.add_.Scalar(x, 1.0) is x
        np.testing.assert_array_equal(x.numpy(), np.arange(4.0) + 11)


def test_an_inplace_kernel_returning_none_wrote_its_argument_where_it_is():
    with Immutable() as s:
        s.lib.close()
        s.lib = s.library("array_api", "IMPL")

        def add_(x, y):
            x.payload.data = x.payload.data + y  # a holder written where it is

        s.lib.impl("add_.Scalar", add_, "Scratch")
        x = s.handle.tensor(np.arange(3.0))
        held = x.payload
        assert bf.ops.array_api.add_.Scalar(x, 1.0) is x
        assert x.payload is held
        np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])


def test_a_new_payload_of_another_shape_is_a_kernel_error_and_changes_nothing():
    with Immutable(returns="wrong") as s:
        x = s.handle.tensor(np.arange(4.0))
        first = x.payload
        with pytest.raises(bf.KernelError) as e:
            x += 1.0
        text = str(e.value)
        assert "'Scratch' kernel" in text and "add_" in text and "float64[7]" in text, text
        assert x.payload is first
        np.testing.assert_array_equal(x.numpy(), np.arange(4.0))


@pytest.mark.parametrize("view", [True, False], ids=["gathered", "no-view-hook"])
def test_view_write_scatters_a_written_view_into_its_base_on_the_device(view):
    with Immutable(view=view) as s:
        x = s.handle.tensor(np.arange(6.0))
        other = x[4:]
        np.testing.assert_array_equal(other.numpy(), [4.0, 5.0])
        bf.metrics.reset()
        s.calls.clear()
        v = x[1:4]
        v += 10.0  # the device's add_ on a copy of the view: scattered into the base
        assert s.calls["view_write"] == 1 and s.calls["to_cpu"] == 0
        assert transfers()[0] == 0  # nothing came to the host
        assert x.residency == "device"
        want = np.arange(6.0)
        want[1:4] += 10.0
        np.testing.assert_array_equal(x.numpy(), want)
        np.testing.assert_array_equal(v.numpy(), want[1:4])
        np.testing.assert_array_equal(other.numpy(), [4.0, 5.0])
        for r in s.xp.reshape(x, (2, 3)):
            r += 1.0
        np.testing.assert_array_equal(x.numpy(), want + 1.0)


def test_without_view_write_a_written_view_reaches_its_base_through_the_host():
    with Immutable(view_write=False) as s:
        x = s.handle.tensor(np.arange(6.0))
        bf.metrics.reset()
        v = x[1:4]
        v += 10.0
        want = np.arange(6.0)
        want[1:4] += 10.0
        np.testing.assert_array_equal(x.numpy(), want)
        assert transfers()[0] > 0  # the view's values (and the base's) came to the host


def test_view_write_must_be_callable():
    with pytest.raises(TypeError, match="'view_write' hook of backend 'Scratch' must be callable"):
        bf.register_backend(
            "Scratch",
            to_cpu=np.asarray,
            from_cpu=np.asarray,
            copy_from_cpu=np.copyto,
            view_write=42,
            replace=True,
        )
