"""Cheap static checks of the package and the tests: no line over 120 characters, and pyflakes finds nothing
(unused or undefined names, redefined imports) where pyflakes is installed (the ``test`` extra brings it)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("src", "tests")
LONGEST = 120


def _sources() -> list[Path]:
    return sorted(path for folder in CHECKED for path in (ROOT / folder).rglob("*.py"))


def test_no_line_is_longer_than_120_characters():
    long = [f"{path.relative_to(ROOT)}:{number}" for path in _sources()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if len(line) > LONGEST]
    assert long == [], long


def test_pyflakes_finds_nothing():
    api = pytest.importorskip("pyflakes.api", reason="pyflakes comes with the test extra")
    from pyflakes.reporter import Reporter

    found, errors = io.StringIO(), io.StringIO()
    count = api.checkRecursive([str(ROOT / folder) for folder in CHECKED], Reporter(found, errors))
    assert count == 0 and errors.getvalue() == "", found.getvalue() + errors.getvalue()
