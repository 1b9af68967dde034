"""Instructions per call of the documented hop and of a plain call, for builds of boxfall, by
callgrind (steady where the wall clock of this machine drifts by 30%).

    python benches/hop_instructions.py BUILD_PYTHONPATH [BUILD_PYTHONPATH ...]

For each build (a directory holding the ``boxfall`` package with its compiled ``_boxfall``), it
runs this file under ``valgrind --tool=callgrind`` three times: ``op(a)`` on a NumPy array with a
Python boxed fallback on a functionality key that runs the documented hop
(``stack[:] = [op.redispatch(keys, *stack)]``), 20,000 calls and none, and the same ``op(a)``
with the key off (the CPU kernel straight away), 20,000 calls. It prints the instructions of a
hopped call, of a plain one, and their difference (what the hop adds). Hash seeds and BLAS
threads are fixed, so that two runs of one build give the same counts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

CALLS = 20000


def _workload(mode: str, n: int) -> None:
    """The measured process: ``n`` calls of ``op(a)``, hopped (``mode`` "hop") or plain."""
    import uuid

    import boxfall as bf
    import numpy as np

    ns = f"hop{uuid.uuid4().hex[:8]}"
    with bf.Library(ns, "DEF") as lib:
        lib.define("ident(Tensor self) -> Tensor")
        lib.impl("ident", lambda x: x, "CPU")
        op = getattr(bf.ops, ns).ident.default
        a = np.ones(1)
        key = "HopInstructions"
        bf.register_functionality_key(key)

        def documented(op, keys, stack):
            stack[:] = [op.redispatch(keys, *stack)]

        with bf.Library("_", "IMPL") as fb:
            fb.fallback(documented, key)
            with bf.include_keys(key):
                for _ in range(100):
                    op(a)
                if mode == "hop":
                    for _ in range(n):
                        op(a)
            if mode == "plain":
                for _ in range(n):
                    op(a)


def _collected(build: str, mode: str, n: int) -> int:
    """Instructions callgrind counted in the whole process."""
    env = dict(os.environ, PYTHONPATH=build, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={tmp}/cg.%p",
                sys.executable,
                __file__,
                "--run",
                mode,
                str(n),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.findall(r"Collected : (\d+)", out.stderr)
    if not found:
        raise SystemExit(f"no callgrind count for {build} {mode} {n}:\n{out.stderr[-2000:]}")
    return int(found[-1])


def main() -> None:
    if sys.argv[1:2] == ["--run"]:
        _workload(sys.argv[2], int(sys.argv[3]))
        return
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for build in sys.argv[1:]:
        none = _collected(build, "hop", 0)
        hop = (_collected(build, "hop", CALLS) - none) // CALLS
        plain = (_collected(build, "plain", CALLS) - none) // CALLS
        print(f"{build}: hopped call {hop}, plain call {plain}, the hop adds {hop - plain}")


if __name__ == "__main__":
    main()
