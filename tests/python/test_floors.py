"""The parts stand on floors (ARCHITECTURE.md), each naming only those below it, so no file
names, through others, itself: no file-level import cycle in ``src/``, in the core (``src/``
outside ``src/python/``) or in the bindings, nor in the Python package ``python/boxfall``, with
no exception.

Both checks read the sources as text, with no build and no import of boxfall.

For Rust, the check follows the ``mod`` declarations from ``src/lib.rs`` to map module paths
onto files, then walks every path a file names (``use`` trees, and
``crate::``/``super::``/``self::`` paths or paths through a name a ``use`` brought in, in
code), resolving each to the file that *defines* the item, through re-exports (``pub use``),
so that a façade such as ``lib.rs`` or a folder's ``mod.rs`` that re-exports its children adds
no edge of its own. Test code (an item under ``#[cfg(test)]``, such as ``mod tests``) is left
aside, as are comments and string literals.

For Python, an edge is every ``import`` and ``from ... import`` of a module of the package,
wherever it stands: at the top, or inside a function, where a circle hides (it raises nothing
at import, and a later reordering turns it into a half-initialised module). Imports under
``if TYPE_CHECKING:`` never run and are left aside. A module importing a package that contains
it (``import boxfall as bf`` inside ``boxfall/``) takes the names that package's
``__init__.py`` hands on, its face, and draws no edge, as a Rust façade does not; otherwise
every package that imports its own modules would be one cycle.

A failure lists each cycle's files, one path around it, and every edge between its files with
the line that makes it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGE = ROOT / "python" / "boxfall"

# Needs only the sources: conftest.py lets this module run without the built extension.
NEEDS_EXTENSION = False

ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+|const\s+|async\s+|extern\s+\"C\"\s+)*"
    r"(?:fn|struct|enum|trait|type|const|static|union|mod|macro_rules!)\s+(\w+)",
    re.M,
)
PATH = re.compile(r"(?<![\w:])((?:r#)?[A-Za-z_]\w*(?:\s*::\s*(?:[A-Za-z_]\w*|\*))+)")


def strip(text: str) -> str:
    """The code of a Rust file with comments, string and char literals blanked out (newlines
    kept, so line numbers still hold)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not text[i - 1].isalnum()):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and (m := re.match(r"'(?:\\[^']*|[^\\'])'", text[i:])):
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(code: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def drop_test_code(code: str) -> str:
    """Blanks every item under ``#[cfg(test)]`` (a test module, a test-only import)."""
    while (m := re.search(r"#\[cfg\(test\)\]", code)) is not None:
        j = m.end()
        while j < len(code) and code[j] not in "{;":
            j += 1
        end = block_end(code, j) if j < len(code) and code[j] == "{" else j + 1
        code = code[: m.start()] + "\n" * code.count("\n", m.start(), end) + code[end:]
    return code


@dataclass
class Module:
    path: tuple[str, ...]  # ("fallback", "policy"); () is the crate
    file: Path
    inline: bool = False  # a `mod x { ... }` inside its file
    line0: int = 0  # an inline module's first line in its file
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    items: set[str] = field(default_factory=set)
    # name -> (full path it names, line): every `use` of the module, re-exports included
    imports: dict[str, tuple[tuple[str, ...], int]] = field(default_factory=dict)
    globs: list[tuple[tuple[str, ...], int]] = field(default_factory=list)
    reexports: set[str] = field(default_factory=set)  # names of `pub use`: the façade
    code: str = ""


def expand_use(tree: str) -> list[tuple[str, str]]:
    """``a::{b, c::d as e, f::*}`` -> [("a::b", "b"), ("a::c::d", "e"), ("a::f::*", "*")]."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))
    out: list[tuple[str, str]] = []

    def walk(prefix: str, t: str) -> None:
        if "{" not in t:
            path, _, alias = t.partition("@")
            full = f"{prefix}{path}"
            last = full.rsplit("::", 1)[-1]
            out.append((full, alias or last))
            return
        head, rest = t.split("{", 1)
        inner = rest[: rest.rfind("}")]
        depth, start = 0, 0
        for k, ch in enumerate(inner + ","):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                part = inner[start:k]
                if part:
                    if part == "self":
                        out.append(
                            (f"{prefix}{head}".rstrip(":"), head.rstrip(":").rsplit("::", 1)[-1])
                        )
                    else:
                        walk(f"{prefix}{head}", part)
                start = k + 1

    walk("", tree)
    return out


class Crate:
    def __init__(self, root: Path) -> None:
        self.modules: dict[tuple[str, ...], Module] = {}
        self.base = root.parent
        self._load((), root / "lib.rs", root)

    def _load(self, path: tuple[str, ...], file: Path, folder: Path) -> None:
        code = drop_test_code(strip(file.read_text(encoding="utf-8")))
        self._scan(path, file, code, folder, inline=False)

    def _scan(
        self, path: tuple[str, ...], file: Path, code: str, folder: Path, inline: bool
    ) -> None:
        mod = Module(path, file, inline=inline, code=code)
        self.modules[path] = mod
        # Inline modules: scanned as modules of their own, and cut out of this one's code.
        for m in list(re.finditer(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{", code)):
            end = block_end(code, m.end() - 1)
            inner = code[m.end() : end - 1]
            child = (*path, m.group(1))
            mod.children[m.group(1)] = child
            self._scan(child, file, inner, folder / m.group(1), inline=True)
            self.modules[child].line0 = code.count("\n", 0, m.end())
            code = code[: m.start()] + "\n" * code.count("\n", m.start(), end) + code[end:]
        mod.code = code
        for m in re.finditer(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            name = m.group(1)
            here = folder if file.name in ("lib.rs", "mod.rs") or inline else folder / file.stem
            target = here / f"{name}.rs"
            if not target.exists():
                target = here / name / "mod.rs"
            child = (*path, name)
            mod.children[name] = child
            self._load(child, target, target.parent)
        mod.items = {m.group(1) for m in ITEM.finditer(code)}
        for m in re.finditer(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
            line = code.count("\n", 0, m.start(2)) + 1
            for full, alias in expand_use(m.group(2)):
                segs = self._absolute(path, full.split("::"))
                if segs is None:
                    continue
                if alias == "*":
                    mod.globs.append((segs[:-1], line))
                else:
                    mod.imports[alias] = (segs, line)
                    if m.group(1):
                        mod.reexports.add(alias)

    def _absolute(self, here: tuple[str, ...], segs: list[str]) -> tuple[str, ...] | None:
        """A path as written in module ``here``, made absolute; None for another crate's."""
        segs = [s for s in segs if s]
        mod = self.modules.get(here)
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] in ("super", "self"):
            cur = here
            while segs and segs[0] in ("super", "self"):
                cur = cur[:-1] if segs.pop(0) == "super" else cur
            return (*cur, *segs)
        if mod is not None and segs[0] in mod.children:
            return (*here, *segs)
        if mod is not None and segs[0] in mod.imports:
            base, _ = mod.imports[segs[0]]
            return (*base, *segs[1:])
        return None

    def file_of(self, segs: tuple[str, ...], seen: frozenset = frozenset()) -> Path | None:
        """The file that defines what an absolute path names (through re-exports)."""
        if segs in seen:
            return None
        seen = seen | {segs}
        mod, rest = self.modules[()], list(segs)
        while rest and rest[0] in mod.children:
            mod = self.modules[mod.children[rest.pop(0)]]
        if not rest or rest[0] in mod.items:
            return mod.file
        if rest[0] in mod.imports:
            target, _ = mod.imports[rest[0]]
            return self.file_of((*target, *rest[1:]), seen)
        for base, _ in mod.globs:
            found = self.file_of((*base, *rest), seen)
            if found is not None and found != mod.file:
                return found
        return mod.file

    def edges(self) -> dict[Path, dict[Path, str]]:
        """file -> {file it names: the first line that names it}."""
        out: dict[Path, dict[Path, str]] = {}
        for mod in self.modules.values():
            deps = out.setdefault(mod.file, {})
            line0 = mod.line0
            lines = mod.code.splitlines()
            named: list[tuple[tuple[str, ...], int]] = [
                v
                for k, v in mod.imports.items()
                if k not in mod.reexports and not self._is_module(v[0])
            ]
            named += mod.globs
            for m in PATH.finditer(mod.code):
                line = mod.code.count("\n", 0, m.start()) + 1
                if re.search(r"\buse\s+[^;]*$", mod.code[: m.start()].rsplit(";", 1)[-1]):
                    continue  # inside a `use` tree: counted through `imports` above
                segs = self._absolute(mod.path, re.sub(r"\s+", "", m.group(1)).split("::"))
                if segs is not None:
                    named.append((segs, line))
            for segs, line in named:
                target = self.file_of(segs)
                if target is not None and target != mod.file and target not in deps:
                    text = lines[line - 1].strip() if line <= len(lines) else ""
                    rel = mod.file.relative_to(self.base).as_posix()
                    deps[target] = f"{rel}:{line + line0}: {text}"
        return out

    def _is_module(self, segs: tuple[str, ...]) -> bool:
        return segs in self.modules


def cycles(edges: dict[Path, dict[Path, str]]) -> list[list[Path]]:
    """The strongly connected components of two or more files (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on: set[Path] = set()
    found: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def describe(comp: list[Path], edges: dict[Path, dict[Path, str]], base: Path = SRC) -> str:
    rel = [p.relative_to(base).as_posix() for p in comp]
    lines = [f"cycle of {len(comp)} files: {', '.join(rel)}"]
    members = set(comp)
    # One cycle through the first file, found by a breadth-first walk inside the component.
    start, paths = comp[0], {comp[0]: [comp[0]]}
    queue, loop = [comp[0]], None
    while queue and loop is None:
        a = queue.pop(0)
        for b in sorted(edges[a]):
            if b == start:
                loop = [*paths[a], start]
                break
            if b in members and b not in paths:
                paths[b] = [*paths[a], b]
                queue.append(b)
    if loop:
        lines.append("  e.g. " + " -> ".join(p.relative_to(base).as_posix() for p in loop))
    for a in comp:
        for b, why in sorted(edges[a].items()):
            if b in members:
                lines.append(f"  {a.relative_to(base)} -> {b.relative_to(base)}: {why}")
    return "\n".join(lines)


def test_the_checker_sees_a_cycle_and_resolves_through_re_exports(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "lib.rs").write_text(
        "mod a;\nmod b;\nmod c;\npub use a::Face;\n// crate::c::Gone in a comment is no edge\n",
        encoding="utf-8",
    )
    (tmp_path / "a" / "mod.rs").write_text(
        "mod inner;\npub use inner::Face;\npub fn top() {}\n", encoding="utf-8"
    )
    (tmp_path / "a" / "inner.rs").write_text(
        "use crate::b::Bee;\npub struct Face(Bee);\n", encoding="utf-8"
    )
    (tmp_path / "b.rs").write_text(
        'pub struct Bee;\nfn f() { let _ = crate::Face::new; let _ = "crate::c::C"; }\n'
        "#[cfg(test)]\nmod tests {\n    use crate::c::C;\n}\n",
        encoding="utf-8",
    )
    (tmp_path / "c.rs").write_text(
        "use super::a;\npub struct C;\nfn g() { a::top(); }\n", encoding="utf-8"
    )
    crate = Crate(tmp_path)
    edges = crate.edges()
    names = {
        a.relative_to(tmp_path).as_posix(): sorted(b.relative_to(tmp_path).as_posix() for b in d)
        for a, d in edges.items()
    }
    # crate::Face resolves through lib.rs and a/mod.rs to a/inner.rs, the file defining it;
    # the test module's and the string's crate::c::C, and the comment, are no edges.
    assert names == {
        "lib.rs": [],
        "a/mod.rs": [],
        "a/inner.rs": ["b.rs"],
        "b.rs": ["a/inner.rs"],
        "c.rs": ["a/mod.rs"],
    }
    assert [[p.relative_to(tmp_path).as_posix() for p in c] for c in cycles(edges)] == [
        ["a/inner.rs", "b.rs"]
    ]


def test_src_keeps_its_floors():
    crate = Crate(SRC)
    edges = crate.edges()
    assert len(edges) >= 40, sorted(edges)  # every file of src/ was reached
    assert all(p.is_relative_to(SRC) for p in edges), "a module outside src/"
    found = cycles(edges)
    named = [frozenset(p.relative_to(SRC).as_posix() for p in c) for c in found]
    assert not named, "file-level import cycles in src/:\n" + (
        "\n\n".join(describe(c, edges) for c in found)
    )


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = getattr(test, "id", None) or getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def python_edges(package: Path) -> dict[Path, dict[Path, str]]:
    """file -> {file of the package it imports: the first line that imports it}, every import
    of the module counted (function-level ones too), ``TYPE_CHECKING`` ones left aside."""
    base = package.parent
    modules: dict[str, Path] = {}
    for file in sorted(package.rglob("*.py")):
        parts = file.relative_to(base).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    out: dict[Path, dict[Path, str]] = {}
    for name, file in modules.items():
        text = file.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text, str(file))
        skip = _type_checking_only(tree)
        # Where a relative import starts: a package's own name, a module's package.
        here = name if file.name == "__init__.py" else name.rpartition(".")[0]
        deps = out.setdefault(file, {})
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = here.split(".")
                    start = ".".join(up[: len(up) - (node.level - 1)])
                    full = f"{start}.{node.module}" if node.module else start
                else:
                    full = node.module or ""
                # `from . import x` imports the module x when there is one.
                targets = [
                    f"{full}.{a.name}" if f"{full}.{a.name}" in modules else full
                    for a in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if not target or target == name:
                    continue
                if modules[target].name == "__init__.py" and name.startswith(target + "."):
                    continue  # the face of a package that contains the module
                dep = modules[target]
                if dep not in deps:
                    rel = file.relative_to(base).as_posix()
                    deps[dep] = f"{rel}:{node.lineno}: {lines[node.lineno - 1].strip()}"
    return out


def test_the_python_checker_sees_a_cycle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from . import a\n",
        "a.py": "from .b import helper\n",
        # The cycle's way back, inside a function: no error at import, still a cycle.
        "b.py": "def helper():\n    from . import a\n    return a\n",
        # TYPE_CHECKING imports never run; `import pkg` is the face of its own package.
        "c.py": (
            "from typing import TYPE_CHECKING\nimport pkg\n"
            "if TYPE_CHECKING:\n    from .a import helper\n"
        ),
        "sub/__init__.py": "",
        "sub/d.py": "from .. import c\nfrom ..a import *\nimport pkg.b\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text, encoding="utf-8")
    edges = python_edges(pkg)
    names = {
        a.relative_to(pkg).as_posix(): sorted(b.relative_to(pkg).as_posix() for b in d)
        for a, d in edges.items()
    }
    assert names == {
        "__init__.py": ["a.py"],
        "a.py": ["b.py"],
        "b.py": ["a.py"],
        "c.py": [],
        "sub/__init__.py": [],
        "sub/d.py": ["a.py", "b.py", "c.py"],
    }
    found = cycles(edges)
    assert [[p.relative_to(pkg).as_posix() for p in c] for c in found] == [["a.py", "b.py"]]
    report = describe(found[0], edges, tmp_path)
    assert "pkg/a.py -> pkg/b.py: pkg/a.py:1: from .b import helper" in report
    assert "pkg/b.py -> pkg/a.py: pkg/b.py:2: from . import a" in report


def test_python_package_keeps_its_floors():
    edges = python_edges(PACKAGE)
    assert len(edges) >= 30, sorted(edges)  # every module of the package was read
    assert PACKAGE / "array_api" / "_array_methods.py" in edges
    found = cycles(edges)
    assert not found, "import cycles in python/boxfall (function-level imports included):\n" + (
        "\n\n".join(describe(c, edges, PACKAGE.parent) for c in found)
    )


# The raw C APIs the bindings speak (CPython's through PyO3, PyO3's private trampolines,
# NumPy's, libc's): named only under src/python/ffi/, behind safe wrappers (ARCHITECTURE.md).
RAW_C_API = re.compile(
    r"\bnpyffi\b|\bPY_ARRAY_API\b|\bas_array_ptr\b|\bpyo3\s*::\s*(?:ffi|impl_)\b"
    r"|\bpyo3\s*::\s*\{[^}]*\b(?:ffi|impl_)\b|\blibc\s*::|\bextern\s+\"C\"|\blibmimalloc_sys\b"
)
FFI = SRC / "python" / "ffi"


def raw_c_api_names(root: Path, ffi: Path) -> list[str]:
    """Each line of a Rust file under ``root`` outside ``ffi`` that names a raw C API in code
    (comments and string literals left aside), as ``path:line: text``."""
    found = []
    for p in sorted(root.rglob("*.rs")):
        if p.is_relative_to(ffi):
            continue
        code = strip(p.read_text(encoding="utf-8"))
        for m in RAW_C_API.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            text = p.read_text(encoding="utf-8").splitlines()[line - 1].strip()
            found.append(f"{p.relative_to(root).as_posix()}:{line}: {text}")
    return found


def test_the_raw_c_api_check_sees_each_kind_of_name(tmp_path):
    (tmp_path / "ffi").mkdir()
    (tmp_path / "ffi" / "numpy.rs").write_text("use numpy::npyffi::PY_ARRAY_API;\n")
    (tmp_path / "a.rs").write_text(
        '// numpy::npyffi in a comment\nfn f() { let _ = "libc::free"; }\n'
        "use pyo3::{ffi, prelude::*};\nfn g() { unsafe { libc::getpid() }; }\n"
    )
    (tmp_path / "b.rs").write_text(
        "fn h(a: &A) { let _ = a.as_array_ptr(); pyo3::impl_::x(); numpy::PY_ARRAY_API; }\n"
    )
    assert [line.split(": ")[0] for line in raw_c_api_names(tmp_path, tmp_path / "ffi")] == [
        "a.rs:3",
        "a.rs:4",
        "b.rs:1",
        "b.rs:1",
        "b.rs:1",
    ]


def test_raw_c_apis_are_named_only_under_python_ffi():
    assert FFI.is_dir()
    assert raw_c_api_names(FFI, FFI / "none") != [], "the check reads ffi/ itself"
    found = raw_c_api_names(SRC / "python", FFI)
    assert not found, "raw C APIs named outside src/python/ffi/:\n" + "\n".join(found)
