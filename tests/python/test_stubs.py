"""The stubs a user's tools read: every class, function, method and
property of ``_boxfall.pyi`` has a docstring, and ``mypy --strict`` catches a misspelt policy,
library kind or ``views=`` and a wrong use of ``Tensor.shape``/``.dtype``."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import boxfall
import pytest

STUB = Path(boxfall.__file__).with_name("_boxfall.pyi")


def _documented(tree: ast.Module) -> list[tuple[str, bool]]:
    """``(qualified name, has a docstring)`` of every public def and class of the stub."""
    found = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                name = f"{prefix}{node.name}"
                dunder = node.name.startswith("__") and node.name.endswith("__")
                if not dunder:
                    found.append((name, ast.get_docstring(node) is not None))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{name}.")

    visit(tree.body, "")
    return found


def test_every_class_function_method_and_property_of_the_stub_has_a_docstring():
    found = _documented(ast.parse(STUB.read_text()))
    names = {n for n, _ in found}
    # The walk sees the stub's whole surface, methods and properties included.
    assert {"Tensor", "Tensor.shape", "Library.impl", "OpOverload.dispatch_table"} <= names
    assert {"coverage", "get_backend", "backends", "register_backend", "call_fallback"} <= names
    missing = [n for n, has in found if not has]
    assert not missing, f"no docstring in _boxfall.pyi: {missing}"


def test_the_stub_types_shape_and_dtype():
    tree = ast.parse(STUB.read_text())
    tensor = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    returns = {
        f.name: ast.unparse(f.returns)
        for f in tensor.body
        if isinstance(f, ast.FunctionDef) and f.returns is not None
    }
    assert returns["shape"] == "tuple[int, ...]"
    assert returns["dtype"].startswith("np.dtype")


GOOD = """
    import numpy as np
    import boxfall as bf

    bf.set_fallback_policy("warn")
    lib = bf.Library("stub_ns", "FRAGMENT")
    fb = bf.CpuFallback(views="copy")
    t = bf.native.tensor(np.ones(3))
    shape: tuple[int, ...] = t.shape
    dtype: np.dtype = t.dtype
    table: dict[str, str] = bf.ops.stub_ns.f.default.dispatch_table()
"""

BAD = """
    import numpy as np
    import boxfall as bf

    bf.set_fallback_policy("wran")
    lib = bf.Library("stub_ns", "DEFF")
    fb = bf.CpuFallback(views="coppy")
    t = bf.native.tensor(np.ones(3))
    shape: str = t.shape
    dtype: int = t.dtype
"""


def _mypy(tmp_path: Path, source: str) -> tuple[int, str]:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_strict_accepts_right_uses_and_catches_wrong_ones(tmp_path):
    code, out = _mypy(tmp_path, GOOD)
    assert code == 0, out
    code, out = _mypy(tmp_path, BAD)
    assert code == 1, out
    errors = [ln for ln in out.splitlines() if ": error:" in ln]
    lines = {int(ln.split(":")[1]) for ln in errors}
    # One error on each wrong line (line numbers of BAD after dedent), and nothing else.
    assert lines == {5, 6, 7, 9, 10}, out
    assert "Literal['wran']" in out and "Literal['DEFF']" in out and "Literal['coppy']" in out
