"""``boxfall.jax``: the array API on a JAX device against NumPy, its interop with JAX, its kernels
and its dtypes. CI runs it on JAX's CPU backend twice, with x64 off (the pytest run) and on
(.ci/run's ``JAX_ENABLE_X64=1`` step): x64 is read when ``boxfall.jax`` is imported.

On a TPU (one process holds the chip): ``python -m pytest tests/python/test_jax_backend.py``,
or ``python tests/python/test_jax_backend.py`` for the agreeing cases counted per group.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import boxfall as bf  # noqa: E402
import boxfall.array_api as xp_cpu  # noqa: E402
import boxfall.jax as bj  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax_cases import all_cases, compare, data  # noqa: E402

# A TPU's default passes float32 products through bfloat16; NumPy's are float32 throughout.
jax.config.update("jax_default_matmul_precision", "highest")

X64 = bj.X64


@pytest.fixture(scope="module")
def ns() -> Any:
    return bj.namespace()


def _run(ns: Any, case: Any) -> tuple[Any, Any]:
    arrays = data(X64)
    on_device = {k: ns.asarray(v) for k, v in arrays.items()}
    return case(ns, on_device), case(xp_cpu, arrays)


@pytest.mark.parametrize(
    ("group", "name", "case"), all_cases(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_case_agrees_with_numpy(ns, group, name, case):
    got, want = _run(ns, case)
    assert isinstance(got, bf.Tensor), type(got)
    assert got.device == "JAX:0"
    compare(got, want, X64)


def test_payload_is_a_jax_array_on_the_device(ns):
    x = ns.asarray(np.arange(3.0, dtype=np.float32))
    y = x * 2.0
    assert isinstance(y.payload, jax.Array)
    assert y.payload.devices() == {jax.devices()[0]}
    assert jnp.asarray(y) is y.payload


def test_asarray_of_a_jax_array_wraps_it_without_a_transfer(ns):
    a = jnp.arange(4, dtype=jnp.float32)
    before = bf.metrics.transfers()
    t = ns.asarray(a)
    assert t.payload is a
    assert bf.metrics.transfers() == before
    np.testing.assert_array_equal(np.asarray(t), np.arange(4, dtype=np.float32))


def test_hot_operators_run_as_jax_kernels_not_through_the_fallback(ns):
    x = ns.asarray(np.ones((3, 3), dtype=np.float32))
    bf.metrics.reset()
    z = xp_cpu.sum(xp_cpu.matmul(x + 1.0, x) * x, axis=0)
    assert isinstance(z.payload, jax.Array)
    fell_back = bf.metrics.counters()
    assert not any(k.startswith("array_api::") for k in fell_back), fell_back
    served = bf.coverage("JAX")
    assert served["array_api::matmul"] == "kernel"
    assert served["array_api::unique_values"] == "backend fallback"


def test_an_operator_without_a_jax_kernel_runs_through_the_cpu_fallback(ns):
    x = ns.asarray(np.array([3.0, 1.0, 2.0, 1.0], dtype=np.float32))
    bf.metrics.reset()
    got = xp_cpu.unique_values(x)  # its output's shape depends on the values
    np.testing.assert_array_equal(np.asarray(got), [1.0, 2.0, 3.0])
    assert got.device == "JAX:0"
    assert bf.metrics.counter_value("array_api::unique_values") == 1


def test_a_case_jax_refuses_raises_numpys_error(ns):
    x = ns.asarray(np.ones((4, 3), dtype=np.float32))
    with pytest.raises(ValueError):
        x @ x


def test_mixed_dtypes_follow_numpys_promotion(ns):
    i = ns.asarray(np.arange(3, dtype=np.int32))
    f = ns.asarray(np.ones(3, dtype=np.float32))
    got = i + f
    want = np.arange(3, dtype=np.int32) + np.ones(3, dtype=np.float32)
    compare(got, want, X64)


def test_the_device_dtypes_are_what_jax_holds(ns):
    info = ns.__array_namespace_info__()
    held = set(info.dtypes())
    defaults = info.default_dtypes()
    if X64:
        assert "float64" in held and "int64" in held
        assert np.dtype(defaults["real floating"]) == np.float64
    else:
        assert not {"float64", "int64", "uint64", "complex128"} & held
        assert np.dtype(defaults["real floating"]) == np.float32
        assert np.dtype(defaults["integral"]) == np.int32
    assert bj.X64 == bool(jax.config.jax_enable_x64)


def test_namespace_takes_a_jax_device_or_its_index():
    assert bj.namespace(jax.devices()[0]) is bj.namespace()
    assert bj.namespace(0) is bj.namespace()
    with pytest.raises(ValueError, match="no device of index"):
        bj.namespace(len(jax.devices()))
    with pytest.raises(TypeError):
        bj.namespace("JAX:0")


def test_to_cpu_waits_for_the_result(ns):
    x = ns.asarray(np.full(1000, 2.0, dtype=np.float32))
    y = xp_cpu.exp(x)
    np.testing.assert_allclose(
        np.asarray(y), np.exp(np.full(1000, 2.0, dtype=np.float32)), rtol=1e-6
    )


def test_importing_without_jax_says_how_to_install_it():
    code = (
        "import sys; sys.modules['jax'] = None\n"
        "try:\n    import boxfall.jax\n"
        "except ImportError as e:\n    print(e)\nelse:\n    print('imported')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert 'pip install ".[jax]"' in out and "imported" not in out


def test_an_in_place_kernel_puts_a_new_array_in_the_tensors_place(ns):
    x = ns.asarray(np.arange(4.0, dtype=np.float32)) * 1.0
    before = x.payload
    bf.metrics.reset()
    x += 1.0
    assert x.payload is not before and isinstance(x.payload, jax.Array)
    np.testing.assert_array_equal(np.asarray(x), np.arange(4.0) + 1.0)
    np.testing.assert_array_equal(np.asarray(before), np.arange(4.0))  # JAX's array unchanged
    assert bf.metrics.op_stats("array_api::add_.Scalar")["kernel_calls"] == 1
    assert bf.metrics.counter_value("array_api::add_.Scalar") == 0


def test_a_view_written_by_a_kernel_is_scattered_into_its_base_on_the_device(ns):
    x = ns.asarray(np.arange(12.0, dtype=np.float32).reshape(3, 4)) * 1.0
    bf.metrics.reset()
    v = x[1:, ::2]
    v *= 10.0
    want = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    want[1:, ::2] *= 10.0
    np.testing.assert_array_equal(np.asarray(x), want)
    assert bf.metrics.op_stats("array_api::multiply_.Scalar")["kernel_calls"] == 1
    assert bf.metrics.counters() == {}  # nothing fell back: no trip through the host


@pytest.mark.skipif(X64, reason="narrowing is JAX's rule without x64")
def test_a_64_bit_request_narrows_as_jax_does(ns):
    bf.metrics.reset()
    with pytest.warns(bf.NarrowingWarning, match="int64"):
        z = ns.zeros(3, dtype=ns.int64)
    assert np.dtype(z.dtype) == np.int32
    assert bf.metrics.op_stats("array_api::zeros")["narrowed"] == 1
    assert bj.backend.narrow


@pytest.mark.skipif(X64, reason="narrowing is JAX's rule without x64")
def test_a_loop_narrowing_one_operator_warns_once(ns):
    # scikit-learn's loops call asarray(a_jax_array, dtype=int64) again and again: narrowing
    # is warned once per operator and backend, as the warning says, not at every call.
    bf.metrics.reset()
    a, host = jnp.ones(3, dtype=jnp.int32), np.ones(3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # every warning issued is seen, none deduplicated
        for _ in range(5):
            assert np.dtype(ns.asarray(a, dtype=ns.int64).dtype) == np.int32
            ns.zeros(2, dtype=ns.int64)
            ns.asarray(host, dtype=ns.float64)
    narrowing = [str(w.message) for w in seen if issubclass(w.category, bf.NarrowingWarning)]
    # Each message starts with the operator it names: "'array_api::zeros' on backend ...".
    assert sorted(m.split("'")[1] for m in narrowing) == ["array_api::asarray", "array_api::zeros"]
    assert bf.metrics.op_stats("array_api::asarray")["narrowed"] == 10


def test_bfloat16_promotes_alike_in_the_jax_kernels_and_the_fallback(ns):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    host = np.array([1.0, 2.5, -3.0], dtype=ml_dtypes.bfloat16)
    b = ns.asarray(host)
    assert "bfloat16" in bj.backend.dtypes
    by_kernel = b * 2.0 + b  # JAX kernels
    by_fallback = xp_cpu.flip(b)  # no JAX kernel: the CPU fallback
    assert by_kernel.dtype == by_fallback.dtype == host.dtype
    np.testing.assert_array_equal(np.asarray(by_kernel), host * 2.0 + host)
    widened = b + ns.asarray(np.ones(3, dtype=np.float32))
    assert np.dtype(widened.dtype) == np.float32


def main() -> int:
    """Runs every case, prints how many agree per group, and returns 1 if any disagrees."""
    ns = bj.namespace()
    failed: list[str] = []
    counts: dict[str, list[int]] = {}
    for group, name, case in all_cases():
        tally = counts.setdefault(group, [0, 0])
        tally[1] += 1
        try:
            got, want = _run(ns, case)
            compare(got, want, X64)
        except Exception as e:  # noqa: BLE001 - a report of every case, whatever it raised
            failed.append(f"{group}/{name}: {type(e).__name__}: {str(e)[:200]}")
        else:
            tally[0] += 1
    print(f"boxfall.jax on {jax.devices()[0].platform} (jax {jax.__version__}, x64={X64}):")
    for group, (ok, total) in counts.items():
        print(f"  {group:16s} {ok:3d} of {total:3d} agree with NumPy")
    agree = sum(ok for ok, _ in counts.values())
    total = sum(t for _, t in counts.values())
    print(f"  {'all':16s} {agree:3d} of {total:3d}")
    for line in failed:
        print("  disagrees:", line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())


def test_view_layouts_are_decided_once_and_kept_within_a_bound(monkeypatch):
    """The view hook remembers how each layout is made (a lookup, not Python work, for a
    layout a loop takes again), and starts again past its bound rather than growing; every
    view's values are right either way."""
    from boxfall.jax import _hooks

    hooks = _hooks.JaxHooks(jax.devices())
    monkeypatch.setattr(_hooks, "_LAYOUTS_KEPT", 4)
    base = jnp.arange(12.0).reshape(3, 4)
    host = np.arange(12.0).reshape(3, 4)
    for row in range(3):
        got, shares = hooks.view(base, (4,), (1,), row * 4)
        assert not shares
        np.testing.assert_array_equal(np.asarray(got), host[row])
    got, _ = hooks.view(base, (4, 3), (1, 4), 0)  # the transpose: a permutation of axes
    np.testing.assert_array_equal(np.asarray(got), host.T)
    assert len(hooks._views) == 4
    got, _ = hooks.view(base, (2,), (2,), 1)  # a fifth layout: the remembered ones go
    np.testing.assert_array_equal(np.asarray(got), host.reshape(-1)[1:5:2])
    assert len(hooks._views) == 1
