"""Every entry point of a call agrees with the general path, as a property: random schemas
(Tensor, Tensor?, Tensor[], int, float, bool, Scalar, int[] and str arguments, defaults,
keyword-only arguments, written ``Tensor(a!)`` arguments, zero to three returns, one of them
possibly aliasing a written argument) with a NumPy CPU kernel, called with random valid
arguments on the CPU (NumPy arrays), on a Python backend with ``bf.cpu_fallback`` and on Native,
through each entry point:

- the general path (the fast path off: bind, the core's boxed call, convert the returns);
- ``bf.ops.<ns>.<op>.<overload>(...)``, arguments by position, and all by keyword;
- the packet ``bf.ops.<ns>.<op>(...)``, with one overload or with a second that never binds;
- ``op.call_boxed([...])`` (the core's boxed call from a list);
- ``bf.call_fallback(bf.cpu_fallback, op, ...)`` (a call with a backend's tensor);
- a boxed kernel of a functionality key passing the call on with ``op.redispatch(keys, ...)``
  or ``op.redispatch_boxed(keys, stack)``, and a functionality key whose kernel is a
  fallthrough;
- the backend's own kernel handing the call to ``bf.call_fallback(bf.cpu_fallback, op, ...)``.

The core's boxed entry points are reached from here by the general path and ``op.call_boxed``
(``OperatorHandle::call_boxed``) and by the redispatches where the fast path passes
(``redispatch_boxed``); typed Rust calls have no Python entry and are covered by the Rust
tests.

Each entry point gets fresh arguments with the same values, and must give the same returns
(values, dtypes, devices, and which return is which argument's own object), leave the same
values in every argument (the written ones written, the others unchanged) and add the same
count to the operator's fallback counter. The kernel checks that it got the keyword-only
arguments by keyword and the others by position.

``BOXFALL_AGREE_EXAMPLES=500 python -m pytest tests/python/test_entry_points_agree.py`` runs
more examples than CI's default.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import boxfall as bf
import numpy as np
import pytest
from boxfall import _boxfall
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("BOXFALL_AGREE_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

KINDS = ["Tensor", "Tensor?", "Tensor[]", "int", "float", "bool", "Scalar", "int[]", "str"]
SHAPE = (3,)


# ------------------------------------------------------------------------------------------
# Schemas


@dataclass
class Arg:
    name: str
    kind: str  # one of KINDS, or "Tensor(a!)" for a written tensor
    kwonly: bool = False
    default: Any = None  # the Python value of the default, if `has_default`
    default_text: str = ""
    has_default: bool = False
    alias: str = ""  # the alias set of a written tensor


@dataclass
class Spec:
    name: str
    overload: str
    args: list[Arg]
    plain_returns: int  # returns that alias nothing
    aliased: int | None  # index in `args` of the written argument the first return aliases
    decoy: bool  # a second overload that binds no call

    @property
    def returns(self) -> int:
        return self.plain_returns + (self.aliased is not None)

    def schema(self) -> str:
        parts, star = [], False
        for a in self.args:
            if a.kwonly and not star:
                parts.append("*")
                star = True
            ty = f"Tensor({a.alias}!)" if a.kind == "Tensor(a!)" else a.kind
            default = f"={a.default_text}" if a.has_default else ""
            parts.append(f"{ty} {a.name}{default}")
        rets = ["Tensor"] * self.plain_returns
        if self.aliased is not None:
            rets.insert(0, f"Tensor({self.args[self.aliased].alias}!)")
        ret = rets[0] if len(rets) == 1 else f"({', '.join(rets)})"
        full = f"{self.name}.{self.overload}" if self.overload else self.name
        return f"{full}({', '.join(parts)}) -> {ret}"


DEFAULTS: dict[str, st.SearchStrategy[tuple[Any, str]]] = {
    "Tensor?": st.just((None, "None")),
    "int": st.integers(-3, 3).map(lambda v: (v, str(v))),
    "float": st.sampled_from([0.5, -1.25, 2.0]).map(lambda v: (v, repr(v))),
    "bool": st.booleans().map(lambda v: (v, str(v))),
    "Scalar": st.sampled_from([(1, "1"), (2.5, "2.5"), (True, "True")]),
    "int[]": st.lists(st.integers(0, 3), max_size=2).map(
        lambda v: (v, "[" + ", ".join(map(str, v)) + "]")
    ),
    "str": st.text("abz", min_size=1, max_size=3).map(lambda v: (v, f'"{v}"')),
}


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    kinds = draw(st.lists(st.sampled_from(KINDS), max_size=5))
    kinds += ["Tensor(a!)"] * draw(st.integers(0, 2))
    kinds = draw(st.permutations(kinds))
    if not kinds:
        kinds = ["Tensor"]
    kwonly_from = draw(st.integers(0, len(kinds)))
    args, aliases = [], iter("abcdefgh")
    for i, kind in enumerate(kinds):
        a = Arg(name=f"a{i}", kind=kind, kwonly=i >= kwonly_from)
        if kind == "Tensor(a!)":
            a.alias = next(aliases)
        elif kind in DEFAULTS and draw(st.booleans()):
            a.default, a.default_text = draw(DEFAULTS[kind])
            a.has_default = True
        args.append(a)
    written = [i for i, a in enumerate(args) if a.kind == "Tensor(a!)"]
    aliased = draw(st.sampled_from([None, *written])) if written else None
    return Spec(
        name=f"op{draw(st.integers(0, 9))}",
        overload=draw(st.sampled_from(["", "Tensor", "out"])),
        args=args,
        plain_returns=draw(st.integers(0, 3 - (aliased is not None))),
        aliased=aliased,
        decoy=draw(st.booleans()),
    )


# ------------------------------------------------------------------------------------------
# The kernel: a function of every argument, each weighted by its position, so that a swapped,
# lost or defaulted-by-mistake argument changes the result.


def contribution(kind: str, value: Any, weight: int) -> Any:
    if kind in ("Tensor", "Tensor(a!)"):
        return np.asarray(value, dtype=np.float64) * weight
    if kind == "Tensor?":
        return 0.0 if value is None else np.asarray(value, dtype=np.float64) * weight
    if kind == "Tensor[]":
        return sum((np.asarray(t, dtype=np.float64) for t in value), np.zeros(SHAPE)) * (
            weight + len(value)
        )
    if kind == "int[]":
        return float(sum(value) + len(value)) * weight
    if kind == "str":
        return float(sum(map(ord, value)) % 11 + len(value)) * weight
    return float(value) * weight  # int, float, bool, Scalar


def make_kernel(spec: Spec, calls: list[str]):
    positional = [a.name for a in spec.args if not a.kwonly]
    kwonly = {a.name for a in spec.args if a.kwonly}

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if len(args) != len(positional) or set(kwargs) != kwonly:
            raise AssertionError(f"bound wrong: {len(args)} positional, keywords {sorted(kwargs)}")
        bound = dict(zip(positional, args, strict=True)) | kwargs
        total = np.zeros(SHAPE)
        for i, a in enumerate(spec.args):
            total = total + contribution(a.kind, bound[a.name], i + 2)
        for i, a in enumerate(spec.args):
            if a.kind == "Tensor(a!)":
                x = bound[a.name]
                x[...] = x + total * 0.25 + i + 1
        outs = [np.asarray(total * (k + 1) + k) for k in range(spec.plain_returns)]
        if spec.aliased is not None:
            outs.insert(0, bound[spec.args[spec.aliased].name])
        calls.append("cpu")
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    return kernel


# ------------------------------------------------------------------------------------------
# Arguments: recipes drawn once, built afresh for each entry point.


@dataclass
class TensorRecipe:
    values: tuple[float, ...]
    device: str  # "cpu", "py" or "native"


@dataclass
class Call:
    recipes: list[Any]  # per argument: a TensorRecipe, a list of them, None, or a plain value
    given: list[bool]  # per argument: passed (False: left to its default)
    devices: set[str] = field(default_factory=set)


def tensor_recipes(device: str) -> st.SearchStrategy[TensorRecipe]:
    values = st.tuples(*[st.integers(-4, 4).map(lambda v: v / 2) for _ in range(SHAPE[0])])
    where = st.sampled_from(["cpu", device]) if device != "cpu" else st.just("cpu")
    return st.builds(TensorRecipe, values, where)


def value_of(kind: str, device: str) -> st.SearchStrategy[Any]:
    tensor = tensor_recipes(device)
    return {
        "Tensor": tensor,
        "Tensor(a!)": tensor,
        "Tensor?": st.none() | tensor,
        "Tensor[]": st.lists(tensor, max_size=2),
        "int": st.integers(-5, 5) | st.integers(-5, 5).map(np.int64),
        "float": st.sampled_from([0.0, 1.5, -2.25])
        | st.integers(-3, 3)
        # NumPy floating too, which the binding rules take
        | st.sampled_from([np.float64(0.75), np.float32(-1.5)]),
        "bool": st.booleans() | st.booleans().map(np.bool_),
        "Scalar": st.integers(-3, 3) | st.sampled_from([0.5, -1.5]) | st.booleans(),
        "int[]": st.lists(st.integers(-3, 3), max_size=3),
        "str": st.text("abcxyz", max_size=4),
    }[kind]


@st.composite
def calls(draw: st.DrawFn, spec: Spec, device: str) -> Call:
    recipes, given = [], []
    for a in spec.args:
        omit = a.has_default and draw(st.booleans())
        recipes.append(None if omit else draw(value_of(a.kind, device)))
        given.append(not omit)
    # A default is left out only where no positional argument after it is given.
    last = -1
    for i, a in enumerate(spec.args):
        if not a.kwonly and given[i]:
            last = i
    for i, a in enumerate(spec.args):
        if not a.kwonly and i < last and not given[i]:
            given[i] = True
            recipes[i] = a.default
    return Call(recipes, given)


class Backends:
    def __init__(self, py: Any) -> None:
        self.py = py

    def tensor(self, r: TensorRecipe) -> Any:
        a = np.array(r.values, dtype=np.float64)
        if r.device == "py":
            return self.py.tensor(a)
        if r.device == "native":
            return bf.native.tensor(a)
        return a


def build(spec: Spec, call: Call, backends: Backends) -> list[Any]:
    """Fresh objects for every argument (defaults filled for those left out)."""
    out = []
    for a, r, g in zip(spec.args, call.recipes, call.given, strict=True):
        if not g:
            out.append(_copy(a.default))
        elif isinstance(r, TensorRecipe):
            out.append(backends.tensor(r))
        elif a.kind == "Tensor[]":
            out.append([backends.tensor(t) for t in r])
        else:
            out.append(_copy(r))
    return out


def _copy(v: Any) -> Any:
    return list(v) if isinstance(v, list) else v


def has_device_tensor(call: Call) -> bool:
    def on_device(r: Any) -> bool:
        if isinstance(r, TensorRecipe):
            return r.device != "cpu"
        return isinstance(r, list) and any(on_device(t) for t in r)

    return any(on_device(r) for r, g in zip(call.recipes, call.given, strict=True) if g)


def forms(spec: Spec, call: Call, objs: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call as a user writes it: positional arguments by position, keyword-only ones by
    keyword, defaults left out where the draw left them out."""
    pos = [o for a, o, g in zip(spec.args, objs, call.given, strict=True) if not a.kwonly and g]
    kw = {a.name: o for a, o, g in zip(spec.args, objs, call.given, strict=True) if a.kwonly and g}
    return pos, kw


# ------------------------------------------------------------------------------------------
# What a call did, in a form two calls can be compared by.


def describe(v: Any, objs: list[Any]) -> Any:
    for i, o in enumerate(objs):
        if v is o and not isinstance(o, bool | int | float | str | type(None)):
            return ("argument", i)
    if isinstance(v, bf.Tensor):
        return ("Tensor", v.device, str(v.dtype), tuple(v.shape), np.asarray(v.numpy()).tolist())
    if isinstance(v, np.ndarray):
        return ("ndarray", str(v.dtype), v.shape, v.tolist())
    return ("value", repr(v))


def returns_of(result: Any, spec: Spec) -> list[Any]:
    if spec.returns == 0:
        assert result is None, result
        return []
    if spec.returns == 1:
        return [result]
    assert isinstance(result, tuple) and len(result) == spec.returns, result
    return list(result)


def state_of(spec: Spec, objs: list[Any]) -> list[Any]:
    """Every argument's values after the call."""
    out = []
    for a, o in zip(spec.args, objs, strict=True):
        if isinstance(o, list) and a.kind == "Tensor[]":
            out.append([describe(t, []) for t in o])
        elif isinstance(o, bf.Tensor | np.ndarray):
            out.append(describe(o, []))
        else:
            out.append(("value", repr(o)))
    return out


@dataclass
class Outcome:
    returns: list[Any]
    state: list[Any]
    fallbacks: int


# ------------------------------------------------------------------------------------------
# The property


@pytest.fixture(scope="module")
def backends(backend_factory):
    py = backend_factory("FbAccel")
    with bf.Library("_", "IMPL") as fb:
        fb.fallback(bf.cpu_fallback, py.name)
        yield Backends(py)


@pytest.fixture(scope="module")
def trace(unique_name) -> str:
    key = unique_name("AgreeTrace")
    bf.register_functionality_key(key)
    return key


@pytest.fixture(scope="module")
def skipped(unique_name) -> str:
    """A functionality key whose kernel, for every operator of these tests, is a fallthrough."""
    key = unique_name("AgreeSkip")
    bf.register_functionality_key(key)
    return key


@st.composite
def examples(draw: st.DrawFn) -> tuple[Spec, str, Call]:
    spec = draw(specs())
    device = draw(st.sampled_from(["cpu", "py", "native"]))
    return spec, device, draw(calls(spec, device))


@SETTINGS
@given(example=examples(), redispatch_boxed=st.booleans())
def test_every_entry_point_agrees_with_the_general_path(
    backends, trace, skipped, example, redispatch_boxed
):
    spec, _device, call = example
    ns = f"agree{uuid.uuid4().hex[:12]}"
    ran: list[str] = []
    with bf.Library(ns, "DEF") as lib:
        lib.define(spec.schema())
        if spec.decoy:
            lib.define(f"{spec.name}.zz_decoy(*, int zz_decoy) -> ()")
        full = f"{spec.name}.{spec.overload}" if spec.overload else spec.name
        lib.impl(full, make_kernel(spec, ran), "CPU")
        packet = getattr(getattr(bf.ops, ns), spec.name)
        op = getattr(packet, spec.overload or "default")
        npos = sum(not a.kwonly for a in spec.args)
        kwnames = [a.name for a in spec.args if a.kwonly]

        def traced(op_: Any, keys: Any, stack: list[Any]) -> None:
            # A functionality key's boxed kernel: it passes the call on below its key.
            assert keys.highest() == trace
            if redispatch_boxed:
                op.redispatch_boxed(keys, stack)
                return
            kw = dict(zip(kwnames, stack[npos:], strict=True))
            r = op.redispatch(keys, *stack[:npos], **kw)
            stack[:] = [] if r is None else list(r) if isinstance(r, tuple) else [r]

        lib.impl(full, traced, trace, boxed=True)
        lib.impl(full, bf.fallthrough, skipped)

        def outcome(run) -> Outcome:
            objs = build(spec, call, backends)
            before = bf.metrics.counter_value(op.name)
            result, seen = run(objs)
            rets = [describe(r, seen) for r in returns_of(result, spec)]
            return Outcome(rets, state_of(spec, objs), bf.metrics.counter_value(op.name) - before)

        def general(objs):
            pos, kw = forms(spec, call, objs)
            was = _boxfall.set_fast_path(False)
            try:
                return op(*pos, **kw), objs
            finally:
                _boxfall.set_fast_path(was)

        def positional(objs):
            pos, kw = forms(spec, call, objs)
            return op(*pos, **kw), objs

        def keywords(objs):
            kw = {a.name: o for a, o, g in zip(spec.args, objs, call.given, strict=True) if g}
            return op(**kw), objs

        def via_packet(objs):
            pos, kw = forms(spec, call, objs)
            return packet(*pos, **kw), objs

        def boxed(objs):
            given = list(objs)
            r = op.call_boxed(given)
            # The list given is left as it was.
            assert all(g is o for g, o in zip(given, objs, strict=True))
            if spec.returns == 0:
                return None, objs
            return (r[0] if spec.returns == 1 else tuple(r)), objs

        def fallback(objs):
            pos, kw = forms(spec, call, objs)
            return bf.call_fallback(bf.cpu_fallback, op, *pos, **kw), objs

        def redispatched(objs):
            pos, kw = forms(spec, call, objs)
            with bf.include_keys(trace):
                return op(*pos, **kw), objs

        def fallen_through(objs):
            pos, kw = forms(spec, call, objs)
            with bf.include_keys(skipped):
                return op(*pos, **kw), objs

        def own_kernel(objs):
            # The backends' own kernel, which hands every call to the CPU fallback, as
            # Native's kernels do with the cases they do not cover.
            def hand_on(*args: Any, **kwargs: Any) -> Any:
                return bf.call_fallback(bf.cpu_fallback, op, *args, **kwargs)

            with bf.Library(ns, "IMPL") as own:
                own.impl(full, hand_on, backends.py.name)
                own.impl(full, hand_on, "Native")
                return positional(objs)

        event(f"device {_device}, {'with' if has_device_tensor(call) else 'no'} device tensor")
        event(f"{spec.returns} returns, aliased: {spec.aliased is not None}")
        event(f"written arguments: {sum(a.kind == 'Tensor(a!)' for a in spec.args)}")
        reference = outcome(general)
        assert ran == ["cpu"], ran
        entries = {
            "op(*args, **kwargs)": positional,
            "op(**kwargs)": keywords,
            "packet": via_packet,
            "op.call_boxed": boxed,
            "redispatch_boxed" if redispatch_boxed else "op.redispatch": redispatched,
            "a fallthrough key": fallen_through,
        }
        if has_device_tensor(call):
            entries["bf.call_fallback"] = fallback
            entries["bf.call_fallback in a backend's kernel"] = own_kernel
        for name, run in entries.items():
            ran.clear()
            got = outcome(run)
            assert ran == ["cpu"], (name, ran)
            assert got == reference, (
                f"{name} differs from the general path for {spec.schema()}:\n"
                f"  got       {got}\n  reference {reference}"
            )


def test_redispatch_boxed_to_the_cpu_fallback_of_a_native_tensor(ns, lib, trace):
    """The example the property first found: ``op.redispatch_boxed(keys, stack)`` from a
    functionality key's kernel, on a Native tensor that the CPU fallback serves with a Python
    CPU kernel, raised "a call's result cannot fill a boxed stack"; it leaves the returns on
    the stack, as ``op.redispatch`` returns them."""
    lib.define("f(Tensor x, int n=0) -> Tensor")
    lib.impl("f", lambda x, n: x + n, "CPU")
    op = getattr(bf.ops, ns).f.default

    def traced(op_: Any, keys: Any, stack: list[Any]) -> None:
        op_.redispatch_boxed(keys, stack)

    lib.impl("f", traced, trace, boxed=True)
    before = bf.metrics.counter_value(op.name)
    with bf.include_keys(trace):
        y = op(bf.native.tensor(np.array([1.0, 2.0])), 3)
    assert isinstance(y, bf.Tensor) and y.device == "Native:0"
    assert y.numpy().tolist() == [4.0, 5.0]
    assert bf.metrics.counter_value(op.name) - before == 1
