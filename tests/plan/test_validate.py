from __future__ import annotations

import pytest

from fuseplan.cost import make_cost_model
from fuseplan.errors import FuseplanError
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import PlanFile, plan_document, read_plan_file
from fuseplan.plan.validate import validate_plan
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
