"""The note a kernel's exception gets ("while running the 'CPU' kernel of 'ns::f'") is added
once per text: an exception raised again, or passing many levels of a recursion through
kernels, does not pile up copies of it."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest

UNARY = "f(Tensor x) -> Tensor"


def _notes(e: BaseException) -> list[str]:
    return list(getattr(e, "__notes__", []))


@pytest.mark.parametrize("fast", [True, False])
def test_a_stored_exception_raised_again_keeps_one_note(ns, lib, fast):
    stored = ValueError("stored")
    lib.define(UNARY)

    def kernel(x):
        raise stored

    lib.impl("f", kernel, "CPU")
    f = getattr(bf.ops, ns).f.default
    before = bf._boxfall.set_fast_path(fast)
    try:
        for _ in range(50):
            with pytest.raises(ValueError):
                f(np.ones(1))
    finally:
        bf._boxfall.set_fast_path(before)
    assert _notes(stored) == [f"while running the 'CPU' kernel of '{ns}::f'"]


def test_a_boxed_kernel_raising_a_stored_exception_keeps_one_note(ns, lib):
    stored = OSError("stored")
    lib.define(UNARY)

    def boxed(op, keys, stack):
        raise stored

    lib.impl("f", boxed, "CPU", boxed=True)
    f = getattr(bf.ops, ns).f.default
    for _ in range(20):
        with pytest.raises(OSError):
            f.call_boxed([np.ones(1)])
    assert len(_notes(stored)) == 1


def test_a_recursion_error_through_a_kernel_carries_one_note(ns, lib):
    lib.define(UNARY)
    f = None

    def kernel(x):
        return f(x)

    lib.impl("f", kernel, "CPU")
    f = getattr(bf.ops, ns).f.default
    with pytest.raises(RecursionError) as info:
        f(np.ones(1))
    assert _notes(info.value) == [f"while running the 'CPU' kernel of '{ns}::f'"]


def test_a_recursion_through_two_operators_carries_one_note_each(ns, lib):
    lib.define(UNARY)
    lib.define("g(Tensor x) -> Tensor")
    o = getattr(bf.ops, ns)
    lib.impl("f", lambda x: o.g(x), "CPU")
    lib.impl("g", lambda x: o.f(x), "CPU")
    with pytest.raises(RecursionError) as info:
        o.f(np.ones(1))
    notes = _notes(info.value)
    assert sorted(notes) == sorted(
        [
            f"while running the 'CPU' kernel of '{ns}::f'",
            f"while running the 'CPU' kernel of '{ns}::g'",
        ]
    ), notes


def test_a_note_of_the_users_own_is_kept(ns, lib):
    stored = ValueError("stored")
    stored.add_note("my own note")
    lib.define(UNARY)

    def kernel(x):
        raise stored

    lib.impl("f", kernel, "CPU")
    for _ in range(3):
        with pytest.raises(ValueError):
            getattr(bf.ops, ns).f(np.ones(1))
    assert _notes(stored) == ["my own note", f"while running the 'CPU' kernel of '{ns}::f'"]


def test_a_failing_hook_raising_a_stored_exception_keeps_one_note(ns, lib, unique_name):
    stored = OSError("hook broke")

    def to_cpu(payload):
        raise stored

    name = "NoteHook"
    backend = bf.register_backend(
        name,
        replace=True,
        to_cpu=to_cpu,
        from_cpu=lambda a: a.copy(),
        copy_from_cpu=lambda p, a: None,
    )
    lib.define(UNARY)
    lib.impl("f", lambda x: x, "CPU")
    x = backend.tensor(np.ones(2))
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, name)
        for _ in range(5):
            with pytest.raises(OSError):
                getattr(bf.ops, ns).f(x)
    notes = _notes(stored)
    assert len(notes) == len(set(notes)), notes
