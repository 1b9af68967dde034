"""No panic reaches Python, as a property: random schemas in PyTorch's
grammar, random argument values (wrong types, huge ints, NaN, odd arrays) and random backend
mixes (NumPy, Native, Python backends whose hooks work, fail or return garbage), through
``op(...)``, the packet, ``op.call_boxed``, ``bf.call_fallback``, the CPU fallback and Native's
Rust kernels. Any exception of boxfall's or Python's own is fine; a ``PanicException`` (a
``BaseException``) is the failure, and so is a crash: the last tests pin the two that these
properties and their probes found (a list that contains itself, a kernel that calls its own
operator: both overflowed the native stack).

``BOXFALL_NO_PANIC_EXAMPLES=2000 python -m pytest tests/python/test_no_panic.py`` runs each
property with that many examples (the default keeps the file under a minute on CI).
"""

from __future__ import annotations

import os
import threading
import uuid
import warnings
from typing import Any

import boxfall as bf
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("BOXFALL_NO_PANIC_EXAMPLES", "250"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Arrays here have up to 64 dimensions, as many as NumPy allows (Native tensors of more than
# 32 once panicked in `.numpy()` and in the CPU fallback). They stay small: an allocation that
# fails is tested on its own, in a child process with a capped address space
# (test_native_memory.py), as a failing one here would fail the machine's other work too.
MAX_DIMS = 64


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def on_a_small_thread(target) -> None:
    """Runs ``target`` on a thread of 1 MiB of stack (a main thread has 8): what overflows the
    native stack there first."""
    previous = threading.stack_size(1 << 20)
    try:
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(previous)


def checked(f, *args, **kwargs) -> Any:
    """``f(*args, **kwargs)``, its exception if it raises an ``Exception``; fails the test on a
    Rust panic (and lets every other ``BaseException`` through)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return f(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - a PanicException is a BaseException
        if type(e).__name__ == "PanicException":
            raise AssertionError(f"a Rust panic reached Python: {e!r}") from e
        if isinstance(e, Exception):
            return e
        raise


def look_at(value: Any, depth: int = 0) -> None:
    """Touches what a call returned the way a user would: repr, and `.numpy()` of tensors."""
    checked(repr, value)
    if isinstance(value, bf.Tensor):
        for attr in ("device", "dtype", "shape", "payload"):
            checked(getattr, value, attr)
        checked(value.numpy)
    elif isinstance(value, list | tuple) and depth < 3:
        for v in value:
            look_at(v, depth + 1)


# ------------------------------------------------------------------------------------------
# Backends: one whose hooks work, one whose hooks misbehave as MODE says, one that batches.


class Buffer:
    """Device memory of the test backends, simulated by a private NumPy array."""

    def __init__(self, array: Any) -> None:
        self.data = np.array(array, copy=True)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)


def _copy_into(buf: Buffer, array: Any) -> None:
    buf.data = np.array(array, copy=True)


# What the bad backend's hooks do in the running example: hook name -> behaviour.
MODE: dict[str, str] = {}
GARBAGE: list[Any] = [None, 5, "x", [1, 2], object(), np.array(["a"]), np.zeros((2, 2), object)]


def _bad(hook: str, good: Any) -> Any:
    mode = MODE.get(hook, "ok")
    if mode == "raise":
        raise RuntimeError(f"{hook} broke")
    if mode.startswith("garbage"):
        return GARBAGE[int(mode[len("garbage") :]) % len(GARBAGE)]
    if mode == "float16":
        return np.zeros(2, np.float16)
    if mode == "bigendian":
        return np.zeros((1, 2), ">f8")
    if mode == "noncontiguous":
        return np.arange(12.0).reshape(3, 4)[:, ::2]
    return good()


def _bad_to_cpu(buf: Any) -> Any:
    return _bad("to_cpu", lambda: np.array(buf.data, copy=True))


def _bad_from_cpu(array: Any) -> Any:
    return _bad("from_cpu", lambda: Buffer(array))


def _bad_copy_from_cpu(buf: Any, array: Any) -> Any:
    if MODE.get("copy_from_cpu") == "partial":
        buf.data = np.full(3, -1.0)
        raise RuntimeError("copy_from_cpu broke half way")
    return _bad("copy_from_cpu", lambda: _copy_into(buf, array))


def _bad_to_cpu_many(bufs: list[Any]) -> Any:
    mode = MODE.get("to_cpu_many", "ok")
    if mode == "short":
        return [np.array(b.data) for b in bufs][:-1]
    if mode == "long":
        return [np.array(b.data) for b in bufs] + [np.zeros(1)]
    return _bad("to_cpu_many", lambda: [np.array(b.data) for b in bufs])


GOOD = _unique("NpGood")
BAD = _unique("NpBad")
BATCH = _unique("NpBatch")
SHARED = _unique("NpShared")
TRACE = _unique("NpTrace")
BACKENDS = {
    GOOD: bf.register_backend(
        GOOD,
        to_cpu=lambda b: np.array(b.data, copy=True),
        from_cpu=Buffer,
        copy_from_cpu=_copy_into,
    ),
    BAD: bf.register_backend(
        BAD, to_cpu=_bad_to_cpu, from_cpu=_bad_from_cpu, copy_from_cpu=_bad_copy_from_cpu
    ),
    BATCH: bf.register_backend(
        BATCH,
        to_cpu=_bad_to_cpu,
        from_cpu=_bad_from_cpu,
        copy_from_cpu=_bad_copy_from_cpu,
        to_cpu_many=_bad_to_cpu_many,
    ),
    SHARED: bf.register_backend(
        SHARED,
        to_cpu=lambda b: b.data,
        from_cpu=Buffer,
        copy_from_cpu=_copy_into,
        shares_memory=True,
    ),
}
bf.register_functionality_key(TRACE)


def _trace_fallback(op, keys, stack):
    """The functionality key's fallback: passes the call on, or misbehaves as MODE says."""
    mode = MODE.get("trace", "ok")
    if mode == "raise":
        raise KeyError("trace broke")
    if mode == "garbage":
        stack[:] = [object()]
        return
    if mode == "fallback":
        bf.cpu_fallback(op, keys, stack)
        return
    op.redispatch_boxed(keys, stack)


_FALLBACKS = bf.Library("_", "IMPL")
_FALLBACKS._for_process_life()  # kept for the run, as @bf.impl's are: no ResourceWarning
for _name in (GOOD, BAD, BATCH):
    _FALLBACKS.fallback(bf.cpu_fallback, _name)
_FALLBACKS.fallback(bf.CpuFallback(views="copy"), SHARED)
_FALLBACKS.fallback(_trace_fallback, TRACE)

HOOK_MODES = st.sampled_from(
    ["ok"] * 4
    + ["raise", "float16", "bigendian", "noncontiguous"]
    + [f"garbage{i}" for i in range(len(GARBAGE))]
)
MODES = st.fixed_dictionaries(
    {
        "to_cpu": HOOK_MODES,
        "from_cpu": HOOK_MODES,
        "copy_from_cpu": st.one_of(HOOK_MODES, st.just("partial")),
        "to_cpu_many": st.one_of(HOOK_MODES, st.sampled_from(["short", "long"])),
        "trace": st.sampled_from(["ok", "ok", "raise", "garbage", "fallback"]),
    }
)

# ------------------------------------------------------------------------------------------
# Values.

DTYPES = [
    "float64",
    "float32",
    "int64",
    "int32",
    "bool",
    "float16",
    "int8",
    "uint8",
    "uint64",
    "complex128",
    ">f8",
    ">i4",
    "object",
    "<U3",
]


@st.composite
def arrays(draw) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(
        st.one_of(
            st.just(()),
            st.just((0,)),
            st.just((2, 0, 3)),
            st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
            st.sampled_from([n for n in (4, 8, 31, 32, 33, 64) if n <= MAX_DIMS]).map(
                lambda n: (1,) * n
            ),
        )
    )
    size = int(np.prod(shape))
    values = draw(
        st.sampled_from(
            [
                lambda: np.arange(size),
                lambda: np.full(size, np.nan),
                lambda: np.full(size, 2**62),
                lambda: np.full(size, -1),
                lambda: np.zeros(size),
            ]
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = values().astype(dtype).reshape(shape)
    layout = draw(st.sampled_from(["c", "c", "f", "transposed", "strided", "readonly", "bcast"]))
    if layout == "f":
        a = np.asfortranarray(a)
    elif layout == "transposed":
        a = a.T
    elif layout == "strided" and a.ndim >= 1:
        a = np.repeat(a, 2, axis=0)[::2]
    elif layout == "readonly":
        a.flags.writeable = False
    elif layout == "bcast" and a.ndim >= 1 and a.shape[0] >= 1:
        a = np.broadcast_to(a[:1], (3,) + a.shape[1:])
    return a


def _make_tensor(where: str, a: np.ndarray) -> Any:
    """``a`` on ``where``: NumPy itself, Native, or a Python backend (index 0 or 1)."""
    if where == "numpy":
        return a
    index = 1 if where.endswith(":1") else 0
    name = where.split(":")[0]
    backend = bf.native.backend if name == "native" else BACKENDS[name]
    made = checked(backend.tensor, a, index)
    # A backend that refuses the array (Native takes five dtypes) raised a normal error.
    return a if isinstance(made, Exception) else made


WHERE = st.sampled_from(["numpy", "native", "native", "native:1", GOOD, BAD, BATCH, SHARED])


@st.composite
def tensors(draw, where=WHERE) -> Any:
    return _make_tensor(draw(where), draw(arrays()))


def _contains_itself() -> list:
    """``[1, [...]]``: a list that holds itself."""
    a: list = [1]
    a.append(a)
    return a


def _nested(depth: int) -> list:
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


HUGE_INTS = [0, 1, -1, 2, -(2**63), 2**63 - 1, 2**63, 2**64, 2**70, -(2**70), 10**30]
SCALARS = st.one_of(
    st.sampled_from(HUGE_INTS),
    st.sampled_from([0.5, float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324]),
    st.sampled_from([True, False, None, 1j, "", "x", "cpu", "Native:1", b"bytes"]),
    st.sampled_from([np.int64(3), np.uint64(2**64 - 1), np.float16(1), np.bool_(True)]),
    st.sampled_from([np.float32, np.dtype("f2"), "float32", "int64", int, float, bool]),
    st.sampled_from(["Native", "native:65535", "Native:65536", "Native:-1", "CPU:0", ":", "a:b"]),
    st.sampled_from([GOOD, f"{BAD}:1", TRACE, "CompositeImplicit"]),
    st.builds(object),
    st.builds(_contains_itself),
    st.builds(_nested, st.sampled_from([63, 64, 65, 200])),
)


def anything(depth: int = 2) -> st.SearchStrategy[Any]:
    base = st.one_of(SCALARS, tensors())
    if depth == 0:
        return base
    inner = anything(depth - 1)
    return st.one_of(
        base,
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    )


ANY = anything()


def value_for(type_text: str, where: st.SearchStrategy[str] = WHERE) -> st.SearchStrategy[Any]:
    """Mostly a value of the type as written in a schema (tensors on ``where``); sometimes
    anything."""
    t = type_text.replace("(a!)", "").replace("(b!)", "").replace("(a)", "")
    if t.endswith("?"):
        return st.one_of(st.none(), value_for(t[:-1], where))
    if t.endswith("[]") or (t.endswith("]") and "[" in t):
        elem = t[: t.index("[")]
        return st.lists(value_for(elem, where), max_size=3)
    typed = {
        "Tensor": tensors(where),
        "int": st.one_of(st.integers(-4, 4), st.sampled_from(HUGE_INTS)),
        "SymInt": st.one_of(st.integers(-4, 4), st.sampled_from(HUGE_INTS)),
        "float": st.one_of(st.floats(), st.integers(-3, 3)),
        "bool": st.booleans(),
        "Scalar": st.one_of(
            st.integers(-3, 3), st.floats(), st.booleans(), st.sampled_from(HUGE_INTS)
        ),
        "str": st.text(max_size=4),
        "Device": st.sampled_from(["cpu", "Native", "Native:1", f"{GOOD}:0", BAD, BATCH]),
        "ScalarType": st.sampled_from([np.float32, np.float64, np.int64, "float32", np.bool_]),
    }.get(t, ANY)
    # One value in twenty is anything at all (a wrong type, mostly).
    return st.integers(0, 19).flatmap(lambda i: ANY if i == 0 else typed)


# ------------------------------------------------------------------------------------------
# Schemas, in PyTorch's grammar.

ARG_TYPES = [
    "Tensor",
    "Tensor?",
    "Tensor[]",
    "Tensor?[]",
    "Tensor(a!)",
    "Tensor(b!)",
    "Tensor(a)",
    "Tensor(a!)[]",
    "int",
    "int[]",
    "int[2]",
    "int?",
    "int[1]?",
    "SymInt",
    "SymInt[]",
    "float",
    "float?",
    "float[]",
    "bool",
    "bool[]",
    "Scalar",
    "Scalar?",
    "str",
    "str?",
    "Device",
    "Device?",
    "ScalarType",
    "ScalarType?",
    "Layout?",
    "MemoryFormat?",
    "Generator?",
    "Any",
    "t",
    "Scalar[]",
]
DEFAULTS = {
    "Tensor?": "None",
    "int": "1",
    "int[]": "[]",
    "int[2]": "1",
    "int?": "None",
    "float": "1.5",
    "bool": "False",
    "Scalar": "1",
    "str": '"mean"',
    "ScalarType?": "None",
    "Device?": "None",
    "Scalar?": "None",
    "float?": "None",
}
RETURNS = [
    "()",
    "Tensor",
    "Tensor(a!)",
    "Tensor(a)",
    "(Tensor, Tensor)",
    "(Tensor a, Tensor b)",
    "Tensor[]",
    "Tensor(a!)[]",
    "int",
    "float",
    "bool",
    "Scalar",
    "str",
    "ScalarType",
    "Tensor?",
    "int[]",
    "(Tensor, int, float)",
    "(" + ", ".join(["Tensor"] * 9) + ")",
]


@st.composite
def schemas(draw) -> tuple[str, list[tuple[str, str, bool]]]:
    """``(schema text without the name, [(type, name, kwarg_only)])``."""
    # Up to 10 arguments: the bindings' fast path takes at most 8, the general path the rest.
    n = draw(st.one_of(st.integers(0, 4), st.integers(7, 10)))
    kw_from = draw(st.integers(0, n))
    args, parts = [], []
    for i in range(n):
        ty = draw(st.sampled_from(ARG_TYPES))
        kw = i >= kw_from
        if kw and i == kw_from:
            parts.append("*")
        text = f"{ty} a{i}"
        if ty in DEFAULTS and draw(st.booleans()):
            text += f"={DEFAULTS[ty]}"
        parts.append(text)
        args.append((ty, f"a{i}", kw))
    returns = draw(st.sampled_from(RETURNS))
    return f"({', '.join(parts)}) -> {returns}", args


# ------------------------------------------------------------------------------------------
# Kernels.


def _result_for(returns: str, args: tuple, kwargs: dict) -> Any:
    tensors_in = [a for a in list(args) + list(kwargs.values()) if isinstance(a, np.ndarray)]
    one = tensors_in[0] if tensors_in else np.zeros(2)
    table = {
        "()": None,
        "Tensor": np.zeros(3),
        "Tensor(a!)": one,
        "Tensor(a)": one,
        "(Tensor, Tensor)": (one, np.ones(1)),
        "(Tensor a, Tensor b)": (np.ones(2), one),
        "Tensor[]": [one, np.zeros(1)],
        "Tensor(a!)[]": [one],
        "int": 3,
        "float": 0.5,
        "bool": True,
        "Scalar": 2,
        "str": "s",
        "ScalarType": np.float32,
        "Tensor?": None,
        "int[]": [1, 2],
        "(Tensor, int, float)": (one, 1, 1.0),
        "(" + ", ".join(["Tensor"] * 9) + ")": (one,) * 9,
    }
    return table.get(returns)


def make_kernel(mode: str, returns: str, garbage: Any):
    """A CPU kernel: well-behaved, failing, returning garbage, or writing its inputs."""

    def kernel(*args, **kwargs):
        if mode == "raise":
            raise ValueError("the kernel failed")
        if mode == "garbage":
            return garbage
        if mode == "write":
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, np.ndarray):
                    a[...] = 7
            return _result_for(returns, args, kwargs)
        if mode == "reshape":
            return np.zeros((5, 5), np.int32)
        return _result_for(returns, args, kwargs)

    return kernel


def make_boxed_kernel(mode: str, garbage: Any):
    def kernel(op, keys, stack):
        if mode == "raise":
            raise ValueError("the boxed kernel failed")
        if mode == "garbage":
            stack[:] = [garbage]
        elif mode == "empty":
            stack.clear()
        elif mode == "redispatch":
            op.redispatch_boxed(keys, stack)
        elif mode == "many":
            stack[:] = [1, 2, 3]

    return kernel


KERNEL_MODES = st.sampled_from(["good", "good", "good", "raise", "garbage", "write", "reshape"])
BOXED_MODES = st.sampled_from(["raise", "garbage", "empty", "redispatch", "many"])
POLICIES = st.sampled_from(["allow", "allow", "warn", "error"])
CALLS = st.sampled_from(["op", "op", "packet", "call_boxed", "call_boxed", "call_fallback"])


def call(how: str, op: Any, packet: Any, args: list, kwargs: dict) -> Any:
    if how == "op":
        out = checked(op, *args, **kwargs)
    elif how == "packet":
        out = checked(packet, *args, **kwargs)
    elif how == "call_fallback":
        out = checked(bf.call_fallback, bf.cpu_fallback, op, *args, **kwargs)
    else:
        out = checked(op.call_boxed, list(args) + list(kwargs.values()))
    # What the calls came to (`--hypothesis-show-statistics`): the mix should not be all errors.
    event(f"{how}: {type(out).__name__}")
    return out


def bind(draw, args: list[tuple[str, str, bool]], where) -> tuple[list, dict]:
    """Values for the schema's arguments: positional ones by position, keyword-only ones by
    keyword; sometimes one missing, one too many, or a keyword that is no argument."""
    pos = [draw(value_for(ty, where)) for ty, _, kw in args if not kw]
    kws = {name: draw(value_for(ty, where)) for ty, name, kw in args if kw}
    change = draw(st.sampled_from(["none"] * 12 + ["drop", "extra", "bad_kw", "all_pos"]))
    if change == "drop" and pos:
        pos.pop()
    elif change == "extra":
        pos.append(draw(ANY))
    elif change == "bad_kw":
        kws["nope"] = 1
    elif change == "all_pos":
        pos += list(kws.values())
        kws = {}
    return pos, kws


@pytest.fixture(autouse=True)
def _modes():
    MODE.clear()
    yield
    MODE.clear()
    bf.set_fallback_policy("allow")


# ------------------------------------------------------------------------------------------
# The properties.


@SETTINGS
@given(data=st.data(), schema=schemas(), modes=MODES, policy=POLICIES)
def test_random_schemas_values_and_backends_never_panic(data, schema, modes, policy):
    text, args = schema
    MODE.update(modes)
    ns = _unique("nopanic")
    lib = checked(bf.Library, ns, "DEF")
    assert not isinstance(lib, Exception), lib
    try:
        defined = checked(lib.define, f"f{text}")
        if isinstance(defined, Exception):
            return  # a schema the grammar allows but boxfall refuses: a SchemaError is fine
        returns = text.split(" -> ", 1)[1]
        garbage = data.draw(ANY, label="garbage")
        if data.draw(st.booleans(), label="boxed CPU kernel"):
            kernel = make_boxed_kernel(data.draw(BOXED_MODES, label="boxed mode"), garbage)
            checked(lib.impl, "f", kernel, "CPU", boxed=True)
        else:
            kernel = make_kernel(data.draw(KERNEL_MODES, label="mode"), returns, garbage)
            checked(lib.impl, "f", kernel, "CPU")
        extra = data.draw(
            st.sampled_from(["none", "none", "composite", "good", "native", "trace"]), label="extra"
        )
        if extra == "native":
            checked(lib.impl, "f", make_kernel(data.draw(KERNEL_MODES), returns, garbage), "Native")
        elif extra == "composite":
            # Decomposes into the operator itself: a recursion through the dispatcher.
            checked(
                lib.impl, "f", lambda *a, **k: getattr(bf.ops, ns).f(*a, **k), "CompositeImplicit"
            )
        elif extra == "good":
            checked(lib.impl, "f", make_kernel("garbage", returns, garbage), GOOD)
        bf.set_fallback_policy(policy)
        op = getattr(bf.ops, ns).f.default
        packet = getattr(bf.ops, ns).f
        # Mostly one device per example (calls that can run), sometimes a mix.
        where = data.draw(st.one_of(WHERE.map(st.just), st.just(WHERE)), label="devices")
        for _ in range(data.draw(st.integers(1, 3), label="calls")):
            pos, kws = bind(data.draw, args, where)
            how = data.draw(CALLS, label="call")
            if extra == "trace":
                with bf.include_keys(TRACE):
                    out = call(how, op, packet, pos, kws)
            else:
                out = call(how, op, packet, pos, kws)
            look_at(out)
            look_at(pos)
        checked(op.dispatch_table)
        checked(bf.metrics.report)
    finally:
        bf.set_fallback_policy("allow")
        checked(lib.close)


NATIVE_SCHEMAS = [
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "mul.Tensor(Tensor self, Tensor other) -> Tensor",
    "div.Tensor(Tensor self, Tensor other) -> Tensor",
    "neg(Tensor self) -> Tensor",
    "exp(Tensor self) -> Tensor",
    "relu(Tensor self) -> Tensor",
    "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)"
    " -> Tensor",
    "mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "matmul(Tensor self, Tensor other) -> Tensor",
    "transpose.int(Tensor self, int dim0, int dim1) -> Tensor",
]


def _numpy_kernel(name: str):
    """The NumPy kernel of a Native schema (as test_native_kernels has them)."""
    kernels = {
        "add": lambda self, other, alpha=1: self + alpha * other,
        "sub": lambda self, other, alpha=1: self - alpha * other,
        "mul": np.multiply,
        "div": np.true_divide,
        "neg": np.negative,
        "exp": np.exp,
        "relu": lambda self: np.maximum(self, 0),
        "sum": lambda self, *a, dtype=None: np.asarray(
            np.sum(self, axis=None if not a or a[0] is None else tuple(a[0]), dtype=dtype)
        ),
        "mean": lambda self, *a, dtype=None: np.asarray(
            np.mean(self, axis=None if not a or a[0] is None else tuple(a[0]), dtype=dtype)
        ),
        "matmul": np.matmul,
        "transpose": lambda self, d0, d1: np.swapaxes(self, d0, d1).copy(),
    }
    return kernels[name.split(".")[0]]


@pytest.fixture(scope="module")
def native_ops():
    ns = _unique("nopanicnative")
    lib = bf.Library(ns, "DEF")
    for s in NATIVE_SCHEMAS:
        lib.define(s)
        lib.impl(s.split("(", 1)[0], _numpy_kernel(s.split("(", 1)[0]), "CPU")
    assert len(lib.register_native_kernels()) == len(NATIVE_SCHEMAS)
    yield ns, [bf.parse_schema(f"{ns}::{s}") for s in NATIVE_SCHEMAS]
    lib.close()


NATIVE_WHERE = st.sampled_from(["native"] * 12 + ["numpy", "native:1", GOOD, BAD])


@SETTINGS
@given(data=st.data(), policy=POLICIES, modes=MODES)
def test_native_kernels_never_panic(native_ops, data, policy, modes):
    ns, schemas_ = native_ops
    MODE.update(modes)
    s = data.draw(st.sampled_from(schemas_), label="schema")
    name = s.name.split("::")[1] + (f".{s.overload_name}" if s.overload_name else "")
    op = getattr(getattr(bf.ops, ns), s.name.split("::")[1])
    op = getattr(op, s.overload_name or "default")
    pos, kws = [], {}
    for a in s.arguments:
        if a.type == "Tensor":
            v = data.draw(
                st.one_of(tensors(NATIVE_WHERE), ANY)
                if data.draw(st.integers(0, 9)) == 0
                else tensors(NATIVE_WHERE),
                label=a.name,
            )
        elif a.type == "int[1]?":
            v = data.draw(
                st.one_of(
                    st.none(),
                    st.lists(st.sampled_from(HUGE_INTS + [-100, 5, 0, 0]), max_size=3),
                    st.sampled_from(HUGE_INTS),
                    ANY,
                ),
                label=a.name,
            )
        else:
            v = data.draw(value_for(a.type), label=a.name)
        if a.kwarg_only:
            kws[a.name] = v
        else:
            pos.append(v)
    bf.set_fallback_policy(policy)
    try:
        how = data.draw(st.sampled_from(["op", "op", "call_boxed", "call_fallback"]), label="call")
        look_at(call(how, op, op, pos, kws))
        look_at(pos)
    finally:
        bf.set_fallback_policy("allow")
    assert name


@SETTINGS
@given(a=arrays(), where=WHERE)
def test_making_and_reading_tensors_never_panics(a, where):
    t = _make_tensor(where, a)
    look_at(t)
    checked(bf.native.tensor, a)
    checked(bf.native.tensor, a, 70000)
    checked(bf.native.tensor, a, -1)


PAYLOADS = st.one_of(
    st.sampled_from(GARBAGE),
    arrays(),
    st.builds(Buffer, arrays()),
    st.just(type("Shapeless", (), {"shape": property(lambda self: 1 / 0)})()),
    st.just(type("Odd", (), {"shape": (2**70,), "dtype": "float99"})()),
)


@SETTINGS
@given(data=st.data(), payload=PAYLOADS, modes=MODES, policy=POLICIES)
def test_tensors_of_any_payload_never_panic(native_ops, data, payload, modes, policy):
    """A Python backend's tensor can hold any object: reading it and passing it to operators
    (whose fallback hands it to the backend's hooks) raises at worst."""
    ns, schemas_ = native_ops
    MODE.update(modes)
    backend = data.draw(st.sampled_from([GOOD, BAD, BATCH, SHARED]), label="backend")
    t = checked(BACKENDS[backend].tensor_from_payload, payload, data.draw(st.sampled_from([0, 1])))
    look_at(t)
    s = data.draw(st.sampled_from(schemas_), label="schema")
    op = getattr(getattr(bf.ops, ns), s.name.split("::")[1])
    op = getattr(op, s.overload_name or "default")
    tensor_args = [a for a in s.arguments if a.type == "Tensor"]
    other = data.draw(st.one_of(st.just(t), tensors()), label="other")
    args = [t, other][: len(tensor_args)]
    if s.name.endswith("transpose"):
        args += [0, 1]
    bf.set_fallback_policy(policy)
    try:
        how = data.draw(st.sampled_from(["op", "call_fallback"]), label="call")
        look_at(call(how, op, op, args, {}))
    finally:
        bf.set_fallback_policy("allow")


NAMES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "::", "a::", "::b", "aten::add", "x.y.z", "_", "CPU", "Native", GOOD]),
    st.sampled_from([None, 5, 2**70, b"bytes", object(), [], ["a"], ("CPU",)]),
)


# Libraries made from junk and dropped warn that they undid their registrations, as they should.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@SETTINGS
@given(data=st.data())
def test_the_api_surface_with_junk_never_panics(native_ops, data):
    """The module-level API, with junk for every argument: errors, never a panic. (Nothing here
    registers a key or a backend: they cannot be taken back, and there are 64.)"""
    ns, _ = native_ops
    junk = st.one_of(NAMES, ANY)
    name = data.draw(st.one_of(NAMES, st.just(f"{ns}::add.Tensor"), st.just(f"{ns}::neg")))
    calls = [
        lambda: bf.parse_schema(data.draw(st.one_of(st.text(max_size=40), NAMES))),
        lambda: bf.find_op(name) if hasattr(bf, "find_op") else bf._boxfall.find_op(name),
        lambda: bf._boxfall.overloads(name),
        lambda: bf.metrics.counter_value(name),
        lambda: bf.metrics.op_stats(name),
        lambda: bf.metrics.report(),
        lambda: bf.set_fallback_policy(data.draw(junk), data.draw(junk)),
        lambda: bf.set_fallback_policy(
            data.draw(st.sampled_from(["allow", "warn", "error"])), [name]
        ),
        lambda: bf.get_fallback_policy(),
        lambda: bf.include_keys(*data.draw(st.lists(NAMES, max_size=2))).__enter__(),
        lambda: bf.exclude_keys(*data.draw(st.lists(NAMES, max_size=2))).__enter__(),
        lambda: bf._boxfall.set_local_keys(data.draw(junk), data.draw(junk)),
        lambda: bf._boxfall.key_bits(data.draw(junk)),
        lambda: bf.Library(
            data.draw(NAMES),
            data.draw(st.one_of(st.sampled_from(["DEF", "IMPL", "FRAGMENT"]), NAMES)),
        ),
        lambda: bf.Library(ns, "FRAGMENT").define(
            data.draw(st.one_of(st.text(max_size=30), NAMES))
        ),
        lambda: bf.Library(ns, "IMPL").impl(name, data.draw(junk), data.draw(NAMES)),
        lambda: bf.Library(ns, "IMPL").impl(name, lambda *a: a, data.draw(NAMES), boxed=True),
        lambda: bf.Library("_", "IMPL").fallback(data.draw(junk), data.draw(NAMES)),
        lambda: bf.CpuFallback(views=data.draw(junk)),
        lambda: bf.call_fallback(data.draw(junk), data.draw(junk)),
        lambda: bf.native.tensor(data.draw(junk), data.draw(junk)),
        lambda: BACKENDS[GOOD].tensor(data.draw(junk), data.draw(junk)),
        lambda: bf.native.backend.tensor_from_payload(data.draw(junk)),
        lambda: bf.AliasInfo(data.draw(junk), data.draw(junk), data.draw(junk)),
        lambda: getattr(bf.ops, ns).add.Tensor.redispatch(data.draw(junk), 1),
    ]
    bf.set_fallback_policy("allow")
    inc, exc = bf._boxfall.local_keys()
    try:
        for i in data.draw(st.lists(st.integers(0, len(calls) - 1), min_size=1, max_size=4)):
            look_at(checked(calls[i]))
    finally:
        bf._boxfall.set_local_keys(inc, exc)
        bf.set_fallback_policy("allow")


def test_a_list_that_contains_itself_passes_through_an_any_argument():
    """Converting such a list for an argument of open type recursed until the stack overflowed
    (a segfault, found by the properties above): past 64 levels the object goes as it is."""
    ns = _unique("cyclic")
    with bf.Library(ns, "DEF") as lib:
        lib.define("f(Any x) -> Any")
        lib.impl("f", lambda x: x, "CPU")
        lib.define("g(Tensor t, Any x) -> Any")
        lib.impl("g", lambda t, x: x, "CPU")
        cyclic = _contains_itself()
        out = getattr(bf.ops, ns).f(cyclic)
        inner = out
        for _ in range(64):
            assert isinstance(inner, list) and inner[0] == 1
            inner = inner[1]
        assert inner is cyclic
        # Through the boxed call and the CPU fallback of a Native tensor, too.
        assert getattr(bf.ops, ns).f.default.call_boxed([cyclic])[0][0] == 1
        deep = _nested(1000)
        out = getattr(bf.ops, ns).g(bf.native.tensor(np.ones(2)), deep)
        for _ in range(1000):
            assert isinstance(out, list) and len(out) == 1
            out = out[0]
        assert out == []


@pytest.mark.parametrize("how", ["call_boxed", "op", "packet", "native"])
def test_a_kernel_that_calls_its_own_operator_ends_in_recursion_error(how):
    """Each level of such a recursion is one Python frame and many Rust ones: the native stack
    overflowed (a segfault: at about 690 levels in a debug build, 370 through Native's CPU
    fallback) before Python's limit of 1000 was reached. Now a RecursionError, also on a thread
    with a small stack."""
    ns = _unique("recurse")
    with bf.Library(ns, "DEF") as lib:
        lib.define("g(Tensor x) -> Tensor")
        op = getattr(bf.ops, ns).g.default

        def boxed(op_, keys, stack):
            if how == "call_boxed":
                stack[:] = op.call_boxed(list(stack))
            elif how == "op":
                stack[:] = [op(*stack)]
            elif how == "packet":
                stack[:] = [getattr(bf.ops, ns).g(*stack)]
            else:  # through Native's CPU fallback at every level
                stack[:] = op.call_boxed([bf.native.tensor(np.ones(1))])

        lib.impl("g", boxed, "CPU", boxed=True)
        with pytest.raises(RecursionError):
            op.call_boxed([bf.native.tensor(np.ones(1))])
        errors = []

        def run():
            try:
                op.call_boxed([np.ones(1)])
            except RecursionError as e:
                errors.append(e)

        on_a_small_thread(run)
        assert len(errors) == 1


DEEP = 100_000  # far past the 64 levels a conversion goes down (and past Python's own limit)


def _deep_tuple(depth: int) -> tuple:
    v: tuple = ()
    for _ in range(depth):
        v = (v,)
    return v


def _levels_down(value: Any, levels: int) -> Any:
    for _ in range(levels):
        assert isinstance(value, list | tuple) and len(value) == 1
        value = value[0]
    return value


@pytest.mark.parametrize("deep", [_nested, _deep_tuple], ids=["list", "tuple"])
def test_an_argument_nested_far_too_deep_is_an_argument_error_or_passes_through(deep):
    """A value nested 100,000 levels deep for an argument goes down no further than its schema
    type (a typed argument: `ArgumentError` naming the operator and its schema) or 64 levels
    (an open type: the rest passes on as the Python object itself), through every entry and
    through Native's CPU fallback, in no more native stack than a thread of 1 MiB has."""
    ns = _unique("deeparg")
    value = deep(DEEP)
    typed = ["int[] x", "float[] x", "bool[] x", "Tensor[] x", "Tensor?[] x", "int[][] x"]
    typed += ["(int, int) x", "Scalar x", "Tensor x"]
    with bf.Library(ns, "DEF") as lib:
        for i, arg in enumerate(typed):
            lib.define(f"typed{i}(Tensor t, {arg}) -> int")
            lib.impl(f"typed{i}", lambda t, x: 0, "CPU")
        lib.define("open(Tensor t, Any x) -> Any")
        lib.impl("open", lambda t, x: x, "CPU")
        lib.define("opens(Tensor t, Any[] x) -> Any[]")
        lib.impl("opens", lambda t, x: x, "CPU")
        space = getattr(bf.ops, ns)
        failures: list[str] = []

        def run() -> None:
            for t in (np.ones(2), bf.native.tensor(np.ones(2))):
                for i, arg in enumerate(typed):
                    op = getattr(space, f"typed{i}")
                    for call in (op, op.default, lambda t, x, op=op: op.default.call_boxed([t, x])):
                        with pytest.raises(bf.ArgumentError) as e:
                            call(t, value)
                        assert f"{ns}::typed{i}" in str(e.value), str(e.value)
                        assert f"{ns}::typed{i}({'Tensor t, ' + arg}) -> int" in str(e.value)
                out = space.open(t, value)
                assert _levels_down(out, 64) is _levels_down(value, 64)
                out = space.open.default.call_boxed([t, value])[0]
                assert _levels_down(out, 64) is _levels_down(value, 64)
                out = space.opens(t, [value])
                assert _levels_down(out[0], 64) is _levels_down(value, 64)

        def run_noting_failures() -> None:
            try:
                run()
            except BaseException as e:  # noqa: BLE001 - a thread's failure is noted, not lost
                failures.append(repr(e))

        run_noting_failures()
        on_a_small_thread(run_noting_failures)
        assert failures == []


@pytest.mark.parametrize("deep", [_nested, _deep_tuple], ids=["list", "tuple"])
def test_a_kernel_result_nested_far_too_deep_is_a_kernel_error_or_passes_through(deep):
    """A Python kernel that returns a value nested 100,000 levels deep: a typed return is a
    `KernelError` naming the operator, an open one passes on past 64 levels as the Python object
    itself; also from a boxed kernel, and through Native's CPU fallback."""
    ns = _unique("deepret")
    value = deep(DEEP)
    with bf.Library(ns, "DEF") as lib:
        for i, ret in enumerate(["int[]", "Tensor[]", "float[][]", "(int, int)", "Tensor"]):
            lib.define(f"typed{i}(Tensor t) -> {ret}")
            lib.impl(f"typed{i}", lambda t: value, "CPU")
            lib.define(f"boxed{i}(Tensor t) -> {ret}")
            lib.impl(
                f"boxed{i}", lambda op, keys, stack: stack.__setitem__(0, value), "CPU", boxed=True
            )
        lib.define("open(Tensor t) -> Any")
        lib.impl("open", lambda t: value, "CPU")
        lib.define("boxed_open(Tensor t) -> Any")
        lib.impl(
            "boxed_open", lambda op, keys, stack: stack.__setitem__(0, value), "CPU", boxed=True
        )
        space = getattr(bf.ops, ns)
        for t in (np.ones(2), bf.native.tensor(np.ones(2))):
            for i in range(5):
                for name in (f"typed{i}", f"boxed{i}"):
                    op = getattr(space, name)
                    for call in (op, op.default, lambda t, op=op: op.default.call_boxed([t])):
                        with pytest.raises(bf.KernelError) as e:
                            call(t)
                        assert f"{ns}::{name}" in str(e.value), str(e.value)
            for name in ("open", "boxed_open"):
                op = getattr(space, name)
                assert _levels_down(op(t), 64) is _levels_down(value, 64)
                out = op.default.call_boxed([t])[0]
                assert _levels_down(out, 64) is _levels_down(value, 64)
