"""Shape rules registered per operator (``lib.register_shape_rule``, as
``torch.library.register_fake``): a user's operator (``bf.custom_op``) with a rule records in
graph mode and its values equal eager mode's; a value its rule reads is a constant of the
graph's key; a wrong result of the rule is a ``bf.RegistrationError`` naming the operator at
the call; ``bf.DataDependentError`` is a counted graph break, as an operator without a rule
is; any other exception of the rule fails the call. The array API's rules go through the same
registration (a newer registration replaces one, until its library closes). On the NumPy
graph test backend, without JAX."""

from __future__ import annotations

from typing import Any

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest
from boxfall import _boxfall
from graph_backend import Compiler, fresh, register

COMPILER = Compiler()
GRAPH = register("ShapeRuleTest", COMPILER)
NAME = "shaperuletest::repeat_flat"

SEEN: list[tuple[Any, Any]] = []
"""What the rule of ``repeat_flat`` was given, per call."""


@bf.custom_op(NAME, mutates_args=())
def repeat_flat(x: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(x.ravel(), n)


@repeat_flat.register_shape_rule
def _repeat_flat_rule(x: bf.TensorMeta, n: int) -> bf.TensorMeta:
    SEEN.append((x, n))
    return bf.TensorMeta(x.dtype, (int(np.prod(x.shape)) * n,))


@bf.custom_op("shaperuletest::ruleless", mutates_args=())
def ruleless(x: np.ndarray) -> np.ndarray:
    return x * 2


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    SEEN.clear()
    yield from fresh(COMPILER)


def recorded_ops() -> list[str]:
    return [op.name for graph in COMPILER.graphs for op, _, _ in graph.nodes]


def program(x: bf.Tensor, n: int) -> bf.Tensor:
    return xp.multiply(repeat_flat(xp.add(x, 1.0), n), 2.0)


def test_a_custom_op_with_a_rule_records_and_its_values_equal_eager_ones() -> None:
    a = np.arange(6.0).reshape(2, 3)
    out = program(GRAPH.tensor(a), 2)
    assert bf.graph.is_pending(out)
    assert out.shape == (12,) and out.dtype == xp.float64  # from the rules, nothing computed
    # The rule got the tensor's meta (its device's) and the int as its value.
    [(meta, n)] = SEEN
    assert meta == bf.TensorMeta("float64", (2, 3), "ShapeRuleTest:0") and n == 2
    with bf.eager():
        expected = program(GRAPH.tensor(a), 2)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    np.testing.assert_array_equal(out.numpy(), np.repeat(a.ravel() + 1, 2) * 2)
    assert NAME in recorded_ops()
    assert bf.metrics.graphs()["breaks"] == {}


def test_a_value_the_rule_reads_is_a_constant_of_the_graph_key() -> None:
    a = np.arange(3.0)
    for n in (2, 3, 2):
        np.testing.assert_array_equal(program(GRAPH.tensor(a), n).numpy(), np.repeat(a + 1, n) * 2)
    graphs = COMPILER.graphs
    assert len(graphs) == 2  # n=2 and n=3 compile apart; n=2 again is the cached program
    assert graphs[0].key != graphs[1].key
    assert bf.metrics.graphs()["cache_hits"] == 1


def test_an_operator_without_a_rule_is_a_counted_break() -> None:
    out = ruleless(xp.add(GRAPH.tensor(np.arange(3.0)), 1.0))
    assert not bf.graph.is_pending(out)
    np.testing.assert_array_equal(out.numpy(), (np.arange(3.0) + 1) * 2)
    assert bf.metrics.graphs()["breaks"] == {"shaperuletest::ruleless": 1}


@pytest.mark.parametrize(
    ("result", "wrong"),
    [
        ((bf.TensorMeta("float64", (3,)),) * 2, "gave 2 outputs for 1 returns"),
        (
            bf.TensorMeta("float128x", (3,)),
            "gave output 0 the dtype 'float128x', which no device holds",
        ),
        (bf.TensorMeta("float64", (3, -1)), "gave output 0 a negative size"),
        (("float64", (3,)), "returned a str as output 0"),
        (None, "returned a NoneType"),
    ],
)
def test_a_wrong_result_of_a_rule_is_an_error_naming_the_operator(result: Any, wrong: str) -> None:
    name = "shaperuletest::wrong"
    if not hasattr(bf.ops.shaperuletest, "wrong"):
        bf.custom_op(name, lambda x: x, mutates_args=(), schema="(Tensor x) -> Tensor")
    with bf.Library("shaperuletest", "FRAGMENT") as lib:
        lib.register_shape_rule("wrong", lambda x: result)
        x = xp.add(GRAPH.tensor(np.arange(3.0)), 1.0)
        with pytest.raises(bf.RegistrationError, match=f"shape rule of '{name}' {wrong}"):
            bf.ops.shaperuletest.wrong(x)
    assert recorded_ops() == []  # nothing recorded past the add, nothing run
    np.testing.assert_array_equal(x.numpy(), np.arange(3.0) + 1)


def test_data_dependent_error_is_a_counted_break() -> None:
    name = "shaperuletest::positive"

    @bf.custom_op(name, mutates_args=())
    def positive(x: np.ndarray) -> np.ndarray:
        return x[x > 0]

    @positive.register_shape_rule
    def _(x: bf.TensorMeta) -> bf.TensorMeta:
        raise bf.DataDependentError("the length is the number of positive values")

    out = positive(xp.subtract(GRAPH.tensor(np.arange(5.0)), 2.0))
    assert not bf.graph.is_pending(out)
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0])
    assert bf.metrics.graphs()["breaks"] == {name: 1}


def test_another_exception_of_a_rule_fails_the_call() -> None:
    def rule(x: bf.TensorMeta) -> bf.TensorMeta:
        raise ValueError("the rule's own mistake")

    with bf.Library("shaperuletest", "FRAGMENT") as lib:
        lib.define("failing(Tensor x) -> Tensor")
        lib.impl("failing", lambda x: x)
        lib.register_shape_rule("failing", rule)
        with pytest.raises(ValueError, match="the rule's own mistake") as info:
            bf.ops.shaperuletest.failing(GRAPH.tensor(np.arange(2.0)))
    assert "shape rule of 'shaperuletest::failing'" in " ".join(info.value.__notes__)
    assert bf.metrics.graphs()["breaks"] == {}


def test_a_rule_is_undone_with_its_library_and_the_array_api_s_rules_are_registered_ones() -> None:
    x = GRAPH.tensor(np.arange(3.0))
    with bf.Library("array_api", "FRAGMENT") as lib:
        # A newer rule of array_api::add replaces the array API's own (Rust's) registration.
        lib.register_shape_rule("add", lambda x1, x2: _raise_data_dependent())
        assert _boxfall._output_metas("array_api::add", x, x) is None
        y = xp.multiply(x, 2.0)  # pending: the break computes it
        assert not bf.graph.is_pending(xp.add(y, y))
        assert bf.metrics.graphs()["breaks"] == {"array_api::add": 1}
    # Closed: the array API's rule serves again.
    assert _boxfall._output_metas("array_api::add", x, x) == [("float64", (3,))]
    assert bf.graph.is_pending(xp.add(x, x))
    with pytest.raises(bf.RegistrationError, match="not defined"):
        with bf.Library("shaperuletest", "FRAGMENT") as other:
            other.register_shape_rule("nothing_here", lambda x: x)
    with pytest.raises(bf.RegistrationError, match="must be callable"):
        with bf.Library("shaperuletest", "FRAGMENT") as other:
            other.register_shape_rule("repeat_flat", 3)


def _raise_data_dependent() -> bf.TensorMeta:
    raise bf.DataDependentError


def test_tensor_meta_names_its_dtype_and_is_immutable() -> None:
    m = bf.TensorMeta(np.float32, [2, np.int64(3)])
    assert (m.dtype, m.shape, m.device, m.ndim) == ("float32", (2, 3), None, 2)
    assert m == bf.TensorMeta("float32", (2, 3)) and hash(m) == hash(
        bf.TensorMeta("float32", (2, 3))
    )
    with pytest.raises(AttributeError):
        m.shape = (1,)  # type: ignore[misc]
    assert issubclass(bf.DataDependentError, bf.BoxfallError)
