"""The passes stage: structural hashing, the importer's preparation as passes, the registry."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from fuseplan.errors import FuseplanError
from fuseplan.graph import graph_from_model, load_graph
from fuseplan.passes import (
    DEFAULT_PASSES, FixInputShapes, FoldAliases, InferShapes, Pass, default_passes, make_pass, passes_from_records,
    run_passes, structural_hash,
)
from tests.builders import legacy_style, two_convs, with_unknown_op
from tests.conftest import ZOO
from tests.passes.digests import full_digest

DATA = Path(__file__).resolve().parents[1] / "data"
# Recorded with the importer as it was before its preparation became passes (fingerprints and full digests).
GOLDEN = json.loads((DATA / "importer_digests.json").read_text())
BUILT = {"legacy_style": legacy_style, "two_convs": two_convs, "with_unknown_op": with_unknown_op}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_default_pipeline_builds_the_same_graph_as_the_importer_did(name):
    if name in BUILT:
        graph = graph_from_model(BUILT[name](), name=name)
    else:
        graph = load_graph(DATA / name if name.endswith(".onnx") else name)
    assert graph.fingerprint == GOLDEN[name]["fingerprint"]
    assert full_digest(graph) == GOLDEN[name]["digest"]
    assert [record["name"] for record in graph.passes] == list(DEFAULT_PASSES)


def test_golden_digests_cover_the_whole_zoo_and_the_test_models():
    assert set(ZOO) | {p.name for p in DATA.glob("*.onnx")} | set(BUILT) == set(GOLDEN)


def _renamed(model: onnx.ModelProto, order: list[int]) -> onnx.ModelProto:
    """``model`` with every value and node renamed and its nodes in ``order``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]} | {i.name for i in graph.initializer}
    names |= {x for n in graph.node for x in [*n.input, *n.output] if x}
    new = {name: f"v{k}" for k, name in enumerate(sorted(names, reverse=True))}
    for value in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]:
        value.name = new[value.name]
    nodes = list(graph.node)
    for k, node in enumerate(nodes):
        node.name = f"n{k}"
        node.input[:] = [new[x] if x else x for x in node.input]
        node.output[:] = [new[x] if x else x for x in node.output]
    reordered = [nodes[i] for i in order]
    copy_nodes = [onnx.NodeProto() for _ in reordered]
    for target, source in zip(copy_nodes, reordered):
        target.CopyFrom(source)
    del graph.node[:]
    graph.node.extend(copy_nodes)
    return copy


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(BUILT)), st.randoms(use_true_random=False))
def test_structural_hash_ignores_names_and_node_order(name, rng):
    model = BUILT[name]()
    order = list(range(len(model.graph.node)))
    rng.shuffle(order)
    assert structural_hash(_renamed(model, order)) == structural_hash(model)


def _edited(model: onnx.ModelProto, edit) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    edit(copy.graph)
    return copy


@pytest.mark.parametrize("edit", [
    lambda g: g.node[0].attribute[1].ints.__setitem__(slice(None), [0, 0, 0, 0]),  # pads of conv1
    lambda g: setattr(g.node[1], "op_type", "ConvTranspose"),
    lambda g: g.node[1].input.__setitem__(0, "x"),  # conv2 reads the model input: an edge moves
    lambda g: g.initializer[0].dims.__setitem__(0, 16),  # a weight's shape
    lambda g: setattr(g.initializer[1], "data_type", onnx.TensorProto.FLOAT16),  # a weight's type
    lambda g: g.output[0].type.tensor_type.shape.dim[2].__setattr__("dim_value", 8),  # a declared shape
], ids=["attribute", "op-type", "edge", "initializer-shape", "initializer-type", "declared-shape"])
def test_structural_hash_sees_every_structural_change(edit):
    model = two_convs()
    assert structural_hash(_edited(model, edit)) != structural_hash(model)


def test_structural_hash_refuses_a_cycle():
    model = _edited(two_convs(), lambda g: g.node[0].input.__setitem__(0, "y2"))
    with pytest.raises(FuseplanError, match="cycle"):
        structural_hash(model)


class _RenameEverything(Pass):
    name = "rename-everything"

    def transform(self, model):
        return _renamed(model, list(range(len(model.graph.node))))


def test_changed_is_judged_by_the_structural_hash():
    model = two_convs()
    inferred = InferShapes()(model)
    assert inferred.changed and len(inferred.model.graph.value_info) > len(model.graph.value_info)
    assert not InferShapes()(inferred.model).changed  # a second inference adds nothing
    renamed = _RenameEverything()(model)
    assert renamed.model.graph.node[0].name != model.graph.node[0].name and not renamed.changed


def test_passes_never_modify_their_input():
    model = legacy_style("N")
    before = model.SerializeToString()
    run_passes(model, default_passes({"x": (1, 3, 16, 16)}))
    assert model.SerializeToString() == before


def test_fold_aliases_removes_activation_aliases_only():
    model = InferShapes()(legacy_style()).model
    result = FoldAliases()(model)
    assert result.changed
    ops = [n.op_type for n in result.model.graph.node]
    assert "Dropout" not in ops
    assert ops.count("Identity") == 1  # the Identity of an initializer is a weight's name, not an alias
    readers = [n for n in result.model.graph.node if n.name in ("conv2", "conv3", "sum")]
    assert all("d1" not in n.input and "n1" in n.input for n in readers)


def test_fold_aliases_keeps_an_alias_that_produces_a_model_output():
    model = _edited(two_convs(), lambda g: (
        g.node.append(helper.make_node("Identity", ["y2"], ["out"], name="alias_out")),
        g.output[0].__setattr__("name", "out"),
    ))
    assert not FoldAliases()(model).changed
    graph = graph_from_model(model, name="t")
    assert graph.tensors[graph.model_outputs[0]].name == "y2"  # the importer reads it as an alias


def test_folding_aliases_first_gives_the_graph_the_importer_gives_without():
    without = [make_pass(name) for name in DEFAULT_PASSES if name != "fold-aliases"]
    graph = graph_from_model(legacy_style(), name="legacy")
    assert full_digest(graph_from_model(legacy_style(), name="legacy", passes=without)) == full_digest(graph)


def test_load_graph_runs_the_pipeline_it_is_given():
    with pytest.raises(FuseplanError, match="unknown after shape inference"):
        graph_from_model(two_convs(), name="t", passes=[])  # nobody inferred y1's shape
    graph = graph_from_model(two_convs(), name="t", passes=[InferShapes()])
    assert graph.passes == ({"name": "infer-shapes", "options": {}, "changed": True},)
    assert graph.fingerprint == GOLDEN["two_convs"]["fingerprint"]


def test_pipeline_errors_name_the_model():
    with pytest.raises(FuseplanError, match=r"^dyn: input 'x' has a dynamic shape"):
        graph_from_model(legacy_style("N"), name="dyn")
    with pytest.raises(FuseplanError, match="not beside a pipeline"):
        graph_from_model(two_convs(), input_shapes={"x": (1, 8, 16, 16)}, passes=[InferShapes()])


def test_recorded_pipeline_rebuilds_the_same_passes():
    graph = graph_from_model(legacy_style("N"), name="dyn", input_shapes={"x": (1, 3, 16, 16)})
    assert graph.passes[0]["options"] == {"shapes": {"x": [1, 3, 16, 16]}}
    rebuilt = passes_from_records(json.loads(json.dumps(graph.passes)))
    assert [p.name for p in rebuilt] == list(DEFAULT_PASSES)
    assert isinstance(rebuilt[0], FixInputShapes) and rebuilt[0].shapes == {"x": (1, 3, 16, 16)}
    assert full_digest(graph_from_model(legacy_style("N"), name="dyn", passes=rebuilt)) == full_digest(graph)


@pytest.mark.parametrize("record, message", [
    ({"name": "no-such-pass"}, "unknown pass 'no-such-pass'"),
    ({"name": "fold-constants", "options": {"rounds": 0}}, "rounds must be a positive integer"),
    ({"name": "fix-input-shapes", "options": {"shapes": {"x": [1, -3]}}}, "list of positive integers"),
    ({"name": "infer-shapes", "options": {"strict": True}}, "does not take the options"),
    ({"options": {}}, "not an object with a \"name\""),
    ("infer-shapes", "not an object"),
])
def test_bad_pass_records_are_one_clear_error(record, message):
    with pytest.raises(FuseplanError, match=message):
        passes_from_records([record])


def test_a_new_input_shape_replaces_the_shapes_a_prepared_model_recorded_for_its_other_tensors():
    # A prepared model saved to a file records every tensor's shape at its own input (224x224). Fixed at
    # 112x112, those were once kept: the graph had 224-sized tensors after a 112 input, every group was priced
    # for them, and the simulator compared them with onnxruntime's 112-sized ones (an infinite error).
    from fuseplan.graph.onnx_import import model_path, prepare_model, read_model

    path, stem = model_path("mobilenet_v3_small")
    saved = prepare_model(read_model(path), stem)[0]
    assert len(saved.graph.value_info) > 100
    again = graph_from_model(saved, name=stem, input_shapes={"input": (1, 3, 112, 112)})
    direct = load_graph("mobilenet_v3_small", {"input": (1, 3, 112, 112)})
    assert [t.shape for t in again.tensors] == [t.shape for t in direct.tensors]
    assert again.tensors[again.nodes[0].outputs[0]].shape == (1, 16, 56, 56)


@pytest.mark.parametrize("size", [224, pytest.param(257, marks=pytest.mark.slow)])
def test_a_resize_to_sizes_frozen_at_export_follows_a_new_input_shape(size):
    # torchvision's DeepLabV3 resizes its ASPP pooling branch to the size of the map it pools and its logits to
    # the input's; the export froze both at 513x513 (33x33 and 513x513). Those now follow the new input: the
    # pooling branch matches the branches it is concatenated with, and the output has the input's size.
    graph = load_graph("deeplabv3_mobilenet_v3_large", {"input": (1, 3, size, size)})
    concat = graph.nodes[graph.node_index("/model/classifier/classifier.0/Concat")]
    branches = [graph.tensors[t].shape for t in concat.inputs]
    assert len(branches) == 5 and len({shape[2:] for shape in branches}) == 1
    assert branches[0][2] < 33
    assert graph.tensors[graph.model_outputs[0]].shape == (1, 21, size, size)
    assert len(graph.nodes) == len(load_graph("deeplabv3_mobilenet_v3_large").nodes)
