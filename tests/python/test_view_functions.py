"""``expand_dims`` and ``matrix_transpose`` (``NamespaceFunction``'s view route): a view of a
tensor whose layout the function knows (it kept the layout of a view the Python function made of
a tensor of that dtype and shape) is made in Rust, and is the view the Python function makes;
every other call reaches the Python function."""

from __future__ import annotations

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall import _boxfall
from boxfall.array_api import _views
from graph_backend import Compiler, fresh, register

COMPILER = Compiler()
GRAPH = register("ViewFnGraph", COMPILER)


@pytest.fixture(autouse=True)
def _fresh():
    yield from fresh(COMPILER)


class Counting:
    """The namespace's Python function ``fn``, counting its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def dev(accel):
    return xp.namespace(accel.device)


def _made(name: str):
    general = Counting(getattr(xp, name).__wrapped__)
    return _boxfall.view_function(general), general


def test_the_namespaces_view_functions_are_namespace_functions():
    assert isinstance(xp.expand_dims, _boxfall.NamespaceFunction)
    assert isinstance(xp.matrix_transpose, _boxfall.NamespaceFunction)


def test_a_known_layout_is_made_without_the_python_function(dev):
    f, general = _made("expand_dims")
    a = dev.asarray(np.arange(6.0).reshape(2, 3))
    b = dev.asarray(np.arange(6.0, 12.0).reshape(2, 3))
    first = f(a, axis=1)
    assert general.calls == 1 and _views.is_view(first)
    second = f(b, axis=1)  # the same dtype, shape and axis: the kept layout
    assert general.calls == 1
    assert _views.is_view(second)
    assert second.shape == (2, 1, 3)
    np.testing.assert_array_equal(np.asarray(second), np.arange(6.0, 12.0).reshape(2, 1, 3))
    # It is a view of `b`: a write through it reaches its base.
    second[1, 0, 2] = 100.0
    assert float(b[1, 2]) == 100.0
    # Positional and by name are the same argument.
    f(b, 1)
    assert general.calls == 1


def test_matrix_transpose_of_a_known_layout_is_its_view(dev):
    f, general = _made("matrix_transpose")
    a = dev.asarray(np.arange(6.0).reshape(2, 3))
    b = dev.asarray(np.arange(6.0, 12.0).reshape(2, 3))
    f(a)
    t = f(b)
    assert general.calls == 1 and _views.is_view(t)
    np.testing.assert_array_equal(np.asarray(t), np.arange(6.0, 12.0).reshape(2, 3).T)
    t[2, 0] = -1.0
    assert float(b[0, 2]) == -1.0


@pytest.mark.parametrize(
    "call",
    [
        lambda f, a: f(a, axis=(0,)),  # a tuple of axes: the Python function's
        lambda f, a: f(a, axis=np.int64(0)),  # no Python int
        lambda f, a: f(a, axis=0, extra=1),  # a keyword it refuses
        lambda f, a: f(a, 0, 1),  # too many arguments
    ],
)
def test_other_calls_reach_the_python_function(dev, call):
    f, general = _made("expand_dims")
    a = dev.asarray(np.ones((2, 3)))
    f(a, axis=0)
    before = general.calls
    try:
        call(f, a)
    except TypeError:
        pass  # the Python function's own error
    assert general.calls == before + 1


def test_a_layout_is_kept_per_dtype_shape_and_axis(dev):
    f, general = _made("expand_dims")
    f(dev.asarray(np.ones((2, 3))), axis=0)
    f(dev.asarray(np.ones((2, 3))), axis=1)  # another axis
    f(dev.asarray(np.ones((3, 2))), axis=0)  # another shape
    f(dev.asarray(np.ones((2, 3), dtype=np.float32)), axis=0)  # another dtype
    assert general.calls == 4
    f(dev.asarray(np.ones((2, 3), dtype=np.float32)), axis=0)
    assert general.calls == 4


def test_a_view_of_a_view_and_a_vector_go_the_python_way(dev):
    f, general = _made("matrix_transpose")
    a = dev.asarray(np.arange(6.0).reshape(2, 3))
    f(a)
    v = f(f(a))  # the inner call's layout is known; the outer call's argument is a view
    assert general.calls == 2
    np.testing.assert_array_equal(np.asarray(v), np.arange(6.0).reshape(2, 3))
    with pytest.raises(ValueError):
        f(dev.asarray(np.ones(3)))  # one dimension: the operator's error
    assert general.calls == 3


def test_a_numpy_array_and_the_cpu_namespace_give_numpys_results():
    a = np.arange(6.0).reshape(2, 3)
    assert np.asarray(xp.expand_dims(xp.asarray(a), axis=0)).shape == (1, 2, 3)
    np.testing.assert_array_equal(np.asarray(xp.matrix_transpose(xp.asarray(a))), a.T)
    np.testing.assert_array_equal(np.asarray(xp.matrix_transpose(a)), a.T)


def test_a_view_function_describes_itself_as_its_python_function():
    f = xp.expand_dims
    assert f.__name__ == "expand_dims" and f.__qualname__ == "expand_dims"
    assert f.__doc__ == f.__wrapped__.__doc__
    assert f.__module__ == f.__wrapped__.__module__
    assert repr(f) == "<function boxfall.array_api.expand_dims>"
    assert xp.matrix_transpose.__name__ == "matrix_transpose"


def test_only_the_two_steps_are_view_functions():
    def squeeze(x):
        return x

    with pytest.raises(ValueError, match="squeeze"):
        _boxfall.view_function(squeeze)


def test_graph_mode_records_the_reads_of_a_known_layout():
    """Two steps of a loop on pending tensors: the second step's views are made in Rust, and
    the graph computes what NumPy does."""
    transpose, general_t = _made("matrix_transpose")
    expand, general_e = _made("expand_dims")
    x = GRAPH.tensor(np.arange(6.0).reshape(2, 3))
    outs = []
    for _ in range(2):
        s = xp.sum(x, axis=1)  # pending
        outs.append(xp.add(transpose(x), expand(s, axis=0)))
    assert general_t.calls == 1 and general_e.calls == 1
    assert "array_api::_strided_view" in bf.graph.dump()
    bf.sync()
    want = np.arange(6.0).reshape(2, 3).T + np.arange(6.0).reshape(2, 3).sum(axis=1)[None]
    for o in outs:
        np.testing.assert_array_equal(np.asarray(o), want)
    assert len(COMPILER.graphs) == 1
