"""The search's shortcuts agree with doing everything afresh: candidates built on a clone with local shape
inference, group prices shared across candidates, no re-sorting after a rule, hashes updated around a rewrite,
graphs read from onnx-ir without serialising."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402

from fuseplan.graph.onnx_import import model_path, prepare_model, read_model  # noqa: E402
from fuseplan.passes import structural_hash  # noqa: E402
from fuseplan.passes.order import topological_order  # noqa: E402
from fuseplan.passes.prepare import _infer_shapes, known_shapes  # noqa: E402
from fuseplan.passes.rewrite import apply_in_place, apply_substitution, load_rules  # noqa: E402
from fuseplan.graph.onnx_import import graph_from_model  # noqa: E402
from fuseplan.passes.ir_hashing import HashState, ir_structural_hash, model_digest  # noqa: E402
from fuseplan.rewrite import GroupPrices, total_dram  # noqa: E402
from fuseplan.rewrite.ir_graph import graph_from_ir  # noqa: E402


def _prepared(name: str) -> onnx.ModelProto:
    path, label = model_path(name)
    return prepare_model(read_model(path), label)[0]


def _one_step_candidates(model: onnx.ModelProto, limit: int):
    """(rule, site, candidate built as the search builds it) for up to ``limit`` sites of every rule."""
    working = ir.from_proto(model)
    for name, rule in load_rules().items():
        for site in rule.sites(working)[:limit]:
            copy = working.clone()
            apply_in_place(copy, name, site)
            yield name, site, ir.to_proto(copy)


@pytest.mark.parametrize("source", ["squeezenet", "tests/data/googlenet_opset13.onnx"])
def test_candidates_built_in_place_match_whole_model_inference(source):
    model = _prepared(source)
    rules_seen = set()
    for name, site, candidate in _one_step_candidates(model, limit=3):
        rules_seen.add(name)
        nodes = list(candidate.graph.node)
        produced = {v.name for v in candidate.graph.input} | {i.name for i in candidate.graph.initializer}
        for node in nodes:  # still in topological order without re-sorting
            assert all(x in produced for x in node.input if x), (name, site, node.name)
            produced.update(node.output)
        assert topological_order(nodes, {i.name for i in candidate.graph.initializer}) == list(range(len(nodes)))
        afresh = apply_substitution(model, name, site)
        local_shapes, local_types = known_shapes(candidate)
        full_shapes, full_types = known_shapes(afresh)
        assert local_shapes == full_shapes and local_types == full_types, (name, site)
        assert structural_hash(candidate) == structural_hash(afresh), (name, site)
    assert len(rules_seen) >= 2


@pytest.mark.parametrize("scheme", ["lbdf", pytest.param("brr", marks=pytest.mark.slow)])  # BRR: about 2 s
def test_shared_group_prices_give_the_same_total_dram(scheme):
    model = _prepared("tests/data/googlenet_opset13.onnx")
    prices = GroupPrices()
    buffer = 64 * 1024
    assert total_dram(model, scheme, buffer, prices=prices) == total_dram(model, scheme, buffer)
    checked = 0
    for _, _, candidate in _one_step_candidates(model, limit=4):
        assert total_dram(candidate, scheme, buffer, prices=prices) == total_dram(candidate, scheme, buffer)
        checked += 1
    assert checked >= 10 and prices.hits > 5 * prices.misses  # most groups were priced for an earlier graph


def test_whole_model_inference_after_a_sequence_declares_every_value():
    model = _prepared("squeezenet")
    working = ir.from_proto(model)
    site = load_rules()["split-conv-by-channels"].sites(working)[0]
    rewritten = apply_substitution(model, "split-conv-by-channels", site)
    reinferred = _infer_shapes(rewritten)
    assert known_shapes(rewritten) == known_shapes(reinferred)


def _every_candidate(model: onnx.ModelProto):
    """(rule, site, clone before the rewrite's nodes, matched nodes, rewritten clone) at every site of every rule."""
    working = ir.from_proto(model)
    for name, rule in load_rules().items():
        for site in rule.sites(working):
            copy = working.clone()
            before = list(copy.graph)
            touched = [node for node in before if node.outputs[0].name in site]
            apply_in_place(copy, name, site)
            yield name, site, before, touched, copy


def _every_rule_model() -> onnx.ModelProto:
    """A small graph where every rule has a site: 1x1 and parallel convolutions, Conv + Add, Conv +
    BatchNormalization, a Concat of a Split's outputs, an Identity."""
    from onnx import TensorProto, helper, numpy_helper

    from fuseplan.passes.prepare import InferShapes

    rng = np.random.default_rng(0)

    def weight(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    conv = helper.make_node
    nodes = [
        conv("Conv", ["x", "w1"], ["a"], name="c1", kernel_shape=[1, 1]),
        conv("Conv", ["x", "w2"], ["b"], name="c2", kernel_shape=[1, 1]),
        conv("Add", ["b", "x"], ["s"], name="add"),
        conv("BatchNormalization", ["a", "g", "beta", "mean", "var"], ["n"], name="bn"),
        conv("Split", ["n"], ["p", "q"], name="split", axis=1, num_outputs=2),
        conv("Concat", ["p", "q"], ["m"], name="concat", axis=1),
        conv("Identity", ["m"], ["i"], name="identity"),
        conv("Add", ["i", "s"], ["y"], name="out"),
    ]
    weights = {"w1": weight(4, 4, 1, 1), "w2": weight(4, 4, 1, 1), "g": weight(4), "beta": weight(4),
               "mean": weight(4), "var": np.abs(weight(4)) + 0.5}
    graph = helper.make_graph(nodes, "every_rule", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in weights.items()])
    return InferShapes().transform(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


@pytest.mark.parametrize("source", ["every-rule", "squeezenet", "resnet18",
                                    pytest.param("tests/data/googlenet_opset13.onnx", marks=pytest.mark.slow)])
def test_hashes_updated_around_a_rewrite_equal_full_hashes_and_group_graphs_as_the_onnx_hash_does(source):
    model = _every_rule_model() if source == "every-rule" else _prepared(source)
    parent = HashState.of(ir.from_proto(model).graph)
    by_onnx_hash: dict[str, set[str]] = {}
    by_ir_hash: dict[str, set[str]] = {}
    rules_seen = set()
    for name, site, before, touched, copy in _every_candidate(model):
        updated = model_digest(copy, parent.update(copy.graph, before, touched))
        full = ir_structural_hash(copy)
        assert updated == full, (name, site)
        onnx_hash = structural_hash(ir.to_proto(copy))
        by_onnx_hash.setdefault(onnx_hash, set()).add(full)
        by_ir_hash.setdefault(full, set()).add(onnx_hash)
        rules_seen.add(name)
    assert rules_seen == set(load_rules()) if source == "every-rule" else len(by_ir_hash) >= 20
    # the same graphs are equal under both hashes: neither merges graphs the other tells apart
    assert all(len(v) == 1 for v in by_onnx_hash.values()) and all(len(v) == 1 for v in by_ir_hash.values())
    assert ir_structural_hash(ir.from_proto(model)) not in by_ir_hash  # every rewrite changed the graph


def test_the_onnx_ir_hash_ignores_names_and_node_order_and_sees_attributes():
    model = _prepared("squeezenet")
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    for node in renamed.graph.node:
        node.name = node.name + "_x"
    reference = ir_structural_hash(ir.from_proto(model))
    assert ir_structural_hash(ir.from_proto(renamed)) == reference
    changed = ir.from_proto(model)
    conv = next(node for node in changed.graph if node.op_type == "MaxPool")
    conv.attributes["strides"] = ir.AttrInt64s("strides", [1, 1])
    assert ir_structural_hash(changed) != reference


@pytest.mark.parametrize("source", ["squeezenet", "resnet18",
                                    pytest.param("tests/data/googlenet_opset13.onnx", marks=pytest.mark.slow),
                                    pytest.param("mobilenet_v2", marks=pytest.mark.slow),  # Constants into Clips
                                    pytest.param("deeplabv3_mobilenet_v3_large", marks=pytest.mark.slow)])  # Shapes
def test_graphs_read_from_onnx_ir_equal_the_importers(source):
    model = _prepared(source)
    read = 0
    for name, site, _, _, copy in _every_candidate(model):
        graph = graph_from_ir(copy)
        assert graph is not None, (name, site)  # prepared zoo candidates take the direct path
        imported = graph_from_model(ir.to_proto(copy), "candidate", passes=[])
        assert graph.nodes == imported.nodes, (name, site)
        assert graph.tensors == imported.tensors, (name, site)
        assert (graph.model_inputs, graph.model_outputs) == (imported.model_inputs, imported.model_outputs)
        assert dict(graph.metadata) == dict(imported.metadata)
        read += 1
    assert read >= 20


def test_graphs_the_importer_reads_differently_are_left_to_it():
    model = _prepared("squeezenet")
    with_identity = ir.from_proto(model)
    first = next(iter(with_identity.graph))
    out = first.outputs[0]
    identity = ir.node("Identity", [out], name="alias")
    out.replace_all_uses_with(identity.outputs[0])
    with_identity.graph.insert_after(first, identity)
    assert graph_from_ir(with_identity) is None
    unnamed = ir.from_proto(model)
    next(iter(unnamed.graph)).name = ""
    assert graph_from_ir(unnamed) is None
    read_by_a_shape_only = ir.from_proto(model)  # the importer folds the Shape and drops the Relu as dead
    source = read_by_a_shape_only.graph.inputs[0]
    relu = ir.node("Relu", [source], name="dead_relu")
    relu.outputs[0].shape, relu.outputs[0].type = source.shape, source.type
    shape = ir.node("Shape", [relu.outputs[0]], name="its_shape")
    shape.outputs[0].shape, shape.outputs[0].type = ir.Shape([len(source.shape)]), ir.TensorType(ir.DataType.INT64)
    read_by_a_shape_only.graph.insert_before(next(iter(read_by_a_shape_only.graph)), [relu, shape])
    assert graph_from_ir(read_by_a_shape_only) is None
    assert graph_from_ir(ir.from_proto(model)).nodes == graph_from_model(model, "candidate", passes=[]).nodes
