"""The differential tester's programs: what they are, how they run, how runs are compared.

A program is a few lines of Python over the array API namespace ``xp`` (and ``np``, ``nan``,
``inf``), each of which defines a variable (``v2 = v0 + 200``), writes one in place
(``v0 += v1``) or writes through an index (``v0[1:, ...] = 7``). The same lines run on NumPy
(the reference) and on each backend; what a run ends with (every variable's dtype, shape and
values) and where it raised are compared. A failing program prints as its lines, so it can be
pasted into a script, or kept in test_differential.py's ``DEFECTS``.

The generator (:func:`programs`) runs each line on NumPy while it draws the next, so that it
knows every variable's shape and dtype: most steps are valid, some are meant to fail (a shape
that does not broadcast, an index out of range, a scalar outside the dtype), and NumPy says
which.
"""

from __future__ import annotations

import ast
import collections
import functools
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

PROFILE = os.environ.get("BOXFALL_DIFF_PROFILE", "dev")
"""The profile: ``dev`` (the default: a few programs and every kept program), ``ci``
(bounded, derandomized: CI's step) or ``long`` (random; README.md)."""
if PROFILE not in ("dev", "ci", "long"):
    raise ValueError(f"BOXFALL_DIFF_PROFILE is dev, ci or long, not {PROFILE!r}")
_COMMON: dict[str, Any] = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],  # fmt: skip
)
settings.register_profile("boxfall-diff-dev", derandomize=True, **_COMMON)
settings.register_profile("boxfall-diff-ci", derandomize=True, **_COMMON)
settings.register_profile("boxfall-diff-long", derandomize=False, **_COMMON)

# --- what programs are made of -------------------------------------------------------------------

SHAPES = ((), (3,), (2, 3), (3, 3))
"""The shapes of a program's inputs and created arrays: few, so that JAX's compiles (one per
shape and dtype) are reused from one program to the next. Views and reductions make a few
more (``(2,)``, ``(3, 2)``, ``(1, 3)``...)."""

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float32", "float64")
COMPLEX_DTYPES = ("complex64", "complex128")
DTYPES = ("bool", *INT_DTYPES, *FLOAT_DTYPES, *COMPLEX_DTYPES)

NARROW = {"int64": "int32", "uint64": "uint32", "float64": "float32", "complex128": "complex64"}
"""A device without 64-bit types (JAX with x64 off) holds each 64-bit dtype as the 32-bit one
of its kind: the reference's dtypes are mapped through this."""

PY_INTS = (
    0, 1, 2, 3, 7, -1, -2, 100, 127, 128, -128, -129, 200, 255, 256, -200, 32767, 32768, 40000,
    -32769, 65535, 65536, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32 - 1, 2**32, 2**40,
    -(2**40), 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 2**100,
    -(2**100), 2**1100,
)  # fmt: skip
"""Python ints of every magnitude: each dtype's bounds and one past them, and beyond any."""

PY_FLOATS = (
    0.0, -0.0, 0.5, 1.5, -2.5, 3.0, 0.1, 1e-3, 1e10, -1e10, 2.0**31, 2.0**63, 3.4e38, 3.5e38,
    1e39, 1e300, -1e300, 1e-45, 5e-324, math.inf, -math.inf, math.nan,
)  # fmt: skip
PY_COMPLEX = (1j, 1 + 2j, -0.5j, complex(math.inf, 0.0), complex(0.0, math.nan))

NP_SCALAR_TYPES = (
    "bool", *INT_DTYPES, "float32", "float64", "complex64", "complex128",
)  # fmt: skip


def int_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def narrowed(dtype: str, narrow: bool) -> str:
    return NARROW.get(dtype, dtype) if narrow else dtype


# --- rendering values as code --------------------------------------------------------------------


def _float_text(v: float, dtype: str = "float64") -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if dtype in ("float32", "complex64"):
        return str(np.float32(v))  # the shortest text that rounds to the same float32
    return repr(float(v))


def _complex_text(v: complex, dtype: str = "complex128") -> str:
    return f"complex({_float_text(v.real, dtype)}, {_float_text(v.imag, dtype)})"


def _int_text(v: int) -> str:
    for k in (16, 31, 32, 40, 53, 63, 64, 100, 1100):
        for base, text in ((2**k, f"2**{k}"), (-(2**k), f"-2**{k}")):
            if v == base:
                return text
            if v == base - 1:
                return f"{text} - 1"
            if v == base + 1:
                return f"{text} + 1"
    return repr(v)


def scalar_text(v: Any) -> str:
    """``v`` (a Python or NumPy scalar) as an operand: in parentheses unless it is a plain
    literal that cannot bind to its neighbours."""
    if isinstance(v, np.generic):
        name = type(v).__name__
        if isinstance(v, np.bool_):
            return f"np.bool_({bool(v)})"
        if isinstance(v, np.integer):
            return f"np.{name}({_int_text(int(v))})"
        if isinstance(v, np.floating):
            return f"np.{name}({_float_text(float(v), name)})"
        return f"np.{name}({_complex_text(complex(v), name)})"
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        text = _int_text(v)
        return text if re.fullmatch(r"\d+", text) else f"({text})"
    if isinstance(v, float):
        text = _float_text(v)
        return text if re.fullmatch(r"[\d.e+]+|nan|inf", text) else f"({text})"
    if isinstance(v, complex):
        return _complex_text(v)
    raise TypeError(type(v))


def array_text(a: np.ndarray) -> str:
    """``np.array(<values>, dtype=np.<dtype>)``: an input of a program, exactly."""
    dtype = a.dtype.name

    def one(x: Any) -> str:
        if dtype == "bool":
            return repr(bool(x))
        if dtype in INT_DTYPES:
            return _int_text(int(x))
        if dtype in FLOAT_DTYPES:
            return _float_text(float(x), dtype)
        return _complex_text(complex(x), dtype)

    def nested(x: Any) -> str:
        if isinstance(x, np.ndarray) and x.ndim:
            return "[" + ", ".join(nested(y) for y in x) + "]"
        return one(x[()] if isinstance(x, np.ndarray) else x)

    return f"np.array({nested(a)}, dtype=np.{dtype})"


def shape_text(shape: tuple[int, ...]) -> str:
    return repr(tuple(shape))


# --- a program -----------------------------------------------------------------------------------

_VAR = re.compile(r"v\d+\Z")

BINOPS = {
    ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide",
    ast.FloorDiv: "floor_divide", ast.Mod: "remainder", ast.Pow: "pow",
    ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor",
    ast.LShift: "bitwise_left_shift", ast.RShift: "bitwise_right_shift", ast.MatMult: "matmul",
}  # fmt: skip
CMPOPS = {
    ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
    ast.Eq: "equal", ast.NotEq: "not_equal",
}  # fmt: skip
UNOPS = {ast.USub: "negative", ast.UAdd: "positive", ast.Invert: "bitwise_invert"}

CREATION = frozenset(
    ("asarray", "zeros", "ones", "full", "arange", "linspace", "eye", "empty", "zeros_like",
     "ones_like", "full_like", "empty_like")
)  # fmt: skip
FROM_PYTHON = frozenset(("asarray", "full", "full_like", "arange", "linspace"))
"""Creation from Python values: with x64 off, a value that the narrowed dtype cannot hold is an
``OverflowError`` (as JAX's own ``jnp.asarray([2**40])``), never a wrapped number."""
SHAPE_ONLY = frozenset(("empty", "empty_like"))
"""Values unspecified: only the dtype and the shape are compared."""
NOT_FROM_VALUES = frozenset(("zeros_like", "ones_like", "full_like", "empty_like"))
"""Results that do not depend on their tensor argument's values."""

EXACT = frozenset(
    ("add", "subtract", "multiply", "divide", "sqrt", "negative", "positive", "abs", "maximum",
     "minimum", "where", "astype", "getitem", "T", "mT", "permute_dims", "reshape",
     "expand_dims", "squeeze", "broadcast_to", "setitem", "max", "min", "floor", "ceil", "trunc",
     "round", "sign", "square", "isnan", "isfinite", "isinf", "logical_not", "floor_divide",
     "remainder", "clip", "any", "all", *CMPOPS.values(), *CREATION - {"linspace"})
)  # fmt: skip
"""Operators whose float results are correctly rounded (IEEE), so bit-exact where their float
inputs are: a later comparison or floor of them may be compared exactly."""
DISCONTINUOUS = frozenset(
    ("floor", "ceil", "trunc", "round", "sign", "floor_divide", "remainder", "isnan",
     "isfinite", "isinf", "any", "all", "astype", "logical_not", *CMPOPS.values())
)  # fmt: skip
"""Operators whose result jumps where a float input crosses a point: on an input that carries
rounding error (a sum's, an ``exp``'s), their result is not compared."""


@dataclass(frozen=True)
class Step:
    """One line, read: what it defines or writes, what it reads, its operator."""

    line: str
    kind: str  # "assign", "inplace", "setitem"
    target: str
    op: str
    reads: tuple[str, ...]
    operands: tuple[ast.expr, ...]  # the operator's operands, for the tolerance and statistics
    code: Any

    @property
    def creation(self) -> bool:
        return self.op in CREATION


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) and _VAR.match(node.id) else None


@functools.lru_cache(maxsize=65536)
def parse(line: str) -> Step:
    """What ``line`` does, read from its syntax."""
    (stmt,) = ast.parse(line).body
    reads = tuple(
        dict.fromkeys(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and _VAR.match(n.id))
    )
    code = compile(line, "<program>", "exec")
    if isinstance(stmt, ast.AugAssign):
        target = _name(stmt.target)
        assert target, line
        return Step(
            line, "inplace", target, BINOPS[type(stmt.op)], reads, (stmt.target, stmt.value), code
        )
    assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1, line
    lhs, value = stmt.targets[0], stmt.value
    if isinstance(lhs, ast.Subscript):
        target = _name(lhs.value)
        assert target, line
        return Step(line, "setitem", target, "setitem", reads, (lhs.value, value), code)
    target = _name(lhs)
    assert target, line
    reads = tuple(r for r in reads if r != target or _mentions(value, target))
    op, operands = _operator(value)
    return Step(line, "assign", target, op, reads, operands, code)


def _mentions(node: ast.expr, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _operator(value: ast.expr) -> tuple[str, tuple[ast.expr, ...]]:
    if isinstance(value, ast.BinOp):
        return BINOPS[type(value.op)], (value.left, value.right)
    if isinstance(value, ast.Compare):
        return CMPOPS[type(value.ops[0])], (value.left, value.comparators[0])
    if isinstance(value, ast.UnaryOp):
        return UNOPS[type(value.op)], (value.operand,)
    if isinstance(value, ast.Subscript):
        return "getitem", (value.value,)
    if isinstance(value, ast.Attribute):
        return value.attr, (value.value,)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return value.func.attr, tuple(value.args) + tuple(k.value for k in value.keywords)
    raise ValueError(f"not a program step: {ast.unparse(value)}")


class Program:
    """A program: its lines. ``repr`` is the constructor call with the lines, ready to paste
    into test_differential.py's ``DEFECTS``."""

    def __init__(self, text: str | tuple[str, ...]) -> None:
        if isinstance(text, str):
            lines = tuple(s.strip() for s in text.strip().splitlines() if s.strip())
        else:
            lines = tuple(text)
        self.lines = lines
        self.steps = tuple(parse(s) for s in lines)

    def __repr__(self) -> str:
        body = "\n".join(self.lines)
        return f"Program('''\n{body}\n''')"

    def script(self, setup: str) -> str:
        """The program as a script on the namespace ``setup`` makes (``xp = ...``)."""
        head = "import numpy as np\nfrom math import inf, nan\n" + setup
        return head + "\n" + "\n".join(self.lines) + "\n"


# --- running -------------------------------------------------------------------------------------


def base_env(xp: Any) -> dict[str, Any]:
    return {"xp": xp, "np": np, "nan": math.nan, "inf": math.inf, "complex": complex}


def family(exc_type: type[BaseException]) -> tuple[type[BaseException], ...]:
    """The built-in exception classes an error of ``exc_type`` is: the most derived built-ins
    of its MRO (NumPy's ``AxisError`` is both a ``ValueError`` and an ``IndexError``)."""
    builtins_in = [c for c in exc_type.__mro__ if c.__module__ == "builtins" and c not in (object,)]
    leaves = [
        c for c in builtins_in if not any(d is not c and issubclass(d, c) for d in builtins_in)
    ]
    return tuple(leaves) or (Exception,)


def describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:300]}"


@dataclass
class Error:
    """An exception a step raised, kept as text (the exception itself would keep its frames,
    and with them pending tensors, alive)."""

    type: type[BaseException]
    text: str
    chain: tuple[type[BaseException], ...] = ()
    chain_text: str = ""
    also: tuple[type[BaseException], ...] = ()
    """Where the call has two faults, the family of the other: NumPy reports the one it
    checks first, a backend may check the other first."""

    @classmethod
    def of(cls, exc: BaseException) -> Error:
        chain, texts, seen = [], [], exc
        for _ in range(8):
            if seen is None:
                break
            chain.append(type(seen))
            texts.append(str(seen))
            seen = seen.__cause__ or seen.__context__
        return cls(type(exc), describe(exc), tuple(chain), " | ".join(texts))

    def is_like(self, ref: Error, deferred: bool = False) -> bool:
        """Whether this error is of ``ref``'s family; one found at a sync (``deferred``) may
        carry it as its cause, or name it in its text (a host callback's error, wrapped)."""
        want = family(ref.type) + ref.also
        if issubclass(self.type, want):
            return True
        if not deferred:
            return False
        if any(issubclass(c, want) for c in self.chain):
            return True
        return any(f"{c.__name__}:" in self.chain_text for c in want)


@dataclass
class Meta:
    """What the reference knows of a variable's values."""

    exact: bool = True  # float values bit-exact (no rounding a device may do otherwise)
    mag: np.ndarray | None = None  # floats: the scale of each value's allowed error
    unspecified: bool = False  # values not compared (an invalid cast, ``empty``)


@dataclass
class Outcome:
    """How a step ended on the reference: run or not (an input it reads was never made),
    its error, and for a write the variables sharing the written memory."""

    ran: bool
    error: Error | None = None
    group: tuple[str, ...] = ()
    may_raise: Error | None = None  # an error the backend may raise instead of computing


@dataclass
class RefRun:
    """The reference's run of a program: its final variables, their facts, each step's end."""

    env: dict[str, Any]
    meta: dict[str, Meta]
    outcomes: list[Outcome]
    order: list[str]  # the variables in the order they were defined

    def values(self) -> dict[str, np.ndarray]:
        return {v: self.env[v] for v in self.order if v in self.env}


def _numeric(v: Any) -> np.ndarray:
    """``v`` as an array NumPy's ufuncs take: a Python int past 64 bits (an object array to
    ``np.asarray``) as the float it rounds to, an infinity where none holds it."""
    a = np.asarray(v)
    if a.dtype != object:
        return a
    try:
        return np.asarray(float(v))
    except OverflowError:
        return np.asarray(math.inf if v > 0 else -math.inf)


_FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def _tiny(v: Any) -> bool:
    """Whether ``v`` holds a nonzero float below float32's smallest normal one (a subnormal
    where a device holds it as float32; flushed to zero by XLA's arithmetic)."""
    if isinstance(v, bool | int) or not isinstance(v, float | complex | np.ndarray | np.generic):
        return False
    a = np.asarray(v)
    if a.dtype.kind not in "fc" or a.size == 0:
        return False
    with np.errstate(invalid="ignore"):
        parts = (a.real, a.imag) if a.dtype.kind == "c" else (a,)
        return any(bool(((p != 0) & (np.abs(p) < _FLOAT32_TINY)).any()) for p in parts)


def _abs(x: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        a = np.abs(np.asarray(x)).astype(np.float64)
    return np.nan_to_num(a, nan=0.0, posinf=np.inf)


def _is_float(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind in "fc"


class Reference:
    """Runs a program on NumPy, step by step: ``narrow`` maps each 64-bit result to the 32-bit
    dtype of its kind, as a device without 64-bit types holds it."""

    def __init__(self, narrow: bool = False) -> None:
        self.narrow = narrow
        self.env = base_env(np)
        self.meta: dict[str, Meta] = {}
        self.outcomes: list[Outcome] = []
        self.order: list[str] = []
        self._may_raise: Error | None = None
        self._pending_may_raise: Error | None = None

    def run(self, program: Program) -> RefRun:
        for step in program.steps:
            self.step(step)
        return RefRun(self.env, self.meta, self.outcomes, self.order)

    def operand(self, node: ast.expr) -> Any:
        name = _name(node)
        if name is not None:
            return self.env[name]
        return eval(compile(ast.Expression(node), "<operand>", "eval"), self.env)  # noqa: S307

    def step(self, step: Step) -> Outcome:
        if any(v not in self.env for v in step.reads):
            out = Outcome(False)
            self.outcomes.append(out)
            return out
        before = {v: self.env[v] for v in step.reads}
        group = tuple(self._group(step.target)) if step.kind != "assign" else (step.target,)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with np.errstate(all="ignore", invalid="warn"):
                try:
                    exec(step.code, self.env)  # noqa: S102
                    error = None
                except Exception as e:  # noqa: BLE001 - any error is a result here
                    error = Error.of(e)
        invalid_cast = any("in cast" in str(w.message) for w in caught)
        self._may_raise = None
        if error is not None and error.type is OverflowError and step.op in CMPOPS.values():
            error = self._exact_comparison(step, error)
        if error is None:
            error = self._settle(step)
        if error is not None:
            if step.kind == "assign":
                self.env.pop(step.target, None)
            error.also = self._second_fault(step)
            out = Outcome(True, error, group)
            self.outcomes.append(out)
            return out
        self._account(step, before, invalid_cast)
        may_raise = self._may_raise or self._pending_may_raise
        self._pending_may_raise = None
        out = Outcome(True, None, group, may_raise)
        self.outcomes.append(out)
        return out

    def _exact_comparison(self, step: Step, error: Error) -> Error | None:
        """A comparison NumPy refused with an OverflowError (a bool array against ``2**63``:
        NumPy converts the int to int64 first; against an integer array it compares exactly):
        the exact answer, or that error, either holds."""
        if step.kind != "assign":
            return error
        trial = dict(self.env)
        for v in step.reads:
            trial[v] = np.asarray(self.env[v]).astype(object)
        try:
            exec(step.code, trial)  # noqa: S102
            exact = np.asarray(trial[step.target], dtype=bool)
        except Exception:  # noqa: BLE001 - no exact answer either: NumPy's error stands
            return error
        self.env[step.target] = exact
        self._pending_may_raise = error
        return None

    def _second_fault(self, step: Step) -> tuple[type[BaseException], ...]:
        """The other fault of a call with two: a write into a read-only view (a
        ``broadcast_to``) that NumPy's cast rules also refuse, or a Python int beyond any float
        (converting it is an ``OverflowError``, whatever else the call does wrong)."""
        found: tuple[type[BaseException], ...] = ()
        values = self._operand_values(step)
        if any(type(v) is int and abs(v) > 2**1023 for v in values):
            found += (OverflowError,)
        target = self.env.get(step.target)
        if step.kind != "assign" and isinstance(target, np.ndarray) and not target.flags.writeable:
            trial = dict(self.env)
            trial[step.target] = target.copy()
            try:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec(step.code, trial)  # noqa: S102
            except Exception as e:  # noqa: BLE001
                found += family(type(e))
        return found

    def _settle(self, step: Step) -> Error | None:
        """The step's result as a device holds it: a 0-d array, not a NumPy scalar; with
        ``narrow``, 64-bit results in 32 bits (a value from Python that does not fit is an
        ``OverflowError``, as JAX raises)."""
        if step.kind != "assign":
            return None
        value = self.env[step.target]
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            return Error(TypeError, f"TypeError: the step made a {type(value).__name__}")
        if value.dtype == object:
            return Error(TypeError, "TypeError: NumPy made an object array")
        if step.op == "floor_divide" and value.dtype.kind == "f":
            # boxfall follows the standard where one float is infinite (floor(x1 / x2));
            # NumPy gives NaN there (docs/array-api.md).
            a, b = (_numeric(o) for o in self._operand_values(step)[:2])
            with np.errstate(all="ignore"):
                one = np.isinf(a) ^ np.isinf(b)
                value = np.where(one, np.floor(np.divide(a, b)), value).astype(value.dtype)
        if self.narrow and value.dtype.name in NARROW:
            to = np.dtype(NARROW[value.dtype.name])
            with np.errstate(all="ignore"):
                small = value.astype(to)
            if step.op in FROM_PYTHON and value.dtype.kind in "iu":
                if not np.array_equal(small.astype(value.dtype), value):
                    return Error(OverflowError, f"OverflowError: {value} does not fit {to}")
            if step.op not in CREATION and value.dtype.kind in "iu":
                # A Python int outside the device's 32-bit integer: NumPy computes in 64 bits.
                # Where the result fits 32 bits the device may compute it or raise (NEP 50 on
                # an int32 array raises); where it does not, a wrapped number would be a
                # silent wrong value: OverflowError. A result that does not fit from tensors
                # alone: JAX wraps it, boxfall's CPU kernels may refuse it; either holds.
                lo, hi = int_range(to.name)
                outside = any(
                    type(o) is int and not lo <= o <= hi for o in self._operand_values(step)
                )
                fits = np.array_equal(small.astype(value.dtype), value)
                if outside and not fits:
                    return Error(OverflowError, f"OverflowError: {value} does not fit {to}")
                if outside or not fits:
                    self._may_raise = Error(OverflowError, f"OverflowError: {value} in {to}")
            value = small
        self.env[step.target] = value
        if step.target not in self.order:
            self.order.append(step.target)
        return None

    def _group(self, name: str) -> list[str]:
        """The variables whose memory a write to ``name`` changes (its base and views)."""
        a = self.env[name]
        return [v for v in self.order if v in self.env and np.may_share_memory(self.env[v], a)]

    def _account(self, step: Step, before: dict[str, Any], invalid_cast: bool) -> None:
        read_meta = [self.meta[v] for v in step.reads if v in self.meta]
        values_read = step.op not in NOT_FROM_VALUES
        unspecified = invalid_cast or step.op in SHAPE_ONLY
        unspecified |= values_read and any(m.unspecified for m in read_meta)
        inexact_in = any(
            not m.exact for v, m in zip(step.reads, read_meta, strict=False) if _is_float(before[v])
        )
        if step.op in ("floor_divide", "divide") and (step.kind != "assign" or step.op == "divide"):
            # An infinite operand: boxfall's in-place floor_divide follows the standard, and
            # complex division of infinities differs by library (C99 or NaN).
            values = [np.asarray(o) for o in self._operand_values(step)]
            target_kind = np.asarray(self.env[step.target]).dtype.kind
            infinite = any(v.dtype.kind in "fc" and not np.isfinite(v).all() for v in values)
            if infinite and (step.op == "floor_divide" or target_kind == "c"):
                unspecified = True
        if inexact_in and step.op in DISCONTINUOUS and step.op != "astype":
            unspecified = True
        if any(_tiny(v) for v in (*self._operand_values(step), self.env[step.target])):
            # XLA computes with subnormal floats flushed to zero, on JAX's CPU and TPU alike
            # (JAX's rule, jax-ml/jax#16200: working as intended): where one is in or out,
            # the values (and what is computed from them) are the device's, not NumPy's.
            unspecified = True
        target = self.env[step.target]
        if step.op == "astype" and inexact_in and target.dtype.kind in "biu":
            unspecified = True
        narrowed_step = self.narrow and any(
            isinstance(o, np.ndarray | np.generic) and o.dtype.name in NARROW
            for o in self._operand_values(step)
        )
        exact = step.op in EXACT and not inexact_in and not narrowed_step
        if step.op in ("multiply", "divide") and any(
            getattr(o, "dtype", np.dtype("f")).kind == "c" for o in self._operand_values(step)
        ):
            exact = False  # complex products are rounded differently by each library
        mag = self._mag(step) if _is_float(target) else None
        if step.kind == "assign":
            self.meta[step.target] = Meta(exact, mag, unspecified)
            return
        for v in self._group(step.target):
            m = self.meta.setdefault(v, Meta())
            m.unspecified |= unspecified
            m.exact &= exact
            if _is_float(self.env[v]):
                m.mag = _abs(self.env[v]) if m.exact else np.full(self.env[v].shape, np.inf)
        if step.kind == "inplace" and mag is not None and not exact:
            self.meta[step.target].mag = mag

    def _operand_values(self, step: Step) -> list[Any]:
        out = []
        for node in step.operands:
            try:
                out.append(self.operand(node))
            except Exception:  # noqa: BLE001 - a keyword like axis=(0, 1): not a value
                continue
        return out

    def _operand_mag(self, node: ast.expr) -> np.ndarray:
        name = _name(node)
        if name is not None and name in self.meta and self.meta[name].mag is not None:
            return self.meta[name].mag
        return _abs(self.operand(node))

    def _mag(self, step: Step) -> np.ndarray:
        """The scale of the error each float result may carry (rtol times it is allowed): the
        result's magnitude for a correctly rounded operator on exact inputs; the sum of the
        terms' magnitudes for sums and matmuls; first-order error propagation otherwise."""
        r = self.env[step.target]
        ar = _abs(r)
        op = step.op
        tensors = [n for n in step.operands if _name(n) is not None]
        try:
            mags = [self._operand_mag(n) for n in step.operands[:2]]
        except Exception:  # noqa: BLE001
            mags = []
        with np.errstate(all="ignore"):
            if op in ("sum", "mean", "cumulative_sum", "prod", "max", "min") and tensors:
                m = self._operand_mag(tensors[0])
                axis = self._keyword(step, "axis")
                if op == "cumulative_sum":
                    out = np.cumsum(m, axis=axis if axis is not None else 0)
                elif op in ("sum", "mean"):
                    out = np.sum(m, axis=axis)
                    if op == "mean":
                        out = out / max(1, m.size // max(1, np.asarray(out).size))
                elif op == "prod":
                    out = np.prod(np.maximum(m, 1.0), axis=axis)
                else:
                    out = np.max(m, axis=axis, initial=0.0)
                out = np.asarray(out, dtype=np.float64)
                if out.size == ar.size:
                    return out.reshape(ar.shape) + ar
                return np.full(ar.shape, out.max() if out.size else 0.0) + ar
            if op == "matmul" and len(mags) == 2:
                out = np.matmul(mags[0], mags[1])
                return np.broadcast_to(out, ar.shape).copy()
            if len(mags) == 2 and op in ("add", "subtract", "maximum", "minimum", "where", "clip"):
                return np.broadcast_to(mags[0] + mags[1], ar.shape).copy() + ar
            if len(mags) == 2 and op == "multiply":
                return np.broadcast_to(mags[0] * mags[1], ar.shape).copy() + ar
            if len(mags) == 2 and op == "divide":
                b = _abs(self.operand(step.operands[1]))
                out = (mags[0] + ar * mags[1]) / b + ar
                return np.broadcast_to(np.where(np.isnan(out), np.inf, out), ar.shape).copy()
            if len(mags) == 2 and op == "pow":
                a = _abs(self.operand(step.operands[0]))
                b = _abs(self.operand(step.operands[1]))
                out = ar * (1 + b * mags[0] / a + np.abs(np.log(a)) * mags[1])
                return np.broadcast_to(np.where(np.isnan(out), np.inf, out), ar.shape).copy()
            if mags and op == "exp":
                return ar * (1 + mags[0])
            if mags and op in ("log",):
                a = _abs(self.operand(step.operands[0]))
                return np.where(a > 0, ar + mags[0] / a, np.inf)
            if mags and op in ("sin", "tanh", "expm1", "log1p"):
                return ar + mags[0]
            if mags and op == "sqrt":
                return ar + np.where(ar > 0, mags[0] / np.where(ar > 0, 2 * ar, 1), 0)
            if mags and op in ("negative", "positive", "abs", "square", "astype"):
                base = np.broadcast_to(mags[0], ar.shape)
                return (base * base if op == "square" else base) + ar
        return ar

    def _keyword(self, step: Step, name: str) -> Any:
        (stmt,) = ast.parse(step.line).body
        value = stmt.value if isinstance(stmt, ast.Assign) else None
        if isinstance(value, ast.Call):
            for k in value.keywords:
                if k.arg == name:
                    return ast.literal_eval(k.value)
        return None


# --- comparing -----------------------------------------------------------------------------------

RTOL = 1e-5


def compare_values(name: str, got: np.ndarray, want: np.ndarray, meta: Meta) -> str | None:
    """Why ``got`` is not ``want`` (None when it is): dtype and shape exactly; integers and
    booleans exactly; floats within ``RTOL`` times their error scale, NaNs equal."""
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype}, NumPy {want.dtype}"
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, NumPy {want.shape}"
    if meta.unspecified:
        return None
    if want.dtype.kind in "biu":
        if not np.array_equal(got, want):
            return f"{name}: {got.tolist()}, NumPy {want.tolist()}"
        return None
    mag = meta.mag if meta.mag is not None and meta.mag.shape == want.shape else _abs(want)
    parts = (got.real, want.real), (got.imag, want.imag) if want.dtype.kind == "c" else ()
    for g, w in [p for p in parts if p]:
        g = g.astype(np.float64)
        w = w.astype(np.float64)
        # Below the smallest normal float32 a compiled program may flush to zero (XLA's CPU
        # programs do): subnormals count as zero.
        tiny = float(np.finfo(np.float32).tiny)
        with np.errstate(all="ignore"):
            same = (g == w) | (np.isnan(g) & np.isnan(w))
            close = np.abs(g - w) <= RTOL * mag + tiny
        ok = same | close | np.isinf(mag)
        if not ok.all():
            return f"{name}: {got.tolist()}, NumPy {want.tolist()}"
    return None


# --- statistics ----------------------------------------------------------------------------------

STATS: collections.Counter[str] = collections.Counter()
"""Steps run, per operator x dtype x scalar class (``less|int8|int:outside``), and programs run
(``programs``); test_differential.py writes them where BOXFALL_DIFF_STATS says."""


def scalar_class(value: Any, dtype: str | None) -> str:
    if isinstance(value, np.ndarray):
        return "tensor"
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        if dtype in INT_DTYPES:
            lo, hi = int_range(dtype)
            return "int:fits" if lo <= value <= hi else "int:outside"
        return "int"
    if isinstance(value, float):
        return "float:special" if not math.isfinite(value) else "float"
    if isinstance(value, complex):
        return "complex"
    return "none"


def count(ref: Reference, step: Step) -> None:
    values = ref._operand_values(step) if step.op not in CREATION else []
    dtype = next((v.dtype.name for v in values if isinstance(v, np.ndarray)), None)
    others = [v for v in values[1:] if not isinstance(v, str)] if values else []
    if step.op in CREATION:
        kind = "creation"
    else:
        kind = scalar_class(others[0], dtype) if others else "none"
    label = step.op if step.kind == "assign" else f"{step.op}({step.kind})"
    STATS[f"{label}|{dtype or '-'}|{kind}"] += 1


# --- the generator -------------------------------------------------------------------------------


@dataclass
class Draft:
    """A program being drawn: its lines and NumPy's run of them so far."""

    draw: Any
    narrow_data: bool  # x64 off: 64-bit inputs hold values their 32-bit dtype holds
    ref: Reference = field(default_factory=Reference)
    lines: list[str] = field(default_factory=list)
    n: int = 0

    def new(self) -> str:
        name = f"v{self.n}"
        self.n += 1
        return name

    def add(self, line: str) -> bool:
        """Runs ``line`` on NumPy; keeps it; whether it ran without an error."""
        self.lines.append(line)
        out = self.ref.step(parse(line))
        return out.error is None

    def vars(self, pred: Any = None) -> list[str]:
        return [
            v
            for v in self.ref.order
            if v in self.ref.env and (pred is None or pred(self.ref.env[v]))
        ]


def _values(dtype: str, narrow: bool) -> st.SearchStrategy[Any]:
    if dtype == "bool":
        return st.booleans()
    if dtype in INT_DTYPES:
        lo, hi = int_range(narrowed(dtype, narrow))
        lo, hi = max(lo, int_range(dtype)[0]), min(hi, int_range(dtype)[1])
        return st.sampled_from((lo, hi, 0, 1, -1 if lo < 0 else 2)) | st.integers(-20, 20).map(
            lambda v: max(lo, min(hi, v))
        )
    if dtype in FLOAT_DTYPES:
        width = 32 if narrowed(dtype, narrow) == "float32" or dtype == "float32" else 64
        special = st.sampled_from((0.0, -0.0, math.inf, -math.inf, math.nan, 1e-3, 3e38))
        return (
            special
            | st.integers(-40, 40).map(lambda v: v / 4)
            | st.floats(-1e6, 1e6, width=width, allow_subnormal=False)
        )
    part = _values("float32", narrow)
    return st.builds(complex, part, part)


@st.composite
def _array(draw: Any, dtype: str, shape: tuple[int, ...], narrow: bool) -> np.ndarray:
    size = math.prod(shape)
    items = draw(st.lists(_values(dtype, narrow), min_size=size, max_size=size))
    return np.array(items, dtype=dtype).reshape(shape)


def _scalar(draw: Any, dtype: str | None, narrow: bool) -> Any:
    """A Python or NumPy scalar of any kind and magnitude, leaning to ``dtype``'s kind."""
    kinds = ["int", "int", "float", "bool", "complex", "np"]
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        if dtype in INT_DTYPES and draw(st.booleans()):
            lo, hi = int_range(dtype)
            return draw(st.sampled_from((lo, hi, lo - 1, hi + 1, 0, 5)))
        return draw(st.sampled_from(PY_INTS))
    if kind == "float":
        return draw(st.sampled_from(PY_FLOATS))
    if kind == "bool":
        return draw(st.booleans())
    if kind == "complex":
        return draw(st.sampled_from(PY_COMPLEX))
    name = draw(st.sampled_from(NP_SCALAR_TYPES))
    holds = narrowed(name, narrow)
    if name == "bool":
        return np.bool_(draw(st.booleans()))
    if name in INT_DTYPES:
        lo, hi = int_range(holds)
        lo, hi = max(lo, int_range(name)[0]), min(hi, int_range(name)[1])
        return getattr(np, name)(draw(st.sampled_from((lo, hi, 0, 1, 3))))
    if name in FLOAT_DTYPES:
        return getattr(np, name)(draw(st.sampled_from(PY_FLOATS[:14] + (math.nan, math.inf))))
    return getattr(np, name)(draw(st.sampled_from(PY_COMPLEX[:3])))


_ARITH = ("+", "-", "*", "/", "//", "%", "**")
_BITS = ("&", "|", "^", "<<", ">>")
_CMP = ("<", "<=", ">", ">=", "==", "!=")
_FUNCS2 = ("maximum", "minimum")
_UNARY_ANY = ("-{}", "+{}", "xp.abs({})", "xp.square({})", "xp.sign({})")
_UNARY_INT = ("~{}",)
_UNARY_FLOAT = (
    "xp.sqrt({})", "xp.exp({})", "xp.log({})", "xp.sin({})", "xp.tanh({})", "xp.floor({})",
    "xp.ceil({})", "xp.trunc({})", "xp.round({})", "xp.isnan({})", "xp.isfinite({})",
)  # fmt: skip
_REDUCE = ("sum", "prod", "max", "min", "mean", "any", "all", "cumulative_sum")


def _kind(a: np.ndarray) -> str:
    return {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "complex"}[a.dtype.kind]


def _binary_ops(kind: str) -> tuple[str, ...]:
    if kind == "bool":
        return ("&", "|", "^", "==", "!=", "+", "<", "*", "-")
    if kind == "int":
        return _ARITH + _BITS + _CMP
    if kind == "float":
        return _ARITH + _CMP
    return ("+", "-", "*", "/", "==", "!=")


def _pick(d: Draft, pred: Any = None) -> str | None:
    names = d.vars(pred)
    return d.draw(st.sampled_from(names)) if names else None


def _broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def gen_input(d: Draft) -> None:
    dtype = d.draw(st.sampled_from(DTYPES))
    shape = d.draw(st.sampled_from(SHAPES))
    a = d.draw(_array(dtype, shape, d.narrow_data))
    d.add(f"{d.new()} = xp.asarray({array_text(a)})")


def gen_binary(d: Draft) -> None:
    x = _pick(d)
    if x is None:
        return gen_input(d)
    a = d.ref.env[x]
    ops = _binary_ops(_kind(a))
    if d.draw(st.integers(0, 9)) == 0:
        ops = _ARITH + _BITS + _CMP
    op = d.draw(st.sampled_from(ops + _FUNCS2))
    if d.draw(st.booleans()):
        y = _pick(d, lambda b: _broadcastable(a.shape, b.shape)) or x
        if d.draw(st.integers(0, 15)) == 0:
            y = _pick(d) or x  # perhaps a shape that does not broadcast
        other = y
    else:
        other = scalar_text(_scalar(d.draw, a.dtype.name, d.narrow_data))
    left, right = (x, other) if d.draw(st.integers(0, 3)) else (other, x)
    if _name_like(left) is None and op in _FUNCS2:
        left, right = right, left
    if op in _FUNCS2:
        line = f"{d.new()} = xp.{op}({left}, {right})"
    else:
        line = f"{d.new()} = {left} {op} {right}"
    d.add(line)


def _name_like(text: str) -> str | None:
    return text if _VAR.match(text) else None


def gen_unary(d: Draft) -> None:
    x = _pick(d)
    if x is None:
        return gen_input(d)
    kind = _kind(d.ref.env[x])
    forms = _UNARY_ANY + (_UNARY_INT if kind in ("int", "bool") else ())
    forms += _UNARY_FLOAT if kind == "float" else ()
    forms += ("xp.logical_not({})",) if kind == "bool" else ()
    form = d.draw(st.sampled_from(forms))
    d.add(f"{d.new()} = {form.format(x)}")


def gen_reduce(d: Draft) -> None:
    x = _pick(d)
    if x is None:
        return gen_input(d)
    a = d.ref.env[x]
    op = d.draw(st.sampled_from(_REDUCE))
    if op == "mean" and a.dtype.kind not in "fc":
        op = "sum"
    args = [x]
    if op == "cumulative_sum":
        if a.ndim > 1 or d.draw(st.booleans()):
            args.append(f"axis={d.draw(st.integers(-1, max(0, a.ndim - 1)))}")
    elif a.ndim and d.draw(st.booleans()):
        args.append(f"axis={d.draw(st.integers(-a.ndim, a.ndim - 1))}")
        if d.draw(st.booleans()):
            args.append("keepdims=True")
    d.add(f"{d.new()} = xp.{op}({', '.join(args)})")


def _index(d: Draft, shape: tuple[int, ...], view: bool) -> str:
    parts: list[str] = []
    axes = len(shape)
    used = d.draw(st.integers(0, axes))
    ints = 0
    for n in shape[:used]:
        kind = d.draw(st.sampled_from(("int", "slice", "all")))
        if kind == "int":
            i = d.draw(st.integers(-n - 1, n)) if d.draw(st.integers(0, 9)) == 0 else None
            parts.append(str(i if i is not None else d.draw(st.integers(-n, max(-n, n - 1)))))
            ints += 1
        elif kind == "slice":
            start = d.draw(st.sampled_from(("", "1", "-1", "0", "2")))
            stop = d.draw(st.sampled_from(("", "2", "-1", "5")))
            step = d.draw(st.sampled_from(("", "", "2", "-1")))
            parts.append(f"{start}:{stop}" + (f":{step}" if step else ""))
        else:
            parts.append(":")
    if d.draw(st.integers(0, 5)) == 0:
        parts.insert(d.draw(st.integers(0, len(parts))), "None")
    if ints == axes or d.draw(st.booleans()):
        parts.append("...")  # a 0-d result stays a view, as it is on every backend
    return ", ".join(parts) if parts else "..."


def gen_view(d: Draft) -> None:
    x = _pick(d)
    if x is None:
        return gen_input(d)
    a = d.ref.env[x]
    form = d.draw(st.sampled_from(("index", "index", "T", "mT", "permute", "reshape", "expand",
                                   "squeeze", "broadcast")))  # fmt: skip
    v = d.new()
    if form == "index":
        line = f"{v} = {x}[{_index(d, a.shape, True)}]"
    elif form == "T" and a.ndim == 2:
        line = f"{v} = {x}.T"
    elif form == "mT" and a.ndim >= 2:
        line = f"{v} = {x}.mT"
    elif form == "permute" and a.ndim >= 2:
        axes = d.draw(st.permutations(range(a.ndim)))
        line = f"{v} = xp.permute_dims({x}, {tuple(axes)})"
    elif form == "reshape":
        shapes = [s for s in ((a.size,), (1, a.size), (a.size, 1), (-1,), (2, 3), (3, 2), (3, 3))
                  if math.prod(s) in (a.size, -a.size)]  # fmt: skip
        line = f"{v} = xp.reshape({x}, {d.draw(st.sampled_from(shapes))})"
    elif form == "expand":
        line = f"{v} = xp.expand_dims({x}, axis={d.draw(st.integers(-a.ndim - 1, a.ndim))})"
    elif form == "squeeze" and 1 in a.shape:
        line = f"{v} = xp.squeeze({x}, axis={a.shape.index(1)})"
    elif form == "broadcast":
        target = d.draw(st.sampled_from(((2, 3), (3, 3), (2, 2, 3), (3,))))
        line = f"{v} = xp.broadcast_to({x}, {target})"
    else:
        line = f"{v} = {x}[{_index(d, a.shape, True)}]"
    d.add(line)


def gen_inplace(d: Draft) -> None:
    x = _pick(d)
    if x is None:
        return gen_input(d)
    a = d.ref.env[x]
    ops = [o for o in _binary_ops(_kind(a)) if o not in _CMP]
    if d.draw(st.integers(0, 9)) == 0:
        ops = list(_ARITH + _BITS)
    op = d.draw(st.sampled_from(ops))
    if d.draw(st.booleans()):
        other = _pick(d, lambda b: _broadcastable(a.shape, b.shape)) or x
    else:
        other = scalar_text(_scalar(d.draw, a.dtype.name, d.narrow_data))
    d.add(f"{x} {op}= {other}")


def gen_setitem(d: Draft) -> None:
    x = _pick(d)
    if x is None:
        return gen_input(d)
    a = d.ref.env[x]
    index = _index(d, a.shape, False)
    if d.draw(st.booleans()):
        value = _pick(d) or scalar_text(0)
    else:
        value = scalar_text(_scalar(d.draw, a.dtype.name, d.narrow_data))
    d.add(f"{x}[{index}] = {value}")


def gen_astype(d: Draft) -> None:
    x = _pick(d)
    if x is None:
        return gen_input(d)
    dtype = d.draw(st.sampled_from(DTYPES))
    d.add(f"{d.new()} = xp.astype({x}, xp.{dtype})")


def gen_matmul(d: Draft) -> None:
    x = _pick(d, lambda a: a.ndim >= 1)
    if x is None:
        return gen_input(d)
    a = d.ref.env[x]
    k = a.shape[-1]
    y = _pick(d, lambda b: b.ndim >= 1 and b.shape[-2 if b.ndim >= 2 else 0] == k)
    if y is None or d.draw(st.integers(0, 3)) == 0:
        kind = _kind(a)
        kinds = {"bool": ("bool",), "int": INT_DTYPES, "float": FLOAT_DTYPES}
        dtype = d.draw(st.sampled_from(kinds.get(kind, COMPLEX_DTYPES)))
        shape = d.draw(st.sampled_from(((k,), (k, 3), (k, 2))))
        y = d.new()
        data = array_text(d.draw(_array(dtype, shape, d.narrow_data)))
        if not d.add(f"{y} = xp.asarray({data})"):
            return
    left, right = (x, y) if d.draw(st.booleans()) or d.ref.env[y].ndim < 2 else (y, x)
    d.add(f"{d.new()} = {left} @ {right}")


def gen_creation(d: Draft) -> None:
    v = d.new()
    dtype = d.draw(st.sampled_from(DTYPES))
    shape = d.draw(st.sampled_from(SHAPES))
    form = d.draw(st.sampled_from(("zeros", "ones", "full", "full", "full_nodtype", "arange",
                                   "linspace", "eye", "list", "list", "list_nodtype", "like",
                                   "empty")))  # fmt: skip
    s = shape_text(shape)
    if form in ("zeros", "ones", "empty"):
        line = f"{v} = xp.{form}({s}, dtype=xp.{dtype})"
    elif form == "full":
        fill = scalar_text(_scalar(d.draw, dtype, d.narrow_data))
        line = f"{v} = xp.full({s}, {fill}, dtype=xp.{dtype})"
    elif form == "full_nodtype":
        fill = d.draw(st.sampled_from(PY_INTS + PY_FLOATS[:8] + (True,)))
        line = f"{v} = xp.full({s}, {scalar_text(fill)})"
    elif form == "arange":
        start = d.draw(st.sampled_from((0, 1, -3, 2**31 - 2, 2**40, 250, 0.5)))
        n = d.draw(st.integers(0, 4))
        stop = start + n * (1 if isinstance(start, int) else 0.5)
        step = "" if isinstance(start, int) else ", 0.5"
        dt = d.draw(st.sampled_from(("", f", dtype=xp.{dtype}")))
        line = f"{v} = xp.arange({scalar_text(start)}, {scalar_text(stop)}{step}{dt})"
    elif form == "linspace":
        a, b = d.draw(st.sampled_from(((0.0, 1.0), (-2.0, 3.0), (1.0, 1e6), (-1.0, 1.0))))
        n = d.draw(st.integers(1, 5))
        dt = d.draw(st.sampled_from(("float32", "float64")))
        line = f"{v} = xp.linspace({scalar_text(a)}, {scalar_text(b)}, {n}, dtype=xp.{dt})"
    elif form == "eye":
        n, m, k = d.draw(st.integers(1, 3)), d.draw(st.integers(1, 3)), d.draw(st.integers(-1, 1))
        line = f"{v} = xp.eye({n}, {m}, k={k}, dtype=xp.{dtype})"
    elif form in ("list", "list_nodtype"):
        size = d.draw(st.integers(1, 3))
        if form == "list":
            items = [_scalar(d.draw, dtype, d.narrow_data) for _ in range(size)]
            items = [i for i in items if not isinstance(i, np.generic)] or [1]
            text = ", ".join(scalar_text(i) for i in items)
            line = f"{v} = xp.asarray([{text}], dtype=xp.{dtype})"
        else:
            pool = d.draw(st.sampled_from((PY_INTS[:-3], PY_FLOATS, (True, False))))
            items = [d.draw(st.sampled_from(pool)) for _ in range(size)]
            line = f"{v} = xp.asarray([{', '.join(scalar_text(i) for i in items)}])"
    else:
        x = _pick(d)
        if x is None:
            return gen_input(d)
        which = d.draw(st.sampled_from(("zeros_like", "ones_like", "full_like")))
        if which == "full_like":
            fill = scalar_text(_scalar(d.draw, d.ref.env[x].dtype.name, d.narrow_data))
            line = f"{v} = xp.full_like({x}, {fill})"
        else:
            line = f"{v} = xp.{which}({x})"
    d.add(line)


def gen_scalar_step(d: Draft) -> None:
    """A tensor and a Python or NumPy scalar of any kind and magnitude: an operator either
    way round, an in-place operator, or the scalar as a creation function's value."""
    x = _pick(d)
    if x is None:
        return gen_input(d)
    a = d.ref.env[x]
    value = _scalar(d.draw, a.dtype.name, d.narrow_data)
    s = scalar_text(value)
    form = d.draw(
        st.sampled_from(("op", "op", "op", "reflected", "inplace", "func", "create", "create"))
    )
    if form == "inplace":
        op = d.draw(st.sampled_from(_ARITH + _BITS))
        d.add(f"{x} {op}= {s}")
        return
    if form == "func":
        d.add(f"{d.new()} = xp.{d.draw(st.sampled_from(_FUNCS2))}({x}, {s})")
        return
    if form == "create":
        # An int of any magnitude asked for as a (64-bit) integer dtype most often: where
        # narrowing bites.
        if d.draw(st.booleans()):
            value = d.draw(st.sampled_from(PY_INTS))
            s = scalar_text(value)
        wide = ("int64", "uint64", "int64", *INT_DTYPES)
        dtype = d.draw(st.sampled_from(wide if type(value) is int else DTYPES))
        shape = shape_text(d.draw(st.sampled_from(SHAPES)))
        if d.draw(st.booleans()):
            d.add(f"{d.new()} = xp.full({shape}, {s}, dtype=xp.{dtype})")
        else:
            d.add(f"{d.new()} = xp.asarray([{s}], dtype=xp.{dtype})")
        return
    op = d.draw(st.sampled_from(_binary_ops(_kind(a)) + _CMP))
    line = f"{x} {op} {s}" if form == "op" else f"{s} {op} {x}"
    d.add(f"{d.new()} = {line}")


GENERATORS = (
    (gen_binary, 6), (gen_unary, 2), (gen_reduce, 2), (gen_view, 3), (gen_inplace, 3),
    (gen_setitem, 2), (gen_astype, 2), (gen_matmul, 1), (gen_creation, 2), (gen_input, 1),
)  # fmt: skip
_WEIGHTED = tuple(g for g, w in GENERATORS for _ in range(w))


@st.composite
def programs(draw: Any, narrow_data: bool, max_steps: int = 10, scalars: bool = False) -> Program:
    """A random program: one to three inputs, then two to ``max_steps`` steps of every kind;
    with ``scalars``, one or two inputs and steps that each meet a scalar."""
    d = Draft(draw, narrow_data)
    for _ in range(draw(st.integers(1, 2 if scalars else 3))):
        gen_input(d)
    pool = (gen_scalar_step,) if scalars else _WEIGHTED
    for _ in range(draw(st.integers(2, max_steps))):
        draw(st.sampled_from(pool))(d)
    return Program(tuple(d.lines))


# --- a backend's run -----------------------------------------------------------------------------


def read(value: Any) -> np.ndarray:
    """A tensor's values on the host (in graph mode, the sync that computes it)."""
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def run_backend(program: Program, xp: Any, ref: RefRun, graph: bool, salt: int = 0) -> list[str]:
    """Runs ``program`` on ``xp`` and compares it with ``ref``; the differences, as text.

    Eager mode must raise at the step NumPy raised at (an error of the same family), and
    nowhere else. Graph mode may instead raise where the tensor that step made (or wrote) is
    computed: the read of it, or of a tensor made from it; never at another read.

    ``salt`` (graph mode): an unrelated pending tensor of that many elements is recorded
    first, so that the program's graph is one no earlier program compiled: its first run
    compiles, whatever ran before (a failure shrinks and replays alike)."""
    env = base_env(xp)
    home: str | None = None  # the device of the program's tensors
    salted = xp.zeros(salt) if salt else None
    problems: list[str] = []
    tainted: dict[str, set[int]] = {}  # variable -> the steps whose errors its read may raise
    deferred: dict[int, Error] = {}
    order: list[str] = []
    for i, step in enumerate(program.steps):
        want = ref.outcomes[i]
        where = f"step {i + 1} `{step.line}`"
        if any(v not in env for v in step.reads):
            continue  # an input failed to be made: reported where it failed
        try:
            exec(step.code, env)  # noqa: S102
            got = None
        except Exception as e:  # noqa: BLE001 - any error is a result here
            got = Error.of(e)
        if step.kind == "assign" and got is None and step.target not in order:
            order.append(step.target)
            made = env.get(step.target)
            if xp is not np and type(made).__module__.split(".")[0] != "boxfall":
                problems.append(
                    f"{where}: made a {type(made).__module__}.{type(made).__name__}, not a "
                    "tensor of the backend"
                )
            elif xp is not np:
                home = home or made.device
                if made.device != home:
                    problems.append(f"{where}: made a tensor on {made.device}, not on {home}")
        sources = set().union(*(tainted.get(v, set()) for v in step.reads))
        if not want.ran:
            pass  # NumPy never made an input of this step: what it makes fails with that input
        elif want.error is not None and got is None:
            if graph:
                deferred[i] = want.error
                sources.add(i)
            else:
                problems.append(f"{where}: NumPy raised {want.error.text}; this computed it")
        elif want.error is None and got is not None:
            if not (want.may_raise and got.is_like(want.may_raise)):
                problems.append(f"{where}: raised {got.text}; NumPy computed it")
        elif want.error is not None and got is not None and not got.is_like(want.error):
            problems.append(f"{where}: raised {got.text}; NumPy raised {want.error.text}")
        if graph and want.ran and want.error is None and want.may_raise and got is None:
            deferred.setdefault(-1 - i, want.may_raise)  # may be raised at a read, need not
            sources.add(-1 - i)
        if sources and got is None:
            for v in want.group or (step.target,):
                tainted.setdefault(v, set()).update(sources)
    surfaced: set[int] = set()
    for v in order:
        if v not in env:
            continue
        try:
            got_value = read(env[v])
        except Exception as e:  # noqa: BLE001
            err = Error.of(e)
            causes = [k for k in tainted.get(v, ()) if err.is_like(deferred.get(k, err), True)]
            if causes:
                surfaced.update(causes)
            else:
                why = "" if v not in tainted else " (not of the family of its step's error)"
                problems.append(f"reading {v} raised {err.text}{why}")
            continue
        if v not in ref.env:
            continue  # NumPy raised where it was made: reported at that step
        diff = compare_values(v, got_value, ref.env[v], ref.meta.get(v, Meta()))
        if diff:
            problems.append(diff)
    for k, err in deferred.items():
        if k >= 0 and k not in surfaced:
            problems.append(
                f"step {k + 1} `{program.steps[k].line}`: NumPy raised {err.text}; graph mode "
                "raised it neither at the call nor at the read of what the step made"
            )
    env.clear()
    if salted is not None:
        try:
            read(salted)
        except Exception as e:  # noqa: BLE001
            problems.append(f"reading an unrelated tensor made first raised {describe(e)}")
    return problems
