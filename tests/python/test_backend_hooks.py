"""A Python backend's hooks: the batched to_cpu_many, and failures of each hook, which change
no argument, name the operator, the hook and the backend, and are counted."""

from __future__ import annotations

import uuid

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest


class Buffer:
    def __init__(self, array):
        self.data = np.array(array, copy=True)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)


class Hooks:
    """Hooks that count their calls and fail on demand."""

    def __init__(self):
        self.calls = {"to_cpu": 0, "to_cpu_many": 0, "from_cpu": 0, "copy_from_cpu": 0}
        self.batch_sizes = []
        self.fail = None

    def _enter(self, name):
        self.calls[name] += 1
        if self.fail == name:
            raise OSError(f"{name} broke")

    def to_cpu(self, buf):
        self._enter("to_cpu")
        return buf.data.copy()

    def to_cpu_many(self, bufs):
        self._enter("to_cpu_many")
        self.batch_sizes.append(len(bufs))
        return [b.data.copy() for b in bufs]

    def from_cpu(self, array):
        self._enter("from_cpu")
        return Buffer(array)

    def copy_from_cpu(self, buf, array):
        self._enter("copy_from_cpu")
        buf.data = np.array(array, copy=True)


@pytest.fixture(scope="module")
def device():
    hooks = Hooks()
    name = f"Hooked{uuid.uuid4().hex[:8]}"
    backend = bf.register_backend(
        name,
        to_cpu=hooks.to_cpu,
        from_cpu=hooks.from_cpu,
        copy_from_cpu=hooks.copy_from_cpu,
        to_cpu_many=hooks.to_cpu_many,
        lazy=False,  # the hooks' own contract: every read and result goes through them
    )
    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, name)
    yield backend, hooks
    fb.close()


@pytest.fixture
def ops(ns, lib, device):
    lib.define("addn(Tensor[] xs, Tensor y) -> Tensor")
    lib.impl("addn", lambda xs, y: sum(xs) + y, "CPU")
    lib.define("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)")

    def add_(self, other):
        self += other
        return self

    lib.impl("add_", add_, "CPU")
    _, hooks = device
    hooks.fail = None
    for k in hooks.calls:
        hooks.calls[k] = 0
    hooks.batch_sizes.clear()
    return getattr(bf.ops, ns)


def test_to_cpu_many_moves_all_of_a_calls_tensors_at_once(ops, device):
    backend, hooks = device
    xs = [backend.tensor(np.full(2, float(i))) for i in range(3)]
    y = ops.addn(xs, backend.tensor(np.ones(2)))
    np.testing.assert_array_equal(y.numpy(), np.full(2, 4.0))
    assert hooks.batch_sizes == [4]
    assert hooks.calls["to_cpu"] == 1  # only y.numpy() above


def test_a_batched_backend_checks_every_tensors_device_before_moving_any(ops, device):
    backend, hooks = device
    xs = [backend.tensor(np.zeros(2)), backend.tensor(np.ones(2), index=1)]
    with pytest.raises(bf.FallbackError, match=r"two devices.*:0.*:1"):
        ops.addn(xs, backend.tensor(np.ones(2)))
    assert hooks.calls["to_cpu_many"] == 0


@pytest.mark.parametrize("hook", ["to_cpu_many", "copy_from_cpu"])
def test_a_failing_hook_changes_nothing_and_says_where(ns, ops, device, hook):
    backend, hooks = device
    x, y = backend.tensor(np.zeros(3)), backend.tensor(np.ones(3))
    before = x.payload.data.copy()
    hooks.fail = hook
    with pytest.raises(OSError, match=f"{hook} broke") as info:
        ops.add_(x, y)
    hooks.fail = None
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert hook in notes and backend.name in notes
    np.testing.assert_array_equal(x.payload.data, before)
    stats = bf.metrics.op_stats(f"{ns}::add_")
    assert (stats["fallbacks"], stats["failures"]) == (1, 1)


def test_a_failing_from_cpu_changes_nothing(ns, ops, device):
    backend, hooks = device
    xs = [backend.tensor(np.ones(2))]
    y = backend.tensor(np.ones(2))
    hooks.fail = "from_cpu"
    with pytest.raises(OSError, match="from_cpu broke"):
        ops.addn(xs, y)
    hooks.fail = None
    np.testing.assert_array_equal(y.payload.data, np.ones(2))
    assert bf.metrics.op_stats(f"{ns}::addn")["failures"] == 1


def _decorated(f):
    """An ordinary decorator, as a lock or a timer around a hook is written: it takes
    ``*args, **kwargs`` whatever ``f`` takes."""

    def g(*args, **kwargs):
        return f(*args, **kwargs)

    return g


@pytest.mark.parametrize("takes_device", [False, True])
def test_a_decorated_from_cpu_is_called_as_its_registration_says(takes_device):
    # Issue 53: a decorated from_cpu (its signature: **kwargs) was called with device= and
    # failed inside the hook it wraps; the registration, not the signature, says it now.
    told = []

    def plain(array):
        return Buffer(array)

    def with_device(array, *, device):
        told.append(device)
        return Buffer(array)

    backend = bf.register_backend(
        "HookedDecorated",
        to_cpu=_decorated(lambda b: b.data.copy()),
        from_cpu=_decorated(with_device if takes_device else plain),
        copy_from_cpu=_decorated(lambda b, a: setattr(b, "data", np.array(a, copy=True))),
        replace=True,
        from_cpu_takes_device=takes_device,
    )
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        t = backend.tensor(np.arange(3.0), 1)
        assert t.device == "HookedDecorated:1"
        on = xp.namespace("HookedDecorated:1")
        made = on.add(t, 1.0)  # the CPU fallback's result, put on the device by from_cpu
        np.testing.assert_array_equal(made.numpy(), [1.0, 2.0, 3.0])
        assert isinstance(made.payload, Buffer)
    assert told == ([1, 1] if takes_device else [])
