"""Graph mode's constants are no license for XLA to simplify: the values of a node with no
operand (``asarray(-0.0)``, a constant made on the host) reach the program as constants, and
XLA's simplifier took ``-0.0 + 0.0`` for ``-0.0`` (``A + 0`` is ``A``), where eager mode (and
NumPy) give ``+0.0``: the standard's own special-case tests found it in graph mode only."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.jax as bj  # noqa: E402


@pytest.fixture(params=["eager", "graph"])
def xp(request):
    bf.sync()
    yield bj.namespace(graph=request.param == "graph")
    bf.sync()


@pytest.mark.parametrize(("a", "b"), [(-0.0, 0.0), (0.0, -0.0), (-0.0, -0.0)])
def test_the_sum_of_signed_zeros_is_numpys(xp, a, b):
    got = xp.add(xp.asarray(a), xp.asarray(b))
    want = np.add(np.float32(a), np.float32(b))
    assert np.signbit(got.numpy()) == np.signbit(want)


def test_the_in_place_sum_of_signed_zeros_is_numpys(xp):
    x = xp.asarray(-0.0)
    x += xp.asarray(0.0)
    assert not np.signbit(x.numpy())


def test_special_values_made_in_the_program_are_the_eager_ones(xp):
    cases = [
        (lambda: xp.acos(xp.asarray(2.0)), np.arccos(np.float32(2.0))),
        (lambda: xp.signbit(xp.asarray(-np.nan)), np.signbit(np.float32(-np.nan))),
        (lambda: xp.pow(xp.asarray(-2.0), xp.asarray(0.5)), np.float32(np.nan)),
        (lambda: xp.multiply(xp.asarray(-0.0), xp.asarray(1.0)), np.float32(-0.0)),
    ]
    with np.errstate(invalid="ignore"):
        for make, want in cases:
            got = make().numpy()
            np.testing.assert_array_equal(got, want)
            if not np.isnan(want):  # a NaN's sign is the platform's
                assert np.signbit(got) == np.signbit(want)
