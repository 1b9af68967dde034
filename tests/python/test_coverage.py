"""A backend author's questions without reading the source (docs/backend-authors.md): what serves
each operator on a backend (``bf.coverage``), which operators and overloads exist
(``dir(bf.ops...)``), and the backends themselves (``bf.get_backend``, ``bf.backends``,
``register_backend(..., replace=True)`` for a notebook cell run twice)."""

from __future__ import annotations

import textwrap

import boxfall as bf
import numpy as np
import pytest


@pytest.fixture
def ops(ns, lib, bare_accel):
    """Five operators, each served differently on the backend (without a fallback for it)."""
    for schema in [
        "own(Tensor x) -> Tensor",
        "comp(Tensor x) -> Tensor",
        "thru(Tensor x) -> Tensor",
        "cpu_only(Tensor x) -> Tensor",
        "add.Tensor(Tensor x, Tensor y) -> Tensor",
        "add.Scalar(Tensor x, Scalar y) -> Tensor",
    ]:
        lib.define(schema)
    lib.impl("own", lambda x: x, bare_accel.name)
    lib.impl("comp", lambda x: x, "CompositeImplicit")
    lib.impl("thru", bf.fallthrough, bare_accel.name)
    lib.impl("cpu_only", lambda x: x, "CPU")
    return ns


def test_coverage_says_what_serves_each_operator_of_a_namespace(ops, bare_accel):
    cov = bf.coverage(bare_accel.name, namespace=ops)
    assert dict(cov) == {
        f"{ops}::add.Scalar": "missing",
        f"{ops}::add.Tensor": "missing",
        f"{ops}::comp": "composite kernel",
        f"{ops}::cpu_only": "missing",
        f"{ops}::own": "kernel",
        f"{ops}::thru": "fallthrough",
    }
    assert list(cov) == sorted(cov)
    assert cov[f"{ops}::own"] == "kernel" and len(cov) == 6
    assert cov.backend == bare_accel.name and cov.namespace == ops
    assert cov.names("missing") == [f"{ops}::add.Scalar", f"{ops}::add.Tensor", f"{ops}::cpu_only"]
    assert cov.totals() == {
        "kernel": 1,
        "composite kernel": 1,
        "backend fallback": 0,
        "fallthrough": 1,
        "missing": 3,
    }


def test_a_backend_fallback_serves_what_has_no_kernel(ops, bare_accel):
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, bare_accel.name)
        cov = bf.coverage(bare_accel.name, namespace=ops)
    assert cov[f"{ops}::cpu_only"] == "backend fallback"
    assert cov[f"{ops}::own"] == "kernel"
    assert cov.totals()["backend fallback"] == 3 and cov.totals()["missing"] == 0
    # A snapshot: the fallback has gone, the object still says what was.
    assert bf.coverage(bare_accel.name, namespace=ops)[f"{ops}::cpu_only"] == "missing"


def test_the_table_groups_operators_by_source_with_totals(ops, bare_accel):
    cov = bf.coverage(bare_accel.name, namespace=ops)
    text = cov.table()
    assert str(cov) == text
    lines = text.splitlines()
    assert lines[0] == f"coverage of {bare_accel.name} (namespace {ops}): 6 operators"
    rows = [ln.split(maxsplit=1) for ln in lines if ln.startswith(f"{ops}::")]
    assert len(rows) == 6
    # Every operator once, what needs work first, names sorted within a source.
    assert [source for _, source in rows] == [
        "missing",
        "missing",
        "missing",
        "fallthrough",
        "composite kernel",
        "kernel",
    ]
    assert [name for name, _ in rows[:3]] == sorted(name for name, _ in rows[:3])
    # The source column starts at one place on every line.
    starts = {ln.index(source) for ln, (_, source) in zip(lines[4:10], rows, strict=True)}
    assert len(starts) == 1, text
    assert lines[-1] == (
        "totals: kernel 1, composite kernel 1, backend fallback 0, fallthrough 1, missing 3 (of 6)"
    )


def test_coverage_of_every_namespace_holds_each_namespace(ops, bare_accel):
    everything = bf.coverage(bare_accel.name)
    assert everything.namespace is None
    assert "every namespace" in everything.table().splitlines()[0]
    assert {k: v for k, v in everything.items() if k.startswith(f"{ops}::")} == dict(
        bf.coverage(bare_accel.name, namespace=ops)
    )


def test_coverage_takes_any_case_a_backend_object_and_other_keys(ops, bare_accel):
    assert bf.coverage(bare_accel.name.lower(), namespace=ops).backend == bare_accel.name
    assert dict(bf.coverage(bare_accel.handle, namespace=ops)) == dict(
        bf.coverage(bare_accel.name, namespace=ops)
    )
    on_cpu = bf.coverage("cpu", namespace=ops)
    assert on_cpu.backend == "CPU"
    assert on_cpu[f"{ops}::cpu_only"] == "kernel"
    assert on_cpu[f"{ops}::comp"] == "composite kernel"


def test_an_unknown_backend_or_namespace_is_a_clear_error(ops, bare_accel):
    with pytest.raises(KeyError) as info:
        bf.coverage("NoSuchBackend")
    assert isinstance(info.value, bf.UnknownKeyError)
    message = str(info.value)
    assert "NoSuchBackend" in message and "CPU" in message and bare_accel.name in message
    with pytest.raises(LookupError) as info:
        bf.coverage(bare_accel.name, namespace=f"{ops}_nothing")
    assert isinstance(info.value, bf.UnknownOperatorError)
    assert f"'{ops}_nothing'" in str(info.value) and ops in str(info.value)
    with pytest.raises(TypeError):
        bf.coverage(3)  # type: ignore[arg-type]


def test_dir_lists_namespaces_operators_and_overloads(ops):
    assert ops in dir(bf.ops)
    assert dir(bf.ops) == sorted(dir(bf.ops))
    assert dir(getattr(bf.ops, ops)) == ["add", "comp", "cpu_only", "own", "thru"]
    packet = getattr(bf.ops, ops).add
    assert packet.overloads() == ["Tensor", "Scalar"]
    listed = dir(packet)  # dir() sorts what __dir__ gives
    assert {"Tensor", "Scalar", "overloads", "name"} <= set(listed)
    assert not [n for n in listed if n.startswith("_")]
    assert "default" in dir(getattr(bf.ops, ops).own)
    assert getattr(bf.ops, ops).own.overloads() == ["default"]


def test_get_backend_and_backends_return_backend_objects(bare_accel):
    found = bf.get_backend(bare_accel.name)
    assert isinstance(found, bf.Backend) and found.name == bare_accel.name
    assert bf.get_backend(bare_accel.name.lower()).name == bare_accel.name
    np.testing.assert_array_equal(found.tensor(np.arange(3.0)).numpy(), np.arange(3.0))
    assert found.tensor(np.ones(1)).device == f"{bare_accel.name}:0"
    native = bf.get_backend("native")
    assert native.name == "Native"
    assert native.tensor(np.ones(2)).device == "Native:0"
    names = [b.name for b in bf.backends()]
    assert names[0] == "Native" and bare_accel.name in names
    assert all(isinstance(b, bf.Backend) for b in bf.backends())
    # In the order of their keys, lowest priority first.
    keys = [k for k in bf.dispatch_keys() if k in names]
    assert names == keys


@pytest.mark.parametrize("name", ["CPU", "NoSuchBackend", "CompositeImplicit"])
def test_get_backend_of_what_is_no_backend_lists_the_backends(name, bare_accel):
    with pytest.raises(KeyError) as info:
        bf.get_backend(name)
    assert isinstance(info.value, bf.UnknownKeyError)
    message = str(info.value)
    assert "Native" in message and bare_accel.name in message, message


def test_a_notebook_cell_registering_a_backend_runs_twice():
    # test_backend_registration's backend (NumPy payloads too): a process has few backend
    # key slots, and that test registers its own hooks again before it uses them.
    name = "Replaced"
    cell = textwrap.dedent(
        f"""
        import numpy as np, boxfall as bf
        backend = bf.register_backend(
            {name!r},
            to_cpu=lambda p: np.asarray(p) * {{scale}},
            from_cpu=lambda a: np.array(a),
            copy_from_cpu=lambda p, a: np.copyto(p, a),
            replace=True,
        )
        x = backend.tensor(np.arange(3.0))
        """
    )
    first: dict = {}
    exec(cell.format(scale=1), first)
    keys = bf.dispatch_keys()
    second: dict = {}
    exec(cell.format(scale=10), second)  # the cell run again, with an edit
    assert bf.dispatch_keys() == keys  # the same key, no new one
    np.testing.assert_array_equal(second["x"].numpy(), np.arange(3.0) * 10)
    # Tensors of the first run, and its Backend object, use the new hooks.
    np.testing.assert_array_equal(first["x"].numpy(), np.arange(3.0) * 10)
    np.testing.assert_array_equal(first["backend"].tensor(np.ones(2)).numpy(), np.ones(2) * 10)
    assert bf.get_backend(name).name == name
    # Without replace=True the second registration is refused, naming the way out.
    with pytest.raises(bf.RegistrationError):
        exec(cell.format(scale=1).replace("replace=True", "replace=False"), {})
