"""`fuseplan why --plan PLAN.json --group N`: explaining a plan's group without naming its operators."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import assert_one_line_error, fuseplan


def test_why_takes_its_group_from_a_plan(planned):
    plan_path, _ = planned
    document = json.loads(plan_path.read_text())
    group = document["groups"][2]
    by_plan = fuseplan("why", "mobilenet_v2", "--plan", plan_path, "--group", "2", "--explainer", "oracle",
                       "--json")
    by_names = fuseplan("why", "mobilenet_v2", "--nodes", ",".join(group["nodes"]), "--buffer", "128KB",
                        "--explainer", "oracle", "--json")
    assert by_plan.returncode == 0, by_plan.stderr
    assert json.loads(by_plan.stdout) == json.loads(by_names.stdout)
    data = json.loads(by_plan.stdout)
    assert data["buffer_bytes"] == document["buffer_bytes"]  # the plan's buffer, not the 256KB default
    assert (data["group_buffer_bytes"], data["group_dram_bytes"]) == (group["buffer_bytes"], group["dram_bytes"])
    text = fuseplan("why", "mobilenet_v2", "--plan", plan_path, "--group", "2", "--explainer", "oracle")
    assert text.stdout.startswith(f"group 2 of {plan_path} ({len(group['nodes'])} operators) needs")


@pytest.mark.parametrize("args,pattern", [
    (("--group", "99"), "the plan has no group 99"),
    ((), "--plan PLAN.json --group N"),
    (("--group", "1", "--nodes", "x"), "--plan PLAN.json --group N"),
])
def test_why_from_a_plan_errors(planned, args, pattern):
    plan_path, _ = planned
    assert_one_line_error(fuseplan("why", "mobilenet_v2", "--plan", plan_path, *args, "--explainer", "oracle"),
                          pattern)


def test_why_refuses_another_models_plan(planned):
    plan_path, _ = planned
    assert_one_line_error(fuseplan("why", "resnet18", "--plan", plan_path, "--group", "0", "--explainer", "oracle"),
                          "the plan was made for model")


def test_why_picture_legend_names_every_part(planned, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fuseplan.report.figures import _explanation_legend

    plan_path, _ = planned
    document = json.loads(plan_path.read_text())
    names = ",".join(document["groups"][1]["nodes"])  # 128KB plan's group, split at half the buffer
    result = fuseplan("why", "mobilenet_v2", "--nodes", names, "--buffer", "64KB", "--explainer", "oracle",
                      "--json", "--png", tmp_path / "why.png")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "why.png").read_bytes().startswith(b"\x89PNG")
    split = json.loads(result.stdout)["split"]
    assert len(split) > 1
    parts = [frozenset(range(len(p["nodes"]))) for p in split]
    labels = [h.get_label() for h in _explanation_legend(parts, plt.get_cmap("tab10"), 5)]
    assert labels[:len(split)] == [f"part {k} ({len(p['nodes'])} ops)" for k, p in enumerate(split)]
    assert labels[len(split):] == ["blamed edge (top 5; width = blame)", "other edge in the group"]
