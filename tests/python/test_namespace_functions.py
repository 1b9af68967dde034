"""The namespace's functions that hand a call to their operator from Rust
(``NamespaceFunction``, of the binary or the operator route): the calls they take directly
reach the operator they name, every other call reaches the Python function they wrap, and they
describe themselves as that function does."""

from __future__ import annotations

import inspect

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall import _boxfall


class Recorder:
    """A callable that records which role served a call and returns that role's name."""

    def __init__(self, role: str, calls: list[str]) -> None:
        self.role, self.calls = role, calls

    def __call__(self, *args: object, **kwargs: object) -> str:
        self.calls.append(self.role)
        return self.role


def general(x1: object, x2: object, /) -> str:
    """The general path's documentation."""
    return "general"


@pytest.fixture
def binary() -> tuple[_boxfall.NamespaceFunction, list[str]]:
    calls: list[str] = []
    f = _boxfall.binary_function(
        Recorder("both", calls), Recorder("right", calls), Recorder("left", calls), general
    )
    return f, calls


@pytest.mark.parametrize(
    ("x1", "x2", "role"),
    [
        (np.ones(2), np.ones(2), "both"),
        (np.ones(2), 2.0, "right"),
        (np.ones(2), 3, "right"),
        (np.ones(2), True, "right"),
        (4.5, np.ones(2), "left"),
        # A NumPy scalar, a complex, an int wider than int64, a subclass of ndarray and a list
        # are the general function's: it converts or refuses them.
        (np.float64(1.0), np.ones(2), "general"),
        (np.ones(2), 1j, "general"),
        (np.ones(2), 2**70, "general"),
        (np.ones(2).view(np.matrix), np.ones(2), "general"),
        ([1.0], np.ones(2), "general"),
    ],
)
def test_a_binary_function_routes_each_kind_of_call(binary, x1, x2, role):
    f, _ = binary
    assert f(x1, x2) == role


def test_a_binary_function_takes_keywords_and_other_arities_generally(binary):
    f, calls = binary
    with pytest.raises(TypeError):
        f(np.ones(2), x2=np.ones(2))  # `general` takes positional arguments only
    with pytest.raises(TypeError):
        f(np.ones(2))
    assert calls == []


def test_a_binary_function_describes_itself_as_its_python_function(binary):
    f, _ = binary
    assert f.__name__ == "general"
    assert f.__doc__ == general.__doc__
    assert f.__module__ == general.__module__
    assert f.__wrapped__ is general
    assert inspect.signature(f) == inspect.signature(general)


def test_an_operator_function_passes_a_dtype_to_its_python_function():
    calls: list[str] = []

    def sum_like(x: object, /, *, axis: object = None, dtype: object = None) -> str:
        return "general"

    f = _boxfall.operator_function(Recorder("op", calls), sum_like, None)
    g = _boxfall.operator_function(Recorder("op", calls), sum_like, 1)
    assert f(np.ones(2), axis=0) == "op"
    assert g(np.ones(2), axis=0) == "op"
    assert g(np.ones(2), dtype=None) == "op"
    assert g(np.ones(2), dtype="float32") == "general"
    assert g(np.float64(1.0)) == "general"  # a NumPy scalar becomes a 0-d array there
    with pytest.raises(TypeError, match="sum_like"):
        g()  # no array first: the Python function's own error
    assert calls == ["op", "op", "op"]


def packed(f: object, *args: object, **kwargs: object) -> object:
    """The call as C code makes it, with a tuple and a dict (``tp_call``)."""
    return type(f).__call__(f, *args, **kwargs)


def test_a_call_switches_the_class_to_vectorcall_which_routes_as_a_packed_call(binary):
    # A namespace function's calls come by vectorcall (the caller's own argument array,
    # handed on as it is) once one was called; they reach what a packed call reaches.
    calls: list[str] = []

    def sum_like(x: object, /, *, axis: object = None, dtype: object = None) -> str:
        return "general"

    g = _boxfall.operator_function(Recorder("op", calls), sum_like, 1)
    g(np.ones(2))
    assert type(g).__flags__ & (1 << 11)  # Py_TPFLAGS_HAVE_VECTORCALL
    for kwargs, role in [
        ({}, "op"),
        ({"axis": 0}, "op"),
        ({"dtype": None}, "op"),
        ({"axis": 0, "dtype": None}, "op"),
        ({"dtype": "float32"}, "general"),
        ({"axis": 0, "dtype": "float32"}, "general"),
    ]:
        assert g(np.ones(2), **kwargs) == role == packed(g, np.ones(2), **kwargs)
    for call in (g, lambda *a: packed(g, *a)):
        with pytest.raises(TypeError, match="sum_like"):
            call(np.ones(2), "float32")  # a dtype by position: the Python function's call
    f, _ = binary
    assert f(np.ones(2), 2.0) == "right" == packed(f, np.ones(2), 2.0)
    assert f(4.5, np.ones(2)) == "left" == packed(f, 4.5, np.ones(2))
    with pytest.raises(TypeError):
        f(np.ones(2), x2=np.ones(2))  # keywords go to `general`, which refuses them
    with pytest.raises(TypeError):
        packed(f, np.ones(2), x2=np.ones(2))


def test_the_namespace_functions_give_numpys_results_on_every_path():
    a = xp.asarray([1.0, 2.0])
    assert isinstance(xp.add, _boxfall.NamespaceFunction)
    assert isinstance(xp.sum, _boxfall.NamespaceFunction)
    assert xp.add(a, 1).tolist() == [2.0, 3.0]
    assert xp.add(1, a).tolist() == [2.0, 3.0]
    assert xp.add(a, 1j).tolist() == [1 + 1j, 2 + 1j]
    assert xp.add(np.float64(1.0), a).tolist() == [2.0, 3.0]
    assert xp.sum(a, dtype=xp.float32).dtype == xp.float32
    with pytest.raises(TypeError, match="add"):
        xp.add("a", a)


def test_a_namespace_function_falls_back_once_a_call(accel):
    """One call of the namespace's function is one call of its operator: the CPU fallback
    of ``accel`` (which has no kernel of its own) counts it once."""
    dev = xp.namespace(accel.device)
    a = dev.asarray([1.0, 2.0, 3.0])
    for fn, op in ((dev.add, "array_api::add"), (dev.sum, "array_api::sum")):
        before = bf.metrics.counter_value(op)
        fn(a, a) if fn is dev.add else fn(a)
        assert bf.metrics.counter_value(op) == before + 1


def test_a_namespace_function_binds_as_a_method_as_a_python_function_does():
    class Holder(np.ndarray):
        plus = xp.add
        total = xp.sum

    h = np.ones(3).view(Holder)
    assert Holder.plus is xp.add
    assert np.asarray(h.plus(np.ones(3))).tolist() == [2.0, 2.0, 2.0]
    assert float(h.total()) == 3.0
