"""The contract of a real device (``bf.register_backend``'s ``dtypes=`` and ``thread_safe=``,
and the check of ``from_cpu``'s payloads), on backends written in Python whose hooks record
what they were asked."""

from __future__ import annotations

import threading
import time
from typing import Any

import boxfall as bf
import boxfall.array_api as xp_cpu
import numpy as np
import pytest
from boxfall.testing import HostBuffer as Buffer
from paths import both

# One backend name for every test, registered again with replace=True by each: a process has
# few key slots, and the whole suite registers many backends.
NAME = "DevContract"


class Hooks:
    """Copy hooks that count their calls and the most of them that ran at once."""

    def __init__(self, pause: float = 0.0) -> None:
        self.calls: dict[str, int] = {"to_cpu": 0, "from_cpu": 0, "copy_from_cpu": 0}
        self.active = 0
        self.most = 0
        self.pause = pause
        self._count = threading.Lock()

    def _enter(self, hook: str) -> None:
        with self._count:
            self.calls[hook] += 1
            self.active += 1
            self.most = max(self.most, self.active)
        if self.pause:
            time.sleep(self.pause)  # lets another thread in, if nothing keeps it out

    def _leave(self) -> None:
        with self._count:
            self.active -= 1

    def to_cpu(self, b: Buffer) -> np.ndarray:
        self._enter("to_cpu")
        try:
            return b.data.copy()
        finally:
            self._leave()

    def from_cpu(self, a: np.ndarray) -> Buffer:
        self._enter("from_cpu")
        try:
            return Buffer(a)
        finally:
            self._leave()

    def copy_from_cpu(self, b: Buffer, a: np.ndarray) -> None:
        self._enter("copy_from_cpu")
        try:
            b.data = np.array(a, copy=True)
        finally:
            self._leave()

    def register(self, name: str, **kwargs: Any) -> bf.Backend:
        backend = bf.register_backend(
            name,
            to_cpu=self.to_cpu,
            from_cpu=self.from_cpu,
            copy_from_cpu=self.copy_from_cpu,
            replace=True,
            **kwargs,
        )
        return backend


@pytest.fixture
def f32():
    """A device holding float32, int64 and bool only, with the CPU fallback."""
    hooks = Hooks()
    backend = hooks.register(NAME, dtypes=["float32", np.int64, np.dtype("bool")])
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        yield backend, hooks


def test_dtypes_lists_what_the_device_holds(f32):
    backend, _ = f32
    assert sorted(backend.dtypes) == ["bool", "float32", "int64"]
    assert bf.get_backend(backend.name).dtypes == backend.dtypes
    assert len(bf.get_backend("Native").dtypes) == 13


def test_the_namespace_info_follows_dtypes(f32):
    backend, _ = f32
    info = xp_cpu.namespace(backend.name).__array_namespace_info__()
    assert set(info.dtypes()) == {"bool", "float32", "int64"}
    assert set(info.dtypes(kind="real floating")) == {"float32"}
    assert info.default_dtypes()["real floating"] == np.float32
    assert info.default_dtypes()["integral"] == np.int64
    # Asked of the CPU namespace about the device, and about the CPU.
    cpu_info = xp_cpu.__array_namespace_info__()
    assert set(cpu_info.dtypes(device=f"{backend.name}:0")) == {"bool", "float32", "int64"}
    assert cpu_info.default_dtypes()["real floating"] == np.float64
    assert len(cpu_info.dtypes()) == 13


def test_creation_without_a_dtype_gives_the_devices_default(f32):
    backend, _ = f32
    xp = xp_cpu.namespace(backend.name)
    for made in (
        xp.ones(3),
        xp.zeros((2,)),
        xp.empty(2),
        xp.eye(2),
        xp.linspace(0, 1, 3),
        xp.full(2, 0.5),
        xp.arange(0.0, 2.0),
        xp.asarray([1.0, 2.5]),
        xp_cpu.ones(2, device=f"{backend.name}:0"),
    ):
        assert made.dtype == np.float32
        assert made.device == f"{backend.name}:0"
    assert xp.asarray([1, 2]).dtype == np.int64
    assert xp.full(2, True).dtype == np.bool_
    np.testing.assert_array_equal(np.asarray(xp.linspace(0, 1, 3)), [0.0, 0.5, 1.0])


def test_a_from_cpu_taking_device_is_told_each_tensors_device_index():
    # A backend of several devices puts each payload on its own device: a from_cpu registered
    # with from_cpu_takes_device=True gets the index of the tensor's device; one without gets
    # the array alone.
    told: list[int] = []

    def from_cpu(array: np.ndarray, *, device: int) -> Buffer:
        told.append(device)
        return Buffer(array)

    backend = bf.register_backend(
        NAME,
        to_cpu=lambda b: b.data.copy(),
        from_cpu=from_cpu,
        copy_from_cpu=lambda b, a: setattr(b, "data", np.array(a, copy=True)),
        replace=True,
        from_cpu_takes_device=True,
    )
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        t = bf.get_backend(NAME).tensor(np.arange(3.0), 1)
        assert t.device == f"{NAME}:1" and told == [1]
        xp = xp_cpu.namespace(f"{NAME}:2")
        made = xp.add(xp.ones(3), 1.0)  # a creation and a CPU fallback result, on device 2
        assert isinstance(made.payload, Buffer)  # its payload made now: from_cpu told 2
        assert made.device == f"{NAME}:2" and told[-1] == 2 and set(told[1:]) == {2}
        np.testing.assert_array_equal(np.asarray(made), [2.0, 2.0, 2.0])

    plain: list[np.ndarray] = []
    hooks = Hooks()
    hooks.from_cpu = lambda a: plain.append(a) or Buffer(a)  # type: ignore[method-assign]
    backend = hooks.register(NAME)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        t = bf.get_backend(NAME).tensor(np.arange(3.0), 1)
        assert t.device == f"{NAME}:1" and len(plain) == 1


def test_creation_defaults_follow_the_backend_registered_again():
    # The creation functions keep the dtype and device they call an operator with, per asked
    # dtype, device and kind: registering the backend again with other dtypes forgets that.
    hooks = Hooks()
    for dtypes, real, integral in (
        (["float32", "int32", "bool"], np.float32, np.int32),
        (None, np.float64, np.int64),
        (["float32", "int64", "bool"], np.float32, np.int64),
    ):
        kwargs = {} if dtypes is None else {"dtypes": dtypes}
        backend = hooks.register(NAME, **kwargs)
        with bf.Library("_", "IMPL") as fb:
            fb.fallback(bf.cpu_fallback, backend.name)
            xp = xp_cpu.namespace(backend.name)
            for made in (xp.eye(2), xp.zeros(2), xp.full(2, 0.5), xp.arange(0.0, 2.0)):
                assert made.dtype == real
            assert xp.arange(3).dtype == integral
            assert xp.full(2, 1).dtype == integral
            np.testing.assert_array_equal(np.asarray(xp.arange(1, 7, 2)), [1, 3, 5])
            assert xp.eye(2, dtype=xp.float32).dtype == np.float32


def test_astype_follows_the_backend_registered_again():
    # astype keeps the name it calls its operator with per (device, dtype) where the device
    # holds the dtype: registering the backend again without that dtype forgets it, and the
    # same call is then refused before anything moves.
    hooks = Hooks()
    without_float64 = ["float32", "int32", "bool"]
    for dtypes, holds_float64 in ((None, True), (without_float64, False), (None, True)):
        kwargs = {} if dtypes is None else {"dtypes": dtypes}
        backend = hooks.register(NAME, **kwargs)
        with bf.Library("_", "IMPL") as fb:
            fb.fallback(bf.cpu_fallback, backend.name)
            xp = xp_cpu.namespace(backend.name)
            x = xp.asarray(np.array([1, 2], dtype=np.int32))
            for _ in range(2):  # the second call is the one a kept name serves
                if holds_float64:
                    got = xp.astype(x, xp_cpu.float64)
                    assert got.dtype == np.float64
                    np.testing.assert_array_equal(np.asarray(got), [1.0, 2.0])
                else:
                    before = dict(hooks.calls)
                    with pytest.raises(bf.DTypeError, match="float64"):
                        xp.astype(x, xp_cpu.float64)
                    assert hooks.calls == before  # refused before x's values moved
            assert xp.astype(x, xp_cpu.float32, copy=False).dtype == np.float32


def test_a_result_the_device_cannot_hold_is_a_dtype_error_before_it_moves(f32):
    backend, hooks = f32
    xp = xp_cpu.namespace(backend.name)
    x = xp.asarray(np.ones(3, dtype=np.float32))
    before = dict(hooks.calls)
    with pytest.raises(bf.DTypeError) as e:
        xp.astype(x, xp_cpu.float64)
    assert isinstance(e.value, TypeError) and isinstance(e.value, bf.BoxfallError)
    text = str(e.value)
    assert "float64" in text and "'array_api::astype'" in text and backend.name in text
    assert "float32" in text  # what the device holds
    assert hooks.calls["from_cpu"] == before["from_cpu"]  # nothing moved to the device
    with pytest.raises(bf.DTypeError):
        backend.tensor(np.ones(2))  # float64 data asked onto it by hand
    with pytest.raises(bf.DTypeError):
        xp.asarray(np.ones(2))  # a NumPy float64 array keeps its dtype, as the standard says


def test_dtypes_that_name_no_numeric_dtype_are_refused():
    # An extension dtype NumPy knows (float16, ml_dtypes.bfloat16) may be declared
    # (test_no_64bit_device.py); strings, objects and dates may not.
    with pytest.raises(TypeError, match="U4"):
        Hooks().register("DevBadDtypes", dtypes=["float32", "U4"])
    with pytest.raises(TypeError, match="datetime64"):
        Hooks().register("DevBadDtypes", dtypes=["float32", "datetime64[s]"])
    with pytest.raises(TypeError, match="no dtype"):
        Hooks().register("DevBadDtypes", dtypes=[])
    # The name stayed free.
    with pytest.raises(bf.UnknownKeyError):
        bf.get_backend("DevBadDtypes")


@pytest.fixture
def scalar_as_vector():
    """A backend whose from_cpu gives a 0-d result a (1,)-shaped payload."""

    def from_cpu(a: np.ndarray) -> Buffer:
        return Buffer(a.reshape(-1) if a.ndim == 0 else a)

    backend = bf.register_backend(
        NAME,
        to_cpu=lambda b: b.data.copy(),
        from_cpu=from_cpu,
        copy_from_cpu=lambda b, a: setattr(b, "data", np.array(a)),
        replace=True,
        lazy=False,  # from_cpu in the fallback (a lazy result is checked when it moves)
    )
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        yield backend


def test_a_payload_of_the_wrong_shape_is_a_kernel_error(scalar_as_vector):
    backend = scalar_as_vector
    x = backend.tensor(np.arange(3.0))
    bf.metrics.reset()
    with pytest.raises(bf.KernelError) as e:
        xp_cpu.sum(x)
    text = str(e.value)
    assert "'from_cpu'" in text and "'array_api::sum'" in text and backend.name in text
    assert "shape (1,)" in text and "shape ()" in text
    assert bf.metrics.op_stats("array_api::sum")["failures"] == 1
    # The same hook through Backend.tensor.
    with pytest.raises(bf.KernelError, match="'from_cpu'"):
        backend.tensor(np.float64(2.0))
    # Results of the right shape pass.
    np.testing.assert_array_equal(np.asarray(xp_cpu.abs(x)), np.arange(3.0))


def test_an_in_place_op_with_a_wrong_payload_writes_nothing_back(scalar_as_vector, lib, ns):
    backend = scalar_as_vector
    # Writes its argument and returns a fresh 0-d total: the total's payload is refused before
    # the argument is written back.
    lib.define("bump_total(Tensor(a!) x) -> (Tensor(a!), Tensor)")

    def bump_total(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x += 1.0
        return x, np.asarray(x.sum())

    lib.impl("bump_total", bump_total, "CPU")
    x = backend.tensor(np.arange(3.0))
    with pytest.raises(bf.KernelError, match="'from_cpu'"):
        getattr(bf.ops, ns).bump_total(x)
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0))


def _overlap(fn: Any, threads: int = 4) -> None:
    """``fn()`` on ``threads`` threads at once, re-raising the first error."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run() -> None:
        try:
            start.wait()
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def test_a_backend_not_thread_safe_runs_its_hooks_and_kernels_one_at_a_time():
    hooks = Hooks(pause=0.002)
    # Eager: every call runs the hooks (residency would read x once).
    backend = hooks.register(NAME, thread_safe=False, lazy=False)
    assert backend.thread_safe is False
    kernel_state = {"active": 0, "most": 0}
    guard = threading.Lock()

    def negative(x: Any) -> Any:
        with guard:
            kernel_state["active"] += 1
            kernel_state["most"] = max(kernel_state["most"], kernel_state["active"])
        time.sleep(0.002)
        # A kernel that hands the call to the fallback takes the lock again on its own thread.
        out = bf.call_fallback(bf.cpu_fallback, bf.ops.array_api.negative.default, x)
        with guard:
            kernel_state["active"] -= 1
        return out

    with bf.Library("_", "IMPL") as fb, bf.Library("array_api", "IMPL") as lib:
        fb.fallback(bf.cpu_fallback, backend.name)
        lib.impl("negative", negative, backend.name)
        x = backend.tensor(np.arange(4.0))

        def work() -> None:
            for _ in range(5):
                y = xp_cpu.negative(x)
                np.testing.assert_array_equal(y.numpy(), -np.arange(4.0))
                xp_cpu.abs(x)

        _overlap(work)
    assert hooks.most == 1
    assert kernel_state["most"] == 1
    assert hooks.calls["to_cpu"] >= 40


def test_a_thread_safe_backend_runs_its_hooks_at_once():
    # The contrast: without thread_safe=False nothing keeps two threads out of a hook (the
    # hook waits until two threads are in it at once, which would never happen one at a time).
    both_in = threading.Barrier(2, timeout=10)

    def to_cpu(b: Buffer) -> np.ndarray:
        both_in.wait()
        return b.data.copy()

    backend = bf.register_backend(
        NAME,
        to_cpu=to_cpu,
        from_cpu=Buffer,
        copy_from_cpu=lambda b, a: setattr(b, "data", np.array(a)),
        replace=True,
    )
    assert backend.thread_safe is True
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        x = backend.tensor(np.arange(3.0))
        _overlap(lambda: xp_cpu.abs(x), threads=2)


# ------------------------------------------------------------------------------ metrics


class _WithHooks:
    """A ``bf.Backend`` and the :class:`Hooks` it was registered with (``hooks``)."""

    def __init__(self, backend: bf.Backend, hooks: Hooks) -> None:
        self._backend = backend
        self.hooks = hooks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


@pytest.fixture
def plain():
    """A thread-safe backend with every dtype and the CPU fallback."""
    hooks = Hooks()
    backend = hooks.register(NAME)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        yield _WithHooks(backend, hooks)


def test_a_failed_fallback_keeps_its_last_exception(plain, lib, ns):
    lib.define("row(Tensor x, int i) -> Tensor")

    def row(x: np.ndarray, i: int) -> np.ndarray:
        if i >= len(x):
            raise IndexError(f"row {i} of {len(x)}")
        return x[i : i + 1].copy()

    lib.impl("row", row, "CPU")
    op = getattr(bf.ops, ns).row
    x = plain.tensor(np.arange(3.0))
    bf.metrics.reset()
    op(x, 1)
    assert bf.metrics.op_stats(f"{ns}::row")["last_failure"] is None
    with pytest.raises(IndexError):
        op(x, 5)
    stats = bf.metrics.op_stats(f"{ns}::row")
    assert stats["failures"] == 1
    assert stats["last_failure"]["type"] == "IndexError"
    assert stats["last_failure"]["message"].startswith("row 5 of 3")
    # A refusal is a failure too; the last one is kept.
    bf.set_fallback_policy("error")
    with pytest.raises(bf.FallbackError):
        op(x, 0)
    last = bf.metrics.op_stats(f"{ns}::row")["last_failure"]
    assert last["type"] == "FallbackError" and f"{ns}::row" in last["message"]
    bf.set_fallback_policy("allow")
    bf.metrics.reset()
    assert bf.metrics.op_stats(f"{ns}::row")["last_failure"] is None


def test_the_last_failure_is_kept_per_backend_as_the_figures_are(plain, lib, ns):
    lib.define("row(Tensor x, int i) -> Tensor")

    def row(x: np.ndarray, i: int) -> np.ndarray:
        if i >= len(x):
            raise IndexError(f"row {i} of {len(x)}")
        return x[i : i + 1].copy()

    lib.impl("row", row, "CPU")
    op = getattr(bf.ops, ns).row
    other = Hooks().register(f"{NAME}Other")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, other.name)
        x, y = plain.tensor(np.arange(3.0)), other.tensor(np.arange(5.0))
        bf.metrics.reset()
        with pytest.raises(IndexError):
            op(x, 4)
        op(y, 4)  # the same call goes well on the other backend
        stats = bf.metrics.op_stats(f"{ns}::row")
        mine, theirs = stats["backends"][plain.name], stats["backends"][other.name]
        assert (mine["failures"], theirs["failures"]) == (1, 0)
        assert mine["last_failure"] == stats["last_failure"]
        assert mine["last_failure"]["message"].startswith("row 4 of 3")
        assert theirs["last_failure"] is None
        # The operator's is the latest of any backend's; each backend keeps its own.
        with pytest.raises(IndexError):
            op(y, 9)
        stats = bf.metrics.op_stats(f"{ns}::row")
        assert stats["last_failure"]["message"].startswith("row 9 of 5")
        assert stats["backends"][other.name]["last_failure"] == stats["last_failure"]
        assert stats["backends"][plain.name]["last_failure"]["message"].startswith("row 4 of 3")
        # The rows and the CSV keep to the figures.
        assert all("last_failure" not in r for r in bf.metrics.rows())
        bf.metrics.reset()
        op(x, 0)
        assert bf.metrics.op_stats(f"{ns}::row")["backends"][plain.name]["last_failure"] is None


def test_backend_kernels_are_counted_and_timed_under_profile(plain, lib, ns):
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")

    def twice_on_device(x: Any) -> Any:
        return plain.tensor(x.payload.data * 2)

    lib.impl("twice", twice_on_device, plain.name)
    op = getattr(bf.ops, ns).twice
    x = plain.tensor(np.arange(3.0))
    bf.metrics.reset()
    for _ in range(3):
        np.testing.assert_array_equal(op(x).numpy(), np.arange(3.0) * 2)
    stats = bf.metrics.op_stats(f"{ns}::twice")
    assert (stats["kernel_calls"], stats["kernel_call_ns"], stats["fallbacks"]) == (3, 0, 0)
    with bf.metrics.profile():
        with bf.metrics.profile():  # nested: timing goes on until the outer one ends
            op(x)
        op(x)
    op(x)  # not timed
    stats = bf.metrics.op_stats(f"{ns}::twice")
    mine = stats["backends"][plain.name]
    assert mine["kernel_calls"] == stats["kernel_calls"] == 6
    assert mine["kernel_call_ns"] > 0
    # Only the fallback's figures count as fallbacks, and the report sets the kernel apart.
    assert f"{ns}::twice" not in bf.metrics.counters()
    report = bf.metrics.report(backend=plain.name)
    assert f"{plain.name}'s {ns}::twice: 6 calls" in report
    assert "implement natively first" not in report  # nothing fell back


def test_a_backend_kernel_is_counted_once_on_every_path_a_call_takes(plain, ns):
    # Counted where the call is routed: the bindings' own call, the core's boxed call, and the
    # general path (the core routes, the kernel's boxed entry runs the function), each once.
    with bf.Library(ns, "DEF") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        with bf.Library(ns, "IMPL") as impl:
            impl.impl("twice", lambda x: plain.tensor(x.payload.data * 2), plain.name)
            op = getattr(bf.ops, ns).twice
            x = plain.tensor(np.arange(3.0))
            bf.metrics.reset()
            for out in both(lambda: op(x)):
                np.testing.assert_array_equal(out.numpy(), np.arange(3.0) * 2)
            op.default.call_boxed([x])
            op(x)
            stats = bf.metrics.op_stats(f"{ns}::twice")
    mine = stats["backends"][plain.name]
    assert (stats["kernel_calls"], mine["kernel_calls"], stats["fallbacks"]) == (4, 4, 0)


def test_x_plus_y_on_native_counts_natives_own_add_kernel():
    x, y = bf.native.tensor(np.arange(3.0)), bf.native.tensor(np.ones(3))
    bf.metrics.reset()
    np.testing.assert_array_equal((x + y).numpy(), np.arange(3.0) + 1)
    x + y
    stats = bf.metrics.op_stats("array_api::add")
    assert (stats["kernel_calls"], stats["fallbacks"]) == (2, 0)
    assert stats["backends"]["Native"]["kernel_calls"] == 2


def test_transfers_the_user_asked_for_are_counted_apart_from_the_fallback(plain):
    xp = xp_cpu.namespace(plain.name)
    bf.metrics.reset()
    t = plain.tensor(np.arange(4.0))  # 32 bytes to the device
    made = xp.asarray([1.0, 2.0])  # host data: 16 bytes, not a fallback of asarray
    assert made.device == f"{plain.name}:0"
    np.testing.assert_array_equal(t.numpy(), np.arange(4.0))  # 32 bytes to the host
    np.asarray(made)  # 16 more
    # The sum falls back and its result stays on the host (residency): float() reads it there.
    assert float(xp.sum(made)) == 3.0
    moved = bf.metrics.transfers()[plain.name]
    assert moved == {
        "to_host": 2,
        "bytes_to_host": 48,
        "to_device": 2,
        "bytes_to_device": 48,
        "materialized": 0,
        "bytes_materialized": 0,
    }
    counted = bf.metrics.counters()
    assert "array_api::asarray" not in counted and counted["array_api::sum"] == 1
    assert "array_api::asarray" not in bf.metrics.report()
    bf.metrics.reset()
    assert plain.name not in bf.metrics.transfers()
    # Native lends its memory: reading it is no transfer.
    np.asarray(bf.native.tensor(np.ones(3)).numpy())
    assert "Native" not in bf.metrics.transfers()


READS = {
    "numpy()": lambda t: t.numpy(),
    "np.asarray": np.asarray,
    "np.array": np.array,
    "np.asarray(dtype=)": lambda t: np.asarray(t, dtype=np.float32),
    "__array__": lambda t: t.__array__(),
    "np.from_dlpack": np.from_dlpack,
    "__dlpack__": lambda t: t.__dlpack__(),
    "to_device('cpu')": lambda t: t.to_device("cpu"),
    "asarray(device='cpu')": lambda t: xp_cpu.asarray(t, device="cpu"),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_each_read_the_user_asks_for_is_one_transfer_with_its_bytes(plain, read):
    hooks = plain.hooks
    t = plain.tensor(np.arange(4.0))
    bf.metrics.reset()
    before = dict(hooks.calls)
    READS[read](t)
    assert bf.metrics.transfers()[plain.name] == {
        "to_host": 1,
        "bytes_to_host": 32,
        "to_device": 0,
        "bytes_to_device": 0,
        "materialized": 0,
        "bytes_materialized": 0,
    }
    assert hooks.calls["to_cpu"] == before["to_cpu"] + 1  # the one transfer counted
    assert bf.metrics.counters() == {}  # and no fallback


@pytest.mark.parametrize("read", sorted(READS))
def test_a_read_of_values_already_on_the_host_is_no_transfer(plain, read):
    # The fallback's result stays on the host (residency), so the user's read of it crosses
    # nothing: transfers() counts only what crossed, and no hook runs.
    hooks = plain.hooks
    t = xp_cpu.namespace(plain.name).add(plain.tensor(np.arange(4.0)), 1.0)
    assert t.residency == "host"
    bf.metrics.reset()
    before = dict(hooks.calls)
    got = READS[read](t)
    if read != "__dlpack__":  # a capsule, not an array
        np.testing.assert_array_equal(np.asarray(got), np.arange(4.0) + 1.0)
    assert plain.name not in bf.metrics.transfers()
    assert hooks.calls == before


def test_a_scalar_read_is_one_transfer_of_its_bytes(plain):
    t = plain.tensor(np.array(2.5))
    for convert, value in ((float, 2.5), (bool, True), (int, 2)):
        bf.metrics.reset()
        assert convert(t) == value
        moved = bf.metrics.transfers()[plain.name]
        assert (moved["to_host"], moved["bytes_to_host"], moved["to_device"]) == (1, 8, 0)


PUTS = {
    "Backend.tensor": lambda b, xp: b.tensor(np.ones(3)),
    "asarray(ndarray)": lambda b, xp: xp.asarray(np.ones(3)),
    "asarray(list)": lambda b, xp: xp.asarray([1.0, 2.0, 3.0]),
    "asarray(ndarray, dtype=)": lambda b, xp: xp.asarray(np.ones(6, np.float32), dtype="float32"),
    "asarray(device=)": lambda b, xp: xp_cpu.asarray(np.ones(3), device=b.name),
    "from_dlpack(ndarray)": lambda b, xp: xp.from_dlpack(np.ones(3)),
}


@pytest.mark.parametrize("put", sorted(PUTS))
def test_each_put_of_host_data_the_user_asks_for_is_one_transfer_with_its_bytes(plain, put):
    hooks = plain.hooks
    xp = xp_cpu.namespace(plain.name)
    bf.metrics.reset()
    before = dict(hooks.calls)
    t = PUTS[put](plain, xp)
    assert t.device == f"{plain.name}:0"
    assert bf.metrics.transfers()[plain.name] == {
        "to_host": 0,
        "bytes_to_host": 0,
        "to_device": 1,
        "bytes_to_device": 24,
        "materialized": 0,
        "bytes_materialized": 0,
    }
    assert hooks.calls["from_cpu"] == before["from_cpu"] + 1
    assert bf.metrics.counters() == {}  # not a fallback of asarray or from_dlpack


# ---------------------------------------------------------------- Native under threads


def test_native_in_place_writes_from_threads_lose_no_update():
    # Each `x += 1.0` reads x, adds on a copy and writes back; a write-back that finds x
    # written by another thread since its read is redone on the new values, so every update
    # stays, as NumPy's in-place ufunc on host memory keeps them.
    nx = xp_cpu.namespace("Native")
    x = nx.zeros(1000)
    y = nx.ones(1000)

    def work() -> None:
        for _ in range(200):
            x.__iadd__(1.0)
            y.__imul__(1.0)  # a second tensor written at the same time stays right too

    _overlap(work)
    np.testing.assert_array_equal(np.asarray(x), np.full(1000, 800.0))
    np.testing.assert_array_equal(np.asarray(y), np.ones(1000))


def test_in_place_writes_on_a_backend_not_thread_safe_lose_no_update():
    # One fallback call of an in-place operator reads the tensor (`to_cpu`), adds on the CPU
    # and writes back (`copy_from_cpu`): the backend's lock is held across the whole call, so
    # another thread's call on the same backend cannot read between this one's read and its
    # write-back (the hooks pause, to let another thread in if anything did).
    hooks = Hooks(pause=0.0005)
    backend = hooks.register(NAME, thread_safe=False)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        x = backend.tensor(np.zeros(100))

        def work() -> None:
            for _ in range(25):
                x.__iadd__(1.0)

        _overlap(work)
        np.testing.assert_array_equal(x.numpy(), np.full(100, 100.0))
    assert hooks.most == 1
