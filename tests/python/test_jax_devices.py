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
