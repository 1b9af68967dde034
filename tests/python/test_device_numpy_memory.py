"""``np.asarray(t)`` of a lazy backend's tensor: the host becomes authoritative, the array is
the tensor's host memory (writable), NumPy's writes reach the fallback and the backend's
kernels, and boxfall's writes (the fallback's and a backend kernel's) reach the array."""

from __future__ import annotations

from typing import Any

import boxfall as bf
import numpy as np
import pytest
from boxfall.testing import HostBuffer as Buffer

# The backend of conftest's counting_dev (lazy) and counting_eager (lazy=False): hooks that
# count their calls, and the CPU fallback.
COUNTING_BACKEND = "ExportedDev"


def on_device(backend: bf.Backend, values: Any) -> bf.Tensor:
    return backend.tensor_from_payload(Buffer(np.asarray(values, dtype=np.float64)))


def test_asarray_moves_the_values_to_host_memory_numpy_and_boxfall_share(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, [1.0, 2.0, 3.0])
    a = np.asarray(x)
    assert a.flags.writeable
    assert x.residency == "host"  # the device payload is dropped
    moved = bf.metrics.transfers()[backend.name]
    assert (moved["to_host"], moved["bytes_to_host"]) == (1, 24)
    assert np.asarray(x) is not a and np.shares_memory(np.asarray(x), a)  # the same memory
    assert hooks.calls["to_cpu"] == 1  # read once
    # NumPy writes; the CPU fallback reads the memory as it is now.
    a[0] = 10.0
    assert float(xp.sum(x)) == 15.0
    # boxfall writes: setitem and an in-place operator land in the same memory.
    x[1] = 20.0
    assert a[1] == 20.0
    x += 1.0
    np.testing.assert_array_equal(a, [11.0, 21.0, 4.0])
    assert x.residency == "host" and hooks.calls["copy_from_cpu"] == 0


def test_a_whole_write_lands_in_the_memory(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, [1.0, 2.0])
    a = np.asarray(x)
    x[...] = 5.0
    np.testing.assert_array_equal(a, [5.0, 5.0])
    assert np.shares_memory(np.asarray(x), a)


def test_a_backend_kernel_sees_numpys_writes_and_numpy_sees_its_writes(counting_dev):
    backend, hooks, xp = counting_dev
    seen = []
    with bf.Library("export_k", "DEF") as lib:
        lib.define("peek(Tensor x) -> Tensor")
        lib.impl("peek", lambda x: x, "CPU")

        def peek(x):
            seen.append(x.payload.data.copy())
            return x

        lib.impl("peek", peek, backend.name)
        lib.define("twice_(Tensor(a!) x) -> Tensor(a!)")
        lib.impl("twice_", lambda x: x, "CPU")

        def twice_(x):
            x.payload.data *= 2  # in place, on the device
            return x

        lib.impl("twice_", twice_, backend.name)
        x = on_device(backend, [1.0, 2.0])
        a = np.asarray(x)
        a[0] = 7.0
        bf.ops.export_k.peek(x)
        np.testing.assert_array_equal(seen[-1], [7.0, 2.0])
        assert x.residency == "host"  # the payload made for the kernel is dropped
        a[1] = 8.0  # written again: the next kernel gets a payload made again
        bf.ops.export_k.peek(x)
        np.testing.assert_array_equal(seen[-1], [7.0, 8.0])
        assert hooks.calls["from_cpu"] == 2
        bf.ops.export_k.twice_(x)
        np.testing.assert_array_equal(a, [14.0, 16.0])  # copied back into NumPy's memory
        assert float(xp.sum(x)) == 30.0
        moved = bf.metrics.transfers()[backend.name]
        assert moved["materialized"] == 3
        assert moved["to_host"] == 2  # the export's read and the kernel's write copied back


def test_payload_is_made_from_the_host_each_time(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, [1.0, 2.0])
    a = np.asarray(x)
    np.testing.assert_array_equal(x.payload.data, [1.0, 2.0])
    a[0] = 3.0
    np.testing.assert_array_equal(x.payload.data, [3.0, 2.0])  # no stale payload
    np.testing.assert_array_equal(x.materialize().payload.data, [3.0, 2.0])


def test_views_read_and_write_the_exported_memory(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, np.arange(6.0))
    a = np.asarray(x)
    v = x[2:4]
    a[2] = 100.0
    np.testing.assert_array_equal(np.asarray(xp.asarray(v, copy=True)), [100.0, 3.0])
    v[...] = 9.0  # a write through the view reaches the base's exported memory
    np.testing.assert_array_equal(a, [0.0, 1.0, 9.0, 9.0, 4.0, 5.0])
    av = np.asarray(v)  # a view's array is a NumPy view of the base's memory
    assert np.shares_memory(av, a)
    av[0] = -1.0
    assert a[2] == -1.0 and float(xp.sum(x)) == 18.0


def test_copy_true_and_another_dtype_still_copy(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, [1.0, 2.0])
    c = np.array(x, copy=True)
    c[0] = 5.0
    assert float(xp.sum(x)) == 3.0
    f = np.asarray(x, dtype=np.float32)
    f[0] = 5.0
    assert float(xp.sum(x)) == 3.0


def test_a_backend_that_is_not_lazy_keeps_copying(counting_eager):
    backend, hooks, xp = counting_eager
    x = on_device(backend, [1.0, 2.0])
    a = np.asarray(x)
    a[0] = 5.0
    assert float(xp.sum(x)) == 3.0
    assert x.residency == "device"


def test_ndimage_output_on_the_device_namespace(counting_dev):
    ndimage = pytest.importorskip("scipy.ndimage")
    backend, hooks, xp = counting_dev
    values = np.arange(8.0) ** 2
    x = on_device(backend, values)
    ndimage.correlate1d(x, xp.asarray([1.0, 2.0, 1.0]), output=x)
    expected = ndimage.correlate1d(values, [1.0, 2.0, 1.0])
    np.testing.assert_array_equal(np.asarray(xp.asarray(x, copy=True)), expected)


def test_an_out_argument_is_written_in_the_memory(counting_dev):
    backend, hooks, xp = counting_dev
    x = on_device(backend, [1.0, 2.0])
    a = np.asarray(x)
    np.add(xp.ones(2), 1.0, out=x)  # NumPy's function on tensors: out= written back
    np.testing.assert_array_equal(a, [2.0, 2.0])
    assert hooks.calls["copy_from_cpu"] == 0


def test_a_failing_kernel_still_drops_its_payload(counting_dev):
    backend, hooks, xp = counting_dev
    with bf.Library("export_f", "DEF") as lib:
        lib.define("boom(Tensor x) -> Tensor")
        lib.impl("boom", lambda x: x, "CPU")

        def boom(x):
            raise RuntimeError("the device failed")

        lib.impl("boom", boom, backend.name)
        x = on_device(backend, [1.0])
        np.asarray(x)
        with pytest.raises(RuntimeError, match="the device failed"):
            bf.ops.export_f.boom(x)
        assert x.residency == "host"


def test_threads_writing_views_of_one_tensor_through_numpy(counting_dev):
    # SciPy's ndimage threading test: each thread writes its row through np.asarray(out[i]).
    import threading

    backend, hooks, xp = counting_dev
    out = on_device(backend, np.zeros((4, 3)))

    def fill(i: int) -> None:
        np.asarray(out[i, ...])[...] = i + 1.0

    threads = [threading.Thread(target=fill, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = np.repeat(np.arange(1.0, 5.0)[:, None], 3, axis=1)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert hooks.calls["to_cpu"] == 1  # one export; every thread shares its memory


def test_bool_memory_and_a_dtype_host_memory_cannot_hold(counting_dev):
    backend, hooks, xp = counting_dev
    b = backend.tensor_from_payload(Buffer(np.array([True, False])))
    a = np.asarray(b)
    a[1] = True
    assert bool(xp.all(b))
    # float16 has no host memory of boxfall's: np.asarray is a copy, as before.
    h = backend.tensor_from_payload(Buffer(np.ones(2, dtype=np.float16)))
    c = np.asarray(h)
    assert c.dtype == np.float16
    c[0] = 5.0
    assert h.residency != "host"
    np.testing.assert_array_equal(np.array(h, copy=True), [1.0, 1.0])
