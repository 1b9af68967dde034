"""Residency: a device tensor's host copy kept beside its payload, tagged by its data version,
and the CPU fallback's results left on the host until the device needs them, on a Python
backend whose hooks count their calls and bytes."""

from __future__ import annotations

from typing import Any

import boxfall as bf
import boxfall.array_api as xp_cpu
import numpy as np
import pytest
from boxfall.testing import HostBuffer as Buffer

# One backend name for every test, registered again with replace=True by each: a process has
# few key slots. conftest's counting_dev (lazy, the default) and counting_eager (lazy=False)
# register it with hooks that count their calls and bytes, and the CPU fallback.
COUNTING_BACKEND = "Resident"


def on_device(backend: bf.Backend, values: Any) -> bf.Tensor:
    """A tensor of ``backend`` whose values are on the device only (no host copy, no hook
    called to make it)."""
    return backend.tensor_from_payload(Buffer(np.asarray(values)))


def stats(op: str) -> dict[str, int]:
    """The fallback figures of every overload of ``op`` summed (``add`` of two tensors is
    ``array_api::add``, of a tensor and a scalar ``array_api::add.Tensor_Scalar``)."""
    found = {name: s for name, s in bf.metrics.to_dict().items() if name.split(".")[0] == op}
    assert found, f"{op} did not fall back"
    keys = ("fallbacks", "bytes_to_cpu", "bytes_from_cpu")
    return {k: sum(s[k] for s in found.values()) for k in keys}


def fallback_bytes(op: str) -> tuple[int, int]:
    s = stats(op)
    return s["bytes_to_cpu"], s["bytes_from_cpu"]


def test_a_chain_of_fallbacks_moves_each_input_once_and_no_result(counting_dev):
    backend, hooks, xp = counting_dev
    assert backend.lazy is True  # the default
    x = on_device(backend, np.arange(4.0))
    y = on_device(backend, np.ones(4))
    assert x.residency == y.residency == "device"
    a = xp.add(x, y)
    b = xp.multiply(a, x)  # x read again: its host copy
    c = xp.exp(b)
    d = xp.sum(c)
    # Each input crossed once; no result went to the device.
    assert hooks.calls == {"to_cpu": 2, "from_cpu": 0, "copy_from_cpu": 0}
    assert a.residency == b.residency == c.residency == d.residency == "host"
    assert x.residency == y.residency == "both"
    assert fallback_bytes("array_api::add") == (64, 0)
    assert fallback_bytes("array_api::multiply") == (0, 0)
    assert fallback_bytes("array_api::exp") == (0, 0)
    assert fallback_bytes("array_api::sum") == (0, 0)
    expect = np.sum(np.exp((np.arange(4.0) + 1) * np.arange(4.0)))
    assert float(d) == pytest.approx(expect)
    # Reading the values is no transfer either: nothing crossed to the host for them.
    assert hooks.calls["to_cpu"] == 2
    assert backend.name not in bf.metrics.transfers()  # no transfer of any kind


def test_reading_the_payload_puts_a_host_result_on_the_device(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, np.arange(3.0))
    y = xp.add(x, x)
    assert y.residency == "host" and hooks.calls["from_cpu"] == 0
    # Shape and dtype are answered from the host, without moving.
    assert y.shape == (3,) and y.dtype == np.float64
    assert hooks.calls["from_cpu"] == 0
    p = y.payload
    assert isinstance(p, Buffer)
    np.testing.assert_array_equal(p.data, [0.0, 2.0, 4.0])
    assert hooks.calls["from_cpu"] == 1 and y.residency == "both"
    assert y.payload is p  # once
    moved = bf.metrics.transfers()[backend.name]
    assert (moved["materialized"], moved["bytes_materialized"]) == (1, 24)
    # Its host copy stays current: a fallback reading it moves nothing.
    xp.negative(y)
    assert hooks.calls["to_cpu"] == 1


def test_materialize_is_the_users_ask(counting_dev):
    backend, hooks, xp = counting_dev
    y = xp.add(on_device(backend, np.ones(2)), 1.0)
    assert y.materialize() is y
    assert y.residency == "both" and hooks.calls["from_cpu"] == 1
    y.materialize()  # already on the device
    assert hooks.calls["from_cpu"] == 1


def test_a_backend_kernel_sees_current_device_data(counting_dev):
    backend, hooks, xp = counting_dev
    seen = []
    with bf.Library("resid_k", "DEF") as lib:
        lib.define("peek(Tensor x) -> Tensor")
        lib.impl("peek", lambda x: x, "CPU")

        def peek(x):
            # Put on the device before the kernel ran (not by reading its payload here).
            seen.append(x.residency)
            seen.append(x.payload.data.copy())
            return x

        lib.impl("peek", peek, backend.name)
        x = on_device(backend, np.arange(3.0))
        y = xp.multiply(x, 3.0)
        assert y.residency == "host"
        bf.ops.resid_k.peek(y)
        assert seen[0] == "both"
        np.testing.assert_array_equal(seen[1], [0.0, 3.0, 6.0])
        assert y.residency == "both"
        # A list argument's elements too, through the general path (a keyword argument).
        lib.define("peek_all(Tensor[] xs, *, Tensor extra) -> Tensor")
        lib.impl("peek_all", lambda xs, *, extra: extra, "CPU")

        def peek_all(xs, *, extra):
            seen.append([t.residency for t in xs] + [extra.residency])
            return extra

        lib.impl("peek_all", peek_all, backend.name)
        a, b = xp.add(x, 1.0), xp.add(x, 2.0)
        c = xp.add(x, 3.0)
        bf.ops.resid_k.peek_all([a, b], extra=c)
        assert seen[-1] == ["both", "both", "both"]


def test_a_backend_kernel_that_writes_in_place_invalidates_the_host_copy(counting_dev):
    backend, hooks, xp = counting_dev
    with bf.Library("resid_w", "DEF") as lib:
        lib.define("twice_(Tensor(a!) x) -> Tensor(a!)")
        lib.impl("twice_", lambda x: x, "CPU")

        def twice_(x):
            x.payload.data *= 2  # in place, on the device
            return x

        lib.impl("twice_", twice_, backend.name)
        x = on_device(backend, np.arange(3.0))
        xp.sum(x)  # keeps a host copy
        assert x.residency == "both"
        bf.ops.resid_w.twice_(x)
        assert x.residency == "device"
        before = hooks.calls["to_cpu"]
        assert float(xp.sum(x)) == 6.0  # read from the device again
        assert hooks.calls["to_cpu"] == before + 1


def test_writes_through_boxfall_invalidate_the_host_copy(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, np.arange(4.0))
    xp.sum(x)
    assert x.residency == "both"
    x[0] = 10.0  # setitem: a write through the fallback (copy_from_cpu)
    assert x.residency == "device"
    assert float(xp.sum(x)) == 16.0
    x += 1.0  # an in-place operator
    np.testing.assert_array_equal(np.asarray(x), [11.0, 2.0, 3.0, 4.0])


def test_a_write_back_into_a_host_result_stays_on_the_host(counting_dev):
    backend, hooks, xp = counting_dev
    y = xp.add(on_device(backend, np.zeros(3)), 1.0)
    assert y.residency == "host"
    calls = dict(hooks.calls)
    y += 2.0
    y[1] = 7.0
    assert y.residency == "host"
    assert hooks.calls == calls  # no copy_from_cpu, no from_cpu, no to_cpu
    np.testing.assert_array_equal(np.asarray(y), [3.0, 7.0, 3.0])
    assert fallback_bytes("array_api::add_") == (0, 0)
    np.testing.assert_array_equal(y.payload.data, [3.0, 7.0, 3.0])


def test_views_share_their_bases_host_copy(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, np.arange(6.0).reshape(2, 3))
    xp.sum(x)
    assert hooks.calls["to_cpu"] == 1
    row = x[1]
    col = x[:, 0]
    assert float(xp.sum(row)) == 12.0
    assert float(xp.sum(col)) == 3.0
    assert hooks.calls["to_cpu"] == 1  # made from x's host copy
    # A write to the base is seen through the views.
    x[1, 0] = 100.0
    assert float(xp.sum(col)) == 100.0
    np.testing.assert_array_equal(np.asarray(row), [100.0, 4.0, 5.0])


def test_a_view_of_a_host_result_is_written_on_the_host(counting_dev):
    backend, hooks, xp = counting_dev
    y = xp.add(on_device(backend, np.zeros((2, 2))), 1.0)
    v = y[0]
    v[1] = 5.0
    assert y.residency == "host"
    np.testing.assert_array_equal(np.asarray(y), [[1.0, 5.0], [1.0, 1.0]])
    assert hooks.calls["copy_from_cpu"] == 0


def test_numpy_reads_the_host_copy(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, np.arange(3.0))
    x.numpy()  # no host copy yet: to_cpu's array, as the hook gave it
    assert hooks.calls["to_cpu"] == 1
    xp.sum(x)  # the fallback keeps what it read
    assert hooks.calls["to_cpu"] == 2
    b = x.numpy()
    assert hooks.calls["to_cpu"] == 2
    np.testing.assert_array_equal(b, [0.0, 1.0, 2.0])
    with pytest.raises(ValueError):
        b[0] = 1.0  # the host copy is read-only
    c = np.array(x, copy=True)  # a copy of it, the caller's to write
    c[0] = 9.0
    assert float(xp.sum(x)) == 3.0
    assert hooks.calls["to_cpu"] == 2
    moved = bf.metrics.transfers()[backend.name]
    assert (moved["to_host"], moved["bytes_to_host"]) == (1, 24)  # only the first crossed
    # np.asarray makes the host copy the tensor's own memory (test_device_numpy_memory.py):
    # made of the current host copy, nothing crosses.
    np.asarray(x)[0] = 9.0
    assert float(xp.sum(x)) == 12.0
    assert hooks.calls["to_cpu"] == 2 and bf.metrics.transfers()[backend.name]["to_host"] == 1
    # A host result is read where it is.
    y = xp.add(x, 1.0)
    np.testing.assert_array_equal(y.numpy(), [10.0, 2.0, 3.0])
    assert hooks.calls["to_cpu"] == 2 and y.residency == "host"


def test_a_dtype_the_device_lacks_is_refused_when_the_result_is_made(counting_hooks):
    hooks = counting_hooks(COUNTING_BACKEND)
    backend = hooks.register(dtypes=["float32", "int64", "bool"])
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        xp = xp_cpu.namespace(backend.name)
        x = xp.add(on_device(backend, np.ones(3, dtype=np.float32)), 1.0)
        assert x.residency == "host"
        calls = dict(hooks.calls)
        with pytest.raises(bf.DTypeError) as e:
            xp.astype(x, xp_cpu.float64)  # a host result of a dtype the device lacks
        assert "float64" in str(e.value) and "'array_api::astype'" in str(e.value)
        assert hooks.calls == calls  # nothing moved
        np.testing.assert_array_equal(np.asarray(x), np.full(3, 2.0))


def test_the_payload_check_runs_when_from_cpu_finally_runs(counting_dev):
    backend, hooks, xp = counting_dev
    y = xp.add(on_device(backend, np.ones(3)), 1.0)
    hooks.wrong_shape = True
    with pytest.raises(bf.KernelError) as e:
        y.payload  # noqa: B018
    assert "from_cpu" in str(e.value) and backend.name in str(e.value)
    # Nothing half-applied: still host-side, with its values.
    assert y.residency == "host"
    hooks.wrong_shape = False
    np.testing.assert_array_equal(y.payload.data, [2.0, 2.0, 2.0])


def test_a_failing_from_cpu_leaves_the_result_on_the_host(counting_dev):
    backend, hooks, xp = counting_dev
    y = xp.add(on_device(backend, np.ones(2)), 1.0)
    hooks.fail_from_cpu = True
    with pytest.raises(RuntimeError, match="the device is full"):
        y.materialize()
    assert y.residency == "host"
    assert float(xp.sum(y)) == 4.0  # still readable, from the host
    hooks.fail_from_cpu = False
    assert y.materialize().residency == "both"


def test_a_failing_kernel_leaves_a_host_result_as_it_was(counting_dev):
    backend, hooks, xp = counting_dev
    y = xp.add(on_device(backend, np.ones(3)), 1.0)
    with pytest.raises(IndexError):
        y[5] = 1.0  # out of range: the CPU kernel fails
    assert y.residency == "host"
    np.testing.assert_array_equal(np.asarray(y), [2.0, 2.0, 2.0])


def test_an_eager_backend_moves_every_read_and_result(counting_eager):
    backend, hooks, xp = counting_eager
    assert backend.lazy is False and bf.get_backend(backend.name).lazy is False
    assert bf.get_backend("Native").lazy is False
    x = on_device(backend, np.arange(4.0))
    a = xp.add(x, x)
    xp.multiply(a, x)
    assert a.residency == "device" and x.residency == "device"
    # add: both arguments read, its result moved; multiply: both read, its result moved.
    assert hooks.calls["from_cpu"] == 2
    assert hooks.calls["to_cpu"] == 4
    assert fallback_bytes("array_api::multiply") == (64, 32)


def test_metrics_count_only_what_crossed(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, np.arange(8.0))
    for _ in range(3):
        x = xp.add(x, 1.0)
    s = stats("array_api::add")
    assert s["fallbacks"] == 3
    assert (s["bytes_to_cpu"], s["bytes_from_cpu"]) == (64, 0)
    assert hooks.bytes["to_cpu"] == 64


def test_a_batched_backend_moves_only_what_has_no_host_copy(counting_hooks):
    hooks = counting_hooks(COUNTING_BACKEND)
    batches: list[int] = []

    def to_cpu_many(payloads: list[Buffer]) -> list[np.ndarray]:
        batches.append(len(payloads))
        return [hooks.to_cpu(b) for b in payloads]

    backend = hooks.register(to_cpu_many=to_cpu_many)
    with bf.Library("_", "IMPL") as fb, bf.Library("resid_b", "DEF") as lib:
        fb.fallback(bf.cpu_fallback, backend.name)
        lib.define("addn(Tensor[] xs) -> Tensor")
        lib.impl("addn", lambda xs: sum(xs), "CPU")
        xs = [on_device(backend, np.full(2, float(i))) for i in range(3)]
        y = bf.ops.resid_b.addn(xs)
        assert batches == [3] and y.residency == "host"
        z = bf.ops.resid_b.addn([xs[0], y, on_device(backend, np.ones(2))])
        assert batches == [3, 1]  # xs[0] and y had host copies: only the new tensor moved
        np.testing.assert_array_equal(np.asarray(z), np.full(2, 4.0))


def test_a_result_that_sees_memory_of_the_kernels_is_copied(counting_dev):
    backend, hooks, xp = counting_dev
    kept = np.zeros(4)
    with bf.Library("resid_v", "DEF") as lib:
        lib.define("window(Tensor x) -> Tensor")
        lib.impl("window", lambda x: kept[:2], "CPU")  # a view of the kernel's own array
        lib.define("fresh(Tensor x) -> Tensor")
        lib.impl("fresh", lambda x: x + 1.0, "CPU")
        y = bf.ops.resid_v.window(on_device(backend, np.ones(2)))
        z = bf.ops.resid_v.fresh(on_device(backend, np.ones(2)))
        assert y.residency == z.residency == "host"
        kept[:] = 5.0  # a later write there does not reach the tensor
        np.testing.assert_array_equal(np.asarray(y), [0.0, 0.0])
        np.testing.assert_array_equal(np.asarray(z), [2.0, 2.0])


def test_a_boxed_backend_kernel_that_writes_in_place_invalidates_the_host_copy(counting_dev):
    # A kernel registered `boxed=True` gets its tensors on the stack: they are put on the
    # device before it runs, and the ones its schema writes are noted by their place on the
    # stack (they were matched against `(op, keys, stack)`, so no write was noted and the host
    # copy stayed, stale).
    backend, hooks, xp = counting_dev
    seen = []
    with bf.Library("resid_wb", "DEF") as lib:
        lib.define("scale_(Tensor(a!) x, float k) -> Tensor(a!)")
        lib.impl("scale_", lambda x, k: x, "CPU")

        def scale_(op, keys, stack):
            x, k = stack
            seen.append(x.residency)
            x.payload.data *= k  # in place, on the device
            stack[:] = [x]

        lib.impl("scale_", scale_, backend.name, boxed=True)
        x = on_device(backend, np.arange(3.0))
        y = xp.multiply(x, 3.0)  # a host result: [0, 3, 6]
        assert y.residency == "host"
        bf.ops.resid_wb.scale_(y, 2.0)
        assert seen == ["both"]
        assert y.residency == "device"
        assert float(xp.sum(y)) == 18.0
        np.testing.assert_array_equal(np.asarray(y), [0.0, 6.0, 12.0])
