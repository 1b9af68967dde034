"""Shared fixtures of the pytest suite of boxfall's Python face.

The dispatcher is process-global, so every test defines its operators in a namespace of its
own (the ``ns`` and ``lib`` fixtures) and every module registers backends and keys under names
of its own (the ``unique_name`` and ``backend_factory`` fixtures): a backend or key cannot be
registered twice nor removed. Helpers are handed out as fixtures, so the suite works under any
pytest import mode.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

try:
    import boxfall as bf
    import numpy as np
    from boxfall.testing import HostBuffer
except ImportError:  # not built: only modules that read the sources (NEEDS_EXTENSION = False) run
    bf = None

# scipy reads SCIPY_ARRAY_API once, at import, and scikit-learn's array API dispatch needs it
# (test_sklearn_clients.py): set here, before any test module can import either.
os.environ.setdefault("SCIPY_ARRAY_API", "1")


def unique(prefix: str = "t") -> str:
    """A fresh identifier-like name, ``prefix`` followed by 12 hex digits."""
    return f"{prefix}{uuid.uuid4().hex[:12]}"


# The payload of the test backends: device memory simulated by a private NumPy array.
DeviceBuffer = HostBuffer if bf is not None else None


def _from_cpu(array: np.ndarray) -> DeviceBuffer:
    return DeviceBuffer(array)


def _to_cpu_copy(buffer: DeviceBuffer) -> np.ndarray:
    return buffer.data.copy()


def _to_cpu_shared(buffer: DeviceBuffer) -> np.ndarray:
    return buffer.data


def _copy_from_cpu(buffer: DeviceBuffer, array: np.ndarray) -> None:
    array = np.asarray(array)
    if array.shape == buffer.data.shape:
        buffer.data[...] = array
    else:
        buffer.data = np.array(array, copy=True)


@dataclass(frozen=True)
class Backend:
    """A registered test backend: its key name and the object ``bf.register_backend`` returned."""

    name: str
    handle: Any
    payload_type: type = DeviceBuffer

    def tensor(self, array: Any, **kwargs: Any) -> bf.Tensor:
        """``handle.tensor(np.asarray(array), **kwargs)``."""
        return self.handle.tensor(np.asarray(array), **kwargs)

    @property
    def device(self) -> str:
        """The device string of index 0, ``"<name>:0"``."""
        return f"{self.name}:0"


def make_backend(
    prefix: str = "Accel", *, shares_memory: bool = False, lazy: bool = True
) -> Backend:
    """Register a Python backend of :class:`DeviceBuffer` payloads named after ``prefix`` (the
    same name again replaces its hooks and keeps its key). Tests whose backend lives no longer
    than one test share the prefix ``"Scratch"``: the backend key slots (44 a process) are few.

    With ``shares_memory`` its ``to_cpu`` returns the payload's own array (and says so);
    ``lazy=False`` moves every read and result at once (no residency).
    """
    # One name a prefix, registered again with replace=True: a process has 61 key slots for
    # backends and functionality keys, and a run of the whole suite would use them up.
    name = f"{prefix}{'Shared' if shares_memory else ''}"
    kwargs = {"shares_memory": True} if shares_memory else {}
    handle = bf.register_backend(
        name,
        to_cpu=_to_cpu_shared if shares_memory else _to_cpu_copy,
        from_cpu=_from_cpu,
        copy_from_cpu=_copy_from_cpu,
        replace=True,
        lazy=lazy,
        **kwargs,
    )
    return Backend(name, handle)


class CountingHooks:
    """Copy hooks of :class:`DeviceBuffer` payloads that count their calls and the bytes they
    moved, for the backend ``name``. ``fail_from_cpu`` makes ``from_cpu`` raise,
    ``wrong_shape`` makes it return a payload of another shape than its array."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = {"to_cpu": 0, "from_cpu": 0, "copy_from_cpu": 0}
        self.bytes = {"to_cpu": 0, "from_cpu": 0, "copy_from_cpu": 0}
        self.fail_from_cpu = False
        self.wrong_shape = False

    def to_cpu(self, b: DeviceBuffer) -> np.ndarray:
        self.calls["to_cpu"] += 1
        self.bytes["to_cpu"] += b.data.nbytes
        return b.data.copy()

    def from_cpu(self, a: np.ndarray) -> DeviceBuffer:
        self.calls["from_cpu"] += 1
        self.bytes["from_cpu"] += a.nbytes
        if self.fail_from_cpu:
            raise RuntimeError("the device is full")
        if self.wrong_shape:
            return DeviceBuffer(np.reshape(a, (1,) + a.shape))
        return DeviceBuffer(a)

    def copy_from_cpu(self, b: DeviceBuffer, a: np.ndarray) -> None:
        self.calls["copy_from_cpu"] += 1
        self.bytes["copy_from_cpu"] += np.asarray(a).nbytes
        b.data = np.array(a, copy=True)

    def register(self, **kwargs: Any) -> Any:
        """Registers the hooks as the backend ``name`` (again: ``replace=True`` keeps its key
        slot), with ``kwargs`` for ``bf.register_backend``; returns its ``bf.Backend``."""
        return bf.register_backend(
            self.name,
            to_cpu=self.to_cpu,
            from_cpu=self.from_cpu,
            copy_from_cpu=self.copy_from_cpu,
            replace=True,
            **kwargs,
        )

    def total(self) -> int:
        """Every hook call so far."""
        return sum(self.calls.values())


@contextlib.contextmanager
def counting_device(name: str, **kwargs: Any) -> Iterator[tuple[Any, CountingHooks, Any]]:
    """The backend ``name`` of fresh :class:`CountingHooks` (``kwargs`` for
    ``bf.register_backend``: ``lazy=False``, ``dtypes=``) with the CPU fallback for every
    operator while the block runs and the metrics reset: its ``bf.Backend``, the hooks and its
    ``boxfall.array_api`` namespace."""
    import boxfall.array_api as xp

    hooks = CountingHooks(name)
    backend = hooks.register(**kwargs)
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        bf.metrics.reset()
        yield backend, hooks, xp.namespace(backend.name)


@pytest.fixture
def counting_dev(request):
    """:func:`counting_device` of the test module's backend name ``COUNTING_BACKEND``, lazy
    (the default): ``(backend, hooks, namespace)``."""
    with counting_device(request.module.COUNTING_BACKEND) as device:
        yield device


@pytest.fixture
def counting_eager(request):
    """As ``counting_dev``, registered with ``lazy=False``."""
    with counting_device(request.module.COUNTING_BACKEND, lazy=False) as device:
        yield device


@pytest.fixture(scope="session")
def counting_hooks():
    """:class:`CountingHooks`, as a fixture: ``counting_hooks(name).register(...)``."""
    return CountingHooks


@pytest.fixture(autouse=True)
def _allow_fallbacks(request):
    """Each test starts and ends with the policy "allow", whatever BOXFALL_FALLBACK says."""
    if bf is None:
        if getattr(request.module, "NEEDS_EXTENSION", True):
            pytest.fail("boxfall is not importable: build it first (maturin develop)")
        yield
        return
    bf.set_fallback_policy("allow")
    yield
    bf.set_fallback_policy("allow")


@pytest.fixture
def ns() -> str:
    """A namespace no other test uses."""
    return unique("t")


@pytest.fixture
def lib(ns: str):
    """A "DEF" library of the test's own namespace, closed after the test."""
    with bf.Library(ns, "DEF") as library:
        yield library


@pytest.fixture(scope="session")
def unique_name():
    """:func:`unique`, as a fixture: ``unique_name("Trace")`` -> ``"Trace3f9c..."``."""
    return unique


@pytest.fixture(scope="session")
def backend_factory():
    """:func:`make_backend`, as a fixture, for module-scoped backend fixtures."""
    return make_backend


@pytest.fixture(params=[True, False], ids=["fast", "general"])
def paths(request):
    """The test runs once on the fast path and once on the general path."""
    before = bf._boxfall.set_fast_path(request.param)
    yield request.param
    bf._boxfall.set_fast_path(before)


@pytest.fixture
def scratch_accel():
    """A Python backend of this test alone (the shared name ``"Scratch"``, registered again)
    with the CPU fallback for every operator."""
    backend = make_backend("Scratch")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        yield backend


@pytest.fixture(scope="module")
def accel():
    """A Python backend (DeviceBuffer payloads, three copy hooks) with the CPU fallback for
    every operator, for the module: one key slot for every module that uses it."""
    backend = make_backend("FbAccel")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, backend.name)
        yield backend


@pytest.fixture(scope="module")
def bare_accel():
    """A Python backend (DeviceBuffer payloads, three copy hooks) with no fallback, for the
    module: an operator without a kernel of its own there cannot run on it."""
    return make_backend("Accel")


@pytest.fixture(params=["cpu", "Native", "accel"])
def any_xp(request, accel):
    """``boxfall.array_api``'s namespace on each kind of device: ``xp`` itself (the CPU, NumPy
    arrays), Native's, and that of ``accel`` (the Python backend, its CPU fallback)."""
    import boxfall.array_api as xp

    return xp.namespace(accel.device if request.param == "accel" else request.param)


@pytest.fixture(params=["Native", "accel"])
def device_xp(request, accel):
    """As ``any_xp``, on the devices only (Native's and ``accel``'s namespaces), where every
    array is a ``bf.Tensor``."""
    import boxfall.array_api as xp

    return xp.namespace(accel.device if request.param == "accel" else request.param)
