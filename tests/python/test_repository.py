"""The repository stands alone: nothing its tests, benches or commands read lies outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A path that climbs out of the checkout into a sibling folder.
OUTSIDE = re.compile(r"""(\.\./|parents\[\d\]\.parent|Path\.cwd\(\)\.parent)""")
SOURCES = ["tests", "benches", "examples", "python/boxfall", "src", ".ci"]
SUFFIXES = {".rs", ".py", ".toml", ""}
# The one sanctioned reader of a sibling folder: the array API standard's own test suite, kept
# beside the checkout where a developer has it. Only .ci/conformance, and .ci/run's optional
# step calling it, look there, and both skip with a message when it is absent
# (test_conformance_script.py); nothing else may.
CONFORMANCE_FILES = {".ci/conformance", ".ci/run"}
# A Rust module file named relative to the file naming it (`#[path = "../src/shared.rs"]`, which
# benches/handwritten.rs uses to measure crate-private modules): outside only if it resolves
# outside the checkout.
MODULE_PATH = re.compile(r"""#\[path\s*=\s*"([^"]*)"\]""")


def _outside_module_paths(p: Path, code: str) -> str:
    """``code`` with each ``#[path = ...]`` that stays inside the checkout removed."""
    return MODULE_PATH.sub(
        lambda m: "" if (p.parent / m.group(1)).resolve().is_relative_to(ROOT) else m.group(0),
        code,
    )


def _sources() -> list[Path]:
    files = []
    for folder in SOURCES:
        for p in (ROOT / folder).rglob("*"):
            if p.is_file() and p.suffix in SUFFIXES and "venv" not in p.parts:
                files.append(p)
    return files


def test_no_source_reads_a_path_outside_the_checkout():
    offenders = []
    for p in _sources():
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            code = line.split("//")[0] if p.suffix == ".rs" else line.split("#")[0]
            if p.suffix == ".rs":
                code = _outside_module_paths(p, code)
            if p.relative_to(ROOT).as_posix() in CONFORMANCE_FILES:
                continue
            if OUTSIDE.search(code):
                offenders.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "paths outside the checkout:\n" + "\n".join(offenders)


def test_the_reference_data_is_in_the_repository():
    data = ROOT / "tests" / "data"
    # The schemas ship in the package too: python -m boxfall bench parses them where installed.
    schemas = ROOT / "python" / "boxfall" / "data" / "torch_schemas.txt"
    lines = schemas.read_text(encoding="utf-8").splitlines()
    assert len([ln for ln in lines if ln and not ln.startswith("#")]) == 2187
    assert (data / "torch_schemas.jsonl").stat().st_size > 0


def test_the_bench_finds_the_schemas_in_the_checkout():
    from boxfall import bench

    assert bench.SCHEMAS.is_relative_to(ROOT), bench.SCHEMAS
    assert bench.SCHEMAS.exists()


def test_a_module_path_counts_as_outside_only_when_it_leaves_the_checkout():
    here = ROOT / "benches" / "handwritten.rs"
    assert _outside_module_paths(here, '#[path = "../src/shared.rs"]') == ""
    outside = '#[path = "../../elsewhere/x.rs"]'
    assert OUTSIDE.search(_outside_module_paths(here, outside))
