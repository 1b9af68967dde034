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
def test_moved_is_every_operators_bytes_what_was_materialized_and_the_users_reads(name):
    s = SETUPS[name]
    r = workload.run(s, P, (X, Y))
    # The run's per-operator figures are the operators' own op_stats on the backend.
    for op, moved in r.by_op.items():
        f = bf.metrics.op_stats(op)["backends"][s.backend]
        assert moved == f["bytes_to_cpu"] + f["bytes_from_cpu"]
    t = bf.metrics.transfers().get(s.backend, {})
    assert r.materialized_bytes == t.get("bytes_materialized", 0)
    assert r.moved == sum(r.by_op.values()) + r.user_bytes + r.materialized_bytes
    # The three results are the CPU fallback's (divide, argmin, solve), so they are on the host
    # (residency): the user's reads of them cross nothing and are no transfer; the user put
    # nothing on the device during the run.
    assert (t.get("to_host", 0), t.get("to_device", 0), r.user_bytes) == (0, 0, 0)


@pytest.mark.parametrize("name", DEVICE_SETUPS)
def test_the_inputs_start_on_the_device(name):
    # What least_needed assumes: asarray of host data puts it on the device at once.
    dx, dy = (SETUPS[name].xp.asarray(a) for a in (X, Y))
    assert (dx.residency, dy.residency) == ("device", "device")


def test_the_least_needed_with_no_native_kernel_is_the_inputs_once():
    # Every operator runs on the CPU: the inputs cross once, and the results are made on the
    # host, where the user reads them.
    assert workload.least_needed(P).least == X.nbytes + Y.nbytes


def test_native_kernels_move_more_of_the_flow_across_than_none_does():
    # matmul, add and sum on the device, argmin and the rest on the host: the distances go to
    # the host each iteration and the one-hot matrix comes back, so the least is higher.
    none, some = workload.least_needed(P), workload.least_needed(P, workload.NATIVE_KERNELS)
    assert some.least > none.least
    assert some.eager < none.eager


@pytest.mark.parametrize("name", DEVICE_SETUPS)
def test_residency_moves_less_than_a_fallback_moving_every_argument_and_result(name):
    """Without residency, each call of the CPU fallback moved each of its device arguments to
    the CPU and each result back (``need.eager``, what moved before residency), even when the
    last call had just moved the same values the other way. A lazy backend keeps the host
    copies and leaves the fallback's results on the host, so its fallback moves less."""
    s = SETUPS[name]
    r = workload.run(s, P, (X, Y))
    need = workload.least_needed(P, s.native)
    assert 0 < r.fallback_bytes + r.user_bytes < need.eager
    assert r.moved < need.eager


def test_with_no_native_kernel_moved_is_the_least_needed():
    r = workload.run(SETUPS["fallback"], P, (X, Y))
    assert r.moved == workload.least_needed(P).least == X.nbytes + Y.nbytes
    assert r.hook_bytes == r.moved  # the metrics see every byte the hooks moved


def test_with_native_kernels_moved_is_at_most_the_least_needed():
    """The views the backend's kernels read (``x.T``, ``onehot.T``, ``centers.T``, the centers'
    squared norms) are made on the device from their bases' payloads by the backend's ``view``
    hook: a base that was on the host crosses once, for itself and all its views."""
    r = workload.run(SETUPS["kernels"], P, (X, Y))
    need = workload.least_needed(P, workload.NATIVE_KERNELS)
    assert r.moved <= need.least
    assert r.hook_bytes == r.moved  # the metrics see every byte the hooks moved


@pytest.mark.parametrize("name", DEVICE_SETUPS)
def test_moved_is_at_most_the_least_needed_on_every_device_setup(name):
    s = SETUPS[name]
    r = workload.run(s, P, (X, Y))
    assert r.moved / workload.least_needed(P, s.native).least <= 1.0
