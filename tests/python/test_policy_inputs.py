"""What set_fallback_policy, get_fallback_policy and BOXFALL_FALLBACK take: the policy names
in any case (anything else is a PolicyError, a ValueError naming the valid values), one
operator or a list, None to clear an operator's own policy, and a bad BOXFALL_FALLBACK warns at
import."""

from __future__ import annotations

import os
import subprocess
import sys

import boxfall as bf
import numpy as np
import pytest


@pytest.fixture
def f(ns, lib):
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x, "CPU")
    op = getattr(bf.ops, ns).f.default
    yield op
    bf.set_fallback_policy(None, op.name)


@pytest.mark.parametrize("text", ["Warn", "WARN", "warn"])
def test_policy_names_are_taken_in_any_case(text):
    bf.set_fallback_policy(text)
    assert bf.get_fallback_policy() == "warn"


@pytest.mark.parametrize("bad", ["bogus", "", "warning", 5, b"warn"])
def test_a_bad_policy_is_a_value_error_naming_the_valid_ones(bad):
    with pytest.raises(bf.PolicyError) as info:
        bf.set_fallback_policy(bad)
    assert isinstance(info.value, ValueError) and isinstance(info.value, bf.BoxfallError)
    assert all(v in str(info.value) for v in ('"allow"', '"warn"', '"error"')), info.value
    assert bf.get_fallback_policy() == "allow"


def test_a_bad_per_op_policy_changes_nothing(f):
    with pytest.raises(bf.PolicyError):
        bf.set_fallback_policy("Wrn", [f.name])
    assert bf.get_fallback_policy(f.name) is None


def test_ops_may_be_one_name(f, scratch_accel):
    bf.set_fallback_policy("error", f.name)  # a string, not a list
    assert bf.get_fallback_policy(f.name) == "error"
    with pytest.raises(bf.FallbackError):
        f(scratch_accel.tensor(np.ones(1)))


def test_ops_may_be_any_iterable_of_names_and_overloads(f):
    bf.set_fallback_policy("warn", (n for n in [f.name]))
    assert bf.get_fallback_policy(f) == "warn"
    bf.set_fallback_policy("allow", [f])
    assert bf.get_fallback_policy(f.name) == "allow"


@pytest.mark.parametrize("bad", [5, [5], ["ok", None]])
def test_ops_of_another_type_is_a_type_error_saying_what_ops_takes(f, bad):
    with pytest.raises(TypeError, match="operator"):
        bf.set_fallback_policy("warn", bad)


def test_an_operator_without_its_own_policy_reads_none(f):
    bf.set_fallback_policy("error")
    assert bf.get_fallback_policy() == "error"
    assert bf.get_fallback_policy(f.name) is None


def test_none_clears_an_operators_own_policy(f, scratch_accel):
    x = scratch_accel.tensor(np.ones(1))
    bf.set_fallback_policy("error")
    bf.set_fallback_policy("allow", [f.name])
    f(x)  # its own "allow" wins
    bf.set_fallback_policy(None, [f.name])
    assert bf.get_fallback_policy(f.name) is None
    with pytest.raises(bf.FallbackError):  # it follows the process-wide "error" again
        f(x)


def test_none_without_ops_is_refused():
    with pytest.raises(bf.PolicyError, match="ops"):
        bf.set_fallback_policy(None)
    assert bf.get_fallback_policy() == "allow"


def _import_with(value: str) -> subprocess.CompletedProcess:
    code = "import boxfall as bf; print(bf.get_fallback_policy())"
    env = {**os.environ, "BOXFALL_FALLBACK": value}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_bad_environment_value_warns_at_import_and_means_allow():
    done = _import_with("bogus")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "allow"
    assert "RuntimeWarning" in done.stderr, done.stderr
    assert 'BOXFALL_FALLBACK="bogus"' in done.stderr, done.stderr
    assert all(v in done.stderr for v in ('"allow"', '"warn"', '"error"')), done.stderr
    # Attributed to the line that imported boxfall, not to boxfall itself.
    assert "<string>:1" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("value", "policy"), [(" Warn ", "warn"), ("ERROR", "error"), ("", "allow")]
)
def test_a_good_environment_value_in_any_case_is_taken_silently(value, policy):
    done = _import_with(value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == policy
    assert done.stderr == ""
