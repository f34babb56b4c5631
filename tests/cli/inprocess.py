"""Run the command line in this process: the same entry point as the console script, without a new interpreter."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fuseplan.cli import run


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys):
    """``cli(*args)`` runs ``fuseplan args...`` and returns its exit status and output."""

    def invoke(*args: object) -> Outcome:
        capsys.readouterr()
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return invoke


def assert_one_line_error(result: Outcome, pattern: str = "", code: int = 2) -> None:
    """Exit ``code``, and stderr is exactly one ``error: ...`` line containing ``pattern``."""
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and pattern in lines[0], lines[0]
    assert "Traceback" not in result.stderr
