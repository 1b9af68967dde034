"""``@bf.custom_op``: an operator defined from a Python function's type hints, as
``torch.library.custom_op`` defines one.

The schema is inferred from the signature (types from the hints, defaults from the defaults,
keyword-only parameters after ``*``), the function becomes the operator's CPU kernel, and the
returned :class:`CustomOpDef` is callable as the operator.
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, Union, get_args, get_origin, overload

import numpy as np

from ._boxfall import FunctionSchema, Library, OpOverload, Tensor, find_op
from ._errors import SchemaError

_F = TypeVar("_F", bound=Callable[..., Any])

# The hints that stand for one schema type, and the element types a list may have.
_SCALARS: dict[Any, str] = {bool: "bool", int: "int", float: "float", str: "str"}
_LIST_ELEMENTS = ("Tensor", "Tensor?", "int", "float", "bool")
_SEQUENCES = (list, tuple, Sequence)  # the origins of list[int], tuple[int, ...], Sequence[int]
_HINTS_TAKEN = (
    "np.ndarray or bf.Tensor (Tensor), int, float, bool, str, int | float (Scalar), "
    "Sequence[int] or list[int] (int[]; also of float, bool, np.ndarray), "
    "Optional[X] or X | None (X?), and for the return also None (()) and "
    "tuple[X, Y] ((X, Y))"
)

# The libraries of custom operators live for the process, as @bf.impl's do.
_libraries: list[Library] = []


class _Unmappable(Exception):
    """A hint with no schema type (turned into a SchemaError naming the parameter)."""


def _is_tensor(hint: Any) -> bool:
    return hint is np.ndarray or hint is Tensor or get_origin(hint) is np.ndarray


def _union_members(hint: Any) -> tuple[Any, ...] | None:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return None


def _schema_type(hint: Any) -> str:
    """The schema type of a parameter's hint (``_Unmappable`` if it has none)."""
    members = _union_members(hint)
    if members is not None:
        present = [m for m in members if m is not type(None)]
        if len(present) < len(members):  # Optional[...] / X | None
            inner = _schema_type(present[0] if len(present) == 1 else Union[tuple(present)])  # noqa: UP007
            if inner.endswith("?"):
                raise _Unmappable
            return inner + "?"
        if set(present) in ({int, float}, {int, float, bool}):
            return "Scalar"
        raise _Unmappable
    if _is_tensor(hint):
        return "Tensor"
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin in _SEQUENCES:
        if origin is tuple:
            if len(args) != 2 or args[1] is not Ellipsis:
                raise _Unmappable  # a fixed-size tuple is no list type
            args = args[:1]
        if len(args) != 1:
            raise _Unmappable
        element = _schema_type(args[0])
        if element not in _LIST_ELEMENTS:
            raise _Unmappable
        return element + "[]"
    raise _Unmappable


def _return_types(hint: Any) -> str:
    """The schema's returns for the return hint: ``()``, one type, or ``(X, Y)``."""
    if hint is None or hint is type(None):
        return "()"
    if get_origin(hint) is tuple:
        args = get_args(hint)
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            raise _Unmappable  # a tuple of unknown length is no fixed list of returns
        return "(" + ", ".join(_schema_type(a) for a in args) + ")"
    return _schema_type(hint)


def _default_text(value: Any, schema_type: str) -> str:
    """A default as the schema language writes it (``_Unmappable`` if it cannot)."""
    if value is None:
        if not schema_type.endswith("?"):
            raise _Unmappable
        return "None"
    if schema_type.startswith("Tensor"):
        raise _Unmappable  # a tensor's only default is None
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    raise _Unmappable


def _alias_letter(i: int) -> str:
    return chr(ord("a") + i) if i < 26 else f"a{i}"


def _mutated_type(schema_type: str, letter: str) -> str | None:
    """``Tensor(a!)`` (``Tensor(a!)?``, ``Tensor(a!)[]``) for a tensor type, else None."""
    if schema_type in ("Tensor", "Tensor?", "Tensor[]"):
        return f"Tensor({letter}!){schema_type[len('Tensor') :]}"
    return None


def infer_schema(name: str, fn: Callable[..., Any], mutates_args: Iterable[str]) -> str:
    """The schema text of ``fn`` as operator ``name`` (``"ns::op"``), from its type hints.

    ``mutates_args`` names the tensor parameters the function writes; each becomes
    ``Tensor(a!)`` with an alias letter of its own. A hint, default or parameter the schema
    language cannot write is a :class:`SchemaError` that names it and lists the hints taken.
    """
    where = f"bf.custom_op({name!r})"
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:  # a hint naming something not importable where fn was defined
        raise SchemaError(
            f"{where}: the type hints of {fn.__qualname__} cannot be read: {e}"
        ) from e
    mutated = list(mutates_args)
    signature = inspect.signature(fn)
    unknown = [m for m in mutated if m not in signature.parameters]
    if unknown:
        raise SchemaError(
            f"{where}: mutates_args names {', '.join(map(repr, unknown))}, which "
            f"{'is no parameter' if len(unknown) == 1 else 'are no parameters'} of "
            f"{fn.__qualname__}{signature}"
        )
    arguments: list[str] = []
    keyword_only_started = False
    letters = iter(range(len(mutated)))
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise SchemaError(
                f"{where}: parameter {p.name!r} is *{p.name} or **{p.name}; an operator's "
                "arguments are named one by one"
            )
        if p.name not in hints:
            raise SchemaError(
                f"{where}: parameter {p.name!r} has no type hint; give it one of: {_HINTS_TAKEN}"
            )
        try:
            schema_type = _schema_type(hints[p.name])
        except _Unmappable:
            raise SchemaError(
                f"{where}: parameter {p.name!r} has type hint {_hint_text(hints[p.name])}, "
                f"which maps to no schema type; use one of: {_HINTS_TAKEN} (or give schema=)"
            ) from None
        if p.name in mutated:
            written = _mutated_type(schema_type, _alias_letter(next(letters)))
            if written is None:
                raise SchemaError(
                    f"{where}: mutates_args names {p.name!r}, of type {schema_type}; only "
                    "tensors (np.ndarray, bf.Tensor, their Optional and Sequence) are written"
                )
            schema_type = written
        text = f"{schema_type} {p.name}"
        if p.default is not p.empty:
            try:
                text += "=" + _default_text(p.default, schema_type)
            except _Unmappable:
                raise SchemaError(
                    f"{where}: parameter {p.name!r} ({schema_type}) has default "
                    f"{p.default!r}, which the schema language cannot write (a tensor's "
                    "default can only be None; others are numbers, bools, strings, None "
                    "for an Optional, or lists of numbers)"
                ) from None
        if p.kind is p.KEYWORD_ONLY and not keyword_only_started:
            arguments.append("*")
            keyword_only_started = True
        arguments.append(text)
    if "return" not in hints:
        raise SchemaError(
            f"{where}: {fn.__qualname__} has no return type hint; write -> None for no returns"
        )
    try:
        returns = _return_types(hints["return"])
    except _Unmappable:
        raise SchemaError(
            f"{where}: the return type hint {_hint_text(hints['return'])} maps to no schema "
            f"type; use one of: {_HINTS_TAKEN} (or give schema=)"
        ) from None
    return f"{name}({', '.join(arguments)}) -> {returns}"


def _hint_text(hint: Any) -> str:
    return hint.__qualname__ if isinstance(hint, type) else repr(hint)


def _keys(device_types: str | Sequence[str] | None) -> list[str]:
    if device_types is None:
        return ["CPU"]
    if isinstance(device_types, str):
        return [device_types]
    return list(device_types)


class CustomOpDef:
    """An operator made by :func:`custom_op`: callable as the operator, with its
    :class:`OpOverload` (``.op``), its schema (``.schema``) and :meth:`register_kernel` for
    the kernels of other keys. Its registrations live for the process."""

    def __init__(self, lib: Library, op: OpOverload, fn: Callable[..., Any]) -> None:
        self._lib = lib
        self._op = op
        self._fn = fn
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        """The operator's name (``"demo::scale"``)."""
        return self._op.name

    @property
    def op(self) -> OpOverload:
        """The operator, as ``bf.ops.<ns>.<name>.<overload>`` is (for ``lib.impl``,
        ``bf.coverage``, the metrics and the policy)."""
        return self._op

    @property
    def schema(self) -> FunctionSchema:
        """The inferred schema (``str(scale.schema)`` prints it)."""
        return self._op.schema

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the operator (dispatched on the arguments' keys, as ``self.op(...)``)."""
        return self._op(*args, **kwargs)

    @overload
    def register_kernel(
        self, device_types: str | Sequence[str], fn: None = None, *, allow_override: bool = False
    ) -> Callable[[_F], _F]: ...
    @overload
    def register_kernel(
        self, device_types: str | Sequence[str], fn: _F, *, allow_override: bool = False
    ) -> _F: ...
    def register_kernel(
        self,
        device_types: str | Sequence[str],
        fn: Callable[..., Any] | None = None,
        *,
        allow_override: bool = False,
    ) -> Any:
        """Registers ``fn`` as the operator's kernel for the key(s) ``device_types``
        (``"Accel"``, any case; a list for several): ``scale.register_kernel("Accel")(fn)``
        or as a decorator. A second kernel for a key needs ``allow_override``."""

        def register(kernel: _F) -> _F:
            for key in _keys(device_types):
                self._lib.impl(self._op, kernel, key, allow_override=allow_override)
            return kernel

        return register if fn is None else register(fn)

    @overload
    def register_shape_rule(self, fn: None = None) -> Callable[[_F], _F]: ...
    @overload
    def register_shape_rule(self, fn: _F) -> _F: ...
    def register_shape_rule(self, fn: Callable[..., Any] | None = None) -> Any:
        """Registers ``fn`` as the operator's shape rule (``lib.register_shape_rule``; as
        ``torch.library.register_fake``), so that graph mode records its calls: ``fn`` gets a
        :class:`bf.TensorMeta` per tensor argument and the other arguments as values, and
        returns the outputs' metas, or raises ``bf.DataDependentError``. Used as a decorator
        (``@scale.register_shape_rule``) or called with ``fn``."""

        def register(rule: _F) -> _F:
            self._lib.register_shape_rule(self._op, rule)
            return rule

        return register if fn is None else register(fn)

    def __repr__(self) -> str:
        return f"bf.CustomOpDef({self._op.name!r}: {self._op.schema})"


@overload
def custom_op(
    name: str,
    fn: None = None,
    /,
    *,
    mutates_args: Iterable[str],
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
) -> Callable[[Callable[..., Any]], CustomOpDef]: ...
@overload
def custom_op(
    name: str,
    fn: Callable[..., Any],
    /,
    *,
    mutates_args: Iterable[str],
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
) -> CustomOpDef: ...
def custom_op(
    name: str,
    fn: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: Iterable[str],
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
) -> Any:
    """Defines operator ``name`` (``"ns::op"`` or ``"ns::op.overload"``) from a function, as
    ``torch.library.custom_op`` does; the function is its kernel for ``device_types`` (CPU by
    default, where it gets and returns NumPy arrays)::

        @bf.custom_op("demo::scale", mutates_args=())
        def scale(x: np.ndarray, factor: float = 2.0) -> np.ndarray:
            return x * factor

        str(scale.schema)      # 'demo::scale(Tensor x, float factor=2.) -> Tensor'
        scale.register_kernel("Accel")(accel_scale)
        scale(x, 3.0)          # bf.ops.demo.scale(x, 3.0)

    The schema comes from the type hints: ``np.ndarray``/``bf.Tensor`` -> ``Tensor``,
    ``int``, ``float``, ``bool``, ``str``, ``int | float`` -> ``Scalar``, ``Sequence[int]``
    (or ``list[int]``) -> ``int[]``, ``Optional[X]``/``X | None`` -> ``X?``; the return
    ``None`` -> ``()``, ``tuple[np.ndarray, np.ndarray]`` -> ``(Tensor, Tensor)``. Defaults
    come from the signature and parameters after ``*`` are keyword-only. ``mutates_args``
    (required, ``()`` for none) names the parameters the function writes in place: each
    becomes ``Tensor(a!)`` (``b``, ``c``... for the next). ``schema=`` gives the schema text
    (without the name: ``"(Tensor x) -> Tensor"``) instead of inferring it. A hint it cannot
    map is a :class:`SchemaError` naming the parameter.

    The definition goes in a ``"FRAGMENT"`` library of the namespace kept for the life of the
    process (so a namespace with a ``"DEF"`` library of its own takes custom operators too).
    """
    if isinstance(mutates_args, str):
        raise TypeError(
            f"bf.custom_op({name!r}): mutates_args is the names of the parameters the function "
            f"writes, as a tuple (mutates_args=({mutates_args!r},)), or () for none"
        )
    mutated = tuple(mutates_args)
    ns, sep, _ = name.partition("::")
    if not sep or not ns:
        raise SchemaError(f"bf.custom_op needs a qualified name ('ns::op'), got {name!r}")

    def define(func: Callable[..., Any]) -> CustomOpDef:
        text = infer_schema(name, func, mutated) if schema is None else f"{name}{schema.strip()}"
        lib = Library(ns, "FRAGMENT")
        try:
            lib.define(text)
            op = find_op(name)
            for key in _keys(device_types):
                lib.impl(op, func, key)
        except BaseException:
            lib.close()
            raise
        lib._for_process_life()  # it goes at exit: no ResourceWarning then
        _libraries.append(lib)
        return CustomOpDef(lib, op, func)

    return define if fn is None else define(fn)
