"""One of two processes of 4 CPU devices each, joined by ``jax.distributed.initialize`` on
localhost into one mesh of 8 (how JAX runs across hosts), each running the same program on its
own rows: ``python jax_mesh_processes.py <process id> <port>``. It prints one line, ``RESULT``
and a JSON object of what it found, which ``test_jax_mesh.py`` checks; or ``SKIP`` and a reason
where JAX has no gloo collectives for its CPU, and exits with 3."""

from __future__ import annotations

import json
import os
import sys

PROCESS, PORT = int(sys.argv[1]), int(sys.argv[2])
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

try:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
except Exception as e:  # an older or a smaller JAX build
    print(f"SKIP JAX's CPU has no gloo collectives here: {e}", flush=True)
    sys.exit(3)
# A dead peer fails the other process here after the timeout, never hangs it.
jax.distributed.initialize(
    f"localhost:{PORT}", num_processes=2, process_id=PROCESS, initialization_timeout=60
)

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402
import numpy as np  # noqa: E402
from boxfall import workload  # noqa: E402
from jax.sharding import AxisType  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
MESH = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
ROWS = P("data", None)


@bf.custom_op("meshtest::twice", mutates_args=())
def twice(x: np.ndarray) -> np.ndarray:
    return x * 2


bj.register_sharding_rule(twice, "elementwise")


@bf.custom_op("meshtest::running", mutates_args=())
def running(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=0)


found: dict[str, object] = {
    "process": jax.process_index(),
    "devices": jax.device_count(),
    "local_devices": jax.local_device_count(),
}
xp = bj.namespace(mesh=MESH)
everything = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
mine = everything[8 * PROCESS : 8 * (PROCESS + 1)]
g = bj.from_process_local(xp, mine, ROWS)
found["shape"] = list(g.shape)
found["sum"] = float(xp.sum(g))
found["local_back"] = bool(np.array_equal(bj.to_process_local(g), mine))

bj.reset_mesh_stats()
t = twice(g)
found["twice_local"] = bool(np.array_equal(bj.to_process_local(t), 2 * mine))
found["twice_spec"] = str(t.sharding.spec)
found["twice"] = bj.mesh_stats()["meshtest::twice"]
found["own_devices"] = sorted(str(d) for d in jax.local_devices())

r = running(g)
found["running_local"] = bool(
    np.array_equal(
        bj.to_process_local(r), np.cumsum(everything, 0)[8 * PROCESS : 8 * (PROCESS + 1)]
    )
)
found["running_spec"] = str(r.sharding.spec)
found["running"] = bj.mesh_stats()["meshtest::running"]

p = workload.Problem(n=800, d=8, k=4, iterations=3)
x, y = workload.make_data(p)
want = workload.kmeans_ridge(np, x, y, p)
x, y = x.astype(np.float32), y.astype(np.float32)
half = slice(400 * PROCESS, 400 * (PROCESS + 1))
for graph in (False, True):
    xg = bj.namespace(mesh=MESH, graph=graph)
    X = bj.from_process_local(xg, x[half], ROWS)
    Y = bj.from_process_local(xg, y[half], ROWS)
    centers, labels, coef = workload.kmeans_ridge(xg, X, Y, p)
    found[f"workload_graph={graph}"] = [
        bool(np.allclose(bj.to_process_local(centers), want[0], rtol=1e-3, atol=1e-3)),
        bool(np.array_equal(bj.to_process_local(labels), want[1][half])),
        bool(np.allclose(bj.to_process_local(coef), want[2], rtol=1e-3, atol=1e-3)),
    ]

print("RESULT " + json.dumps(found), flush=True)
jax.distributed.shutdown()
