"""``boxfall.jax`` on two JAX devices (``jax_two_devices.py``), run in a process of its own
where JAX's CPU shows two: the device count is read when JAX starts, and this process's JAX
has started with one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

CHECKS = Path(__file__).with_name("jax_two_devices.py")


def test_boxfall_jax_on_two_devices():
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(CHECKS), "-q", "-p", "no:cacheprovider", "-rs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = run.stdout[-4000:] + run.stderr[-2000:]
    assert run.returncode == 0, out
    # Every check ran: none skipped for want of a second device.
    assert "skipped" not in run.stdout and " passed" in run.stdout, out


# In this process: an index that none of JAX's devices has is an error at the call, in eager
# and graph mode, naming the backend and the devices it has (it used to make a tensor that
# reported that device, and a later `f + g` failed with a bare IndexError in `from_cpu`).


def _beyond():
    import boxfall.jax as bj

    return bj, len(bj.device_hooks.devices)


@pytest.mark.parametrize("backend", ["JAX", "JAXGraph"])
def test_a_device_index_no_device_has_is_refused_at_the_call(backend):
    import numpy as np

    bj, n = _beyond()
    xp = bj.namespace(graph=backend == "JAXGraph")
    x = xp.asarray(np.arange(3.0, dtype=np.float32))
    calls = {
        "to_device": lambda: x.to_device(f"{backend}:{n}"),
        "zeros": lambda: xp.zeros(3, device=f"{backend}:{n + 2}"),
        "asarray": lambda: xp.asarray([1.0, 2.0], device=f"{backend}:{n}"),
        "linspace": lambda: xp.linspace(0.0, 1.0, 3, device=f"{backend.lower()}:{n}"),
        "astype": lambda: xp.astype(x, xp.int32, device=f"{backend}:{n}"),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"{backend} has no device of index \d+; it has {n}"):
            call()
            pytest.fail(f"{name} made a tensor on a device that does not exist")


def test_the_namespace_of_a_device_that_does_not_exist_is_refused():
    import boxfall.array_api as bxp

    _, n = _beyond()
    with pytest.raises(ValueError, match=f"JAX has no device of index {n}"):
        bxp.namespace(f"JAX:{n}")


def test_the_operator_refuses_such_a_device_too():
    import boxfall as bf

    _, n = _beyond()
    with pytest.raises(ValueError, match=f"JAX has no device of index {n}"):
        bf.ops.array_api.zeros.default([3], dtype="float32", device=f"JAX:{n}")


def test_from_cpu_names_the_devices_rather_than_an_index_error():
    import numpy as np

    bj, n = _beyond()
    with pytest.raises(ValueError, match=f"JAX has no device of index {n}: it has {n}"):
        bj.device_hooks.from_cpu(np.zeros(2, np.float32), device=n)


def test_the_devices_that_exist_still_serve():
    import numpy as np

    bj, n = _beyond()
    xp = bj.namespace()
    y = xp.zeros(3, device=f"JAX:{n - 1}") + xp.asarray(np.ones(3, np.float32))
    np.testing.assert_array_equal(y.numpy(), np.ones(3))
    assert y.to_device(f"JAXGraph:{n - 1}").device == f"JAXGraph:{n - 1}"
