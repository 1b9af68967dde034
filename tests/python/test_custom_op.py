"""``@bf.custom_op``: the schema inferred from type hints as ``torch.library.custom_op`` infers
it, the function as the CPU kernel, ``.register_kernel(key)``, ``.op`` and ``.schema``, and a
clear error for what it cannot map (README, "For backend authors")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import boxfall as bf
import numpy as np
import pytest


def test_the_schema_comes_from_the_hints_and_the_function_is_the_cpu_kernel(ns):
    @bf.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: np.ndarray, factor: float) -> np.ndarray:
        return x * factor

    assert str(scale.schema) == f"{ns}::scale(Tensor x, float factor) -> Tensor"
    assert isinstance(scale, bf.CustomOpDef) and scale.name == f"{ns}::scale"
    assert isinstance(scale.op, bf.OpOverload) and scale.op.name == f"{ns}::scale"
    np.testing.assert_array_equal(scale(np.arange(3.0), 2.0), np.arange(3.0) * 2)
    np.testing.assert_array_equal(getattr(bf.ops, ns).scale(np.ones(2), 3.0), np.ones(2) * 3)
    assert scale.op.dispatch_table()["CPU"] == "kernel"
    assert scale.__name__ == "scale"  # it wraps the function


@pytest.mark.parametrize(
    ("hint", "schema_type"),
    [
        ("np.ndarray", "Tensor"),
        ("bf.Tensor", "Tensor"),
        ("int", "int"),
        ("float", "float"),
        ("bool", "bool"),
        ("str", "str"),
        ("int | float", "Scalar"),
        ("Sequence[int]", "int[]"),
        ("list[int]", "int[]"),
        ("tuple[int, ...]", "int[]"),
        ("list[float]", "float[]"),
        ("Sequence[np.ndarray]", "Tensor[]"),
        ("Optional[np.ndarray]", "Tensor?"),
        ("np.ndarray | None", "Tensor?"),
        ("Optional[int]", "int?"),
        ("Sequence[int] | None", "int[]?"),
        ("list[np.ndarray | None]", "Tensor?[]"),
    ],
)
def test_each_hint_maps_to_its_schema_type(ns, hint, schema_type):
    namespace = {"np": np, "bf": bf, "Sequence": Sequence, "Optional": Optional}
    exec(f"def f(x: {hint}) -> None: pass", namespace)
    op = bf.custom_op(f"{ns}::f", namespace["f"], mutates_args=())
    assert str(op.schema) == f"{ns}::f({schema_type} x) -> ()"


@pytest.mark.parametrize(
    ("hint", "returns"),
    [
        ("None", "()"),
        ("np.ndarray", "Tensor"),
        ("tuple[np.ndarray, np.ndarray]", "(Tensor, Tensor)"),
        ("tuple[np.ndarray, int]", "(Tensor, int)"),
        ("list[np.ndarray]", "Tensor[]"),
        ("float", "float"),
    ],
)
def test_return_hints_map_to_returns(ns, hint, returns):
    namespace = {"np": np}
    exec(f"def f(x: np.ndarray) -> {hint}: pass", namespace)
    op = bf.custom_op(f"{ns}::f", namespace["f"], mutates_args=())
    assert str(op.schema) == f"{ns}::f(Tensor x) -> {returns}"


def test_defaults_and_keyword_only_parameters_come_from_the_signature(ns):
    @bf.custom_op(f"{ns}::opts", mutates_args=())
    def opts(
        x: np.ndarray,
        factor: float = 2.0,
        *,
        dims: Sequence[int] = (0, 1),
        bias: Optional[np.ndarray] = None,  # noqa: UP045  (the hint torch users write)
        mode: str = "mean",
        keep: bool = False,
        n: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        return x * factor, np.asarray(len(mode) + (bias is not None) + keep)

    assert str(opts.schema) == (
        f"{ns}::opts(Tensor x, float factor=2., *, int[] dims=[0, 1], Tensor? bias=None, "
        'str mode="mean", bool keep=False, int? n=None) -> (Tensor, Tensor)'
    )
    kwarg_only = {a.name: a.kwarg_only for a in opts.schema.arguments}
    assert kwarg_only == {
        "x": False,
        "factor": False,
        "dims": True,
        "bias": True,
        "mode": True,
        "keep": True,
        "n": True,
    }
    # Defaults filled, keyword-only arguments passed by keyword: as a torch.library user expects.
    scaled, count = opts(np.ones(2), mode="ab", keep=True)
    np.testing.assert_array_equal(scaled, np.ones(2) * 2)
    assert int(count) == 3


def test_mutated_arguments_get_distinct_alias_letters_and_are_written(ns, bare_accel):
    @bf.custom_op(f"{ns}::fill_", mutates_args=("out", "extra"))
    def fill_(out: np.ndarray, value: float, extra: np.ndarray | None = None) -> None:
        out[...] = value
        if extra is not None:
            extra[...] = -value

    assert str(fill_.schema) == (
        f"{ns}::fill_(Tensor(a!) out, float value, Tensor(b!)? extra=None) -> ()"
    )
    assert fill_.schema.written_arguments == [0, 2]
    a = np.zeros(3)
    assert fill_(a, 4.0) is None
    np.testing.assert_array_equal(a, [4.0, 4.0, 4.0])
    # On a device, through the CPU fallback: the writes reach the device tensors.
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, bare_accel.name)
        x, y = bare_accel.tensor(np.zeros(2)), bare_accel.tensor(np.zeros(2))
        fill_(x, 5.0, y)
    np.testing.assert_array_equal(x.numpy(), [5.0, 5.0])
    np.testing.assert_array_equal(y.numpy(), [-5.0, -5.0])


def test_register_kernel_adds_a_backends_kernel(ns, bare_accel):
    @bf.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: np.ndarray, factor: float) -> np.ndarray:
        return x * factor

    calls = []

    @scale.register_kernel(bare_accel.name.lower())
    def scale_accel(x, factor):
        calls.append(factor)
        return bare_accel.tensor(x.payload.data * factor)

    assert scale_accel.__name__ == "scale_accel"  # the decorator gives the function back
    assert scale.op.dispatch_table()[bare_accel.name] == "kernel"
    out = scale(bare_accel.tensor(np.arange(3.0)), 2.0)
    assert calls == [2.0] and out.device == f"{bare_accel.name}:0"
    np.testing.assert_array_equal(out.numpy(), np.arange(3.0) * 2)
    # A second kernel for the key needs allow_override, as Library.impl does.
    with pytest.raises(bf.RegistrationError):
        scale.register_kernel(bare_accel.name, lambda x, factor: x)
    scale.register_kernel(bare_accel.name, lambda x, factor: x, allow_override=True)
    assert scale(bare_accel.tensor(np.ones(1)), 9.0).numpy()[0] == 1.0


def test_device_types_and_an_explicit_schema(ns):
    @bf.custom_op(f"{ns}::neg", mutates_args=(), device_types="CompositeImplicitAutograd")
    def neg(x: np.ndarray) -> np.ndarray:
        return -x

    assert neg.op.dispatch_table()["CPU"] == "composite kernel"

    @bf.custom_op(f"{ns}::twice", mutates_args=(), schema="(Tensor self) -> Tensor")
    def twice(x):
        return x * 2

    assert str(twice.schema) == f"{ns}::twice(Tensor self) -> Tensor"
    np.testing.assert_array_equal(twice(np.ones(1)), [2.0])


def test_a_namespace_with_a_def_library_takes_custom_ops_too(ns, lib):
    lib.define("other(Tensor x) -> Tensor")

    @bf.custom_op(f"{ns}::extra", mutates_args=())
    def extra(x: np.ndarray) -> np.ndarray:
        return x + 1

    assert sorted(dir(getattr(bf.ops, ns))) == ["extra", "other"]
    np.testing.assert_array_equal(extra(np.zeros(1)), [1.0])


@pytest.mark.parametrize(
    ("signature", "said"),
    [
        ("x: dict[str, int]", "parameter 'x' has type hint dict[str, int]"),
        ("x", "parameter 'x' has no type hint"),
        ("*xs: int", "parameter 'xs'"),
        ("x: tuple[int, int]", "parameter 'x' has type hint"),
        ("x: np.ndarray = 0", "has default 0"),
        ("x: int = None", "has default None"),
    ],
)
def test_a_parameter_it_cannot_map_is_a_schema_error_naming_it(ns, signature, said):
    namespace = {"np": np}
    exec(f"def f({signature}) -> None: pass", namespace)
    with pytest.raises(bf.SchemaError) as info:
        bf.custom_op(f"{ns}::f", namespace["f"], mutates_args=())
    message = str(info.value)
    assert f"bf.custom_op('{ns}::f')" in message and said in message, message
    # Nothing was defined: the name is free for a corrected definition.
    assert ns not in dir(bf.ops)


def test_bad_returns_and_mutates_args_are_clear_errors(ns):
    def no_return(x: np.ndarray):
        return x

    with pytest.raises(bf.SchemaError, match="no return type hint; write -> None"):
        bf.custom_op(f"{ns}::f", no_return, mutates_args=())

    def f(x: np.ndarray, n: int) -> None:
        pass

    with pytest.raises(bf.SchemaError, match="'y', which is no parameter"):
        bf.custom_op(f"{ns}::f", f, mutates_args=("y",))
    with pytest.raises(bf.SchemaError, match="mutates_args names 'n', of type int"):
        bf.custom_op(f"{ns}::f", f, mutates_args=("n",))
    with pytest.raises(TypeError, match=r"mutates_args=\('x',\)"):
        bf.custom_op(f"{ns}::f", f, mutates_args="x")  # type: ignore[arg-type]
    with pytest.raises(bf.SchemaError, match="qualified name"):
        bf.custom_op("f", f, mutates_args=())
    assert ns not in dir(bf.ops)  # nothing was defined
    bf.custom_op(f"{ns}::f", f, mutates_args=("x",))  # the name is still free
