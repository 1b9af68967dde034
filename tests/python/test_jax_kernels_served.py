"""Which array API operators ``boxfall.jax`` computes on the device: every case of
``jax_cases`` but the few whose output shape depends on the values runs as a JAX kernel, in
eager mode and in graph mode (no CPU fallback, no host callback), with NumPy's values; the
operators left to the CPU fallback are at most 15, each with its reason in ``bf.coverage``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.array_api as xp_cpu  # noqa: E402
import boxfall.jax as bj  # noqa: E402
from boxfall import _coverage  # noqa: E402
from jax_cases import all_cases, compare, data  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

# The cases whose output shape depends on the values (or whose key holds arrays): the CPU
# fallback computes them, in graph mode too.
ON_THE_HOST = {
    "nonzero",
    "unique_values",
    "unique_counts",
    "unique_inverse",
    "unique_all",
    "integer_array",
    "boolean_mask",
    # x[key] = value writes into x, which a kernel returning () cannot replace (a jax.Array
    # is immutable): the fallback's write goes back by copy_from_cpu
    "setitem",
}
SERVED = [c for c in all_cases() if c[1] not in ON_THE_HOST]
# An int scalar beside an integer tensor in `where` is a traced input of a graph's program
# whose range is not known there (only BINARY's scalars are range-checked when recorded): the
# node runs on the host.
GRAPH_SERVED = [c for c in SERVED if c[1] != "where_scalar_first"]


def _fallbacks() -> dict[str, int]:
    return {k: v for k, v in bf.metrics.counters().items() if k.startswith("array_api::")}


def _inputs(ns: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    arrays = data(bj.X64)
    return {k: ns.asarray(v) for k, v in arrays.items()}, arrays


@pytest.mark.parametrize(
    ("group", "name", "case"), SERVED, ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_case_runs_as_jax_kernels_in_eager_mode(group, name, case):
    ns = bj.namespace()
    on_device, arrays = _inputs(ns)
    bf.metrics.reset()
    got = case(ns, on_device)
    assert _fallbacks() == {}
    compare(got, case(xp_cpu, arrays), bj.X64)


@pytest.mark.parametrize(
    ("group", "name", "case"), GRAPH_SERVED, ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_case_runs_on_the_device_in_graph_mode_with_eager_modes_values(group, name, case):
    gx, ex = bj.namespace(graph=True), bj.namespace()
    on_device, _ = _inputs(gx)
    bf.sync()
    compiler = bj.graph_compiler()
    before = dict(compiler.host_callbacks)
    bf.metrics.reset()
    got = case(gx, on_device)
    values = np.asarray(got)
    assert dict(compiler.host_callbacks) == before
    assert _fallbacks() == {}
    want = case(ex, _inputs(ex)[0])
    np.testing.assert_array_equal(values, np.asarray(want))
    assert values.dtype == np.asarray(want).dtype


@pytest.mark.parametrize("graph", [False, True])
def test_at_most_15_operators_fall_back_each_with_its_reason(graph):
    ns = bj.namespace(graph=graph)
    name = bj.GRAPH_BACKEND_NAME if graph else bj.BACKEND_NAME
    assert ns is not None
    cov = bf.coverage(name, namespace="array_api")
    fallbacks = cov.names("backend fallback")
    assert len(fallbacks) <= 15, fallbacks
    table = cov.table()
    for op in fallbacks:
        reason = cov.reason(op)
        assert reason and all(reason.values()), op
        line = next(line for line in table.splitlines() if line.startswith(op + " "))
        assert next(iter(reason.values())) in line


def test_a_kernels_cases_left_on_a_tpu_are_said_per_device():
    bj.namespace()
    cov = bf.coverage(bj.BACKEND_NAME, namespace="array_api")
    assert cov["array_api::linalg_svd"] == "kernel"
    assert "single precision" in cov.reason("array_api::linalg_svd")["tpu"]
    assert "tpu: " in next(
        line for line in cov.table().splitlines() if line.startswith("array_api::fft_fft ")
    )


def test_a_backend_explains_a_fallback_per_device_kind_and_coverage_shows_it():
    bj.namespace()
    saved = dict(_coverage._REASONS.get(bj.BACKEND_NAME, {}))
    try:
        bf.Coverage.explain(
            bj.BACKEND_NAME,
            {"array_api::nonzero": {"cpu": "on the host", "tpu": "a sync of the chip"}},
        )
        cov = bf.coverage(bj.BACKEND_NAME, namespace="array_api")
        assert cov.reason("array_api::nonzero") == {
            "cpu": "on the host",
            "tpu": "a sync of the chip",
        }
        line = next(
            line for line in cov.table().splitlines() if line.startswith("array_api::nonzero ")
        )
        assert line.endswith("cpu: on the host; tpu: a sync of the chip")
        assert cov.reason("array_api::add") == {}
        with pytest.raises(KeyError):
            cov.reason("array_api::no_such_operator")
    finally:
        _coverage._REASONS[bj.BACKEND_NAME] = saved


def test_floor_divide_and_remainder_keep_numpys_signed_zeros_and_zero_divisors():
    ns = bj.namespace()
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, np.inf, -np.inf, np.nan, 3.0], np.float32)
    a, b = (v.ravel() for v in np.meshgrid(vals, vals))
    bf.metrics.reset()
    for name in ("floor_divide", "remainder"):
        got = getattr(ns, name)(ns.asarray(a), ns.asarray(b)).numpy()
        want = np.asarray(getattr(xp_cpu, name)(xp_cpu.asarray(a), xp_cpu.asarray(b)))
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want)).all(), name
    i = np.array([-128, -7, 0, 5, 127], np.int8)
    j = np.array([-1, 0, 0, 2, 0], np.int8)
    got = (ns.asarray(i) // ns.asarray(j)).numpy(), (ns.asarray(i) % ns.asarray(j)).numpy()
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got[0], i // j)  # a division by zero is 0, as NumPy's
        np.testing.assert_array_equal(got[1], i % j)
    assert _fallbacks() == {}


def test_shifts_by_the_width_or_more_follow_numpy():
    ns = bj.namespace()
    x = np.array([1, -1, 100, -128, 127, 3], np.int8)
    s = np.array([8, 8, 9, 7, 100, -1], np.int8)
    bf.metrics.reset()
    left = ns.bitwise_left_shift(ns.asarray(x), ns.asarray(s)).numpy()
    right = ns.bitwise_right_shift(ns.asarray(x), ns.asarray(s)).numpy()
    np.testing.assert_array_equal(left, np.left_shift(x, s))
    np.testing.assert_array_equal(right, np.right_shift(x, s))
    assert _fallbacks() == {}


def test_a_case_a_kernel_cannot_take_still_reads_as_numpys_error():
    ns = bj.namespace()
    x = ns.asarray(np.arange(6.0, dtype=np.float32))
    with pytest.raises(IndexError):
        ns.take_along_axis(x, ns.asarray(np.array([0, 9], np.int32)), axis=0)
    nan = ns.asarray(np.array([[1.0, np.nan], [0.0, 1.0]], np.float32))
    with pytest.raises(np.linalg.LinAlgError):
        ns.linalg.svd(nan)


def test_sign_of_either_zero_is_numpys_positive_zero():
    ns = bj.namespace()
    bf.metrics.reset()
    got = ns.sign(ns.asarray(np.array([-0.0, 0.0, -3.0, np.nan], np.float32))).numpy()
    np.testing.assert_array_equal(got, [0.0, 0.0, -1.0, np.nan])
    assert not np.signbit(got[:2]).any()
    assert _fallbacks() == {}
