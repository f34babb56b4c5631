"""`fuseplan simulate`: a plan's schedules run inside the buffer and compared with their prices and onnxruntime."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import assert_one_line_error, fuseplan

pytest.importorskip("onnxruntime", reason="simulate compares with onnxruntime (the rewrite extra)")

SMALL = ("--input-shape", "input=1x3x96x96")  # a quicker squeezenet: every tensor a third of its rows


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    result = fuseplan("plan", "squeezenet", "--buffer", "64KB", *SMALL, "-o", str(path))
    assert result.returncode == 0, result.stderr
    return path


def _edited(tmp_path, plan_path, edit) -> str:
    document = json.loads(plan_path.read_text())
    edit(document)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_a_plan_runs_as_priced(plan_path):
    result = fuseplan("simulate", "squeezenet", str(plan_path), *SMALL, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    plan = json.loads(plan_path.read_text())
    assert report["input_shapes"] == {"input": [1, 3, 96, 96]}
    assert report["groups_run"] + report["groups_skipped"] == len(plan["groups"]) + len(plan["alone"])
    assert report["groups_agreeing"] == report["groups_run"] >= len(plan["groups"])
    stream = [g for g in report["groups"] if g["kind"] == "stream"]
    assert sum(g["simulated_dram_bytes"] for g in stream) == plan["dram_bytes"]
    assert all(g["peak_buffer_bytes"] <= g["priced_buffer_bytes"] < plan["buffer_bytes"] for g in stream)
    assert all(g["max_error"] <= 1e-4 for g in stream)


def test_the_file_s_schedules_run_at_the_planned_shape(plan_path):
    # without --input-shape the plan's own schedules run (here the plan was made at 96x96: the same figures)
    plan = json.loads(plan_path.read_text())
    at_shape = json.loads(fuseplan("simulate", "squeezenet", str(plan_path), *SMALL, "--json").stdout)
    recorded = fuseplan("simulate", "squeezenet", str(plan_path), "--json")
    assert recorded.returncode == 0, recorded.stderr
    assert json.loads(recorded.stdout)["groups"] == at_shape["groups"]
    assert len(plan["groups"]) > 1


def test_a_line_buffer_edited_one_row_short_is_a_finding(tmp_path, plan_path):
    def shorten(document):
        for group in document["groups"]:
            for tensor in group["schedule"]["tensors"]:
                if tensor[1] == "rows" and tensor[2] > 1:
                    tensor[2] -= 1
                    return
        raise AssertionError("no line buffer of several rows in the plan")

    result = fuseplan("simulate", "squeezenet", _edited(tmp_path, plan_path, shorten))
    assert result.returncode == 1
    assert "finding: group" in result.stderr and "cannot emit row" in result.stderr


def test_bad_input_is_one_error_line(tmp_path, plan_path):
    def overflow(document):
        document["groups"][0]["schedule"]["scratch"] = document["buffer_bytes"]

    assert_one_line_error(fuseplan("simulate", "squeezenet", _edited(tmp_path, plan_path, overflow)),
                          "not less than the 64.00 KB buffer")
    assert_one_line_error(fuseplan("simulate", "resnet18", str(plan_path)), "made for model 'squeezenet'")

    def corrupt(document):
        document["groups"][1]["schedule"]["tensors"][0][0] = "no such tensor"

    assert_one_line_error(fuseplan("simulate", "squeezenet", _edited(tmp_path, plan_path, corrupt)),
                          "malformed schedule")

    def old(document):
        document["version"] = 2
        for group in document["groups"]:
            del group["schedule"]

    assert_one_line_error(fuseplan("simulate", "squeezenet", _edited(tmp_path, plan_path, old)), "plan again")
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{")
    assert_one_line_error(fuseplan("simulate", "squeezenet", str(garbage)), "not a plan file")
    assert_one_line_error(fuseplan("simulate", "squeezenet", str(plan_path), "--hardware", "eyeriss-v1"),
                          "the plan was made for")


@pytest.mark.slow
def test_deeplabv3_planned_at_its_own_shape_runs_at_another(tmp_path):
    # its export froze two Resize sizes at 513x513; the importer makes them follow the input (75 s at load 9)
    path = tmp_path / "deeplab.json"
    planned = fuseplan("plan", "deeplabv3_mobilenet_v3_large", "--buffer", "64KB", "-o", str(path))
    assert planned.returncode == 0, planned.stderr
    result = fuseplan("simulate", "deeplabv3_mobilenet_v3_large", str(path), "--input-shape", "input=1x3x97x97",
                      "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["input_shapes"] == {"input": [1, 3, 97, 97]} and report["groups_skipped"] == 0
    assert report["groups_agreeing"] == report["groups_run"] > 50
    assert report["simulated_dram_bytes"] == report["priced_dram_bytes"] and report["output_error"] <= 1e-4


def test_a_plan_whose_group_moves_its_pipeline_fill_says_so_and_the_simulator_moves_it(tmp_path):
    # squeezenet at 128x128 under BRR at 32KB: the first group streams its weights per row tile, and its
    # operators make their rows in fewer steps than the tiles, so it moves less than its price when run
    shape = ("--input-shape", "input=1x3x128x128")
    path = tmp_path / "plan.json"
    report = tmp_path / "plan.html"
    result = fuseplan("plan", "squeezenet", "--scheme", "brr", "--buffer", "32KB", *shape, "-o", str(path),
                      "--report", str(report))
    assert result.returncode == 0, result.stderr
    assert "DRAM when run" in result.stdout
    page = report.read_text()
    assert 'data-total="executed_dram_bytes"' in page
    plan = json.loads(path.read_text())
    filled = [g for g in plan["groups"] if "executed_dram_bytes" in g]
    assert filled and all(g["executed_dram_bytes"] != g["dram_bytes"] for g in filled)
    assert plan["executed_dram_bytes"] == plan["dram_bytes"] + sum(g["executed_dram_bytes"] - g["dram_bytes"]
                                                                   for g in filled)
    # the report's group panel has each such group's figure (its data: F_beta, F_D, schedule, when run)
    assert all(f', {g["executed_dram_bytes"]}]' in page for g in filled)
    result = fuseplan("simulate", "squeezenet", str(path), "--json")
    assert result.returncode == 1  # a group differs from its price
    report = json.loads(result.stdout)
    groups = {g["group"]: g for g in report["groups"]}
    for group in filled:
        simulated = groups[group["id"]]
        assert simulated["simulated_dram_bytes"] == simulated["executed_dram_bytes"] == group["executed_dram_bytes"]
        assert simulated["pipeline_fill"] and not simulated["agrees"]
    assert report["groups_pipeline_fill"] == len(filled)
    assert report["groups_agreeing"] + len(filled) == report["groups_run"]
    in_plan = [g for g in report["groups"] if g["group"] < len(plan["groups"])]
    assert sum(g["simulated_dram_bytes"] for g in in_plan) == plan["executed_dram_bytes"]
    # validate recounts it; a version-3 file, written before plans recorded it, is not asked for it
    validated = fuseplan("validate", "squeezenet", str(path))
    assert validated.returncode == 0 and "when run" in validated.stdout
    edited = _edited(tmp_path, path, lambda d: d["groups"][filled[0]["id"]].update(executed_dram_bytes=1))
    result = fuseplan("validate", "squeezenet", edited)
    assert result.returncode == 1 and "moved when run" in result.stderr

    def as_version_3(document):
        document["version"] = 3
        document.pop("executed_dram_bytes")
        for group in document["groups"]:
            group.pop("executed_dram_bytes", None)
    assert fuseplan("validate", "squeezenet", _edited(tmp_path, path, as_version_3)).returncode == 0
