"""``op.redispatch(keys, *args, **kwargs)`` takes ``keys`` as its signature says (first, or as
the keyword ``keys`` when no argument is positional), and passes every other argument to the
operator, positional and keyword alike."""

from __future__ import annotations

import uuid

import boxfall as bf
import numpy as np
import pytest


@pytest.fixture(scope="module")
def key():
    """One functionality key for the module (a process has few key slots); each test's
    fallback for it goes with the test's library."""
    name = f"RedispKey{uuid.uuid4().hex[:6]}"
    bf.register_functionality_key(name)
    return name


@pytest.fixture
def op_and_key(key):
    ns = f"redisp{uuid.uuid4().hex[:8]}"
    with bf.Library(ns, "DEF") as lib:
        lib.define("scale(Tensor self, int n=1) -> Tensor")
        lib.impl("scale", lambda x, n=1: x * n, "CPU")
        yield getattr(bf.ops, ns).scale.default, key


def _through_fallback(op, key, body):
    seen = []

    def fallback(op, keys, stack):
        seen.append(body(op, keys, stack))
        stack[:] = [op.redispatch(keys, *stack)]

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(fallback, key)
        with bf.include_keys(key):
            out = op(np.array([1.0, 2.0]), 5)
    return out, seen[0]


def test_the_documented_form_runs_the_kernel_below(op_and_key):
    op, key = op_and_key
    out, _ = _through_fallback(op, key, lambda op, keys, stack: None)
    np.testing.assert_array_equal(out, [5.0, 10.0])


def test_keyword_arguments_go_to_the_operator(op_and_key):
    op, key = op_and_key
    _, seen = _through_fallback(op, key, lambda op, keys, s: op.redispatch(keys, s[0], n=3))
    np.testing.assert_array_equal(seen, [3.0, 6.0])


def test_keys_may_be_given_by_keyword(op_and_key):
    op, key = op_and_key
    _, seen = _through_fallback(op, key, lambda op, keys, s: op.redispatch(keys=keys, self=s[0]))
    np.testing.assert_array_equal(seen, [1.0, 2.0])


def test_keys_missing_twice_given_or_of_another_type_are_type_errors(op_and_key):
    op, _ = op_and_key
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'keys'"):
        op.redispatch()
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'keys'"):
        op.redispatch(n=2)
    with pytest.raises(TypeError, match="DispatchKeySet"):
        op.redispatch(1, np.ones(1))
    with pytest.raises(TypeError, match="multiple values for argument 'keys'"):
        op.redispatch(np.ones(1), keys=np.ones(1))
