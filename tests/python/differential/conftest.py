"""The differential tester's profiles and its statistics file.

``BOXFALL_DIFF_PROFILE`` picks the profile: ``dev`` (the default: a few programs, every kept
program; what ``pytest tests/python`` runs), ``ci`` (bounded and derandomized: CI's step)
or ``long`` (random, as many programs as ``BOXFALL_DIFF_SECONDS`` allows). README.md says more.
"""

from __future__ import annotations

import json
import os
import time

from diffprog import PROFILE

_START = time.monotonic()


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest's hook signature
    """Writes the steps run per operator x dtype x scalar class where BOXFALL_DIFF_STATS says."""
    path = os.environ.get("BOXFALL_DIFF_STATS")
    if not path:
        return
    import diffprog

    stats = dict(sorted(diffprog.STATS.items()))
    summary = {
        "profile": PROFILE,
        "x64": os.environ.get("JAX_ENABLE_X64", "") not in ("", "0", "false", "False"),
        "wall_s": round(time.monotonic() - _START, 1),
        "programs": stats.pop("programs", 0),
        "threads_cases": stats.pop("threads", 0),
        "not_run_past_seconds": stats.pop("not run: past BOXFALL_DIFF_SECONDS", 0),
        "known_open": {k: stats.pop(k) for k in list(stats) if k.startswith("known open: ")},
        "steps": sum(stats.values()),
        "by_operator_dtype_scalar": stats,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
