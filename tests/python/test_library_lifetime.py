"""When a Library's registrations end: the garbage collector sees through a library to the
kernels it registered (so a kernel that refers back to its library does not keep it forever),
and a library collected while it still holds registrations says so with a ResourceWarning."""

from __future__ import annotations

import functools
import gc
import subprocess
import sys
import textwrap
import warnings
import weakref

import boxfall as bf
import numpy as np
import pytest

UNARY = "f(Tensor x) -> Tensor"


@pytest.fixture(autouse=True)
def _collect_only_when_asked():
    """The collector runs where a test calls gc.collect(), not when allocations trigger it."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def _self_referring_library(ns: str) -> weakref.ref:
    """A library whose only reference is its own kernel's closure."""
    lib = bf.Library(ns, "DEF")
    lib.define(UNARY)
    lib.impl("f", lambda x: (lib, x)[1], "CPU")
    return weakref.ref(lib)


def test_a_library_captured_by_its_own_kernel_is_collected(ns):
    ref = _self_referring_library(ns)
    op = getattr(bf.ops, ns).f.default
    assert op.dispatch_table()["CPU"] == "kernel"
    np.testing.assert_array_equal(op(np.ones(2)), np.ones(2))
    del op
    with pytest.warns(ResourceWarning, match=f"'{ns}::f'"):
        gc.collect()
    assert ref() is None
    with pytest.raises(bf.UnknownOperatorError):
        bf._boxfall.find_op(f"{ns}::f")


def test_a_fallback_that_refers_to_its_library_is_collected_too(backend_factory):
    backend = backend_factory("Scratch")

    def make() -> weakref.ref:
        fb = bf.Library("_", "IMPL")
        fb.fallback(lambda op, keys, stack: (fb, bf.cpu_fallback(op, keys, stack))[1], backend.name)
        return weakref.ref(fb)

    ref = make()
    with pytest.warns(ResourceWarning, match=f"the '{backend.name}' fallback"):
        gc.collect()
    assert ref() is None
    # The key has no fallback any more: a second one registers.
    with bf.Library("_", "IMPL") as again:
        again.fallback(bf.cpu_fallback, backend.name)


def test_a_library_still_referenced_is_not_collected(ns):
    lib = bf.Library(ns, "DEF")
    lib.define(UNARY)
    lib.impl("f", lambda x: (lib, x)[1], "CPU")
    gc.collect()
    assert lib.is_open
    op = getattr(bf.ops, ns).f.default
    np.testing.assert_array_equal(op(np.ones(2)), np.ones(2))
    lib.close()


def test_a_kernel_referenced_elsewhere_keeps_its_library(ns):
    """The library shows the collector one reference to the function (the kernel's); a second
    one, the user's, keeps the whole cycle alive."""

    def make():
        lib = bf.Library(ns, "DEF")
        lib.define(UNARY)
        kernel = lambda x: (lib, x)[1]  # noqa: E731
        lib.impl("f", kernel, "CPU")
        return kernel, weakref.ref(lib)

    kernel, ref = make()
    gc.collect()
    assert ref() is not None and ref().is_open
    del kernel
    with pytest.warns(ResourceWarning):
        gc.collect()
    assert ref() is None


def test_a_library_is_not_collected_while_its_kernel_runs(ns):
    """A running kernel is referenced by its call, even a callable (a partial) that no frame
    refers to: the collector running inside it leaves the library and the kernel alone."""
    seen = []

    def body(lib_ref, x):
        gc.collect()
        seen.append(lib_ref() is not None and lib_ref().is_open)
        return x

    def make() -> weakref.ref:
        lib = bf.Library(ns, "DEF")
        lib.define(UNARY)
        ref = weakref.ref(lib)
        holder = [lib]  # the partial holds the library, the library shows the partial
        lib.impl("f", functools.partial(lambda h, x: body(ref, x), holder), "CPU")
        return ref

    ref = make()
    op = getattr(bf.ops, ns).f.default
    np.testing.assert_array_equal(op(np.ones(2)), np.ones(2))
    assert seen == [True]
    del op
    with pytest.warns(ResourceWarning):
        gc.collect()
    assert ref() is None


def test_a_library_collected_while_open_warns_naming_what_it_undid(ns, lib, backend_factory):
    backend = backend_factory("Scratch")
    lib.define(UNARY)
    lib.impl("f", lambda x: -x, "CPU")
    with pytest.warns(ResourceWarning) as caught:
        bf.Library("_", "IMPL").fallback(bf.cpu_fallback, backend.name)  # not kept
    message = str(caught[0].message)
    assert 'bf.Library("_", "IMPL")' in message
    assert f"the '{backend.name}' fallback" in message
    assert "close()" in message and "with" in message
    with pytest.raises(bf.NoKernelError):  # what the warning explains
        getattr(bf.ops, ns).f(backend.tensor(np.ones(2)))


def test_the_warning_lists_definitions_and_kernels(ns):
    with pytest.warns(ResourceWarning) as caught:
        lib = bf.Library(ns, "DEF")
        lib.define(UNARY)
        lib.impl("f", lambda x: x, "CPU")
        del lib
    message = str(caught[0].message)
    assert f"its claim on namespace '{ns}'" in message
    assert f"the definition of '{ns}::f'" in message
    assert f"the 'CPU' kernel of '{ns}::f'" in message


def test_a_closed_library_does_not_warn(ns):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        lib = bf.Library(ns, "DEF")
        lib.define(UNARY)
        lib.impl("f", lambda x: x, "CPU")
        lib.close()
        del lib
        with bf.Library(ns, "DEF") as lib2:
            lib2.define(UNARY)
        del lib2
        gc.collect()


def test_an_empty_impl_library_does_not_warn(ns):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        bf.Library(ns, "IMPL")
        gc.collect()


def test_a_warning_turned_into_an_error_is_reported_not_raised(ns):
    """Like an unclosed file's: the warning cannot raise out of the collector."""
    reported = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: reported.append(u.exc_value)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            lib = bf.Library(ns, "DEF")
            lib.define(UNARY)
            del lib
    finally:
        sys.unraisablehook = old
    assert len(reported) == 1 and isinstance(reported[0], ResourceWarning)
    with bf.Library(ns, "DEF"):  # the registrations were undone all the same
        pass


def test_a_pending_exception_survives_the_warning(ns):
    def fails():
        lib = bf.Library(ns, "DEF")  # noqa: F841  (goes with the frame, while the error flies)
        raise KeyError("the original")

    with pytest.warns(ResourceWarning), pytest.raises(KeyError, match="the original"):
        fails()


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_importing_boxfall_gives_no_resource_warning_at_exit():
    done = _run("import boxfall")
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr


def test_bf_impl_libraries_go_at_exit_without_a_warning():
    done = _run(
        """
        import numpy as np, boxfall as bf
        lib = bf.Library("exit_ns", "DEF")
        lib.define("f(Tensor x) -> Tensor")

        @bf.impl("exit_ns::f", "CPU")
        def f(x):
            return x + 1

        assert (bf.ops.exit_ns.f(np.zeros(2)) == 1).all()
        lib.close()
        """
    )
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr


def test_a_library_left_open_at_exit_warns():
    done = _run(
        """
        import boxfall as bf
        lib = bf.Library("exit_open", "DEF")
        lib.define("f(Tensor x) -> Tensor")
        """
    )
    assert "ResourceWarning" in done.stderr and "exit_open" in done.stderr, done.stderr
