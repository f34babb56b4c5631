"""Plans made after passes that replace operators validate, and annotate, against the replayed model."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import helper

from fuseplan.cost import make_cost_model
from fuseplan.graph import graph_from_model
from fuseplan.passes import PASSES, InferShapes, Pass, default_passes
from fuseplan.plan import FusionProblem
from fuseplan.plan.io import GROUP_KEY, annotate_onnx, plan_document, write_json
from fuseplan.search import IntervalDP, minimize
from fuseplan.split import make_splitter
from tests.builders import two_convs
from tests.cli.test_cli import fuseplan

DATA = Path(__file__).resolve().parents[1] / "data"


class _ReluAfterFirstConv(Pass):
    """Adds an operator the input model does not have (a stand-in for a rewrite)."""

    name = "relu-after-first-conv"
    preserves_operators = False

    def transform(self, model):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        first = copy.graph.node[0]
        produced = first.output[0]
        for node in copy.graph.node[1:]:
            node.input[:] = [f"{produced}_relu" if x == produced else x for x in node.input]
        copy.graph.node.insert(1, helper.make_node("Relu", [produced], [f"{produced}_relu"], name="inserted_relu"))
        return copy


@pytest.fixture
def rewritten(tmp_path, monkeypatch):
    monkeypatch.setitem(PASSES, _ReluAfterFirstConv.name, _ReluAfterFirstConv)
    model_file = tmp_path / "two_convs.onnx"
    onnx.save(two_convs(), model_file)
    passes = [*default_passes(), _ReluAfterFirstConv(), InferShapes()]
    graph = graph_from_model(two_convs(), name="two_convs", passes=passes)
    problem = FusionProblem(make_cost_model("lbdf", graph, 256 * 1024))
    result = minimize(problem, IntervalDP(), make_splitter("random"), budget=100, seed=0)
    plan_file = tmp_path / "plan.json"
    write_json(plan_document(problem, result.plan, result.search_record()), plan_file)
    return model_file, plan_file, problem, result.plan


def test_a_plan_after_a_rewrite_names_the_new_operator_and_validates(rewritten):
    model_file, plan_file, _, _ = rewritten
    document = json.loads(plan_file.read_text())
    assert document["passes"][-2] == {"name": "relu-after-first-conv", "options": {}, "changed": True}
    assert "inserted_relu" in [name for group in document["groups"] for name in group["nodes"]]
    outcome = fuseplan("validate", model_file, plan_file)
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stdout.startswith("valid:")


def test_without_the_recorded_passes_the_plan_is_for_another_model(rewritten):
    model_file, plan_file, _, _ = rewritten
    document = json.loads(plan_file.read_text())
    del document["passes"]
    plan_file.write_text(json.dumps(document))
    outcome = fuseplan("validate", model_file, plan_file)
    assert outcome.returncode == 2 and "operators differ" in outcome.stderr


def test_annotation_replays_the_rewrite(rewritten):
    _, _, problem, plan = rewritten
    annotated = annotate_onnx(two_convs(), problem, plan)
    labels = {node.name: {p.key: p.value for p in node.metadata_props}.get(GROUP_KEY) for node in annotated.graph.node}
    assert set(labels) == {"conv1", "inserted_relu", "conv2"}
    assert all(label is not None for label in labels.values())


def test_annotation_of_a_prepared_model_is_the_input_model():
    graph = graph_from_model(two_convs(), name="two_convs")
    problem = FusionProblem(make_cost_model("lbdf", graph, 256 * 1024))
    result = minimize(problem, IntervalDP(), make_splitter("random"), budget=100, seed=0)
    annotated = annotate_onnx(two_convs(), problem, result.plan)
    assert len(annotated.graph.value_info) == 0  # shape inference ran on a copy only
    assert [n.name for n in annotated.graph.node] == ["conv1", "conv2"]


def test_a_plan_after_real_substitutions_validates_against_the_input_file(tmp_path):
    pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
    from fuseplan.passes import Rewrite

    model_file = tmp_path / "googlenet.onnx"
    model_file.write_bytes((DATA / "googlenet_opset13.onnx").read_bytes())
    steps = [{"rule": "merge-parallel-convs", "site": []}]
    prepared = graph_from_model(onnx.load(model_file), name="googlenet")
    first_pair = next(([a, b] for a in prepared.tensors for b in prepared.tensors
                       if a.producer is not None and b.producer is not None and a.index < b.index
                       and prepared.nodes[a.producer].op_type == prepared.nodes[b.producer].op_type == "Conv"
                       and prepared.nodes[a.producer].inputs[0] == prepared.nodes[b.producer].inputs[0]
                       and prepared.nodes[a.producer].attributes == prepared.nodes[b.producer].attributes))
    steps[0]["site"] = [first_pair[0].name, first_pair[1].name]
    steps.append({"rule": "enlarge-conv-kernel", "site": [next(
        prepared.tensors[n.outputs[0]].name for n in prepared.nodes
        if n.op_type == "Conv" and n.attributes.get("kernel_shape") == [1, 1]
        and prepared.tensors[n.outputs[0]].name not in steps[0]["site"])]})
    graph = graph_from_model(onnx.load(model_file), name="googlenet", passes=[*default_passes(), Rewrite(steps)])
    assert [n.op_type for n in graph.nodes].count("Split") == 1
    problem = FusionProblem(make_cost_model("brr", graph, 64 * 1024))
    result = minimize(problem, IntervalDP(), make_splitter("random"), budget=100, seed=0)
    plan_file = tmp_path / "plan.json"
    write_json(plan_document(problem, result.plan, result.search_record()), plan_file)
    outcome = fuseplan("validate", model_file, plan_file)
    assert outcome.returncode == 0, outcome.stderr
    annotated = annotate_onnx(onnx.load(model_file), problem, result.plan)
    assert sum(n.op_type == "Split" and any(p.key == GROUP_KEY for p in n.metadata_props)
               for n in annotated.graph.node) == 1
