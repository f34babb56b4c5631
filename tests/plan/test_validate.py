from __future__ import annotations

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import PlanFile, plan_document, read_plan_file
from fuseplan.plan.validate import check_fit, validate_plan
from fuseplan.search import IntervalDP


def _document(graph, kb):
    problem = FusionProblem(make_cost_model("lbdf", graph, kb * 1024))
    plan = IntervalDP().solve(problem)[0]
    return plan_document(problem, plan, {"algorithm": "dp"})


def test_a_plan_for_a_big_buffer_does_not_fit_a_small_one(zoo_graphs):
    graph = zoo_graphs["mobilenet_v2"]
    document = _document(graph, 2048)
    assert validate_plan(graph, PlanFile(document)) == []
    small = dict(document, buffer_bytes=128 * 1024)
    reasons = validate_plan(graph, PlanFile(small))
    assert any("more than the 131072-byte buffer allows" in r or "unfuseable" in r for r in reasons)


def test_unknown_operator_names_and_other_models(zoo_graphs):
    graph = zoo_graphs["squeezenet"]
    document = _document(graph, 256)
    document["groups"][0]["nodes"].append("/no/such/node")
    assert any("/no/such/node" in r for r in validate_plan(graph, PlanFile(document)))
    with pytest.raises(FuseplanError, match="was made for model 'squeezenet'"):
        validate_plan(zoo_graphs["resnet18"], PlanFile(_document(graph, 256)))


def test_plan_file_shape_checks(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"format": "fuseplan-plan", "version": 99}')
    with pytest.raises(FuseplanError, match="version 99 is not supported"):
        read_plan_file(path)
    path.write_text('{"format": "fuseplan-plan", "version": 1, "model": "m"}')
    with pytest.raises(FuseplanError, match="field 'scheme' is missing"):
        read_plan_file(path)


def test_a_plan_checked_against_another_accelerator(zoo_graphs):
    graph = zoo_graphs["mobilenet_v2"]
    document = _document(graph, 256)
    plan_file = PlanFile(document)
    needs = [group["buffer_bytes"] for group in document["groups"]]
    # its own accelerator: every group fits, and the largest need is the recorded maximum usage
    assert check_fit(graph, plan_file, 256 * 1024, 1) == ([], document["max_buffer_usage_bytes"])
    # a smaller buffer: exactly the groups whose recorded F_beta reaches it
    too_big, largest = check_fit(graph, plan_file, 64 * 1024, 1)
    assert too_big == [(k, need) for k, need in enumerate(needs) if need >= 64 * 1024] != []
    assert largest == max(needs)
    # twice the data width: LBDF's F_beta doubles, so the groups above half the buffer no longer fit
    too_big, largest = check_fit(graph, plan_file, 256 * 1024, 2)
    assert largest == 2 * max(needs)
    assert [k for k, _ in too_big] == [k for k, need in enumerate(needs) if 2 * need >= 256 * 1024] != []
