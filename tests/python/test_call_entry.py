"""How calls from Python enter boxfall. ``op.redispatch``, and ``op(x)`` while a Python function
serves the operator's calls, run without PyO3's count of the GIL: what the count decides,
whether a reference is given back at once or left to PyO3's pool, must not show. A failing call
empties that pool before it raises, so that the exception's objects go as soon as the caller
lets go of them, with no collector run. A call that no Python function serves takes PyO3's
entry, before anything runs, and the operator keeps to it."""

from __future__ import annotations

import gc
import threading
import weakref

import boxfall as bf
import numpy as np
import pytest


class _Held:
    """An object an exception carries, to see when the exception goes."""


@pytest.fixture(scope="module")
def key(unique_name):
    """One functionality key for the module (the key slots are few)."""
    name = unique_name("EntryKey")
    bf.register_functionality_key(name)
    return name


@pytest.fixture
def no_collector():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _raised_and_dropped(call) -> weakref.ref:
    """Calls ``call`` (which raises ValueError(_Held())) and drops the exception; a weak
    reference to what it carried."""
    try:
        call()
    except ValueError as e:
        return weakref.ref(e.args[0])
    raise AssertionError("the call did not raise")


def test_a_kernel_s_exception_through_op_goes_with_its_caller(ns, no_collector):
    with bf.Library(ns, "DEF") as lib:
        lib.define("boom(Tensor x) -> Tensor")

        def boom(x):
            raise ValueError(_Held())

        lib.impl("boom", boom, "CPU")
        op = getattr(bf.ops, ns).boom.default
        ref = _raised_and_dropped(lambda: op(np.ones(1)))
        assert ref() is None


def test_a_kernel_s_exception_through_a_redispatch_goes_with_its_caller(ns, key, no_collector):
    with bf.Library(ns, "DEF") as lib:
        lib.define("boom(Tensor x) -> Tensor")

        def boom(x):
            raise ValueError(_Held())

        lib.impl("boom", boom, "CPU")
        op = getattr(bf.ops, ns).boom.default
        kept = []

        def fallback(op, keys, stack):
            kept.append(keys)
            stack[:] = [op.redispatch(keys, *stack)]

        with bf.Library("_", "IMPL") as fb:
            fb.fallback(fallback, key)
            with bf.include_keys(key):
                ref = _raised_and_dropped(lambda: op(np.ones(1)))
            assert ref() is None
            # The redispatch entered from plain Python code (no boxfall call around it).
            ref = _raised_and_dropped(lambda: op.redispatch(kept[0], np.ones(1)))
            assert ref() is None


def test_redispatch_takes_only_a_key_set(ns, key):
    with bf.Library(ns, "DEF") as lib:
        lib.define("ident(Tensor x) -> Tensor")
        lib.impl("ident", lambda x: x, "CPU")
        op = getattr(bf.ops, ns).ident.default
        seen = []

        def fallback(op, keys, stack):
            seen.append(keys)
            stack[:] = [op.redispatch(keys, *stack)]

        with bf.Library("_", "IMPL") as fb:
            fb.fallback(fallback, key)
            a = np.ones(1)
            with bf.include_keys(key):
                assert op(a) is a
        keys = seen[0]
        with pytest.raises(TypeError):
            op.redispatch("CPU", a)
        with pytest.raises(TypeError):
            op.redispatch(object(), a)
        with pytest.raises(TypeError, match="keys"):
            op.redispatch()
        # The key set positionally and by keyword alike.
        assert op.redispatch(keys, a) is a
        assert op.redispatch(keys=keys, x=a) is a


def test_the_recursion_guard_holds_on_threads_after_the_main_one(ns):
    # The native stack's bounds are kept from the last call; a thread's calls must find its
    # own (a recursion on a small stack ends in RecursionError, not in a crash), and the main
    # thread's after it.
    with bf.Library(ns, "DEF") as lib:
        lib.define("g(Tensor x) -> Tensor")
        op = getattr(bf.ops, ns).g.default

        def deep(x):
            return op(x)

        lib.impl("g", deep, "CPU")
        errors = []

        def run():
            try:
                op(np.ones(1))
            except RecursionError as e:
                errors.append(e)

        with pytest.raises(RecursionError):
            op(np.ones(1))
        previous = threading.stack_size(1 << 20)
        try:
            for _ in range(2):
                t = threading.Thread(target=run)
                t.start()
                t.join()
        finally:
            threading.stack_size(previous)
        assert len(errors) == 2
        with pytest.raises(RecursionError):
            op(np.ones(1))


def test_an_operator_served_by_python_then_by_native_gives_the_same_as_before(ns):
    # The first call runs the Python CPU kernel by the lean entry; the Native ones find a
    # Rust kernel (or the CPU fallback), which sends them, and every later call, PyO3's way.
    with bf.Library(ns, "DEF") as lib:
        lib.define("plus(Tensor self, Tensor other) -> Tensor")
        lib.impl("plus", np.add, "CPU")
        op = getattr(bf.ops, ns).plus.default
        a, b = np.arange(3.0), np.ones(3)
        np.testing.assert_array_equal(op(a, b), [1.0, 2.0, 3.0])
        x, y = bf.native.tensor(a), bf.native.tensor(b)
        for _ in range(2):
            out = op(x, y)
            assert isinstance(out, bf.Tensor)
            np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])
            np.testing.assert_array_equal(op(a, b), [1.0, 2.0, 3.0])
        with pytest.raises(TypeError):
            op(a, "not a tensor")
