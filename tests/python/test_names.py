"""One rule for operator names wherever one is taken (metrics, the per-operator policy,
libraries): ``ns::op`` is the overload whose name is empty, ``ns::op.overload`` another one; an
unknown name is an UnknownOperatorError listing the closest names, the overloads of the same
operator first. A defined operator that never fell back has zeros."""

from __future__ import annotations

import re

import boxfall as bf
import numpy as np
import pytest


@pytest.fixture
def add_tensor(ns, lib):
    """``ns::add.Tensor``, the only overload of ``ns::add``, with a CPU kernel."""
    lib.define("add.Tensor(Tensor self, Tensor other) -> Tensor")
    lib.impl("add.Tensor", lambda a, b: a + b, "CPU")
    return getattr(bf.ops, ns).add.Tensor


def _unknown(ns: str) -> str:
    return re.escape(f"unknown operator '{ns}::add'; did you mean: {ns}::add.Tensor?")


def test_counter_value_of_a_name_without_its_overload_is_unknown(ns, add_tensor, scratch_accel):
    x = scratch_accel.tensor(np.ones(2))
    add_tensor(x, x)
    assert bf.metrics.counter_value(f"{ns}::add.Tensor") == 1
    with pytest.raises(bf.UnknownOperatorError, match=_unknown(ns)):
        bf.metrics.counter_value(f"{ns}::add")


def test_op_stats_of_a_name_without_its_overload_is_unknown(ns, add_tensor):
    with pytest.raises(bf.UnknownOperatorError, match=_unknown(ns)):
        bf.metrics.op_stats(f"{ns}::add")


def test_an_unknown_name_is_a_lookup_error_with_close_matches(ns, add_tensor):
    with pytest.raises(LookupError, match=f"did you mean: {ns}::add.Tensor"):
        bf.metrics.op_stats(f"{ns}::add.Tensr")
    with pytest.raises(bf.UnknownOperatorError, match=f"'{ns}::nothing_like_it'$"):
        bf.metrics.counter_value(f"{ns}::nothing_like_it")


def test_a_defined_operator_that_never_fell_back_has_zeros(ns, add_tensor):
    assert bf.metrics.counter_value(f"{ns}::add.Tensor") == 0
    stats = bf.metrics.op_stats(f"{ns}::add.Tensor")
    assert stats.pop("backends") == {}
    assert stats.pop("last_failure") is None
    assert set(stats.values()) == {0}


def test_the_default_overload_is_named_without_a_dot(ns, lib, scratch_accel):
    lib.define("neg(Tensor x) -> Tensor")
    lib.impl("neg", lambda x: -x, "CPU")
    getattr(bf.ops, ns).neg(scratch_accel.tensor(np.ones(1)))
    assert bf.metrics.counter_value(f"{ns}::neg") == 1
    with pytest.raises(bf.UnknownOperatorError, match=f"did you mean: {ns}::neg"):
        bf.metrics.counter_value(f"{ns}::neg.default")


def test_an_op_overload_is_taken_where_a_name_is(ns, add_tensor, scratch_accel):
    x = scratch_accel.tensor(np.ones(2))
    add_tensor(x, x)
    assert bf.metrics.counter_value(add_tensor) == 1
    assert bf.metrics.op_stats(add_tensor)["fallbacks"] == 1
    bf.set_fallback_policy("error", add_tensor)
    assert bf.get_fallback_policy(add_tensor) == "error"
    bf.set_fallback_policy(None, add_tensor)


def test_an_operator_counted_then_closed_is_still_known(ns, scratch_accel):
    with bf.Library(ns, "DEF") as lib:
        lib.define("gone(Tensor x) -> Tensor")
        lib.impl("gone", lambda x: x, "CPU")
        getattr(bf.ops, ns).gone(scratch_accel.tensor(np.ones(1)))
    name = f"{ns}::gone"
    assert bf.metrics.counters()[name] == 1
    assert bf.metrics.counter_value(name) == 1
    assert bf.metrics.op_stats(name)["fallbacks"] == 1


def test_the_per_op_policy_takes_the_same_names(ns, add_tensor):
    with pytest.raises(bf.UnknownOperatorError, match=_unknown(ns)):
        bf.set_fallback_policy("warn", [f"{ns}::add"])
    with pytest.raises(bf.UnknownOperatorError, match=_unknown(ns)):
        bf.get_fallback_policy(f"{ns}::add")
    bf.set_fallback_policy("warn", [f"{ns}::add.Tensor"])
    assert bf.get_fallback_policy(f"{ns}::add.Tensor") == "warn"
    bf.set_fallback_policy(None, [f"{ns}::add.Tensor"])


def test_a_refused_name_changes_no_policy(ns, add_tensor):
    with pytest.raises(bf.UnknownOperatorError):
        bf.set_fallback_policy("error", [f"{ns}::add.Tensor", f"{ns}::add"])
    assert bf.get_fallback_policy(f"{ns}::add.Tensor") is None


def test_a_kernel_for_a_name_without_its_overload_suggests_the_overload(ns, add_tensor, lib):
    with pytest.raises(bf.UnknownOperatorError, match=_unknown(ns)):
        lib.impl("add", lambda a, b: a - b, "Native")
