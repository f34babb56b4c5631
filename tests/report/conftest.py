"""A plan with its report, shared by the report tests."""

from __future__ import annotations

import pytest

from tests.cli.test_cli import fuseplan


@pytest.fixture(scope="package")
def planned(tmp_path_factory):
    """mobilenet_v2 at 128 KB (8 unfuseable operators), planned by the CLI with a report."""
    out = tmp_path_factory.mktemp("report")
    plan_path, report_path = out / "plan.json", out / "report.html"
    result = fuseplan("plan", "mobilenet_v2", "--buffer", "128KB", "--search", "ls", "--budget", "300",
                      "--seed", "1", "-o", plan_path, "--report", report_path)
    assert result.returncode == 0, result.stderr
    assert f"report written to {report_path}" in result.stdout
    return plan_path, report_path
