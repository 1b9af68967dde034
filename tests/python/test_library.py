"""bf.Library: define, impl, fallback, close; bf.impl; registering keys and backends."""

from __future__ import annotations

import gc

import boxfall as bf
import numpy as np
import pytest

UNARY = "foo(Tensor self) -> Tensor"


def plus(n):
    """A CPU kernel ``self + n``."""
    return lambda self: self + n


def test_define_impl_call(ns, lib):
    lib.define(UNARY)
    lib.impl("foo", plus(1), "CPU")
    out = getattr(bf.ops, ns).foo(np.zeros(3))
    np.testing.assert_array_equal(out, np.ones(3))


def test_defined_operator_has_its_schema_and_name(ns, lib):
    lib.define("bar.Tensor(Tensor self, Tensor other) -> Tensor")
    op = getattr(bf.ops, ns).bar.Tensor
    assert op.name == f"{ns}::bar.Tensor"
    assert str(op.schema) == f"{ns}::bar.Tensor(Tensor self, Tensor other) -> Tensor"


def test_library_is_a_context_manager_that_closes(ns):
    with bf.Library(ns, "DEF") as lib:
        assert isinstance(lib, bf.Library)
        lib.define(UNARY)
        lib.impl("foo", plus(1), "CPU")
        getattr(bf.ops, ns).foo(np.zeros(1))
    with pytest.raises(AttributeError):
        getattr(bf.ops, ns).foo  # noqa: B018


def test_close_removes_the_definition(ns):
    lib = bf.Library(ns, "DEF")
    lib.define(UNARY)
    assert getattr(bf.ops, ns).foo.default.name == f"{ns}::foo"
    lib.close()
    with pytest.raises(AttributeError):
        getattr(bf.ops, ns).foo  # noqa: B018


def test_collecting_the_library_removes_its_registrations(ns):
    lib = bf.Library(ns, "DEF")
    lib.define(UNARY)
    assert getattr(bf.ops, ns).foo.default.name == f"{ns}::foo"
    with pytest.warns(ResourceWarning, match="collected while open"):
        del lib
        gc.collect()
    with pytest.raises(AttributeError):
        getattr(bf.ops, ns).foo  # noqa: B018


def test_closing_an_impl_library_removes_its_kernels_only(ns, lib):
    lib.define(UNARY)
    lib.define("baz(Tensor self) -> Tensor")
    lib.impl("baz", plus(5), "CPU")
    impl = bf.Library(ns, "IMPL")
    impl.impl("foo", plus(1), "CPU")
    o = getattr(bf.ops, ns)
    np.testing.assert_array_equal(o.foo(np.zeros(2)), np.ones(2))
    impl.close()
    with pytest.raises(bf.NoKernelError):
        o.foo(np.zeros(2))
    assert o.foo.default.dispatch_table()["CPU"] == "missing"
    np.testing.assert_array_equal(o.baz(np.zeros(2)), np.full(2, 5.0))


def test_override_needs_allow_override(ns, lib):
    lib.define(UNARY)
    lib.impl("foo", plus(1), "CPU")
    with pytest.raises(bf.RegistrationError):
        lib.impl("foo", plus(2), "CPU")
    np.testing.assert_array_equal(getattr(bf.ops, ns).foo(np.zeros(1)), [1.0])


def test_allow_override_replaces_and_closing_restores(ns, lib):
    lib.define(UNARY)
    lib.impl("foo", plus(1), "CPU")
    with bf.Library(ns, "IMPL") as other:
        other.impl("foo", plus(2), "CPU", allow_override=True)
        np.testing.assert_array_equal(getattr(bf.ops, ns).foo(np.zeros(1)), [2.0])
    np.testing.assert_array_equal(getattr(bf.ops, ns).foo(np.zeros(1)), [1.0])


def test_registration_error_is_a_boxfall_error():
    assert issubclass(bf.RegistrationError, bf.BoxfallError)


def test_defining_an_operator_twice_is_a_registration_error(lib):
    lib.define(UNARY)
    with pytest.raises(bf.RegistrationError):
        lib.define(UNARY)


def test_define_with_bad_schema_raises_schema_error(lib):
    with pytest.raises(bf.SchemaError):
        lib.define("foo(Tensr self) -> Tensor")


def test_second_def_library_for_a_namespace_is_an_error(ns, lib):
    with pytest.raises(bf.RegistrationError):
        bf.Library(ns, "DEF")


def test_bf_ops_keeps_its_objects_while_the_definitions_stay(ns):
    with bf.Library(ns, "DEF") as lib:
        lib.define(UNARY)
        lib.impl("foo", plus(1), "CPU")
        space = getattr(bf.ops, ns)
        assert getattr(bf.ops, ns) is space
        assert type(space) is space.__class__ is bf.OpNamespace
        assert repr(space) == f"OpNamespace({ns})" and dir(space) == ["foo"]
        packet = space.foo
        assert space.foo is packet and packet.default is packet.default
        assert type(packet) is packet.__class__ is bf.OpOverloadPacket
        assert packet.name == f"{ns}::foo" and packet.overloads() == ["default"]
        # The first call (by tp_call) switches the class to vectorcall; the next ones go on
        # to the overload's own entry, keywords included.
        for _ in range(3):
            np.testing.assert_array_equal(packet(np.zeros(1)), [1.0])
            np.testing.assert_array_equal(packet(self=np.ones(1)), [2.0])
        with pytest.raises(TypeError):
            packet(np.zeros(1), np.zeros(1))
    # Gone with its library: the kept packet says so when called, and a new look-up fails.
    with pytest.raises(AttributeError, match="is not defined"):
        packet(np.zeros(1))
    with pytest.raises(AttributeError):
        space.foo  # noqa: B018
    # Defined again, differently: the namespace, and the packet the caller kept, find the new
    # definition.
    with bf.Library(ns, "DEF") as lib:
        lib.define("foo(Tensor self, int n) -> Tensor")
        lib.impl("foo", lambda self, n: self + n, "CPU")
        assert str(space.foo.default.schema) == f"{ns}::foo(Tensor self, int n) -> Tensor"
        np.testing.assert_array_equal(packet(np.zeros(1), 5), [5.0])
        np.testing.assert_array_equal(space.foo.default(np.zeros(1), 7), [7.0])


def test_a_packet_called_again_by_its_kernel_after_a_new_definition(ns):
    # The kernel defines an operator (so the packet lets go of the overloads it kept) and
    # calls the same packet again, while the first call still runs in the overload it kept.
    frags = []
    with bf.Library(ns, "DEF") as lib:
        lib.define("rec(Tensor self, int depth) -> Tensor")

        def rec(self, depth):
            if depth == 0:
                return self
            frag = bf.Library(ns, "FRAGMENT")
            frag.define(f"extra{len(frags)}(Tensor self) -> Tensor")
            frags.append(frag)
            gc.collect()
            return packet(self + 1, depth - 1)

        lib.impl("rec", rec, "CPU")
        packet = getattr(bf.ops, ns).rec
        for round in range(3):  # the first by tp_call, the others by vectorcall
            np.testing.assert_array_equal(packet(np.zeros(1), 3), [3.0])
            assert len(frags) == 3 * (round + 1)
        for frag in frags:
            frag.close()


def test_fragment_library_defines_more_operators(ns, lib):
    lib.define(UNARY)
    with bf.Library(ns, "FRAGMENT") as frag:
        frag.define("more(Tensor self) -> Tensor")
        frag.impl("more", plus(3), "CPU")
        np.testing.assert_array_equal(getattr(bf.ops, ns).more(np.zeros(1)), [3.0])
    with pytest.raises(AttributeError):
        getattr(bf.ops, ns).more  # noqa: B018
    assert getattr(bf.ops, ns).foo.default.name == f"{ns}::foo"


def test_closing_the_def_library_frees_the_namespace(ns):
    bf.Library(ns, "DEF").close()
    with bf.Library(ns, "DEF") as again:
        again.define(UNARY)


def test_impl_decorator(ns, lib):
    lib.define(UNARY)

    @bf.impl(f"{ns}::foo", "CPU")
    def foo_cpu(self):
        return self * 10

    out = getattr(bf.ops, ns).foo(np.ones(2))
    np.testing.assert_array_equal(out, np.full(2, 10.0))
    assert getattr(bf.ops, ns).foo.default.dispatch_table()["CPU"] == "kernel"


def test_unknown_operator_name(ns, lib):
    lib.define(UNARY)
    with pytest.raises(AttributeError) as info:
        getattr(bf.ops, ns).nope  # noqa: B018
    assert "nope" in str(info.value)
    # A name that is no UTF-8 is simply no operator's, nor any overload's.
    assert not hasattr(getattr(bf.ops, ns), "\ud800")
    assert not hasattr(getattr(bf.ops, ns).foo, "\ud800")


def test_unknown_overload_name(ns, lib):
    lib.define(UNARY)
    with pytest.raises(AttributeError):
        getattr(bf.ops, ns).foo.nope  # noqa: B018


def test_unknown_key_raises_key_error_listing_known_keys(lib):
    lib.define(UNARY)
    with pytest.raises(KeyError) as info:
        lib.impl("foo", plus(1), "NoSuchKey")
    message = str(info.value)
    assert "NoSuchKey" in message
    assert "CPU" in message
    assert "Native" in message


def test_fallback_only_in_namespace_underscore(ns):
    with bf.Library(ns, "IMPL") as lib, pytest.raises(bf.RegistrationError):
        lib.fallback(bf.fallthrough, "CPU")


def test_fallback_in_namespace_underscore_is_accepted_and_removed_on_close(ns, lib, unique_name):
    key = bf.register_functionality_key(unique_name("LibTrace"))
    lib.define(UNARY)
    lib.impl("foo", plus(1), "CPU")
    op = getattr(bf.ops, ns).foo.default
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.fallthrough, key)
        assert op.dispatch_table()[key] == "fallthrough"
    assert op.dispatch_table()[key] == "missing"


def test_functionality_key_registered_twice_is_an_error(unique_name):
    name = unique_name("Dup")
    bf.register_functionality_key(name)
    with pytest.raises(bf.RegistrationError):
        bf.register_functionality_key(name)


def test_backend_registered_twice_is_an_error(backend_factory):
    backend = backend_factory("DupBackend")
    with pytest.raises(bf.RegistrationError):
        bf.register_backend(
            backend.name,
            to_cpu=np.asarray,
            from_cpu=np.asarray,
            copy_from_cpu=np.copyto,
        )


def test_builtin_key_names_cannot_be_registered():
    with pytest.raises(bf.RegistrationError):
        bf.register_functionality_key("CPU")
