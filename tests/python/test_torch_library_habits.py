"""A torch.library user's first tries (README, "For backend authors"): an ``OpOverload`` wherever an
operator's name is taken, key names as PyTorch writes them (``CompositeImplicitAutograd``,
lowercase backend names), and a library registering only for its own namespace."""

from __future__ import annotations

import boxfall as bf
import numpy as np
import pytest


@pytest.fixture(scope="module")
def trace(unique_name):
    name = unique_name("HabitTrace")
    bf.register_functionality_key(name)
    return name


@pytest.fixture
def relu(ns, lib):
    lib.define("relu(Tensor self) -> Tensor")
    lib.impl("relu", lambda x: np.maximum(x, 0), "CPU")
    return getattr(bf.ops, ns).relu.default


def test_library_impl_takes_an_op_overload(ns, lib, relu, bare_accel):
    seen = []
    lib.impl(relu, lambda x: seen.append("accel") or x, bare_accel.name)
    assert relu.dispatch_table()[bare_accel.name] == "kernel"
    relu(bare_accel.tensor(np.ones(1)))
    assert seen == ["accel"]
    with pytest.raises(TypeError, match="bf.OpOverload"):
        lib.impl(42, lambda x: x, "CPU")  # type: ignore[arg-type]


def test_the_impl_decorator_takes_an_op_overload(relu, bare_accel):
    @bf.impl(relu, bare_accel.name)
    def relu_accel(x):
        return x

    assert relu.dispatch_table()[bare_accel.name] == "kernel"


def test_metrics_policy_and_coverage_take_an_op_overload(ns, relu, bare_accel):
    bf.set_fallback_policy("warn", ops=relu)
    try:
        assert bf.get_fallback_policy(relu) == "warn"
    finally:
        bf.set_fallback_policy(None, ops=relu)
    assert bf.coverage(bare_accel.name, namespace=ns)[relu.name] == "missing"


def test_composite_implicit_autograd_is_an_alias_of_composite_implicit(ns, lib):
    lib.define("double(Tensor x) -> Tensor")
    lib.impl("double", lambda x: x * 2, "CompositeImplicitAutograd")
    table = getattr(bf.ops, ns).double.default.dispatch_table()
    assert table["CompositeImplicit"] == "kernel" and table["CPU"] == "composite kernel"


@pytest.mark.parametrize("spelling", ["lower", "upper"])
def test_key_names_are_taken_in_any_case(ns, lib, bare_accel, trace, spelling):
    def spell(name: str) -> str:
        return name.lower() if spelling == "lower" else name.upper()

    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x + 1, spell("CPU"))
    lib.impl("f", lambda x: x, spell(bare_accel.name))
    op = getattr(bf.ops, ns).f.default
    table = op.dispatch_table()
    assert table["CPU"] == "kernel" and table[bare_accel.name] == "kernel"
    hops = []

    def hop(op, keys, stack):
        hops.append(keys.highest())
        op.redispatch_boxed(keys, stack)

    with bf.Library("_", "IMPL") as fb:
        fb.fallback(hop, spell(trace))
        with bf.include_keys(spell(trace)):
            op(np.zeros(1))
            with bf.exclude_keys(spell(trace)):
                op(np.zeros(1))
    assert hops == [trace]
    assert bf.get_backend(spell(bare_accel.name)).name == bare_accel.name
    assert bf.get_backend(spell("native")).name == "Native"


def test_an_unknown_key_name_lists_the_known_keys(lib, bare_accel):
    lib.define("g(Tensor x) -> Tensor")
    for call in (
        lambda: lib.impl("g", lambda x: x, "Acel"),
        lambda: bf.Library("_", "IMPL").fallback(bf.cpu_fallback, "Acel"),
        lambda: bf.include_keys("Acel").__enter__(),
    ):
        with pytest.raises(bf.UnknownKeyError) as info:
            call()
        message = str(info.value)
        assert "'Acel'" in message and "CPU" in message and bare_accel.name in message, message
    # Any case, but no guessing: a near name is no name; get_backend lists the backends.
    with pytest.raises(bf.UnknownKeyError) as info:
        bf.get_backend("acel")
    assert "'acel'" in str(info.value) and "backends: [Native, " in str(info.value)
    assert bare_accel.name in str(info.value)


def test_an_impl_library_of_another_namespace_is_refused(ns, lib, relu, unique_name):
    other = unique_name("zz")
    with bf.Library(other, "IMPL") as elsewhere:
        for name in (f"{ns}::relu", relu):
            with pytest.raises(bf.RegistrationError) as info:
                elsewhere.impl(name, lambda x: x, "CPU", allow_override=True)
            message = str(info.value)
            assert f'Library("{other}", "IMPL")' in message, message
            assert f"'{ns}::relu'" in message and f"namespace '{ns}'" in message, message
            assert f'Library("{ns}", "IMPL")' in message, message  # what to write
    # Nothing changed: the CPU kernel is the one the DEF library registered.
    np.testing.assert_array_equal(relu(np.array([-1.0, 2.0])), [0.0, 2.0])


def test_the_impl_decorator_registers_in_the_operators_own_namespace(ns, lib, relu, bare_accel):
    lib.define("sub(Tensor x) -> Tensor")

    @bf.impl(f"{ns}::sub", "CPU")
    def sub_cpu(x):
        return x - 1

    @bf.impl(f"{ns}::relu", bare_accel.name.lower())
    def relu_accel(x):
        return x

    np.testing.assert_array_equal(getattr(bf.ops, ns).sub(np.ones(1)), [0.0])
    assert relu.dispatch_table()[bare_accel.name] == "kernel"
    assert bf._impl_libraries[ns].ns == ns
