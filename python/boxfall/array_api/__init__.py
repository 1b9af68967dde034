"""The Python array API standard (2024.12) as boxfall operators.

Every function is the operator ``array_api::<name>``, with a schema in PyTorch's language and a
NumPy CPU kernel, so it runs on every backend that has the CPU fallback (Native has it; a
backend written in Python registers ``bf.cpu_fallback``), counted per operator in
``bf.metrics``, and a backend takes any of them natively with
``bf.Library("array_api", "IMPL").impl("add", accel_add, "Accel")``::

    import boxfall.array_api as xp
    nx = xp.namespace("Native")            # creation functions default to Native
    x = nx.asarray([1.0, 2.0]); y = nx.ones(2)
    z = x + y                              # array_api::add, Native's CPU fallback
    xp.sum(z, axis=0)

``xp`` itself creates on the CPU, where arrays are NumPy arrays; on any other device an array is
a ``bf.Tensor``. Dtypes are NumPy's dtype objects (``xp.float64 == np.dtype("float64")``).

The package follows the standard's chapters, one file each, every file a table of schemas and
kernels that registers itself (``_registry``): ``_elementwise_functions``,
``_creation_functions``, ``_statistical_functions``, ``_manipulation_functions``,
``_linear_algebra_functions``, ``_data_type_functions``, ``_utility_functions``,
``_searching_functions``, ``_sorting_functions``, ``_set_functions``, ``_indexing_functions``,
``_constants``, ``_info``, ``_indexing`` (``x[key]`` and ``x[key] = value``: the operators
``array_api::getitem`` and ``array_api::setitem``) and ``_array_methods`` (the methods of
``bf.Tensor``, DLPack included); the ``linalg`` extension is ``_linalg`` (operators
``array_api::linalg_<name>``), public as ``xp.linalg``, and the ``fft`` extension ``_fft``
(operators ``array_api::fft_<name>``), public as ``xp.fft``.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from . import (
    _constants,
    _creation_functions,
    _data_type_functions,
    _dtypes,
    _elementwise_functions,
    _fft,
    _helpers,
    _indexing,
    _indexing_functions,
    _info,
    _linear_algebra_functions,
    _manipulation_functions,
    _registry,
    _searching_functions,
    _set_functions,
    _sorting_functions,
    _statistical_functions,
    _utility_functions,
    fft,
    linalg,
)
from ._constants import *  # noqa: F403
from ._creation_functions import *  # noqa: F403
from ._data_type_functions import *  # noqa: F403
from ._dtypes import *  # noqa: F403
from ._elementwise_functions import *  # noqa: F403
from ._indexing_functions import *  # noqa: F403
from ._linear_algebra_functions import *  # noqa: F403
from ._manipulation_functions import *  # noqa: F403
from ._searching_functions import *  # noqa: F403
from ._set_functions import *  # noqa: F403
from ._sorting_functions import *  # noqa: F403
from ._statistical_functions import *  # noqa: F403
from ._utility_functions import *  # noqa: F403

__array_api_version__ = "2024.12"

# Graph mode's shape rules of these operators (Rust's), registered as any operator's rule is
# (``lib.register_shape_rule``): a recorded call asks its operator's rule, never a name.
_registry._library.register_array_api_shape_rules()

NATIVE_KERNELS: list[str] = _registry._library.register_native_array_api_kernels()
"""The operators Native runs with its Rust kernels (element-wise arithmetic and comparisons in
their three overloads, ``sum``/``prod``/``mean``/``max``/``min``), for every dtype; the cases
they do not compute go to the CPU fallback (see :func:`boxfall.native.register_kernels`)."""

_CHAPTERS = (
    _constants,
    _creation_functions,
    _data_type_functions,
    _dtypes,
    _elementwise_functions,
    _linear_algebra_functions,
    _indexing,
    _indexing_functions,
    _manipulation_functions,
    _searching_functions,
    _set_functions,
    _sorting_functions,
    _statistical_functions,
    _utility_functions,
)


def __array_namespace_info__() -> _info.Info:
    """The inspection API of the CPU namespace."""
    return _info.Info("cpu")


def _on_device(fn: Any, device: str) -> Any:
    # asarray and from_dlpack keep a bf.Tensor's device (the standard's rule); the others are
    # made where the namespace is. Decided here, once: the wrapper is on every creation call.
    if fn in (asarray, from_dlpack):  # noqa: F405

        @functools.wraps(fn)
        def create(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("device") is None and not (args and isinstance(args[0], Tensor)):
                kwargs["device"] = device
            return fn(*args, **kwargs)

    else:

        @functools.wraps(fn)
        def create(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("device") is None:
                kwargs["device"] = device
            return fn(*args, **kwargs)

    return create


_namespaces: dict[str, types.ModuleType] = {}


def _module_name(device: str) -> str:
    """The ``__name__`` of ``namespace(device)``: a dotted name of identifiers
    (``boxfall.array_api.Native_0``), as a module's is. Libraries put ``xp.__name__`` in their
    messages and their tests match those with it as a regular expression (SciPy's
    ``bootstrap``, scikit-learn's ``Ridge``), where brackets would be a character class."""
    return "boxfall.array_api." + "".join(c if c.isalnum() else "_" for c in device)


def _fft_namespace(device: str) -> types.ModuleType:
    """``fft`` of ``namespace(device)``: the same functions, ``fftfreq``/``rfftfreq`` on
    ``device`` by default."""
    mod = types.ModuleType(f"{_module_name(device)}.fft", fft.__doc__)
    for attr in fft.__all__:
        mod.__dict__[attr] = getattr(fft, attr)
    for attr in _fft.DEVICE_DEFAULTED:
        mod.__dict__[attr] = _on_device(getattr(fft, attr), device)
    mod.__dict__["__all__"] = list(fft.__all__)
    return mod


def namespace(device: Any) -> types.ModuleType:
    """The namespace whose creation functions default to ``device`` (``"Native"``,
    ``"Accel:0"``, any device string ``bf.Tensor.device`` prints, or ``"cpu"``). Every other
    function is the same object as in ``boxfall.array_api``. ``asarray`` keeps a
    ``bf.Tensor``'s device (the standard's rule) and moves anything else, NumPy arrays
    included, to the namespace's device."""
    found = _namespaces.get(device) if isinstance(device, str) else None
    if found is not None:
        return found
    name = _helpers.canonical_device(device)
    if name == "cpu":
        import boxfall.array_api as xp

        return xp
    found = _namespaces.get(name)
    if found is not None:
        if isinstance(device, str) and len(_namespaces) < 1024:
            _namespaces[device] = found
        return found
    ns = types.ModuleType(_module_name(name), f"boxfall.array_api on {name}.")
    for chapter in _CHAPTERS:
        for attr in chapter.__all__:
            ns.__dict__[attr] = globals()[attr]
    for attr in _creation_functions.DEVICE_DEFAULTED:
        ns.__dict__[attr] = _on_device(globals()[attr], name)
    ns.__dict__["__array_api_version__"] = __array_api_version__
    ns.__dict__["linalg"] = linalg
    ns.__dict__["fft"] = _fft_namespace(name)
    ns.__dict__["__array_namespace_info__"] = lambda: _info.Info(name)
    ns.__dict__["namespace"] = namespace
    ns.__dict__["device"] = name
    _namespaces[name] = ns
    if isinstance(device, str):
        _namespaces[device] = ns
    return ns


from .._boxfall import Tensor  # noqa: E402

__all__ = sorted(
    {
        "__array_api_version__",
        "__array_namespace_info__",
        "fft",
        "linalg",
        "namespace",
        *(n for chapter in _CHAPTERS for n in chapter.__all__),
    }
)

from . import _array_methods  # noqa: E402

_array_methods.install(Tensor)
