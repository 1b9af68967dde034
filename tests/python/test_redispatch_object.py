"""``op.redispatch`` is one callable per ``OpOverload``, made at the first look-up and kept by
it: every look-up gives the same object, which keeps its operator alive, is collected with it,
and documents itself."""

from __future__ import annotations

import gc
import sys
import uuid
import weakref

import boxfall as bf
import numpy as np
import pytest
from boxfall import _boxfall


@pytest.fixture(scope="module")
def key():
    # One key for the module: the functionality key slots are few, and every fallback here is
    # removed when its test ends.
    name = f"RedObjKey{uuid.uuid4().hex[:6]}"
    bf.register_functionality_key(name)
    return name


@pytest.fixture
def op_and_key(key):
    ns = f"redobj{uuid.uuid4().hex[:8]}"
    with bf.Library(ns, "DEF") as lib:
        lib.define("scale(Tensor self, int n=1) -> Tensor")
        lib.impl("scale", lambda x, n=1: x * n, "CPU")
        yield getattr(bf.ops, ns).scale.default, key


def _keys_seen(op, key):
    """The key set a boxed fallback on ``key`` receives for ``op``."""
    seen = []

    def fallback(op, keys, stack):
        seen.append(keys)
        op.redispatch_boxed(keys, stack)

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(fallback, key)
        with bf.include_keys(key):
            op(np.array([1.0]))
    return seen[0]


def test_every_look_up_gives_the_same_object(op_and_key):
    op, _ = op_and_key
    assert op.redispatch is op.redispatch


def test_each_operator_object_has_its_own(op_and_key):
    op, _ = op_and_key
    other = _boxfall.find_op(op.name)
    assert other.redispatch is not op.redispatch
    assert other.redispatch.__self__ is other
    assert op.redispatch.__self__ is op


def test_a_kept_redispatch_works_after_its_operator_is_dropped(op_and_key):
    op, key = op_and_key
    keys = _keys_seen(op, key)
    fresh = _boxfall.find_op(op.name)
    redispatch = fresh.redispatch
    ref = weakref.ref(fresh) if _weakrefable(fresh) else None
    del fresh
    gc.collect()
    if ref is not None:
        assert ref() is not None
    np.testing.assert_array_equal(redispatch(keys, np.array([1.0, 2.0]), 3), [3.0, 6.0])
    np.testing.assert_array_equal(redispatch(keys=keys, self=np.array([2.0])), [2.0])


def _weakrefable(obj):
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def test_an_operator_and_its_redispatch_are_collected_together(op_and_key):
    op, _ = op_and_key
    gc.collect()
    before = sum(1 for o in gc.get_objects() if type(o) is bf.OpOverload)
    for _ in range(50):
        fresh = _boxfall.find_op(op.name)
        assert fresh.redispatch.__self__ is fresh
        del fresh
    gc.collect()
    after = sum(1 for o in gc.get_objects() if type(o) is bf.OpOverload)
    assert after <= before


def test_its_repr_name_and_doc(op_and_key):
    op, _ = op_and_key
    r = op.redispatch
    assert r.__name__ == "redispatch"
    assert r.__qualname__ == "OpOverload.redispatch"
    assert "redispatch" in repr(r) and "OpOverload" in repr(r)
    assert "dispatches on `keys` without its highest key" in r.__doc__
    assert r.__text_signature__ == "($self, keys, *args, **kwargs)"
    assert "keys" in bf.OpOverload.redispatch.__doc__


def test_help_documents_it(op_and_key):
    import pydoc

    op, _ = op_and_key
    text = pydoc.render_doc(op.redispatch, renderer=pydoc.plaintext)
    assert "redispatch(keys, *args, **kwargs)" in text
    assert "without its highest key" in text


def test_an_unknown_keyword_reaches_the_operator_s_binding(op_and_key):
    op, key = op_and_key
    keys = _keys_seen(op, key)
    with pytest.raises(bf.ArgumentError, match="bogus"):
        op.redispatch(keys, np.array([1.0]), bogus=1)


def test_the_general_path_s_operator_goes_when_its_call_ends(op_and_key):
    # With the fast path off, a boxed fallback gets an OpOverload made for its call; looking
    # up its `redispatch` ties the two in a cycle, which the call breaks when nobody kept
    # either, so no OpOverload waits for the collector.
    op, key = op_and_key
    kept = []

    def fallback(op, keys, stack):
        stack[:] = [op.redispatch(keys, *stack)]

    def keeping(op, keys, stack):
        kept.append(op.redispatch)
        stack[:] = [op.redispatch(keys, *stack)]

    before = _boxfall.set_fast_path(False)
    gc.disable()
    try:
        gc.collect()
        count = sum(1 for o in gc.get_objects() if type(o) is bf.OpOverload)
        with bf.Library("_", "IMPL") as fb:
            fb.fallback(fallback, key)
            with bf.include_keys(key):
                outs = [op(np.array([float(i)]), 2) for i in range(20)]
        assert sum(1 for o in gc.get_objects() if type(o) is bf.OpOverload) == count
        with bf.Library("_", "IMPL") as fb:
            fb.fallback(keeping, key)
            with bf.include_keys(key):
                op(np.array([1.0]), 2)
    finally:
        gc.enable()
        _boxfall.set_fast_path(before)
    assert [o.tolist() for o in outs] == [[2.0 * i] for i in range(20)]
    # A kept one still works, and still names its own operator.
    assert kept[0].__self__.name == op.name
    keys = _keys_seen(op, key)
    np.testing.assert_array_equal(kept[0](keys, np.array([3.0]), 2), [6.0])


def _look_up(op):
    return op.redispatch


def test_the_attribute_is_a_read_only_member_every_object_has(op_and_key):
    # The look-up reads the function kept in the object (a read-only member, which the
    # interpreter specializes into a load): every OpOverload, however made, has it from the
    # start, and a specialized look-up site serves each object its own.
    op, key = op_and_key
    assert type(bf.OpOverload.__dict__["redispatch"]).__name__ == "member_descriptor"
    with pytest.raises(AttributeError):
        op.redispatch = None
    made = [op, _boxfall.find_op(op.name), *_boxfall.overloads(op.name.split(".")[0])]
    seen_by_the_general_path = []

    def fallback(op, keys, stack):
        seen_by_the_general_path.append((op, _look_up(op)))
        stack[:] = [op.redispatch(keys, *stack)]

    before = _boxfall.set_fast_path(False)
    try:
        with bf.Library("_", "IMPL") as fb:
            fb.fallback(fallback, key)
            with bf.include_keys(key):
                out = op(np.array([2.0]), 3)
    finally:
        _boxfall.set_fast_path(before)
    np.testing.assert_array_equal(out, [6.0])
    ((general, its_redispatch),) = seen_by_the_general_path
    assert its_redispatch.__self__ is general
    for _ in range(20):
        for o in made:
            r = _look_up(o)
            assert r is o.redispatch
            assert r.__self__ is o


def _depth() -> int:
    """Frames on this thread's stack now."""
    n, f = 0, sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n


def test_a_recursion_through_op_redispatch_counts_one_level_a_kernel(key):
    # A lean `op.redispatch` runs a Python function, whose frame counts the level for Python:
    # the call counts none of its own, so such a recursion goes as deep as Python's limit
    # allows (it counted two levels a kernel, and ended at half the limit), and still ends in
    # RecursionError, with the kernel's note, not in a crash.
    ns = f"redobj{uuid.uuid4().hex[:8]}"
    depth = 0
    with bf.Library(ns, "DEF") as lib:
        lib.define("deep(Tensor self) -> Tensor")
        op = getattr(bf.ops, ns).deep.default
        lib.impl("deep", lambda x: x, "CPU")
        keys = _keys_seen(op, key)

        def kernel(x):
            nonlocal depth
            depth += 1
            return op.redispatch(keys, x)

        levels = 400
        previous = sys.getrecursionlimit()
        lib.impl("deep", kernel, "CPU", allow_override=True)
        sys.setrecursionlimit(_depth() + levels)
        try:
            with pytest.raises(RecursionError) as info:
                op.redispatch(keys, np.ones(1))
        finally:
            sys.setrecursionlimit(previous)
    assert depth > 0.8 * levels, depth
    assert any("'CPU' kernel" in n for n in getattr(info.value, "__notes__", [])), info.value
