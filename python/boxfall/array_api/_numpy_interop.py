"""NumPy's functions and ufuncs given ``bf.Tensor`` arrays (NumPy's ``__array_ufunc__`` and
``__array_function__`` protocols).

``np.sqrt(t)``, ``np.add.reduce(t)``, ``np.concatenate([t, u])``, ``np.linalg.norm(t)`` give
NumPy's values with their array results on the arguments' device, as CuPy's arrays do. Each
NumPy function (or ufunc method) is an operator of its own in the namespace ``numpy``, defined
at its first call: ``numpy::sqrt``, ``numpy::add.reduce``, ``numpy::concatenate``,
``numpy::linalg_norm``, every one of the schema::

    numpy::<name>(Any call, Tensor[] arrays, Tensor(a!)[] outs) -> (Tensor[], Any)

whose CPU kernel is the NumPy function itself, so a device runs it through its CPU fallback
(counted in ``bf.metrics`` under that name, under the fallback policy) and a backend may take
one natively (``bf.Library("numpy", "IMPL")``). ``arrays`` are the call's tensors (found in
its positional and keyword arguments and in lists and tuples there), ``outs`` the tensors it
writes (``out=``, ``ufunc.at``'s first argument, the destination of ``np.copyto``,
``np.put``, ``np.place``, ``np.putmask``, ``np.fill_diagonal``): the fallback writes those
back into the device tensors, all or nothing. The results keep NumPy's structure: arrays come
back as tensors on the device (an ``out=`` tensor as itself), NumPy scalars and other values as
NumPy gives them.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .. import _boxfall
from .._boxfall import Library, Tensor

NAMESPACE = "numpy"

_library: Library | None = None
_ops: dict[str, Any] = {}

_WRITES_FIRST = frozenset({"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis"})
"""NumPy functions that write into their first argument."""

_MAX_DEPTH = 8


class _Slot:
    """Where the ``i``-th array (of ``arrays``, or of ``outs`` when ``out``) goes."""

    __slots__ = ("i", "out")

    def __init__(self, i: int, out: bool) -> None:
        self.i, self.out = i, out


class _Call:
    """The call with its tensors taken out: an opaque object the dispatcher passes as it is."""

    __slots__ = ("fn", "args", "kwargs")

    def __init__(self, fn: Any, args: Any, kwargs: Any) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs


def _take(value: Any, arrays: list[Any], outs: list[Any], out: bool, depth: int = 0) -> Any:
    if isinstance(value, Tensor):
        into = outs if out else arrays
        into.append(value)
        return _Slot(len(into) - 1, out)
    if depth < _MAX_DEPTH and type(value) in (list, tuple):
        return type(value)(_take(v, arrays, outs, out, depth + 1) for v in value)
    return value


def _put(value: Any, arrays: Any, outs: Any, depth: int = 0) -> Any:
    if isinstance(value, _Slot):
        return (outs if value.out else arrays)[value.i]
    if depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        return _rebuild(value, (_put(v, arrays, outs, depth + 1) for v in value))
    return value


def _rebuild(like: Any, items: Any) -> Any:
    """A list or tuple of ``like``'s type (a named tuple's too: ``np.linalg.qr``'s)."""
    if type(like) in (list, tuple):
        return type(like)(items)
    if isinstance(like, tuple) and hasattr(like, "_fields"):
        return type(like)(*items)
    return list(items) if isinstance(like, list) else tuple(items)


class _Result:
    """The kernel's result with its arrays taken out (``_Slot``s into the returned arrays, or
    into ``outs`` for a result that is an ``out`` array)."""

    __slots__ = ("template",)

    def __init__(self, template: Any) -> None:
        self.template = template


def _given(value: Any, into: set[int], depth: int = 0) -> None:
    if isinstance(value, np.ndarray):
        into.add(id(value))
    elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        for v in value:
            _given(v, into, depth + 1)


def _split(value: Any, found: list[Any], outs: list[Any], given: set[int], depth: int = 0) -> Any:
    if isinstance(value, np.ndarray):
        for i, o in enumerate(outs):
            if value is o:
                return _Slot(i, True)
        if id(value) in given:  # the caller's own NumPy array (`out=`): itself, as NumPy does
            return value
        found.append(value)
        return _Slot(len(found) - 1, False)
    if depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        return _rebuild(value, (_split(v, found, outs, given, depth + 1) for v in value))
    return value


def _kernel(call: Any, arrays: list[Any], outs: list[Any]) -> tuple[list[Any], Any]:
    """NumPy's function on the host arrays; its array results taken out of its result."""
    args = _put(call.args, arrays, outs)
    kwargs = {k: _put(v, arrays, outs) for k, v in call.kwargs.items()}
    result = call.fn(*args, **kwargs)
    found: list[Any] = []
    given: set[int] = set()
    _given((call.args, tuple(call.kwargs.values())), given)
    template = _split(result, found, outs, given)
    return found, _Result(template)


def _name(fn: Any, method: str | None) -> str:
    if method is not None:  # a ufunc
        name = fn.__name__
        return name if method == "__call__" else f"{name}.{method}"
    module = getattr(fn, "__module__", "") or ""
    prefix = module.removeprefix("numpy").strip(".").replace("._", ".").split(".")
    parts = [p for p in prefix if p and not p.startswith("_") and p not in ("core", "lib")]
    return "_".join([*parts, getattr(fn, "__name__", "function")])


def _operator(name: str) -> Any:
    op = _ops.get(name)
    if op is not None:
        return op
    global _library
    if _library is None:
        _library = Library(NAMESPACE, "FRAGMENT")
        _library._for_process_life()
    safe = re.sub(r"[^0-9A-Za-z_.]", "_", name)
    base, _, overload = safe.partition(".")
    schema = "(Any call, Tensor[] arrays, Tensor(a!)[] outs) -> (Tensor[], Any)"
    full = f"{NAMESPACE}::{base}" + (f".{overload}" if overload else "")
    try:
        op = _boxfall.find_op(full)
    except Exception:  # noqa: BLE001  (not defined yet)
        _library.define(f"{base}{'.' + overload if overload else ''}{schema}")
        _library.impl(f"{base}{'.' + overload if overload else ''}", _kernel, "CPU")
        op = _boxfall.find_op(full)
    _ops[name] = op
    return op


def _run(name: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], writes: Any) -> Any:
    arrays: list[Any] = []
    outs: list[Any] = []
    arglist = list(args)
    for i in writes:
        if i < len(arglist):
            arglist[i] = _take(arglist[i], arrays, outs, True)
    if "out" in kwargs:
        kwargs = dict(kwargs)
        kwargs["out"] = _take(kwargs["out"], arrays, outs, True)
    taken_args = tuple(_take(a, arrays, outs, False) for a in arglist)
    taken_kwargs = {k: _take(v, arrays, outs, False) for k, v in kwargs.items()}
    found, result = _operator(name)(_Call(fn, taken_args, taken_kwargs), arrays, outs)
    return _put(result.template, found, outs)


def _standard(ufunc: Any) -> Any:
    """The function of the standard that is this ufunc (``np.add``: ``add``), or None."""
    from . import _elementwise_functions as ew

    found = _STANDARD.get(ufunc)
    if found is None and not _STANDARD:
        for table in (ew.UNARY, ew.BINARY):
            for n, f in table.items():
                if isinstance(f, np.ufunc):
                    _STANDARD[f] = getattr(ew, n)
        found = _STANDARD.get(ufunc)
    return found


_STANDARD: dict[Any, Any] = {}


def array_ufunc(self: Any, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """``ufunc.method(*inputs, **kwargs)`` of NumPy, its arrays on the tensors' device. A plain
    call of a ufunc that is a function of the standard (``ndarray + tensor`` is ``np.add``) is
    that function's operator, which a backend's own kernel may serve."""
    plain = all(
        isinstance(x, (np.ndarray, np.generic, Tensor, bool, int, float, complex)) for x in inputs
    )
    if method == "__call__" and not kwargs and ufunc.nin == len(inputs) and plain:
        standard = _standard(ufunc)
        if standard is not None:
            # A NumPy scalar (``np.float32(2) * x``) too: the function takes it as a 0-d array
            # of its dtype, as NumPy 2 does, and its result stays a tensor on the device.
            return standard(*inputs)
    fn = getattr(ufunc, method)
    writes = (0,) if method == "at" else ()
    return _run(_name(ufunc, method), fn, inputs, kwargs, writes)


def array_function(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    """NumPy's ``func(*args, **kwargs)``, its arrays on the tensors' device."""
    if not all(issubclass(t, (np.ndarray, Tensor)) for t in types):
        return NotImplemented
    writes = (0,) if getattr(func, "__name__", "") in _WRITES_FIRST else ()
    # The kernel calls `func` with NumPy arrays only, so NumPy runs its own implementation.
    return _run(_name(func, None), func, tuple(args), dict(kwargs), writes)
