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
