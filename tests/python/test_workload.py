"""The k-means plus ridge workload of ``boxfall.workload`` (the bench's workload rows): its
results on every setup agree with NumPy's, and the bytes the metrics count are the ones its
data flow explains. No timing here: the times are the bench's (``python -m boxfall bench
--only workload``)."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest
from boxfall import workload

# Small enough for a debug build; every step of the full-size workload is in it.
P = workload.Problem(n=2_000, d=8, k=4, iterations=3)
X, Y = workload.make_data(P)
SETUPS = {s.name: s for s in workload.setups()}
DEVICE_SETUPS = ("fallback", "kernels")


@pytest.fixture(scope="module")
def expected():
    return workload.run(SETUPS["numpy"], P, (X, Y)).results


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_the_workload_agrees_with_numpy_on_every_setup(name, expected):
    got = workload.run(SETUPS[name], P, (X, Y)).results
    assert [r.shape for r in got] == [(P.k, P.d), (P.n, 1), (P.d, 1)]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-10)
    # The clusters are the blobs the data were made of (each point's own blob), so that the
    # workload compares real work, not a degenerate fixed point.
    labels = got[1][:, 0]
    assert len(set(labels.tolist())) == P.k
    blob = np.arange(P.n) % P.k
    assert all(len(set(labels[blob == b].tolist())) == 1 for b in range(P.k))


def test_numpy_moves_nothing():
    r = workload.run(SETUPS["numpy"], P, (X, Y))
    assert (r.moved, r.by_op, r.hook_bytes) == (0, {}, 0)


@pytest.mark.parametrize("name", DEVICE_SETUPS)
def test_moved_is_every_operators_bytes_and_the_users_reads_each_once(name):
    s = SETUPS[name]
    r = workload.run(s, P, (X, Y))
    # The run's per-operator figures are the operators' own op_stats on the backend.
    for op, moved in r.by_op.items():
        f = bf.metrics.op_stats(op)["backends"][s.backend]
        assert moved == f["bytes_to_cpu"] + f["bytes_from_cpu"]
    assert r.moved == sum(r.by_op.values()) + r.user_bytes
    # The user read the three results, each once (np.asarray), with its bytes, and put nothing
    # on the device during the run.
    t = bf.metrics.transfers()[s.backend]
    assert (t["to_host"], t["to_device"], t["bytes_to_device"]) == (3, 0, 0)
    assert t["bytes_to_host"] == r.user_bytes == sum(a.nbytes for a in r.results)


def test_the_least_needed_with_no_native_kernel_is_the_inputs_and_the_results_once():
    need = workload.least_needed(P)
    results = (P.k * P.d + P.n + P.d) * 8
    assert need.least == X.nbytes + Y.nbytes + results


def test_native_kernels_move_more_of_the_flow_across_than_none_does():
    # matmul, add and sum on the device, argmin and the rest on the host: the distances go to
    # the host each iteration and the one-hot matrix comes back, so the least is higher.
    none, some = workload.least_needed(P), workload.least_needed(P, workload.NATIVE_KERNELS)
    assert some.least > none.least
    assert some.eager < none.eager


@pytest.mark.parametrize("name", DEVICE_SETUPS)
def test_today_each_fallback_moves_every_argument_and_every_result(name):
    """The known reason moved exceeds the least needed: each call of the CPU fallback moves
    each of its device arguments to the CPU and each result back, even when the last call
    just moved the same values the other way. Residency (issue 31) lowers it: this test then
    turns into ``moved <= need.eager``."""
    s = SETUPS[name]
    r = workload.run(s, P, (X, Y))
    need = workload.least_needed(P, s.native)
    assert r.moved == need.eager
    assert r.moved > need.least


@pytest.mark.xfail(strict=True, reason="residency (issue 31) not merged yet")
@pytest.mark.parametrize("name", DEVICE_SETUPS)
def test_moved_is_at_most_the_least_needed(name):
    s = SETUPS[name]
    r = workload.run(s, P, (X, Y))
    assert r.moved <= workload.least_needed(P, s.native).least
