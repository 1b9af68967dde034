"""The documents (README.md, ARCHITECTURE.md, docs/**/*.md) stay short and true.

- README.md is a front page: at most 300 lines, none over 100 characters; ARCHITECTURE.md is
  under 800 lines; no document cites a design file outside the repository.
- Every name the documents give in backticks outside code blocks exists: a file or folder of
  the repository, at exactly the path the document names (from the repository's root, the
  document's folder, ``src/``, ``python/boxfall/``, or a folder the same paragraph or list item
  named before it: ``fallback/`` then ``moves.rs``), a Rust path (``crate::x::y``,
  ``Type::member``, ``module::item``) that resolves in ``src/``, a Python name of ``boxfall``
  (``bf.x``, ``boxfall.x``, ``xp.x``) whose module is a file and whose attributes the
  package's code names, and a bare identifier
  (``compute_table``, ``TableEntry``, ``to_cpu``) that the code of the repository names (Rust
  without its comments, Python without its comments and docstrings), so a renamed or removed
  function leaves a sentence that fails here.
- The relations the documents state are the code's: the floors ARCHITECTURE.md draws (each
  file names only files on its own floor or below), the files it says name raw C APIs, and
  the core modules docs/checking.md says hold ``unsafe`` (which AddressSanitizer's run covers).

Everything here reads the sources as text: no build, no import of boxfall.
"""

from __future__ import annotations

import ast
import bisect
import posixpath
import re
from pathlib import Path

import pytest
from test_floors import Crate, drop_test_code

ROOT = Path(__file__).resolve().parents[2]

# Needs only the sources: conftest.py lets this module run without the built extension.
NEEDS_EXTENSION = False

README_MAX_LINES = 300
README_MAX_WIDTH = 100
ARCHITECTURE_MAX_LINES = 800
# Where a path a document names may start, besides the document's own folder and the folders
# named before it in its paragraph: the root, the crate's sources (the floors' tables name
# their files so), and the Python package.
PATH_BASES = ("", "src", "python/boxfall")

# Names of other projects that the documents cite as the model they follow; no code of this
# repository has to name them.
ELSEWHERE = {
    "computeDispatchTableEntryWithDebug",  # c10's table rule
    "call_fallback_fn",  # c10's
    "xla_cpu_fallback",  # torch_xla's
    "rdtsc",  # the x86 instruction clock.rs reads
    "skip_xp_backends",  # SciPy's test marker
    "WARNING",  # a level of Python's logging
}
# Crates the Rust paths of the documents may start with: not this repository's to check.
OTHER_CRATES = {"pyo3", "numpy", "libc", "std", "ndarray", "mimalloc", "thiserror"}
# First segments of ``a::b`` that are operator namespaces, not Rust modules.
OPERATOR_NAMESPACES = {"demo", "array_api", "numpy", "ns", "_"}
# Modules of other libraries that ``x.y`` names may start with: not boxfall's to check.
FOREIGN_MODULES = {"np", "jnp", "jax", "sklearn", "scipy", "pyopencl", "ml_dtypes", "threading"}
SKIPPED_DIRS = {".git", "target", "target-asan", "target-tsan", "__pycache__", "venv", ".venv"}

FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$", re.M | re.S)
TICKED = re.compile(r"`([^`]+)`")  # a span may run over a line's end
IDENT = r"[A-Za-z_]\w*"
RUST_PATH = re.compile(rf"^{IDENT}(?:::{IDENT})+$")
DOTTED = re.compile(rf"^{IDENT}(?:\.{IDENT})+$")
BARE = re.compile(rf"^{IDENT}$")
PATHLIKE = re.compile(r"^[\w.\-/*<>]+$")
FILE_SUFFIXES = (".rs", ".py", ".pyi", ".md", ".toml", ".sh", ".txt", ".png", ".dict")


def documents(root: Path) -> list[Path]:
    return [root / "README.md", root / "ARCHITECTURE.md", *sorted((root / "docs").rglob("*.md"))]


def ticked(text: str) -> list[tuple[int, str]]:
    """(line, content) of every inline code span outside fenced blocks."""
    return [(line, token) for line, token, _ in ticked_in_units(text)]


# Where a paragraph, a list item or a table row starts: a path named before it in the same
# unit is the context of the bare names after it.
UNIT_START = re.compile(r"\n[ \t]*\n|\n[ \t]*(?:[-*] |\d+\. |\|)")


def ticked_in_units(text: str) -> list[tuple[int, str, int]]:
    """(line, content, unit) of every inline code span outside fenced blocks; ``unit`` numbers
    the paragraph, list item or table row it is in."""
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    starts = [m.start() for m in UNIT_START.finditer(prose)]
    return [
        (
            prose.count("\n", 0, m.start()) + 1,
            re.sub(r"\s*\n\s*", " ", m.group(1)),
            bisect.bisect_right(starts, m.start()),
        )
        for m in TICKED.finditer(prose)
    ]


def without_calls(token: str) -> str:
    """``f(x).g[0]()`` -> ``f.g``: the name a call or subscript expression is made of."""
    prev = None
    while prev != token:
        prev = token
        token = re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "", token)
    return token


# A Rust comment or literal, whichever starts first (block comments taken as unnested).
RUST_LEXEMES = re.compile(
    r"//[^\n]*|/\*.*?\*/|(?<!\w)b?r(#*)\".*?\"\1|(?<!\w)b?\"(?:\\.|[^\"\\])*\""
    r"|'(?:\\[^']*|[^\\'])'",
    re.S,
)


def rust_code(text: str, literals: bool) -> str:
    """Rust code without its comments; without its literals too unless ``literals`` (the
    literals hold names, the code without them shows the structure)."""

    def keep(m: re.Match[str]) -> str:
        if m.group(0).startswith(("//", "/*")) or not literals:
            return "\n" * m.group(0).count("\n") + ("" if m.group(0)[0] == "/" else '""')
        return m.group(0)

    return RUST_LEXEMES.sub(keep, text)


class Repository:
    """What the checks resolve names against, read from a checkout's files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        for p in root.rglob("*"):
            rel = p.relative_to(root)
            if SKIPPED_DIRS & set(rel.parts[:-1]) or rel.parts[0] in SKIPPED_DIRS:
                continue
            (self.dirs if p.is_dir() else self.files).add(rel.as_posix())
        # Anchored entries of .gitignore (a slash before the end): what commands write.
        self.ignored = [
            line.strip().strip("/")
            for line in (root / ".gitignore").read_text(encoding="utf-8").splitlines()
            if "/" in line.strip().rstrip("/") or line.startswith("/")
        ]
        self.rust: dict[str, str] = {}  # src file -> code without comments and literals
        self._members: dict[str, set[str]] = {}
        self._types: dict[str, bool] = {}
        self.words: set[str] = set()
        for rel in sorted(self.files):
            path = root / rel
            if rel.endswith(".rs"):
                text = path.read_text(encoding="utf-8")
                if rel.startswith("src/"):
                    self.rust[rel] = rust_code(text, literals=False)
                self.words |= set(re.findall(IDENT, rust_code(text, literals=True)))
            elif rel.endswith((".py", ".pyi")) or rel == ".ci/conformance":
                self.words |= python_names(path.read_text(encoding="utf-8"))
            elif rel.endswith(".toml") or rel == ".ci/run":
                self.words |= set(re.findall(IDENT, path.read_text(encoding="utf-8")))
        self.crate = Crate(root / "src") if (root / "src" / "lib.rs").exists() else None

    # Paths.

    def resolve_path(self, token: str, bases: tuple[str, ...] = PATH_BASES) -> str | None:
        """The path of the repository ``token`` names, joined to one of ``bases`` (a ``*`` or a
        ``<name>`` stands for one path segment), or None: the whole path must match, not only
        its end, so ``tensor.rs`` is no name for ``tests/tensor.rs``."""
        pattern = re.sub(r"<[^>]*>", "*", token).rstrip("/")
        if any(pattern == d or pattern.startswith(d + "/") for d in self.ignored):
            return pattern  # what a command writes (fuzz/artifacts/...), not kept
        pool = self.dirs if token.endswith("/") else self.files | self.dirs
        for base in bases:
            full = posixpath.normpath(posixpath.join(base, pattern))
            if "*" not in full:
                if full in pool:
                    return full
                continue
            rx = re.compile(re.escape(full).replace(r"\*", "[^/]*"))
            hit = next((p for p in sorted(pool) if rx.fullmatch(p)), None)
            if hit is not None:
                return hit
        return None

    def path_exists(self, token: str, bases: tuple[str, ...] = PATH_BASES) -> bool:
        return self.resolve_path(token, bases) is not None

    def resolve_paths(self, token: str, bases: tuple[str, ...]) -> list[str]:
        """Every path ``token`` names under one of ``bases`` (``python/`` is the package's
        folder and the bindings' ``src/python/``)."""
        found = (self.resolve_path(token, (base,)) for base in bases)
        return list(dict.fromkeys(p for p in found if p is not None))

    # Rust.

    def defines(self, kind: str, name: str) -> list[str]:
        rx = re.compile(rf"\b{kind}\s+{re.escape(name)}\b")
        return [f for f, code in self.rust.items() if rx.search(code)]

    def members(self, type_name: str) -> set[str]:
        """Functions, constants, variants and fields of a type, trait or enum."""
        if type_name in self._members:
            return self._members[type_name]
        out: set[str] = set()
        impl = re.compile(rf"\bimpl\b[^{{;]*?\b{type_name}\b[^{{;]*\{{")
        data = re.compile(rf"\b(?:struct|enum|union)\s+{type_name}\b[^{{;]*\{{")
        trait = re.compile(rf"\btrait\s+{type_name}\b[^{{;]*\{{")
        for code in self.rust.values():
            for m in [*impl.finditer(code), *trait.finditer(code)]:
                body = code[m.end() : block_end(code, m.end() - 1)]
                out |= set(re.findall(rf"\b(?:fn|const|type)\s+({IDENT})", body))
            for m in data.finditer(code):  # variants and fields: every name of the body
                out |= set(re.findall(IDENT, code[m.end() : block_end(code, m.end() - 1)]))
        self._members[type_name] = out
        return out

    def is_type(self, name: str) -> bool:
        if name not in self._types:
            kinds = ("struct", "enum", "trait", "type", "union")
            self._types[name] = any(self.defines(k, name) for k in kinds)
        return self._types[name]

    def rust_path_exists(self, token: str) -> bool:
        segs = token.split("::")
        if segs[0] in ("crate", "boxfall"):
            segs = segs[1:]
        if self.crate is None or not segs:
            return False
        # A module by its path's end (``fallback``, ``fast``, ``ffi``), then items in it.
        mods = [p for p in self.crate.modules if p and p[-len(segs[:1]) :] == tuple(segs[:1])]
        if token.split("::")[0] not in ("crate", "boxfall") and not mods:
            return self.type_path_exists(segs)
        starts = mods or [()]
        rest = segs[1:] if mods else segs
        return any(self.module_path_exists(m, rest) for m in starts)

    def module_path_exists(self, mod_path: tuple[str, ...], rest: list[str]) -> bool:
        mod = self.crate.modules[mod_path]
        if not rest:
            return True
        head, tail = rest[0], rest[1:]
        if head in mod.children:
            return self.module_path_exists(mod.children[head], tail)
        if head in mod.imports:
            target, _ = mod.imports[head]
            if target in self.crate.modules:
                return self.module_path_exists(target, tail)
            if target[:-1] in self.crate.modules:
                return self.module_path_exists(target[:-1], [target[-1], *tail])
            return False
        if head not in mod.items:
            return False
        return not tail or self.type_path_exists([head, *tail])

    def type_path_exists(self, segs: list[str]) -> bool:
        if not self.is_type(segs[0]):
            return False
        for outer, inner in zip(segs, segs[1:], strict=False):
            if inner not in self.members(outer):
                return False
        return True

    # Python.

    def python_module(self, dotted: list[str]) -> int:
        """How many leading segments of ``boxfall.a.b`` name a module or package file."""
        n = 1
        for k in range(2, len(dotted) + 1):
            base = "python/" + "/".join(dotted[:k])
            if f"{base}.py" in self.files or f"{base}/__init__.py" in self.files:
                n = k
            else:
                break
        return n


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


def python_names(text: str) -> set[str]:
    """Every name a Python file's code gives: identifiers, attributes, arguments, keywords,
    and the words of its string literals, docstrings left out."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out |= set(re.findall(IDENT, node.name)) | ({node.asname} if node.asname else set())
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                out |= set(re.findall(IDENT, node.value))
    return out


def is_path(token: str) -> bool:
    t = token.strip()
    if t.startswith(".ci/"):
        return True
    return bool(PATHLIKE.match(t)) and ("/" in t or t.endswith(FILE_SUFFIXES)) and t[0] != "."


def unresolved(repo: Repository, token: str, bases: tuple[str, ...] = PATH_BASES) -> str | None:
    """Why a ticked token names nothing that exists, or None (it exists, or is no name). A
    path is looked for under each of ``bases``."""
    t = token.strip()
    beside = Path(t).parts[:1] == ("..",)  # a path beside the checkout, not in it
    if t.startswith(("'", '"', "-")) or " " in t or beside or not re.search(r"\w", t):
        return None  # a string value, an option, an expression; a path beside the checkout
    if is_path(t):
        return None if repo.path_exists(t, bases) else "no such file or folder"
    name = without_calls(t).rstrip("=")
    if "<" in name or not name:
        return None
    if RUST_PATH.match(name):
        if name.split("::")[0] in OPERATOR_NAMESPACES | OTHER_CRATES:
            return None
        return None if repo.rust_path_exists(name) else "no such Rust item in src/"
    if DOTTED.match(name):
        segs = name.split(".")
        if segs[0] in FOREIGN_MODULES or segs[0] not in ("bf", "boxfall", "xp"):
            return None
        segs = ["boxfall", *segs[1:]] if segs[0] == "bf" else segs
        segs = ["boxfall", "array_api", *segs[1:]] if segs[0] == "xp" else segs
        n = repo.python_module(segs)
        missing = [s for s in segs[n:] if s not in repo.words]
        return f"boxfall's code names no {missing}" if missing else None
    if BARE.match(name):
        if name in ELSEWHERE or name in repo.words:
            return None
        return "no code of the repository names it"
    return None


def stale_names(root: Path) -> list[str]:
    repo = Repository(root)
    out = []
    for doc in documents(root):
        own = doc.parent.relative_to(root).as_posix().strip(".")
        unit, context = -1, ()
        for line, token, at in ticked_in_units(doc.read_text(encoding="utf-8")):
            if at != unit:
                unit, context = at, ()
            bases = (*PATH_BASES, own, *context)
            why = unresolved(repo, token, bases)
            if why:
                out.append(f"{doc.relative_to(root)}:{line}: `{token}`: {why}")
            elif is_path(token.strip()):
                # The folders it names (or its file's) are where the unit's next names are.
                for found in repo.resolve_paths(token.strip(), bases):
                    folder = found if token.strip().endswith("/") else posixpath.dirname(found)
                    context = tuple(dict.fromkeys((*context, folder, posixpath.dirname(folder))))
    return out


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    wide = [f"{n}: {len(s)}" for n, s in enumerate(lines, 1) if len(s) > README_MAX_WIDTH]
    assert not wide, f"README.md lines over {README_MAX_WIDTH} characters: {wide}"


def test_every_name_the_documents_give_exists():
    stale = stale_names(ROOT)
    assert not stale, "names in the documents that the repository lacks:\n" + "\n".join(stale)


def test_architecture_stays_under_its_length():
    lines = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < ARCHITECTURE_MAX_LINES, f"ARCHITECTURE.md has {len(lines)} lines"


def test_architecture_says_where_each_kind_of_change_goes():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Where each kind of change goes", 1)[1].split("\n## ", 1)[0]
    kinds = re.findall(r"^- \*\*(.+?)\*\*", section, re.M)
    for kind in ("A shape rule", "A new kind of backend", "A change to the fallback's moves"):
        assert any(k.startswith(kind) for k in kinds), f"{kind!r} is not among {kinds}"


# "DESIGN" and what follows, split so that this file does not match itself.
DESIGN_CITATION = re.compile("DESIGN" + r"(?:\.md|,? +section|,? +§)")


def test_nothing_cites_a_design_file_outside_the_repository():
    """A user who clones the repository cannot read a design file beside it: the documents,
    comments and docstrings say what they need in the repository's own words."""
    repo = Repository(ROOT)
    text_suffixes = (*FILE_SUFFIXES, ".pyi", ".yml", ".yaml", ".cfg", ".ini", ".json")
    cited = []
    for rel in sorted(repo.files):
        if not rel.endswith(text_suffixes) and not rel.startswith(".ci/"):
            continue
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        cited += [
            f"{rel}:{text.count(chr(10), 0, m.start()) + 1}" for m in DESIGN_CITATION.finditer(text)
        ]
    assert not cited, "cites a design file the repository lacks:\n" + "\n".join(cited)


def test_the_api_reference_finds_every_public_name():
    """The site's API reference (mkdocstrings) reads the package as griffe does, statically:
    every name of ``boxfall.__all__`` must resolve to its definition, in the sources or the
    extension's stubs, or the reference silently leaves it out (a stub module griffe cannot
    find, a star import it cannot follow)."""
    griffe = pytest.importorskip("griffe")  # installed with mkdocstrings: pip install ".[docs]"
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / "python")], allow_inspection=False)
    package = loader.load("boxfall")
    loader.resolve_aliases(implicit=False, external=None)
    names = ast.literal_eval(
        re.search(
            r"^__all__ = (\[.*?\])",
            (ROOT / "python/boxfall/__init__.py").read_text(encoding="utf-8"),
            re.M | re.S,
        ).group(1)
    )
    lost = []
    for name in names:
        member = package.get_member(name) if name in package.members else None
        try:
            target = member.final_target if member is not None and member.is_alias else member
        except griffe.AliasResolutionError:
            target = None
        if target is None:
            lost.append(name)
    assert not lost, f"the API reference cannot find: {lost}"
    assert package["register_backend"].final_target.docstring is not None


# What the [test] extra installs, by the module a test imports: `pip install ".[test]"` in a
# user's environment must let `python -m pytest tests/python` collect every test.
DISTRIBUTION_MODULES = {
    "pytest": "pytest",
    "pytest-xdist": "xdist",
    "hypothesis": "hypothesis",
    "array-api-compat": "array_api_compat",
    "scipy": "scipy",
    "scikit-learn": "sklearn",
    "ml_dtypes": "ml_dtypes",
    "matplotlib": "matplotlib",
    "ruff": "ruff",
    "mypy": "mypy",
}
# Imported only after pytest.importorskip of themselves: their tests skip, saying so, without
# them (the extra `jax`; pyopencl and pocl, which .ci/run installs where it can).
OPTIONAL_MODULES = {"jax", "pyopencl"}


def module_level_imports(root: Path) -> dict[str, set[str]]:
    """Top-level module -> the test files that import it at module level (where collection
    fails without it)."""
    out: dict[str, set[str]] = {}
    for path in sorted((root / "tests" / "python").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue
            for name in names:
                out.setdefault(name, set()).add(path.relative_to(root).as_posix())
    return out


def test_the_test_extra_installs_what_the_tests_import():
    import sys
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = project["optional-dependencies"]["test"]
    installed = {
        DISTRIBUTION_MODULES.get(n, n)
        for n in (re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0] for d in extra)
    }
    installed |= {re.split(r"[<>=!~; ]", d, maxsplit=1)[0] for d in project["dependencies"]}
    local = {p.stem for p in (ROOT / "tests" / "python").rglob("*.py")}
    local |= {p.name for p in (ROOT / "tests" / "python").iterdir() if p.is_dir()}
    ours = {"boxfall", "pytest_boxfall"}
    missing = {
        name: sorted(files)
        for name, files in module_level_imports(ROOT).items()
        if name not in sys.stdlib_module_names
        and name not in local | ours | installed | OPTIONAL_MODULES
    }
    assert not missing, f"imported by the tests, not in the [test] extra: {missing}"
    assert {"xdist", "hypothesis", "array_api_compat", "scipy", "sklearn"} <= installed


def test_architecture_cites_nothing_outside_the_repository():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    cited = [t for _, t in ticked(text)] + re.findall(r"\]\(([^)]+)\)", text)
    outside = [t for t in cited if any(".." in Path(w).parts for w in t.split())]
    assert not outside, f"ARCHITECTURE.md cites what lies beside the checkout: {outside}"


def test_the_name_check_fails_on_a_renamed_function(tmp_path):
    (tmp_path / "src" / "fallback").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "python" / "boxfall").mkdir(parents=True)
    (tmp_path / ".gitignore").write_text("/target\n/out\n", encoding="utf-8")
    (tmp_path / "src" / "lib.rs").write_text(
        "pub mod fallback;\npub mod kernel;\npub use kernel::Kernel;\n", encoding="utf-8"
    )
    (tmp_path / "src" / "kernel.rs").write_text(
        "pub struct Kernel { pub boxed: u8 }\npub enum Route { Plain, Wrapper }\n"
        "impl Kernel {\n    pub fn call_boxed(&self) {}\n}\n"
        "// fn call_compiled() {} in a comment defines nothing\n",
        encoding="utf-8",
    )
    (tmp_path / "src" / "fallback" / "mod.rs").write_text("pub fn run_on() {}\n", encoding="utf-8")
    (tmp_path / "python" / "boxfall" / "__init__.py").write_text(
        '"""Mentions old_name in a docstring only."""\ndef coverage(key, namespace=None): ...\n',
        encoding="utf-8",
    )
    good = (
        "`src/kernel.rs`, `fallback/mod.rs`, `out/x.csv`, `fallback::run_on`, "
        "`crate::kernel::Kernel`, `Kernel::call_boxed`, `boxfall::Kernel`, `Route::Wrapper`, "
        "`Kernel::boxed`, `run_on`, `bf.coverage(x)`, `namespace=`, `demo::add.Tensor`, "
        '`"a string"`, `np.add`\n'
    )
    (tmp_path / "README.md").write_text(good, encoding="utf-8")
    (tmp_path / "ARCHITECTURE.md").write_text(
        "```\n`gone` in a code block\n```\n", encoding="utf-8"
    )
    (tmp_path / "docs" / "guide.md").write_text("", encoding="utf-8")
    assert stale_names(tmp_path) == []

    bad = [
        "`src/kernel.py`",
        "`fallback::call_compiled`",
        "`call_compiled`",
        "`Kernel::call_unboxed`",
        "`Route::Foreign`",
        "`crate::kernel::Table`",
        "`old_name`",
        "`bf.coverage.gone`",
        "`boxfall.metrics`",
    ]
    (tmp_path / "docs" / "guide.md").write_text("\n".join(bad) + "\n", encoding="utf-8")
    found = stale_names(tmp_path)
    assert [s.split(": ", 1)[0] for s in found] == [f"docs/guide.md:{n}" for n in range(1, 10)]

    # A rename in the code: the document's sentence is stale at once.
    kernel = tmp_path / "src" / "kernel.rs"
    kernel.write_text(kernel.read_text().replace("call_boxed", "call_stack"), encoding="utf-8")
    (tmp_path / "docs" / "guide.md").write_text("", encoding="utf-8")
    assert [s.split("`")[1] for s in stale_names(tmp_path)] == ["Kernel::call_boxed"]


def test_a_path_is_matched_whole_not_by_its_end(tmp_path):
    for rel in ("src/lib.rs", "src/fallback/mod.rs", "src/fallback/moves.rs", "tests/tensor.rs"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    (tmp_path / "python" / "boxfall" / "jax").mkdir(parents=True)
    (tmp_path / "python" / "boxfall" / "jax" / "_graph.py").write_text("", encoding="utf-8")
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "docs" / "guide" / "page.md").write_text("", encoding="utf-8")
    (tmp_path / ".gitignore").write_text("/target\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("", encoding="utf-8")
    good = (
        "`src/fallback/moves.rs`, `fallback/mod.rs` (from src/), `jax/_graph.py` (from the\n"
        "package), `tests/tensor.rs`, `guide/page.md` (beside the document).\n\n"
        "- `fallback/`: the step engine (`moves.rs`) and its face (`mod.rs`), named after their\n"
        "  folder in the same item.\n"
    )
    (tmp_path / "ARCHITECTURE.md").write_text("", encoding="utf-8")
    (tmp_path / "docs" / "index.md").write_text(good, encoding="utf-8")
    assert stale_names(tmp_path) == []
    # Each names a file only by the end of its path: stale, however many files end so.
    bad = "`tensor.rs`\n\n`moves.rs`\n\n`_graph.py`\n\n`src/moves.rs`\n\n`boxfall/jax/_graph.py`\n"
    (tmp_path / "docs" / "index.md").write_text(bad, encoding="utf-8")
    assert [s.split("`")[1] for s in stale_names(tmp_path)] == [
        "tensor.rs",
        "moves.rs",
        "_graph.py",
        "src/moves.rs",
        "boxfall/jax/_graph.py",
    ]


# The relations the documents state.

FLOOR_TABLE = re.compile(r"^\| floor \| files \|.*\n\|[-| ]+\|\n((?:\|.*\|\n)+)", re.M)
RAW_C = re.compile(
    r"\bpyo3::ffi\b|\bpyo3::impl_\b|\bnpyffi\b|\bPY_ARRAY_API\b|\blibc::|\blibmimalloc_sys\b"
)
UNSAFE = re.compile(r"\bunsafe\s*(?:\{|fn\b|impl\b|extern\b|trait\b)")


def floor_tables(text: str) -> list[list[list[str]]]:
    """Each floors table of a document: per row, the paths of its files column."""
    tables = []
    for m in FLOOR_TABLE.finditer(text):
        rows = [line.split("|")[2] for line in m.group(1).splitlines()]
        tables.append([re.findall(r"`([^`]+)`", cells) for cells in rows])
    return tables


def best_match(rel: str, patterns: list[str]) -> str | None:
    """The most specific pattern (a file, or a folder ending in ``/``) covering ``rel``."""
    hits = [p for p in patterns if rel == p or (p.endswith("/") and rel.startswith(p))]
    return max(hits, key=len, default=None)


def floor_keys(text: str) -> dict[str, tuple[int, int]]:
    """pattern -> (its floor in the crate's table, its floor in a folder's table or 0)."""
    tables = floor_tables(text)
    assert tables, "no floors table in the document"
    keys = {p: (i, 0) for i, row in enumerate(tables[0]) for p in row}
    for table in tables[1:]:
        for i, row in enumerate(table, 1):
            for p in row:
                outer = best_match(p, list(keys))
                assert outer is not None, f"{p}: on no floor of the crate's table"
                keys[p] = (keys[outer][0], i)
    return keys


def floor_violations(src: Path, text: str) -> list[str]:
    keys = floor_keys(text)
    edges = Crate(src).edges()
    out = []
    for a, deps in sorted(edges.items()):
        rel_a = a.relative_to(src).as_posix()
        pa = best_match(rel_a, list(keys))
        if pa is None:
            out.append(f"{rel_a}: on no floor")
            continue
        for b, why in sorted(deps.items()):
            pb = best_match(b.relative_to(src).as_posix(), list(keys))
            if pb is not None and keys[pb] > keys[pa]:
                out.append(f"{rel_a} {keys[pa]} names a file above it, {keys[pb]}: {why}")
    return out


def listed_after(text: str, marker: str) -> list[str]:
    """The ticked items of the sentence that follows ``marker`` in a document."""
    at = text.index(marker) + len(marker)
    sentence = re.match(r"(?s)(.*?)\.(?:\s|$)", text[at:]).group(1)
    return re.findall(r"`([^`]+)`", sentence)


def files_naming(src: Path, pattern: re.Pattern[str], where) -> set[str]:
    out = set()
    for p in sorted(src.rglob("*.rs")):
        rel = p.relative_to(src).as_posix()
        code = rust_code(p.read_text(encoding="utf-8"), literals=False)
        if where(rel) and pattern.search(drop_test_code(code)):
            out.add(rel)
    return out


def check_list(listed: list[str], actual: set[str], covers) -> list[str]:
    out = [
        f"{f}: not in the document's list"
        for f in sorted(actual)
        if not any(covers(item, f) for item in listed)
    ]
    out += [
        f"{item}: listed, but no such file does"
        for item in listed
        if not any(covers(item, f) for f in actual)
    ]
    return out


def path_covers(item: str, rel: str) -> bool:
    return rel == item or (item.endswith("/") and rel.startswith(item))


def module_covers(item: str, rel: str) -> bool:
    module = re.sub(r"(/mod)?\.rs$", "", rel).replace("/", "::")
    return module == item or module.startswith(item + "::")


def test_the_files_keep_the_floors_architecture_draws():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    bad = floor_violations(ROOT / "src", text)
    assert not bad, "files off the floors of ARCHITECTURE.md:\n" + "\n".join(bad)


def test_the_floor_check_sees_a_file_naming_one_above_it(tmp_path):
    (tmp_path / "lib.rs").write_text("mod a;\nmod b;\nmod c;\n", encoding="utf-8")
    (tmp_path / "a.rs").write_text("use crate::b::B;\npub struct A(B);\n", encoding="utf-8")
    (tmp_path / "b.rs").write_text("pub struct B;\n", encoding="utf-8")
    (tmp_path / "c.rs").write_text("pub struct C;\n", encoding="utf-8")
    table = "| floor | files | what |\n|---|---|---|\n| one | {} | x |\n| two | {} | y |\n"
    ok = table.format("`b.rs`, `c.rs`", "`a.rs`, `lib.rs`")
    assert floor_violations(tmp_path, ok) == []
    inverted = table.format("`a.rs`, `c.rs`", "`b.rs`, `lib.rs`")
    assert [v.split(" ")[0] for v in floor_violations(tmp_path, inverted)] == ["a.rs"]
    assert floor_violations(tmp_path, table.format("`a.rs`, `b.rs`", "`lib.rs`")) == [
        "c.rs: on no floor"
    ]


def test_the_files_that_name_raw_c_apis_are_those_architecture_lists():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    listed = listed_after(text, "checks against the sources:")
    actual = files_naming(ROOT / "src", RAW_C, lambda rel: True)
    bad = check_list(listed, actual, path_covers)
    assert not bad, "ARCHITECTURE.md's files naming raw C APIs:\n" + "\n".join(bad)


def test_the_core_modules_with_unsafe_are_those_checking_lists():
    text = (ROOT / "docs" / "checking.md").read_text(encoding="utf-8")
    listed = listed_after(text, "The core's modules with `unsafe`:")
    actual = files_naming(ROOT / "src", UNSAFE, lambda rel: not rel.startswith("python/"))
    bad = check_list(listed, actual, module_covers)
    assert not bad, "docs/checking.md's modules with unsafe:\n" + "\n".join(bad)


def test_the_lists_fail_both_ways():
    actual = {"rcu.rs", "native/alloc.rs", "python/ffi/entry.rs"}
    assert check_list(["rcu.rs", "native/", "python/ffi/"], actual, path_covers) == []
    assert check_list(["rcu.rs", "python/ffi/"], actual, path_covers) == [
        "native/alloc.rs: not in the document's list"
    ]
    assert check_list(
        ["rcu.rs", "native/alloc.rs", "python/ffi/", "gone.rs"], actual, path_covers
    ) == ["gone.rs: listed, but no such file does"]
    assert check_list(["rcu", "native::alloc", "python::ffi"], actual, module_covers) == []
    assert listed_after("Listed: `a.rs`, `b/` and `c.rs`. Not `d.rs`.", "Listed:") == [
        "a.rs",
        "b/",
        "c.rs",
    ]
