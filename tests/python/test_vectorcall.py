"""Calls from Python reach an operator by vectorcall (the interpreter's own argument array)
once any operator was called, and give what a call with a packed tuple (``tp_call``) gives:
the same results, objects and errors, with positional, keyword and unpacked arguments."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest
from boxfall import _boxfall
from test_fast_path import error_of


@pytest.fixture(scope="module")
def ops(unique_name):
    ns = unique_name("vc")
    lib = bf.Library(ns, "DEF")
    lib.define("ident(Tensor self) -> Tensor")
    lib.define("scale(Tensor a, int b=2, *, float c=1.0) -> Tensor")
    lib.define("nothing() -> int")
    lib.define("many(Tensor a, Tensor b, Tensor c, Tensor d, Tensor e) -> Tensor")
    lib.impl("ident", lambda x: x, "CPU")
    lib.impl("scale", lambda a, b, *, c: a * b * c, "CPU")
    lib.impl("nothing", lambda: 7, "CPU")
    lib.impl("many", lambda a, b, c, d, e: a + b + c + d + e, "CPU")
    packet = getattr(bf.ops, ns)
    yield packet
    lib.close()


def packed(op, *args, **kwargs):
    """The call as C code makes it with a tuple and a dict (``tp_call``)."""
    return type(op).__call__(op, *args, **kwargs)


def test_a_call_switches_the_class_to_vectorcall(ops):
    a = np.ones(2)
    assert ops.ident.default(a) is a
    assert _boxfall.vectorcall_installed()


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {}), ((3,), {}), ((), {"b": 3}), ((3,), {"c": 0.5}), ((), {"c": 2.0, "b": 4})],
)
def test_keywords_and_defaults_bind_as_with_a_tuple(ops, args, kwargs):
    a = np.arange(3.0)
    op = ops.scale.default
    np.testing.assert_array_equal(op(a, *args, **kwargs), packed(op, a, *args, **kwargs))
    b, c = (list(args) + [kwargs.get("b", 2)])[0], kwargs.get("c", 1.0)
    np.testing.assert_array_equal(op(a, *args, **kwargs), a * b * c)


def test_no_arguments_and_five(ops):
    assert ops.nothing.default() == 7 == packed(ops.nothing.default)
    xs = [np.full(2, float(i)) for i in range(5)]
    np.testing.assert_array_equal(ops.many.default(*xs), sum(xs))
    np.testing.assert_array_equal(ops.many.default(*xs[:2], *xs[2:]), sum(xs))


def test_the_argument_is_returned_as_the_callers_object(ops):
    a = np.ones(1)
    assert ops.ident.default(a) is a
    assert ops.ident.default(self=a) is a
    assert ops.ident.default(*[a]) is a


@pytest.mark.parametrize(
    "call",
    [
        lambda op: op(),
        lambda op: op(np.ones(1), np.ones(1)),
        lambda op: op(np.ones(1), other=1),
        lambda op: op(3),
    ],
    ids=["missing", "too-many", "unknown-keyword", "wrong-type"],
)
def test_errors_are_those_of_a_tuple_call(ops, call):
    op = ops.ident.default
    assert error_of(lambda: call(op)) == error_of(lambda: call(lambda *a, **k: packed(op, *a, **k)))
