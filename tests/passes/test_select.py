"""The registry of wrapped passes, pruning by structural hash, architecture signatures and the pruning cache."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxoptimizer", reason="the passes extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")
pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")

from fuseplan import zoo  # noqa: E402
from fuseplan.errors import FuseplanError  # noqa: E402
from fuseplan.passes import InferShapes, make_pass  # noqa: E402
from fuseplan.passes.external import ExternalPass, external_passes, light_model  # noqa: E402
from fuseplan.passes.registry import all_passes  # noqa: E402
from fuseplan.passes.select import (  # noqa: E402
    apply_pass, architecture_signature, cached_prune, graph_hash, normalise, prune,
)


def _model(nodes, inputs, outputs, weights, inputs_too=False) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(a, dtype=np.float32), n) for n, a in weights.items()]
    graph_inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    if inputs_too:  # old exporters list every initializer as a graph input too
        graph_inputs += [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits]
    graph = helper.make_graph(nodes, "case", graph_inputs,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    return InferShapes().transform(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def conv_bn(inputs_too: bool = False, channels: int = 4) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> Transpose with the identity permutation."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((8, channels, 3, 3)), "s": rng.random(8) + 0.5, "b": rng.standard_normal(8),
               "m": rng.standard_normal(8), "v": rng.random(8) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 1, 2, 3])]
    return _model(nodes, {"x": [1, channels, 8, 8]}, ["y"], weights, inputs_too)


def test_registry_lists_every_source_and_builds_passes_by_name():
    names = all_passes()
    sources = {cls.source for cls in external_passes().values()}
    assert {"onnxoptimizer", "onnx-ir", "onnxscript", "onnxruntime", "fuseplan"} <= sources
    assert {"fix-input-shapes", "onnxoptimizer/fuse_bn_into_conv", "ort/all", "ort/all-without:ConvBNFusion",
            "fuseplan/fold-batchnorm", "onnxscript/FuseBatchNormIntoConv", "onnxscript/mul_by_1"} <= set(names)
    assert isinstance(make_pass("onnxoptimizer/fuse_bn_into_conv"), ExternalPass)
    with pytest.raises(FuseplanError, match="unknown pass 'onnxoptimizer/no_such_pass'"):
        make_pass("onnxoptimizer/no_such_pass")
    with pytest.raises(FuseplanError, match="unknown pass"):
        apply_pass("nowhere/nothing", conv_bn())


def test_an_onnxscript_rule_applies_where_its_pattern_and_condition_hold_and_refuses_elsewhere():
    from fuseplan.passes.verify import random_inputs, run

    model = normalise(conv_bn())
    fused = apply_pass("onnxscript/FuseBatchNormIntoConv", model)
    assert not fused.failed and fused.hash != graph_hash(model)
    assert [node.op_type for node in fused.model.graph.node] == ["Conv", "Relu", "Transpose"]
    feeds = random_inputs(model, 0)
    np.testing.assert_allclose(run(fused.model, feeds)["y"], run(model, feeds)["y"], rtol=1e-4, atol=1e-5)
    # a Transpose that moves axes matches the pattern of TransposeIdentity but not its condition
    swap = _model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], {"x": [1, 4, 8, 8]}, ["y"], {})
    kept = apply_pass("onnxscript/TransposeIdentity", swap)
    assert not kept.failed and kept.hash == graph_hash(swap)
    removed = apply_pass("onnxscript/TransposeIdentity", model)
    assert "Transpose" not in [node.op_type for node in removed.model.graph.node]


def test_an_onnxscript_rule_whose_output_operator_is_absent_is_skipped_with_the_result_a_full_run_gives(monkeypatch):
    import fuseplan.passes.external as external

    model = normalise(onnx.load(zoo.path("squeezenet")))
    rules = [name for name, cls in external_passes().items() if cls.source == "onnxscript"]
    shortcut = {name: apply_pass(name, model).hash for name in rules}
    monkeypatch.setattr(external, "_may_match", lambda rule, present: True)
    assert shortcut == {name: apply_pass(name, model).hash for name in rules}
    assert sum(h != graph_hash(model) for h in shortcut.values()) >= 1  # some rule does apply to squeezenet


def test_graph_hash_ignores_declared_intermediate_types_and_leaves_the_model_alone():
    model = conv_bn()
    assert len(model.graph.value_info) > 0
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    assert graph_hash(model) == graph_hash(bare)
    assert len(model.graph.value_info) > 0


def test_pruning_keeps_passes_that_change_the_graph_and_drops_those_that_do_not():
    names = ["onnxoptimizer/fuse_bn_into_conv", "onnxoptimizer/eliminate_nop_transpose",
             "onnxoptimizer/fuse_consecutive_squeezes", "onnxoptimizer/fuse_pad_into_conv", "ort/all",
             "ort/all-without:ConvBNFusion", "ort/all-without:AttentionFusion"]
    pruning = prune(normalise(conv_bn()), names)
    verdicts = pruning.verdicts
    assert verdicts["onnxoptimizer/eliminate_nop_transpose"].alone_changed
    assert verdicts["onnxoptimizer/fuse_bn_into_conv"].alone_changed
    # onnxruntime folds the BatchNormalization itself, unless ConvBNFusion is switched off
    assert verdicts["ort/all-without:ConvBNFusion"].relevant
    assert not verdicts["ort/all-without:AttentionFusion"].relevant
    assert set(pruning.irrelevant) == {"onnxoptimizer/fuse_consecutive_squeezes", "onnxoptimizer/fuse_pad_into_conv",
                                       "ort/all-without:AttentionFusion"}
    assert set(pruning.relevant) == set(names) - set(pruning.irrelevant)
    assert pruning.signature == "batchnorm"


def test_normalising_writes_default_attributes_out_and_takes_weights_off_the_inputs():
    model = normalise(conv_bn(inputs_too=True))
    conv = next(node for node in model.graph.node if node.op_type == "Conv")
    assert {"auto_pad", "group"} <= {attr.name for attr in conv.attribute}  # the attributes with a default
    assert [value.name for value in model.graph.input] == ["x"]
    # so these onnx-ir passes have nothing left to do, and the one that lists weights as inputs is not offered
    verdicts = prune(model, ["onnx-ir/AddDefaultAttributes", "onnx-ir/RemoveInitializersFromInputs"]).verdicts
    assert not any(verdict.relevant for verdict in verdicts.values())
    assert "onnx-ir/AddInitializersToInputs" not in external_passes()
    assert "onnxoptimizer/rename_input_output" not in external_passes()  # renames the inputs callers feed


def test_pruning_on_the_light_model_decides_as_on_the_model_holding_its_weights():
    model = normalise(conv_bn(channels=256))  # an 8x256x3x3 weight: 73 KB, over the light model's threshold
    with light_model(model) as (light, _):
        weight = next(init for init in light.graph.initializer if init.name == "w")
        assert weight.data_location == onnx.TensorProto.EXTERNAL and light.ByteSize() < 10_000
    names = ["onnxoptimizer/fuse_bn_into_conv", "onnxoptimizer/eliminate_nop_transpose",
             "onnxoptimizer/fuse_pad_into_conv", "onnx-ir/DeduplicateInitializers", "fuseplan/fold-batchnorm",
             "ort/all", "ort/all-without:ConvBNFusion", "ort/all-without:AttentionFusion"]
    light, heavy = prune(model, names), prune(model, names, light=False)
    assert light.verdicts["fuseplan/fold-batchnorm"].alone_changed  # it read the weight from the file
    assert light.verdicts["onnxoptimizer/fuse_bn_into_conv"].alone_changed
    assert light.verdicts["ort/all-without:ConvBNFusion"].relevant
    assert {n: (v.alone_changed, v.dropped_changed, v.error) for n, v in light.verdicts.items()} == \
        {n: (v.alone_changed, v.dropped_changed, v.error) for n, v in heavy.verdicts.items()}


def test_a_pass_that_does_nothing_alone_is_relevant_when_leaving_it_out_of_the_pipeline_changes_the_result():
    # onnxoptimizer fuses a BatchNormalization only when its parameters are not graph inputs as well
    # (normalise would remove them from the inputs, so the model is pruned as built).
    model = conv_bn(inputs_too=True)
    names = ["onnx-ir/RemoveInitializersFromInputs", "onnxoptimizer/fuse_bn_into_conv"]
    verdicts = prune(model, names).verdicts
    fuse = verdicts["onnxoptimizer/fuse_bn_into_conv"]
    assert fuse.alone_changed is False
    assert fuse.dropped_changed is True and fuse.relevant
    assert verdicts["onnx-ir/RemoveInitializersFromInputs"].alone_changed  # the graph's inputs change


def test_a_pass_that_throws_or_returns_an_invalid_model_is_recorded_as_failed_and_pruning_goes_on(monkeypatch):
    class Broken(ExternalPass):
        name, source = "test/broken", "test"

        def transform(self, model):
            result = onnx.ModelProto()
            result.CopyFrom(model)
            result.graph.node[0].input[0] = "nowhere"  # reads a value nothing defines
            return result

    class Throws(ExternalPass):
        name, source = "test/throws", "test"

        def transform(self, model):
            raise RuntimeError("native failure\nsecond line")

    monkeypatch.setitem(external_passes(), Broken.name, Broken)
    monkeypatch.setitem(external_passes(), Throws.name, Throws)
    pruning = prune(normalise(conv_bn()), ["test/broken", "test/throws", "onnxoptimizer/eliminate_nop_transpose"])
    assert pruning.failed == ["test/broken", "test/throws"]
    assert pruning.verdicts["test/throws"].error == "native failure"
    assert "nowhere" in pruning.verdicts["test/broken"].error
    assert pruning.relevant == ["onnxoptimizer/eliminate_nop_transpose"]


def _residual_block(depthwise: bool, se: bool, size: int = 8) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    weights = {"w": rng.standard_normal((8, 1 if depthwise else 8, 3, 3)), "w2": rng.standard_normal((8, 8, 1, 1))}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              group=8 if depthwise else 1)]
    last = "c"
    if se:
        nodes += [helper.make_node("GlobalAveragePool", ["c"], ["p"]),
                  helper.make_node("Conv", ["p", "w2"], ["q"], kernel_shape=[1, 1]),
                  helper.make_node("Sigmoid", ["q"], ["g"]),
                  helper.make_node("Mul", ["c", "g"], ["e"])]
        last = "e"
    nodes.append(helper.make_node("Add", ["x", last], ["y"]))
    return _model(nodes, {"x": [1, 8, size, size]}, ["y"], weights)


def _attention() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    weights = {"wq": rng.standard_normal((16, 16)), "wk": rng.standard_normal((16, 16)),
               "wv": rng.standard_normal((16, 16))}
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["a"], axis=-1),
             helper.make_node("MatMul", ["a", "v"], ["o"]), helper.make_node("Add", ["x", "o"], ["y"])]
    return _model(nodes, {"x": [1, 6, 16]}, ["y"], weights)


def test_architecture_signature_names_the_structures_the_graph_has():
    assert architecture_signature(_residual_block(False, False)) == "residual"
    assert architecture_signature(_residual_block(True, True)) == "depthwise+residual+squeeze-excite"
    assert architecture_signature(_attention()) == "attention+residual"
    assert architecture_signature(conv_bn()) == "batchnorm"
    assert architecture_signature(normalise(onnx.load(zoo.path("squeezenet")))) == "concat-branches"
    assert architecture_signature(normalise(onnx.load(zoo.path("resnet18")))) == "residual"


def test_pruning_is_cached_by_signature(tmp_path):
    names = ["onnxoptimizer/eliminate_nop_transpose", "onnxoptimizer/fuse_consecutive_squeezes"]
    first = cached_prune(normalise(_residual_block(False, False)), tmp_path, names)
    assert not first.cached and len(list(tmp_path.rglob("*.json"))) == 1
    # another model of the same class reuses the decision
    second = cached_prune(normalise(_residual_block(False, False, size=16)), tmp_path, names)
    assert second.cached and second.relevant == first.relevant and second.signature == "residual"
    third = cached_prune(normalise(conv_bn()), tmp_path, names)  # another class: pruned afresh
    assert not third.cached and len(list(tmp_path.rglob("*.json"))) == 2
