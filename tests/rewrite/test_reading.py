"""A candidate read with what was read of the graph it was rewritten from (its reading and labels) is the
graph, and has the labels, that reading it afresh gives: every rule at every site of zoo models and of a
hand-built graph where every rule applies, one and two substitutions deep."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from fuseplan.errors import FuseplanError  # noqa: E402
from fuseplan.graph.onnx_import import graph_from_model, model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes.rewrite import apply_in_place, load_rules  # noqa: E402
from fuseplan.rewrite import DramObjective  # noqa: E402
from fuseplan.rewrite.ir_graph import IrMemo, read_ir  # noqa: E402
from fuseplan.rewrite.objectives import _relabel  # noqa: E402
from fuseplan.rewrite.trial import undo_for  # noqa: E402
from tests.rewrite.test_window import _every_rule_but_identity  # noqa: E402

GOOGLENET = "tests/data/googlenet_opset13.onnx"


def _model(source: str):
    if source == "every-rule":
        return _every_rule_but_identity()
    if source == "split-concat-output":
        return _split_concat_output()
    path, label = model_path(source)
    return prepare_model(read_model(path), label)[0]


def _split_concat_output():
    """A Concat of a Split's outputs as the model output: dropping the pair renames the Relu's output
    (read before the substitution, and unchanged) to the model output's name."""
    from fuseplan.passes.prepare import InferShapes

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Split", ["r"], ["p", "q"], name="split", axis=1, num_outputs=2),
             helper.make_node("Concat", ["p", "q"], ["y"], name="concat", axis=1)]
    graph = helper.make_graph(nodes, "split_concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                    [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return InferShapes().transform(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def _assert_same_graph(read, afresh, where):
    assert read.graph.nodes == afresh.graph.nodes, where
    assert read.graph.tensors == afresh.graph.tensors, where
    assert (read.graph.model_inputs, read.graph.model_outputs) == (afresh.graph.model_inputs,
                                                                    afresh.graph.model_outputs), where
    assert read.node_ids == afresh.node_ids, where


def _check(source: str, depth: int) -> tuple[set[str], int]:
    """Read every candidate of every rule near its parent and afresh; ``(rules seen, operators taken over
    from the parent as the same objects)``."""
    objective = DramObjective(scheme="lbdf")
    parents = [ir.from_proto(_model(source))]
    rules_seen: set[str] = set()
    reused = 0
    for _ in range(depth):
        children = []
        for parent in parents:
            expansion = objective.expansion(parent)
            assert expansion is not None
            for name, rule in load_rules().items():
                for site in rule.sites(parent):
                    _, _, undo = undo_for(parent, site)
                    try:
                        try:
                            apply_in_place(parent, name, site)
                        except FuseplanError:
                            continue
                        where = (source, name, site)
                        read = read_ir(parent, memo=expansion.memo, changed=undo.changed)
                        afresh = read_ir(parent)
                        assert read is not None and afresh is not None, where
                        _assert_same_graph(read, afresh, where)
                        assert read_ir(parent, memo=IrMemo()).graph.tensors == afresh.graph.tensors
                        reused += sum(a is b for a, b in zip(read.graph.nodes, expansion.reading.graph.nodes))
                        relabel = _relabel(read, expansion, undo.changed)
                        assert relabel is not None, where
                        labels = [objective.prices.label(read.graph, v) if i in relabel else expansion.labels[i]
                                  for v, i in enumerate(read.node_ids)]
                        assert labels == objective.prices.labels(afresh.graph), where
                        assert len(relabel) < len(labels) or len(labels) < 12, where  # local, not everything
                        rules_seen.add(name)
                    finally:
                        undo()
                    if len(children) < 2 and site == rule.sites(parent)[-1]:
                        copy = parent.clone()
                        apply_in_place(copy, name, site)
                        children.append(copy)
        parents = children
    return rules_seen, reused


@pytest.mark.parametrize("source", ["every-rule", pytest.param("squeezenet", marks=pytest.mark.slow), "resnet18",
                                    pytest.param(GOOGLENET, marks=pytest.mark.slow),
                                    pytest.param("mobilenet_v2", marks=pytest.mark.slow),
                                    pytest.param("efficientnet_b0", marks=pytest.mark.slow),
                                    pytest.param("deeplabv3_mobilenet_v3_large", marks=pytest.mark.slow)])  # Shapes
def test_candidates_read_near_their_parent_equal_candidates_read_afresh(source):
    seen, reused = _check(source, depth=2)
    assert reused > 0
    if source == "every-rule":
        assert seen == set(load_rules()) - {"drop-identity-like"}


def test_a_value_renamed_before_the_substitution_is_read_with_its_new_name():
    seen, _ = _check("split-concat-output", depth=1)
    assert "merge-concat-of-splits" in seen


def test_the_importer_reads_the_renamed_value_as_the_reading_does():
    model = ir.from_proto(_split_concat_output())
    site = load_rules()["merge-concat-of-splits"].sites(model)[0]
    apply_in_place(model, "merge-concat-of-splits", site)
    graph = read_ir(model).graph
    assert graph.tensors[graph.nodes[0].outputs[0]].name == "y"
    assert graph.nodes == graph_from_model(ir.to_proto(model), "candidate", passes=[]).nodes
