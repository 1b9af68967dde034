"""Errors say what happened: a hook's or a CPU kernel's error reached through the fallback
names the operator, the backend and the hook or kernel (a Python exception keeps its type and
gets notes); NoKernelError says what the thread excluded and names keys by their names."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest
from boxfall import _boxfall


class Buf:
    def __init__(self, array):
        self.data = np.array(array, copy=True)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)


class Broken(Exception):
    pass


@pytest.fixture(scope="module")
def flaky(unique_name):
    """A backend whose hooks fail on demand: ``state["fail"]`` names the hook."""
    state = {"fail": None}

    def hook(name, fn):
        def run(*args):
            if state["fail"] == name:
                raise Broken(f"{name} broke")
            return fn(*args)

        return run

    def copy_from_cpu(buf, arr):
        buf.data = np.array(arr, copy=True)

    name = "Flaky"
    backend = bf.register_backend(
        name,
        replace=True,
        to_cpu=hook("to_cpu", lambda b: b.data.copy()),
        from_cpu=hook("from_cpu", Buf),
        copy_from_cpu=hook("copy_from_cpu", copy_from_cpu),
        lazy=False,  # from_cpu runs in the fallback, whose errors are checked here
    )
    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, name)
    yield backend, state
    fb.close()


@pytest.mark.parametrize("hook", ["to_cpu", "from_cpu", "copy_from_cpu"])
def test_a_hooks_error_names_the_operator_the_backend_and_the_hook(ns, lib, flaky, hook):
    backend, state = flaky
    lib.define("add_(Tensor(a!) self, Tensor other) -> Tensor(a!)")
    lib.define("neg(Tensor x) -> Tensor")

    def add_(self, other):
        self += other
        return self

    lib.impl("add_", add_, "CPU")
    lib.impl("neg", lambda x: -x, "CPU")
    ops = getattr(bf.ops, ns)
    x = backend.tensor(np.ones(2))
    state["fail"] = hook
    try:
        with pytest.raises(Broken) as info:
            if hook == "from_cpu":
                ops.neg(x)
            else:
                ops.add_(x, x)
    finally:
        state["fail"] = None
    notes = "\n".join(info.value.__notes__)
    assert f"'{ns}::" in notes, notes
    assert f"'{backend.name}'" in notes and f"'{hook}'" in notes, notes


def test_a_cpu_kernels_error_through_the_fallback_names_the_backend(ns, lib, flaky):
    backend, _ = flaky
    lib.define("bad(Tensor x) -> Tensor")

    def bad(x):
        raise Broken("no")

    lib.impl("bad", bad, "CPU")
    for x in (backend.tensor(np.ones(1)), bf.native.tensor(np.ones(1))):
        with pytest.raises(Broken) as info:
            getattr(bf.ops, ns).bad(x)
        notes = "\n".join(info.value.__notes__)
        assert f"'CPU' kernel of '{ns}::bad'" in notes, notes
        assert f"CPU fallback for '{x.backend}'" in notes, notes


def test_a_core_error_of_a_hook_names_all_three(ns, lib, unique_name):
    name = "NotArray"
    backend = bf.register_backend(
        name, replace=True, to_cpu=lambda b: 5, from_cpu=Buf, copy_from_cpu=lambda b, a: None
    )
    lib.define("neg(Tensor x) -> Tensor")
    lib.impl("neg", lambda x: -x, "CPU")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, name)
        with pytest.raises(bf.FallbackError) as info:
            getattr(bf.ops, ns).neg(backend.tensor(np.ones(1)))
    text = str(info.value)
    assert f"'{ns}::neg'" in text and f"'{name}'" in text and "to_cpu" in text, text


def test_no_kernel_error_says_the_key_was_excluded(ns, lib):
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x, "CPU")
    with bf.exclude_keys("CPU"), pytest.raises(bf.NoKernelError) as info:
        getattr(bf.ops, ns).f(np.ones(1))
    assert str(info.value) == (
        f"Could not run '{ns}::f' with arguments from the 'CPU' backend, which is excluded on "
        f"this thread (bf.exclude_keys: [CPU]). '{ns}::f' is only available for these "
        "backends: [CPU]."
    )


def test_no_kernel_error_names_an_unregistered_key_by_its_bit(ns, lib):
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x, "CPU")
    inc, exc = _boxfall.local_keys()
    _boxfall.set_local_keys(inc | (1 << 62), exc)
    try:
        with pytest.raises(bf.NoKernelError) as info:
            getattr(bf.ops, ns).f(np.ones(1))
    finally:
        _boxfall.set_local_keys(inc, exc)
    assert "'<unregistered key 62>'" in str(info.value)
    assert "'?'" not in str(info.value)
