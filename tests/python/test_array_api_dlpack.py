"""DLPack (the standard's data interchange) between NumPy and ``boxfall.array_api`` on the CPU,
Native and a Python backend: ``bf.Tensor.__dlpack__``/``__dlpack_device__`` export the values
on the CPU (kDLCPU: Native's host memory shared read-only, any other backend a host copy),
``xp.from_dlpack`` takes ``device=`` and ``copy=`` as the 2024.12 standard says, and the
errors are the standard's (``BufferError`` from ``__dlpack__``, ``ValueError`` from
``from_dlpack``). Also ``boxfall.testing``'s Python backend, which the conformance run uses."""

from __future__ import annotations

import boxfall as bf
import boxfall.array_api as xp
import boxfall.testing
import numpy as np
import pytest

DEVICES = ["Native", "accel"]
VALUES = np.arange(6.0).reshape(2, 3)


@pytest.fixture(params=DEVICES)
def device(request, accel):
    return {"Native": "Native:0", "accel": accel.device}[request.param]


class Producer:
    """Another library's array: only the two DLPack methods, over a NumPy array."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_a_tensor_reports_the_cpu_as_its_dlpack_device(device):
    t = xp.namespace(device).asarray(VALUES)
    kind, index = t.__dlpack_device__()
    assert (kind, index) == (1, 0) and isinstance(index, int)
    assert kind.name == "kDLCPU"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_numpy_reads_a_tensor_through_dlpack(device, dtype):
    t = xp.namespace(device).asarray(VALUES.astype(dtype))
    got = np.from_dlpack(t)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, VALUES.astype(dtype))


def test_native_shares_its_host_memory_read_only():
    t = xp.namespace("Native").asarray(VALUES)
    shared = np.from_dlpack(t)
    assert np.shares_memory(shared, t.numpy())
    assert not shared.flags.writeable


def test_a_python_backend_exports_a_copy(accel):
    t = accel.tensor(VALUES)
    got = np.from_dlpack(t)
    got[0, 0] = 100.0
    np.testing.assert_array_equal(t.numpy(), VALUES)


def test_copy_true_never_shares(device):
    t = xp.namespace(device).asarray(VALUES)
    got = np.from_dlpack(t, copy=True)
    assert got.flags.writeable and not np.shares_memory(got, t.numpy())
    np.testing.assert_array_equal(got, VALUES)


def test_copy_false_is_a_buffer_error_when_a_copy_is_needed(accel):
    with pytest.raises(BufferError, match=accel.device):
        accel.tensor(VALUES).__dlpack__(copy=False)
    t = xp.namespace("Native").asarray(VALUES)
    # Native's memory is shared: read-only where the capsule can say so (DLPack >= 1.0), the
    # tensor's writable memory itself in an older one (copy=False forbids the copy).
    assert t.__dlpack__(copy=False, max_version=(1, 0)) is not None
    assert t.__dlpack__(copy=False) is not None


def test_a_device_other_than_the_cpu_is_a_buffer_error(device):
    t = xp.namespace(device).asarray(VALUES)
    with pytest.raises(BufferError, match=r"\(1, 0\)"):
        t.__dlpack__(dl_device=(2, 0))
    assert t.__dlpack__(dl_device=(1, 0), max_version=(1, 0)) is not None


def test_from_dlpack_on_the_cpu_shares_unless_copy_is_true():
    a = VALUES.copy()
    shared = xp.from_dlpack(Producer(a))
    assert isinstance(shared, np.ndarray) and np.shares_memory(shared, a)
    copied = xp.from_dlpack(Producer(a), copy=True)
    assert not np.shares_memory(copied, a)
    np.testing.assert_array_equal(copied, VALUES)


def test_from_dlpack_of_a_device_namespace_creates_on_its_device(device):
    ns = xp.namespace(device)
    got = ns.from_dlpack(Producer(VALUES))
    assert isinstance(got, bf.Tensor) and got.device == device
    np.testing.assert_array_equal(got.numpy(), VALUES)
    got = xp.from_dlpack(VALUES, device=device, copy=True)
    assert got.device == device


def test_from_dlpack_copy_false_to_a_device_is_a_value_error(device):
    with pytest.raises(ValueError, match="copy=False"):
        xp.from_dlpack(VALUES, device=device, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        xp.namespace(device).from_dlpack(Producer(VALUES), copy=False)


def test_from_dlpack_keeps_a_tensor_on_its_device(device):
    t = xp.namespace(device).asarray(VALUES)
    assert xp.from_dlpack(t) is t
    assert xp.namespace("cpu").from_dlpack(t, copy=False) is t
    copied = xp.from_dlpack(t, copy=True)
    assert copied is not t and copied.device == device
    host = xp.from_dlpack(t, device="cpu")
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, VALUES)
    with pytest.raises(ValueError, match="copy=False"):
        xp.from_dlpack(t, device="cpu", copy=False)


def test_round_trip_numpy_to_each_device_and_back(device):
    ns = xp.namespace(device)
    for dtype in ("float32", "float64", "int64", "bool"):
        start = (VALUES % 2).astype(dtype)
        back = np.from_dlpack(ns.from_dlpack(start))
        assert back.dtype == start.dtype
        np.testing.assert_array_equal(back, start)


def test_from_dlpack_of_host_data_is_the_users_transfer_not_a_fallback(accel):
    # As asarray of host data: no kernel of the device could avoid it, so it is counted in
    # bf.metrics.transfers() and does not rank as a fallback.
    bf.metrics.reset()
    xp.from_dlpack(VALUES, device=accel.device)
    assert "array_api::from_dlpack" not in bf.metrics.counters()
    moved = bf.metrics.transfers()[accel.device.split(":")[0]]
    assert (moved["to_device"], moved["bytes_to_device"]) == (1, VALUES.nbytes)


def test_testing_registers_a_python_backend_once_and_gives_its_namespace():
    ns = boxfall.testing.python_backend_namespace("TestingPyAccel")
    assert boxfall.testing.python_backend_namespace("TestingPyAccel") is ns
    assert ns is xp.namespace("TestingPyAccel")
    x = ns.asarray([1.0, 2.0, 3.0])
    assert isinstance(x, bf.Tensor) and x.device == "TestingPyAccel:0"
    assert isinstance(x.payload, boxfall.testing.HostBuffer)
    bf.metrics.reset()
    y = ns.sum(x * 2.0)  # served by the CPU fallback
    assert float(y) == 12.0 and y.device == "TestingPyAccel:0"
    assert bf.metrics.counters()["array_api::multiply.Tensor_Scalar"] == 1


def test_testing_refuses_a_name_another_backend_has(accel):
    with pytest.raises(bf.RegistrationError):
        boxfall.testing.register_python_backend(accel.name)
