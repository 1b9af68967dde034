"""The stubs a user's tools read: ``_boxfall.pyi`` re-exports the extension's names from
``boxfall._stubs`` (one module a subject, each with a ``.py`` twin that stubtest checks it
against); every class, function, method and property of the stubs has a docstring, and
``mypy --strict`` catches a misspelt policy, library kind or ``views=`` and a wrong use of
``Tensor.shape``/``.dtype``."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import boxfall
import pytest

HUB = Path(boxfall.__file__).with_name("_boxfall.pyi")
PIECES = sorted((HUB.parent / "_stubs").glob("*.pyi"))
STUBS = [HUB, *PIECES]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


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


def test_every_class_function_method_and_property_of_the_stubs_has_a_docstring():
    found = [item for path in STUBS for item in _documented(_tree(path))]
    names = {n for n, _ in found}
    # The walk sees the stubs' whole surface, methods and properties included.
    assert {"Tensor", "Tensor.shape", "Library.impl", "OpOverload.dispatch_table"} <= names
    assert {"coverage", "get_backend", "backends", "register_backend", "call_fallback"} <= names
    missing = [n for n, has in found if not has]
    assert not missing, f"no docstring in the stubs: {missing}"


def _defined(tree: ast.Module) -> list[str]:
    """The top-level names a stub defines that exist at runtime: classes, functions and
    annotated values, not the type aliases and protocols only checkers see."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            protocol = any(ast.unparse(b) == "Protocol" for b in getattr(node, "bases", []))
            if not protocol:
                names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) != "TypeAlias":
            names.append(ast.unparse(node.target))
    return names


def test_the_hub_re_exports_every_name_of_the_pieces_and_each_twin_holds_its_pieces_names():
    # stubtest checks a piece against its twin, not that the hub re-exports it: a name left
    # out of the hub would be missing for a user's checker (`bf._boxfall.x`).
    assert len(PIECES) >= 5 and all(p.with_suffix(".py").is_file() for p in PIECES)
    imports = [node for node in _tree(HUB).body if isinstance(node, ast.ImportFrom)]
    starred = {node.module for node in imports if node.names[0].name == "*"}
    aliased = {alias.asname for node in imports for alias in node.names if alias.asname}
    defined = {name: piece for piece in PIECES for name in _defined(_tree(piece))}
    assert {"Tensor", "Library", "register_backend", "fallthrough", "_output_metas"} <= set(defined)
    # A star import leaves a private name out: the hub names those.
    left_out = [
        f"{piece.stem}.{name}"
        for name, piece in defined.items()
        if f"boxfall._stubs.{piece.stem}" not in starred
        or (name.startswith("_") and name not in aliased)
    ]
    assert not left_out, f"not re-exported by _boxfall.pyi: {left_out}"
    extension = importlib.import_module("boxfall._boxfall")
    # The extension itself, not a package of stubs (a `_boxfall/` folder would shadow it).
    assert Path(extension.__file__).suffix in {".so", ".pyd"}
    for name, piece in defined.items():
        twin = importlib.import_module(f"boxfall._stubs.{piece.stem}")
        assert getattr(twin, name, None) is getattr(extension, name), (piece.name, name)


def test_no_stub_file_is_over_800_lines():
    long = {p.name: n for p in STUBS if (n := len(p.read_text().splitlines())) > 800}
    assert not long, long


def test_the_stub_types_shape_and_dtype():
    tree = next(_tree(p) for p in PIECES if p.stem == "tensor")
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
