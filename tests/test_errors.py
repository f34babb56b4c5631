"""How error messages show the user's values: whole when short, by their start and length when long."""

from __future__ import annotations

from fuseplan.errors import shown


def test_a_short_value_is_shown_whole():
    assert shown("dp") == "'dp'"
    assert shown(7) == "7"
    assert shown("/tmp/model.onnx", quote=False) == "/tmp/model.onnx"
    assert shown("x" * 60) == repr("x" * 60)


def test_a_long_value_is_shown_by_its_start_and_length():
    assert shown("x" * 61) == "'" + "x" * 40 + "'... (61 characters)"
    assert shown("9" * 5000, quote=False) == "'" + "9" * 40 + "'... (5,000 characters)"  # the start quoted anyway
    assert shown("a\x1bb" * 100) == repr(("a\x1bb" * 100)[:40]) + "... (300 characters)"
    assert shown("p" * 150, quote=False, whole=200) == "p" * 150
