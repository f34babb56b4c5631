"""`fuseplan plan` and `fuseplan validate` end to end."""

from __future__ import annotations

import json

import onnx
import pytest

from fuseplan import zoo
from fuseplan.cost import COST_MODEL_VERSION
from tests.cli.test_cli import assert_one_line_error, fuseplan


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    plan_path, onnx_path = out / "plan.json", out / "annotated.onnx"
    result = fuseplan("plan", "mobilenet_v2", "--scheme", "lbdf", "--buffer", "128KB", "--search", "ls",
                      "--budget", "400", "--seed", "3", "-o", str(plan_path), "--onnx-out", str(onnx_path))
    assert result.returncode == 0, result.stderr
    return result, plan_path, onnx_path


def test_summary_and_plan_file(planned):
    result, plan_path, _ = planned
    for line in ("DRAM access", "max buffer usage", "groups", "excluded", "plans evaluated", "wall time",
                 "vs interval DP"):
        assert line in result.stdout
    document = json.loads(plan_path.read_text())
    assert document["format"] == "fuseplan-plan" and document["version"] == 4
    assert document["model"] == "mobilenet_v2" and document["scheme"] == "lbdf"
    assert document["buffer_bytes"] == 131072 and document["bytes_per_element"] == 1
    assert document["cost_model_version"] == COST_MODEL_VERSION == 9
    assert all(group["schedule"]["kind"] in ("stream", "row-tiles", "conv-blocks", "matmul-blocks", "chunks", "whole")
               for group in document["groups"])
    # every excluded operator runs alone, or rides on one that does, in a recorded schedule
    assert {name for record in document["alone"] for name in record["schedule"]["operators"]} == \
        set(document["excluded"])
    assert document["search"]["algorithm"] == "ls" and document["search"]["seed"] == 3
    assert document["search"]["budget"] == 400 and document["search"]["plans_evaluated"] == 400
    assert document["dram_bytes"] == sum(g["dram_bytes"] for g in document["groups"])
    assert document["max_buffer_usage_bytes"] == max(g["buffer_bytes"] for g in document["groups"]) < 131072
    names = [n for g in document["groups"] for n in g["nodes"]] + document["excluded"]
    assert len(names) == len(set(names)) == 100  # every operator exactly once
    assert document["reference"]["ratio"] >= 1.0 or not document["reference"]["plan_in_interval_space"]


def test_validate_accepts_the_plan(planned):
    _, plan_path, _ = planned
    result = fuseplan("validate", "mobilenet_v2", str(plan_path))
    assert result.returncode == 0 and result.stdout.startswith("valid:")


def test_annotated_onnx_carries_groups(planned):
    _, plan_path, onnx_path = planned
    document = json.loads(plan_path.read_text())
    model = onnx.load(str(onnx_path))
    labels = {n.name: {p.key: p.value for p in n.metadata_props}.get("fuseplan.group") for n in model.graph.node}
    for group in document["groups"]:
        assert {labels[name] for name in group["nodes"]} == {str(group["id"])}
    assert all(labels[name] == "excluded" for name in document["excluded"])


def test_same_seed_same_plan_on_the_command_line(planned, tmp_path):
    _, plan_path, _ = planned
    again = tmp_path / "again.json"
    fuseplan("plan", "mobilenet_v2", "--scheme", "lbdf", "--buffer", "128KB", "--search", "ls", "--budget", "400",
             "--seed", "3", "-o", str(again))
    first, second = json.loads(plan_path.read_text()), json.loads(again.read_text())
    assert first["groups"] == second["groups"] and first["dram_bytes"] == second["dram_bytes"]


def test_validate_rejects_a_tampered_plan(planned, tmp_path):
    _, plan_path, _ = planned
    document = json.loads(plan_path.read_text())
    document["dram_bytes"] -= 1
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    result = fuseplan("validate", "mobilenet_v2", str(tampered))
    assert result.returncode == 1
    assert "invalid: total DRAM is recorded as" in result.stderr and "Traceback" not in result.stderr

    document = json.loads(plan_path.read_text())
    document["groups"][0]["nodes"] = [n for g in document["groups"] for n in g["nodes"]]
    del document["groups"][1:]
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps(document))
    result = fuseplan("validate", "mobilenet_v2", str(merged))
    assert result.returncode == 1 and "invalid: group 0 is not connected" in result.stderr

    document = json.loads(plan_path.read_text())
    document["groups"].pop()
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps(document))
    result = fuseplan("validate", "mobilenet_v2", str(missing))
    assert result.returncode == 1 and "in no group" in result.stderr


def test_validate_bad_inputs(planned, tmp_path):
    _, plan_path, _ = planned
    assert_one_line_error(fuseplan("validate", "resnet18", str(plan_path)), "was made for model 'mobilenet_v2'")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    assert_one_line_error(fuseplan("validate", "mobilenet_v2", str(corrupt)), "not a plan file")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something-else"}))
    assert_one_line_error(fuseplan("validate", "mobilenet_v2", str(other)), "not a plan file")
    assert_one_line_error(fuseplan("validate", "mobilenet_v2", str(tmp_path / "nope.json")), "no such file")


def test_plan_never_overwrites_the_input_model(tmp_path):
    model = tmp_path / "resnet18.onnx"
    model.write_bytes(zoo.path("resnet18").read_bytes())
    before = model.read_bytes()
    assert_one_line_error(fuseplan("plan", str(model), "--onnx-out", str(model)), "refusing to overwrite")
    assert_one_line_error(fuseplan("plan", str(model), "-o", str(model)), "refusing to overwrite")
    assert model.read_bytes() == before


def test_plan_json_output_and_bad_options():
    result = fuseplan("plan", "squeezenet", "--search", "dp", "--json")
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert document["reference"]["ratio"] == 1.0 and document["search"]["algorithm"] == "dp"
    assert fuseplan("plan", "squeezenet", "--search", "magic").returncode == 2
    assert fuseplan("plan", "squeezenet", "--budget", "0").returncode == 2
    assert_one_line_error(fuseplan("plan", "squeezenet", "--buffer", "0KB"), "must be a positive")


def test_refine_lowers_brr_dram_and_needs_an_explainer():
    common = ("plan", "vgg16", "--scheme", "brr", "--buffer", "128KB", "--search", "rs", "--budget", "300",
              "--splitter", "oracle", "--json")
    plain, refined = (json.loads(fuseplan(*common, *extra).stdout) for extra in ((), ("--refine",)))
    assert refined["search"]["refinements"] > 0 and "refinements" not in plain["search"]
    assert refined["dram_bytes"] < plain["dram_bytes"]
    assert_one_line_error(fuseplan("plan", "vgg16", "--refine"), "needs an explainer-driven splitter")


def test_exact_and_auto_report_optimality_and_totals():
    result = fuseplan("plan", "resnet50", "--buffer", "512KB", "--search", "exact")
    assert result.returncode == 0, result.stderr
    assert "proven optimal over all plans" in result.stdout
    assert "this plan lies outside the DP's space" in result.stdout  # the interval DP misses this optimum
    assert "total DRAM" in result.stdout
    document = json.loads(fuseplan("plan", "resnet50", "--buffer", "512KB", "--json").stdout)
    assert document["search"]["algorithm"] == "auto" and document["search"]["optimal"] is True
    assert document["search"]["lower_bound_bytes"] == document["dram_bytes"]
    assert document["reference"]["ratio"] < 1.0
    assert document["total_dram_bytes"] == document["dram_bytes"] + document["excluded_dram_bytes"]
    assert document["excluded_dram_bytes"] > 0
    assert "exact" in fuseplan("plan", "--help").stdout


def test_inspect_reports_totals_with_unfuseable_operators():
    text = fuseplan("inspect", "vgg16", "--buffer", "128KB")
    assert text.returncode == 0 and "total DRAM, no fusion (all ops)" in text.stdout
    report = json.loads(fuseplan("inspect", "vgg16", "--buffer", "128KB", "--json").stdout)
    alone = sum(row["alone_dram_bytes"] for row in report["operators"] if not row["fuseable"])
    assert report["excluded_dram_bytes"] == alone > 0
    assert report["total_unfused_dram_bytes"] == report["unfused_dram_bytes"] + alone
    assert report["total_dram_lower_bound_bytes"] == report["dram_lower_bound_bytes"] + alone


def test_max_sets_limits_the_enumeration_and_is_recorded(tmp_path):
    for limit, proven in ((60, False), (5000, True)):  # squeezenet BRR 256KB visits about 1,000 sets
        out = tmp_path / f"plan{limit}.json"
        result = fuseplan("plan", "squeezenet", "--scheme", "brr", "--buffer", "256KB", "--max-sets", limit,
                          "-o", out)
        assert result.returncode == 0, result.stderr
        search = json.loads(out.read_text())["search"]
        assert search["exact"]["max_sets"] == limit
        assert search["exact"]["candidates_complete"] is proven and search["optimal"] is proven
        if not proven:  # "about" the limit: a seed's last set's growths are still counted
            assert search["exact"]["sets_visited"] < 2 * limit


def test_max_sets_is_refused_out_of_range_and_for_other_searches(tmp_path):
    out = tmp_path / "plan.json"
    assert_one_line_error(fuseplan("plan", "squeezenet", "--max-sets", "0", "-o", out), "--max-sets must be 1 to")
    assert_one_line_error(fuseplan("plan", "squeezenet", "--max-sets", "20000000", "-o", out), "10,000,000")
    assert_one_line_error(fuseplan("plan", "squeezenet", "--search", "ls", "--max-sets", "10", "-o", out),
                          "--max-sets applies to --search exact and auto")
    assert not out.exists()
