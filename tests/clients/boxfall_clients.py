"""A pytest plugin that runs SciPy's and scikit-learn's own array API tests on boxfall.

Load it with ``-p boxfall_clients`` (``tests/clients`` on ``PYTHONPATH``; ``run.py`` does both).
It adds boxfall's namespaces beside the ones the libraries test already:

- ``boxfall_native``: ``boxfall.array_api.namespace("Native")``;
- ``boxfall_python``: the namespace of ``ClientPy``, a backend written in Python here (a NumPy
  array in a small payload object, three copy hooks, ``bf.cpu_fallback`` for every operator);
- ``boxfall_jax``: ``boxfall.jax.namespace()``, where JAX is installed (its jax.numpy kernels,
  the CPU fallback for the rest; float32 defaults unless ``JAX_ENABLE_X64=1``);
- ``boxfall_jax_graph``: ``boxfall.jax.namespace(graph=True)``, graph mode on the same devices
  (operators recorded, computed by one ``jax.jit`` program at the first read of a value), to
  be compared with ``boxfall_jax``: the same tests must pass on both.

SciPy: its ``xp`` fixture (``scipy/conftest.py``) is parametrized by a list made at import;
``pytest_generate_tests`` below appends boxfall's namespaces to that fixture's params, and their
``__name__`` joins ``xp_known_backends`` so that ``skip_xp_backends(np_only=True)`` skips them as
it skips every library that is not NumPy. scikit-learn: ``yield_namespaces`` and
``yield_namespace_device_dtype_combinations`` (``sklearn.utils._array_api``) are wrapped before
any test module imports them, and each namespace is in ``sys.modules`` under its name, so
``_array_api_for_tests`` imports it as it imports ``array_api_strict``.

Every test that runs on a namespace is recorded: with ``BOXFALL_CLIENTS_RESULTS`` set, one JSON
line a test (``label``, ``ns``, ``outcome``, ``nodeid``, ``seconds``) is appended to that file
as the test ends, so a run cut short keeps what it ran. ``--boxfall-clients-only`` deselects
the tests that run on none of the compared namespaces (NumPy's, and scikit-learn's tests that
loop over no namespace), to spend the run on the comparison. ``BOXFALL_CLIENTS_NAMESPACES`` (a comma
separated list of the names above and ``array_api_strict``) narrows a run to some of them.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import boxfall.array_api as bxp
import pytest
from boxfall.testing import register_python_backend

PYTHON_BACKEND = "ClientPy"
"""The name of the Python backend the plugin registers."""


# The Python backend boxfall.testing provides (NumPy-payload "device memory", copy hooks and
# bf.cpu_fallback), registered once per process.
register_python_backend(PYTHON_BACKEND)

COMPARED_ALL = (
    "boxfall_native",
    "boxfall_python",
    "boxfall_jax",
    "boxfall_jax_graph",
    "array_api_strict",
)
"""Every namespace the plugin can compare, in the table's column order."""

_CHOSEN = {n for n in os.environ.get("BOXFALL_CLIENTS_NAMESPACES", "").split(",") if n}
if _CHOSEN - set(COMPARED_ALL):
    raise ValueError(
        f"BOXFALL_CLIENTS_NAMESPACES names {sorted(_CHOSEN - set(COMPARED_ALL))}, "
        f"none of {COMPARED_ALL}"
    )

COMPARED = tuple(n for n in COMPARED_ALL if not _CHOSEN or n in _CHOSEN)
"""The namespaces this run compares: those ``BOXFALL_CLIENTS_NAMESPACES`` names (a comma
separated list), or all of them where it is unset or empty. A run spent on two of them (graph
mode against eager mode) neither adds the others to the libraries' parametrizations nor runs
array_api_strict's tests unless it is named."""

_MAKERS: dict[str, Any] = {
    "boxfall_native": lambda: bxp.namespace("Native"),
    "boxfall_python": lambda: bxp.namespace(PYTHON_BACKEND),
}
try:
    import boxfall.jax as _bj
except ImportError:
    pass
else:
    _MAKERS["boxfall_jax"] = _bj.namespace
    _MAKERS["boxfall_jax_graph"] = lambda: _bj.namespace(graph=True)

NAMESPACES: dict[str, Any] = {n: make() for n, make in _MAKERS.items() if n in COMPARED}
"""The compared boxfall namespaces by the name the libraries' parametrizations see."""

for _name, _ns in NAMESPACES.items():
    # importlib.import_module finds a module in sys.modules by its name first: scikit-learn's
    # _array_api_for_tests imports a namespace by the name its generators yield.
    sys.modules.setdefault(_name, _ns)


def _patch_sklearn() -> None:
    try:
        import sklearn.utils._array_api as sk
    except ImportError:
        return
    if getattr(sk, "_boxfall_clients", False):
        return
    namespaces = sk.yield_namespaces
    combinations = sk.yield_namespace_device_dtype_combinations

    @functools.wraps(namespaces)
    def yield_namespaces(include_numpy_namespaces: bool = True) -> Any:
        yield from namespaces(include_numpy_namespaces=include_numpy_namespaces)
        yield from NAMESPACES

    @functools.wraps(combinations)
    def yield_namespace_device_dtype_combinations(include_numpy_namespaces: bool = True) -> Any:
        yield from combinations(include_numpy_namespaces=include_numpy_namespaces)
        for name in NAMESPACES:
            yield name, None, None

    sk.yield_namespaces = yield_namespaces
    sk.yield_namespace_device_dtype_combinations = yield_namespace_device_dtype_combinations
    sk._boxfall_clients = True


# Before scikit-learn's test modules (and sklearn.utils.estimator_checks) import the generators
# by name: a -p plugin is imported before any conftest or test module.
_patch_sklearn()


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        "--boxfall-clients-only",
        action="store_true",
        help="deselect tests that run on none of boxfall's namespaces and array_api_strict",
    )


_extended: set[int] = set()


def _extend_scipy_xp(metafunc: Any) -> None:
    defs = getattr(metafunc, "_arg2fixturedefs", {}).get("xp")
    if not defs:
        return
    fixturedef = defs[-1]
    if id(fixturedef) in _extended or fixturedef.params is None:
        return
    conftest = sys.modules.get("scipy.conftest")
    if conftest is None or fixturedef.func.__module__ != "scipy.conftest":
        return
    mark = pytest.mark.array_api_backends
    params = list(fixturedef.params)
    params += [pytest.param(ns, id=name, marks=mark) for name, ns in NAMESPACES.items()]
    fixturedef.params = params
    fixturedef.ids = None
    # skip_xp_backends(np_only=True) skips every known backend but NumPy.
    conftest.xp_known_backends.update(ns.__name__ for ns in NAMESPACES.values())
    _extended.add(id(fixturedef))


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: Any) -> None:
    if "xp" in metafunc.fixturenames:
        _extend_scipy_xp(metafunc)


_BY_MODULE = {id(ns): name for name, ns in NAMESPACES.items()}


def _name_of(value: Any) -> str | None:
    if isinstance(value, str):
        return value if value in (*NAMESPACES, "array_api_strict", "numpy") else None
    if id(value) in _BY_MODULE:
        return _BY_MODULE[id(value)]
    name = getattr(value, "__name__", None)
    if name in ("array_api_strict", "numpy"):
        return name
    keywords = getattr(value, "keywords", None)  # a check of scikit-learn's: a partial
    if isinstance(keywords, dict) and "array_namespace" in keywords:
        return _name_of(keywords["array_namespace"])
    return None


def namespace_of(item: Any) -> str | None:
    """The namespace a collected test runs on, or None."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for key in ("xp", "array_namespace", "namespace", "check"):
        if key in callspec.params:
            found = _name_of(callspec.params[key])
            if found is not None:
                return found
    for value in callspec.params.values():
        found = _name_of(value)
        if found is not None:
            return found
    return None


GRAPH_KNOWN: dict[str, str] = {}
"""Tests that fail on ``boxfall_jax_graph`` and pass on ``boxfall_jax``, with the cause, by
their module's name and their name in it (a node id depends on pytest's root directory):
marked ``xfail(strict=True)`` on the graph namespace, so that one that passes again fails the
run (and comes off this list)."""


def _known_name(item: Any) -> str:
    """``module::Class::test`` of a collected test, without its parameters."""
    module = getattr(getattr(item, "module", None), "__name__", "")
    inside = item.nodeid.split("[", 1)[0].split("::", 1)[-1]
    return f"{module}::{inside}"


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        item.stash[_NS] = namespace_of(item)
        if item.stash[_NS] == "boxfall_jax_graph":
            reason = GRAPH_KNOWN.get(_known_name(item))
            if reason is not None:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    if not config.getoption("--boxfall-clients-only"):
        return
    keep = [i for i in items if i.stash[_NS] in COMPARED]
    gone = [i for i in items if i.stash[_NS] not in COMPARED]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = keep


_NS = pytest.StashKey[Any]()
_OUTCOME = pytest.StashKey[str]()
_SECONDS = pytest.StashKey[float]()
_XFAIL = pytest.StashKey[str]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    previous = item.stash.get(_OUTCOME, "passed")
    if report.failed:
        now = "failed"
    elif hasattr(report, "wasxfail"):
        now = "xpassed" if report.passed else "xfailed"
    elif report.skipped:
        now = "skipped"
    else:
        now = "passed"
    # The worst phase decides (a teardown error fails a test that passed).
    item.stash[_OUTCOME] = max(now, previous, key=_RANK.index)
    # Setup, call and teardown: what the test costs the run (SciPy's fixtures do real work).
    item.stash[_SECONDS] = item.stash.get(_SECONDS, 0.0) + report.duration
    if hasattr(report, "wasxfail"):
        item.stash[_XFAIL] = report.wasxfail


_RANK = ["passed", "xpassed", "xfailed", "skipped", "failed"]


def _clear_jax_caches() -> None:
    """JAX's caches of compiled programs, which grow with every new shape a test module meets
    (a module of SciPy's tests meets hundreds: plain jax.numpy grew to 3 GB so, boxfall.jax's
    kernels and programs with it), emptied where a module ends: the next module compiles what
    it needs again. Nothing where JAX was not imported, or where
    ``BOXFALL_CLIENTS_KEEP_JAX_CACHES`` is set (to measure what the caches hold)."""
    jax = sys.modules.get("jax")
    if jax is not None and not os.environ.get("BOXFALL_CLIENTS_KEEP_JAX_CACHES"):
        jax.clear_caches()


RESIDENT_LIMIT = 2 << 30
"""The resident bytes past which JAX's caches are emptied after a test, not only where a module
ends: one module of SciPy's tests (ndimage's filters) meets thousands of shapes."""


def _resident_bytes() -> int:
    """This process's resident memory now (Linux's /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _peak_mib() -> int:
    """This process's peak resident memory so far (0 where the platform does not say): the
    test where it jumps is the one that took it, which ``resident_mib`` after the test misses."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10  # Linux: KiB


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    yield
    module_ends = nextitem is None or getattr(nextitem, "module", None) is not getattr(
        item, "module", None
    )
    if module_ends or _resident_bytes() > RESIDENT_LIMIT:
        _clear_jax_caches()
    path = os.environ.get("BOXFALL_CLIENTS_RESULTS")
    if not path:
        return
    row = {
        "label": os.environ.get("BOXFALL_CLIENTS_LABEL", ""),
        "ns": item.stash.get(_NS, None),
        "outcome": item.stash.get(_OUTCOME, "skipped"),
        "nodeid": item.nodeid,
        "seconds": round(item.stash.get(_SECONDS, 0.0), 4),
        "resident_mib": _resident_bytes() >> 20,
        "peak_mib": _peak_mib(),
    }
    if _XFAIL in item.stash:
        row["xfail"] = item.stash[_XFAIL]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
