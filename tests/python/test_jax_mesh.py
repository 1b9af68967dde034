"""``boxfall.jax`` on a mesh of devices, run in processes of their own (a device count and
``jax.distributed`` must come before JAX starts, and this process's JAX has started):

- one process of 8 CPU devices runs ``jax_mesh_checks.py``;
- two processes of 4 CPU devices each, joined into one mesh of 8 by ``jax.distributed`` on
  localhost (gloo collectives), run ``jax_mesh_processes.py``, each on its own rows.

Both take a few seconds of CPU (the workload's kernels compile once per sharding)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jax")

HERE = Path(__file__).parent


def _env(devices: int | None) -> dict[str, str]:
    # SCIPY_ARRAY_API: scikit-learn's array API dispatch needs SciPy's, set before either starts.
    env = dict(os.environ, JAX_PLATFORMS="cpu", SCIPY_ARRAY_API="1")
    if devices:
        flags = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
        )
        env["XLA_FLAGS"] = flags.strip()
    return env


def test_boxfall_jax_on_a_mesh_of_eight_devices_in_one_process():
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(HERE / "jax_mesh_checks.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
        ],
        env=_env(8),
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = run.stdout[-4000:] + run.stderr[-2000:]
    assert run.returncode == 0, out
    # Every check ran: none skipped for want of devices (nor of scikit-learn, where it is here).
    if importlib.util.find_spec("sklearn") is not None:
        assert "skipped" not in run.stdout, out
    assert " passed" in run.stdout, out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def two_processes() -> list[dict[str, Any]]:
    port = _free_port()
    script = str(HERE / "jax_mesh_processes.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script, str(i), str(port)],
            env=_env(None),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=420)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, out in zip(procs, outs, strict=True):
        if p.returncode == 3 and "SKIP" in out:
            reason = out[out.index("SKIP") + 5 :].splitlines()[0]
            print(reason)
            pytest.skip(reason)
        assert p.returncode == 0, out[-6000:]
    found = []
    for out in outs:
        line = next(x for x in out.splitlines() if x.startswith("RESULT "))
        found.append(json.loads(line[len("RESULT ") :]))
    return found


def test_two_processes_make_one_mesh_of_their_rows(two_processes):
    for i, found in enumerate(two_processes):
        assert found["process"] == i
        assert found["devices"] == 8 and found["local_devices"] == 4
        assert found["shape"] == [16, 3]
        # The same global sum in both processes: a collective across them.
        assert found["sum"] == float(sum(range(48)))
        assert found["local_back"]


def test_a_shard_wise_fallback_moves_only_each_process_shards(two_processes):
    for found in two_processes:
        assert found["twice_local"] and found["twice_spec"] == "P('data', None)"
        stats = found["twice"]
        assert stats["shard_runs"] == 4  # this process's 4 shards, not the mesh's 8
        assert stats["gathers"] == 0 and stats["gathered_bytes"] == 0
        # Only this process's own devices moved anything, each its shard (2 rows of 3 float32).
        assert stats["bytes_to_cpu"] == {d: 24 for d in found["own_devices"]}
        assert stats["bytes_from_cpu"] == {d: 24 for d in found["own_devices"]}


def test_a_gathering_fallback_across_processes_is_counted(two_processes):
    for found in two_processes:
        assert found["running_local"]
        assert found["running_spec"] == "P('data', None)"
        assert found["running"]["gathers"] == 1
        assert found["running"]["gathered_bytes"] == 16 * 3 * 4


def test_the_workload_across_two_processes_agrees_with_numpy(two_processes):
    for found in two_processes:
        assert found["workload_graph=False"] == [True, True, True]
        assert found["workload_graph=True"] == [True, True, True]
