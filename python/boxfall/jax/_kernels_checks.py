"""The checks of the JAX backend's kernels whose JAX function gives numbers where NumPy raises
(a singular ``solve``, an index out of range): eager mode reads a flag and hands a failed case
to the CPU fallback; a graph's program collects the flags and fails its run on one."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax.numpy as jnp

from ._kernels_base import _TRACER


class _Checks(threading.local):
    """The checks a graph's program collects while JAX traces it in this thread (None outside
    such a trace): per check, a traced bool (True: the node's values are what NumPy computes)
    and the error NumPy raises where it is False."""

    found: list[tuple[Any, type[Exception], str]] | None = None


CHECKS = _Checks()


@contextlib.contextmanager
def collecting_checks() -> Iterator[list[tuple[Any, type[Exception], str]]]:
    """Collects the checks of the kernels traced in the block (a graph's program)."""
    saved, CHECKS.found = CHECKS.found, []
    try:
        yield CHECKS.found
    finally:
        CHECKS.found = saved


def checked(out: Any, ok: Any, error: type[Exception], message: str, excused: Any = None) -> Any:
    """``out``, a kernel's result whose JAX function gives numbers where NumPy raises (a
    singular ``solve``, an index out of range), and ``ok``, whether it is surely NumPy's.

    Eager: the flag is read, which waits for the device (a sync on each call of these few
    kernels: the price of NumPy's error), and a False hands the call to the CPU fallback
    (None), which raises NumPy's error or computes NumPy's result. Traced by a graph's
    program: the flag joins the program's checks, read when the sync commits the run's
    results, and a False fails the run with ``error`` (the sync then finds the node that
    failed); ``excused`` (a NaN or an infinity in: NumPy's numbers are NaNs too, mostly)
    passes there, as a failed run with every node computed would be the program's fault."""
    if isinstance(ok, _TRACER):
        found = CHECKS.found
        if found is not None:
            found.append((ok if excused is None else ok | excused, error, message))
        return out
    return out if bool(ok) else None


def _with_check(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a solve, an inverse, a factorization) returning its result, whether that is
    finite, and whether some input is not: LAPACK's refusals (a singular matrix, one not
    positive definite) are infinities and NaNs in JAX's results; a NaN in gives NaNs out,
    where NumPy computes or raises. One compiled program."""

    def checks(*arrays: Any, **static: Any) -> Any:
        out = fn(*arrays, **static)
        finite_in = jnp.all(jnp.stack([jnp.isfinite(a).all() for a in arrays]))
        return out, jnp.isfinite(out).all(), jnp.logical_not(finite_in)

    return checks
