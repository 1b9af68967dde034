"""What the fast-path tests share: one call on the fast path and on the general path, and
what an exception says."""

from __future__ import annotations

from boxfall import _boxfall


def both(fn):
    """``fn()`` on the fast path and on the general path: (fast result, general result)."""
    out = []
    for on in (True, False):
        before = _boxfall.set_fast_path(on)
        try:
            out.append(fn())
        finally:
            _boxfall.set_fast_path(before)
    return out[0], out[1]


def error_of(fn):
    """The type, text and notes of the exception ``fn()`` raises."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any exception is the result here
        return type(e), str(e), getattr(e, "__notes__", [])
    raise AssertionError("no exception")
