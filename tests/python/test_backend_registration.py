"""register_backend checks its hooks when the backend is registered: a hook that is not
callable is a TypeError naming the hook and the backend, and the refused backend is not
registered (its name stays free)."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest


def _hooks(**overrides):
    hooks = {
        "to_cpu": lambda p: p.copy(),
        "from_cpu": lambda a: a.copy(),
        "copy_from_cpu": lambda p, a: p.__setitem__(..., a),
    }
    hooks.update(overrides)
    return hooks


@pytest.mark.parametrize("hook", ["to_cpu", "from_cpu", "copy_from_cpu", "to_cpu_many"])
def test_a_hook_that_is_not_callable_is_refused_at_registration(hook):
    # One name for every case (a process has few backend key slots): the first case finds it
    # free, the others registered by the case before.
    name = "BadHook"
    known = name in bf.dispatch_keys()
    with pytest.raises(TypeError) as info:
        bf.register_backend(name, **_hooks(**{hook: 5}), replace=True)
    message = str(info.value)
    assert f"'{hook}'" in message and name in message and "int" in message, message
    # Nothing was registered: the key is as known as it was before.
    assert (name in bf.dispatch_keys()) == known
    backend = bf.register_backend(name, **_hooks(), replace=True)
    assert backend.name == name
    np.testing.assert_array_equal(backend.tensor(np.arange(3.0)).numpy(), np.arange(3.0))


# The backends below live one test: they share the name "Scratch" (see conftest's make_backend).


def test_to_cpu_many_may_be_left_out_or_none():
    left_out = bf.register_backend("Scratch", **_hooks(), replace=True)
    assert left_out.tensor(np.arange(2.0)).numpy().tolist() == [0.0, 1.0]
    none = bf.register_backend("Scratch", **_hooks(to_cpu_many=None), replace=True)
    assert none.tensor(np.arange(2.0)).numpy().tolist() == [0.0, 1.0]


def test_a_callable_object_is_a_hook():
    calls = []

    class ToCpu:
        def __call__(self, payload):
            calls.append(payload.shape)
            return payload.copy()

    backend = bf.register_backend("Scratch", **_hooks(to_cpu=ToCpu()), replace=True)
    assert backend.tensor(np.arange(3.0)).numpy().tolist() == [0.0, 1.0, 2.0]
    assert calls == [(3,)]


def test_replace_gives_a_backend_new_hooks_and_keeps_its_key():
    calls = []

    def to_cpu(p):
        calls.append("new")
        return np.asarray(p)

    first = bf.register_backend(
        "Replaced", to_cpu=np.asarray, from_cpu=np.array, copy_from_cpu=np.copyto, replace=True
    )
    keys_before = bf.dispatch_keys()
    again = bf.register_backend(
        "Replaced", to_cpu=to_cpu, from_cpu=np.array, copy_from_cpu=np.copyto, replace=True
    )
    assert bf.dispatch_keys() == keys_before, "no second key"
    t = again.tensor(np.arange(3.0))
    assert t.device == first.tensor(np.ones(1)).device == "Replaced:0"
    assert np.array_equal(t.numpy(), np.arange(3.0)) and calls == ["new"]
    with pytest.raises(bf.RegistrationError):
        bf.register_backend("Replaced", to_cpu=to_cpu, from_cpu=np.array, copy_from_cpu=np.copyto)
    with pytest.raises(bf.RegistrationError, match="cannot be replaced"):
        bf.register_backend(
            "Native", to_cpu=to_cpu, from_cpu=np.array, copy_from_cpu=np.copyto, replace=True
        )
