"""The command line reads as help should: ``--help`` texts show each
option's default and no reST markup, and ``python -m boxfall bench`` prints each label once
and nothing about who measured what."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boxfall
import pytest
from boxfall import bench


def _run(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "boxfall", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        cwd=cwd,
    )
    return done.stdout


@pytest.mark.parametrize("command", [(), ("demo",), ("bench",)])
def test_help_shows_no_markup(command):
    text = _run(*command, "--help")
    assert "usage: python -m boxfall" in text
    assert "`" not in text, text
    if not command:  # the top level says where the options and their defaults are
        assert "python -m boxfall COMMAND --help" in text, text


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_help_shows_the_default_of_every_option_that_has_one(command):
    text = _run(command, "--help")
    options = {
        "demo": ["--batch", "--hidden", "--steps", "--seed", "--backend"],
        "bench": ["--number", "--repeat", "--quick", "--schemas"],
    }[command]
    # argparse puts an option's help after it, on its line or the next ones.
    for option in options:
        help_text = text.split(f"  {option}", 1)[1].split("\n  -", 1)[0]
        assert "default" in help_text, f"{option}: {help_text!r}"


def test_the_bench_schemas_ship_in_the_package():
    # An installed boxfall has no checkout around it: the schemas are package data.
    package = Path(boxfall.__file__).resolve().parent
    assert bench.SCHEMAS.is_relative_to(package), bench.SCHEMAS
    assert len(bench.SCHEMAS.read_text(encoding="utf-8").splitlines()) > 2000


def test_bench_prints_each_label_once_and_no_hearsay(tmp_path):
    # --quick, from a directory outside the checkout, as a user who installed boxfall runs it.
    out = _run("bench", "--quick", "--number", "20", "--repeat", "1", cwd=tmp_path)
    assert "schemas parsed: 2187" in out, out
    assert "10000 elements" in out, out  # --quick's smaller arrays
    lines = out.splitlines()
    header = next(ln for ln in lines if ln.startswith("measured"))
    rows = [ln for ln in lines[lines.index(header) + 1 :] if "ns" in ln]
    assert len(rows) >= 8, out
    labels = [ln[:48].strip() for ln in rows]
    assert len(labels) == len(set(labels)), labels
    assert "measured by" not in out and "issue's author" not in out, out
    # Medians of paired rounds, never a best-of, with the spread of the rounds' ratios.
    assert "paired rounds" in out and "rounds' ratios" in header, out
    # The columns line up: every time column ends where the header says.
    end = header.index("median") + len("median")
    assert all(ln[end - 2 : end] == "ns" for ln in rows), out
