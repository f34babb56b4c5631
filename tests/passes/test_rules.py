"""Each substitution rule: equivalence on random shapes (checked with onnxruntime), and its refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnx_ir", reason="the rewrite extra is not installed")
pytest.importorskip("onnxruntime", reason="the rewrite extra is not installed")

import onnx_ir as ir  # noqa: E402

from fuseplan.passes import InferShapes  # noqa: E402
from fuseplan.passes.rewrite import apply_substitution  # noqa: E402
from fuseplan.passes.rules import RULES, RuleRefused  # noqa: E402
from fuseplan.passes.verify import Verifier  # noqa: E402

PROPERTY = settings(max_examples=12, deadline=None)


def _model(nodes, inputs, outputs, weights, opset=17) -> onnx.ModelProto:
    """A model with shapes inferred; ``inputs`` maps names to shapes, ``weights`` names to arrays."""
    graph = helper.make_graph(
        nodes, "rule_case",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in weights.items()])
    return InferShapes().transform(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def _w(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _sites(rule: str, model: onnx.ModelProto):
    return RULES[rule].sites(ir.from_proto(model))


def _refusals(rule: str, model: onnx.ModelProto):
    return RULES[rule].refusals(ir.from_proto(model))


def _apply_and_verify(model, rule, site=None):
    """Apply ``rule`` at its (first) site; the rewritten model and the verification of it."""
    sites = _sites(rule, model)
    assert sites, _refusals(rule, model)
    site = site or sites[0]
    rewritten = apply_substitution(model, rule, site)
    onnx.checker.check_model(rewritten, full_check=True)
    verification = Verifier(model, seed=0).check([{"rule": rule, "site": list(site)}])
    assert verification.passed, verification
    return rewritten


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _conv(name, x, w, out, **attrs):
    return helper.make_node("Conv", [x, w], [out], name=name, **attrs)


# --- enlarge-conv-kernel ---------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(1, 6), st.integers(1, 6), st.integers(3, 9), st.integers(1, 2), st.integers(0, 1), st.integers())
def test_enlarge_conv_kernel_keeps_the_output(c, o, size, stride, pad, seed):
    rng = np.random.default_rng(seed % 2**32)
    model = _model([_conv("c", "x", "w", "y", kernel_shape=[1, 1], strides=[stride] * 2, pads=[pad] * 4)],
                   {"x": [1, c, size, size]}, ["y"], {"w": _w(rng, o, c, 1, 1)})
    rewritten = _apply_and_verify(model, "enlarge-conv-kernel")
    conv = rewritten.graph.node[0]
    attrs = {a.name: list(a.ints) for a in conv.attribute}
    assert attrs["kernel_shape"] == [3, 3] and attrs["pads"] == [pad + 1] * 4


@pytest.mark.parametrize("attrs, shape, reason", [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (4, 4, 3, 3), "not 1x1"),
    ({"kernel_shape": [1, 1], "group": 2}, (4, 2, 1, 1), "grouped"),
    ({"kernel_shape": [1, 1], "dilations": [2, 2]}, (4, 4, 1, 1), "dilated"),
    ({"kernel_shape": [1, 1], "pads": [0, 0, 1, 1]}, (4, 4, 1, 1), "asymmetric pads"),
])
def test_enlarge_conv_kernel_refuses(attrs, shape, reason):
    model = _model([_conv("c", "x", "w", "y", **attrs)], {"x": [1, 4, 6, 6]}, ["y"],
                   {"w": np.ones(shape, np.float32)})
    assert not _sites("enlarge-conv-kernel", model)
    assert reason in _refusals("enlarge-conv-kernel", model)[("y",)]
    with pytest.raises(RuleRefused, match=reason):
        apply_substitution(model, "enlarge-conv-kernel", ["y"])


def test_rules_refuse_unknown_shapes():
    graph = helper.make_graph([_conv("c", "x", "w", "y", kernel_shape=[1, 1])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for rule in ("enlarge-conv-kernel", "split-conv-by-channels"):
        assert _refusals(rule, model)[("y",)] == "its input or output shape is unknown"


# --- merge-parallel-convs ----------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.sampled_from([1, 3]), st.integers(1, 2),
       st.booleans(), st.integers())
def test_merge_parallel_convs_keeps_both_outputs(c, oa, ob, k, stride, bias, seed):
    rng = np.random.default_rng(seed % 2**32)
    attrs = dict(kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4)
    weights = {"wa": _w(rng, oa, c, k, k), "wb": _w(rng, ob, c, k, k)}
    nodes = [_conv("a", "x", "wa", "ya", **attrs), _conv("b", "x", "wb", "yb", **attrs)]
    if bias:  # one bias only: the other convolution's is zero
        weights["ba"] = _w(rng, oa)
        nodes[0].input.append("ba")
    model = _model([*nodes, helper.make_node("Relu", ["yb"], ["rb"])], {"x": [1, c, 7, 7]}, ["ya", "rb"], weights)
    rewritten = _apply_and_verify(model, "merge-parallel-convs")
    assert _ops(rewritten).count("Conv") == 1 and "Split" in _ops(rewritten)


def test_merge_parallel_convs_on_an_old_opset_uses_the_split_attribute():
    rng = np.random.default_rng(0)
    nodes = [_conv("a", "x", "wa", "ya", kernel_shape=[1, 1]), _conv("b", "x", "wb", "yb", kernel_shape=[1, 1])]
    model = _model(nodes, {"x": [1, 3, 5, 5]}, ["ya", "yb"], {"wa": _w(rng, 2, 3, 1, 1), "wb": _w(rng, 4, 3, 1, 1)},
                   opset=11)
    rewritten = _apply_and_verify(model, "merge-parallel-convs")
    split = next(n for n in rewritten.graph.node if n.op_type == "Split")
    assert [list(a.ints) for a in split.attribute if a.name == "split"] == [[2, 4]]


@pytest.mark.parametrize("b_attrs, b_shape, reason", [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (4, 4, 3, 3), "differ"),
    ({"kernel_shape": [1, 1], "strides": [2, 2]}, (4, 4, 1, 1), "differ"),
    ({"kernel_shape": [1, 1], "group": 2}, (4, 2, 1, 1), "grouped"),
])
def test_merge_parallel_convs_refuses(b_attrs, b_shape, reason):
    nodes = [_conv("a", "x", "wa", "ya", kernel_shape=[1, 1]), _conv("b", "x", "wb", "yb", **b_attrs)]
    model = _model(nodes, {"x": [1, 4, 6, 6]}, ["ya", "yb"],
                   {"wa": np.ones((4, 4, 1, 1), np.float32), "wb": np.ones(b_shape, np.float32)})
    assert not _sites("merge-parallel-convs", model)
    assert reason in _refusals("merge-parallel-convs", model)[("ya", "yb")]


# --- fuse-conv-add -----------------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(1, 5), st.integers(1, 5), st.sampled_from([1, 3, 5]), st.booleans(), st.integers())
def test_fuse_conv_add_keeps_the_sum(c, o, k, conv_first, seed):
    rng = np.random.default_rng(seed % 2**32)
    nodes = [_conv("c", "x", "w", "y", kernel_shape=[k, k], pads=[k // 2] * 4),
             _conv("side", "x", "ws", "s", kernel_shape=[1, 1]),
             helper.make_node("Add", ["y", "s"] if conv_first else ["s", "y"], ["z"], name="add")]
    model = _model(nodes, {"x": [1, c, 6, 6]}, ["z"], {"w": _w(rng, o, c, k, k), "ws": _w(rng, o, c, 1, 1)})
    site = next(s for s in _sites("fuse-conv-add", model) if s[0] == "y")
    rewritten = _apply_and_verify(model, "fuse-conv-add", site)
    assert "Add" not in _ops(rewritten) and "Concat" in _ops(rewritten)


@pytest.mark.parametrize("case, reason", [
    ("strided", "strided"),
    ("computed-from-conv", "other readers"),
    ("other-readers", "other readers"),
    ("broadcast", "broadcasting"),
])
def test_fuse_conv_add_refuses(case, reason):
    w = {"w": np.ones((4, 4, 1, 1), np.float32)}
    conv = _conv("c", "x", "w", "y", kernel_shape=[1, 1], strides=[2, 2] if case == "strided" else [1, 1])
    outputs = ["z"]
    if case == "strided":
        nodes = [conv, helper.make_node("MaxPool", ["x"], ["s"], kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Add", ["y", "s"], ["z"])]
    elif case == "computed-from-conv":
        nodes = [conv, helper.make_node("Relu", ["y"], ["s"]), helper.make_node("Add", ["y", "s"], ["z"])]
    elif case == "other-readers":
        nodes = [conv, helper.make_node("Add", ["y", "x"], ["z"])]
        outputs = ["z", "y"]
    else:
        w["b"] = np.ones((1, 4, 1, 1), np.float32)
        nodes = [conv, helper.make_node("Add", ["y", "b"], ["z"])]
    model = _model(nodes, {"x": [1, 4, 6, 6]}, outputs, w)
    assert not _sites("fuse-conv-add", model)
    assert reason in _refusals("fuse-conv-add", model)[("y", "z")]


# --- split-conv-by-channels --------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(1, 5), st.integers(2, 9), st.sampled_from([1, 3]), st.booleans(), st.integers())
def test_split_conv_by_channels_keeps_the_output(c, o, k, bias, seed):
    rng = np.random.default_rng(seed % 2**32)
    conv = _conv("c", "x", "w", "y", kernel_shape=[k, k], pads=[k // 2] * 4)
    weights = {"w": _w(rng, o, c, k, k)}
    if bias:
        conv.input.append("b")
        weights["b"] = _w(rng, o)
    rewritten = _apply_and_verify(_model([conv], {"x": [1, c, 5, 5]}, ["y"], weights), "split-conv-by-channels")
    assert _ops(rewritten).count("Conv") == 2 and "Concat" in _ops(rewritten)
    assert rewritten.graph.output[0].name == "y"


def test_split_conv_by_channels_refuses():
    grouped = _model([_conv("c", "x", "w", "y", kernel_shape=[1, 1], group=2)], {"x": [1, 4, 4, 4]}, ["y"],
                     {"w": np.ones((4, 2, 1, 1), np.float32)})
    single = _model([_conv("c", "x", "w", "y", kernel_shape=[1, 1])], {"x": [1, 4, 4, 4]}, ["y"],
                    {"w": np.ones((1, 4, 1, 1), np.float32)})
    assert _refusals("split-conv-by-channels", grouped)[("y",)] == "grouped convolution"
    assert _refusals("split-conv-by-channels", single)[("y",)] == "fewer than two output channels"


# --- merge-concat-of-splits --------------------------------------------------------------------------------------

@PROPERTY
@given(st.lists(st.integers(1, 4), min_size=2, max_size=4), st.sampled_from([1, 2, -1]), st.integers())
def test_merge_concat_of_splits_gives_the_input_back(sizes, axis, seed):
    shape = [1, 3, 4, 5]
    shape[axis] = sum(sizes)
    outs = [f"p{k}" for k in range(len(sizes))]
    nodes = [helper.make_node("Split", ["x", "sizes"], outs, axis=axis),
             helper.make_node("Concat", outs, ["y"], axis=axis),
             helper.make_node("Relu", ["y"], ["z"])]
    model = _model(nodes, {"x": shape}, ["z"], {"sizes": np.array(sizes, np.int64)})
    rewritten = _apply_and_verify(model, "merge-concat-of-splits")
    assert _ops(rewritten) == ["Relu"]


def test_merge_concat_of_splits_refuses_another_order_or_axis():
    for concat_inputs, axis in ((["p1", "p0"], 1), (["p0", "p1"], 2)):
        nodes = [helper.make_node("Split", ["x", "sizes"], ["p0", "p1"], axis=1),
                 helper.make_node("Concat", concat_inputs, ["y"], axis=axis)]
        model = _model(nodes, {"x": [1, 4, 4, 4]}, ["y"], {"sizes": np.array([2, 2], np.int64)})
        assert not _sites("merge-concat-of-splits", model)
        assert _refusals("merge-concat-of-splits", model)


# --- fold-batchnorm ----------------------------------------------------------------------------------------------

@PROPERTY
@given(st.integers(1, 5), st.integers(1, 6), st.sampled_from([1, 3]), st.integers(1, 2), st.integers())
def test_fold_batchnorm_keeps_the_output(c, o, k, group_choice, seed):
    rng = np.random.default_rng(seed % 2**32)
    group = c if group_choice == 2 and o % c == 0 else 1  # depthwise-style groups fold as well
    conv = _conv("c", "x", "w", "y", kernel_shape=[k, k], pads=[k // 2] * 4, group=group)
    bn = helper.make_node("BatchNormalization", ["y", "g", "b", "m", "v"], ["z"], epsilon=1e-3)
    weights = {"w": _w(rng, o, c // group, k, k), "g": _w(rng, o), "b": _w(rng, o), "m": _w(rng, o),
               "v": rng.uniform(0.5, 2, o).astype(np.float32)}
    rewritten = _apply_and_verify(_model([conv, bn], {"x": [1, c, 5, 5]}, ["z"], weights), "fold-batchnorm")
    assert _ops(rewritten) == ["Conv"]


def test_fold_batchnorm_refuses_a_shared_convolution_output():
    rng = np.random.default_rng(0)
    nodes = [_conv("c", "x", "w", "y", kernel_shape=[1, 1]),
             helper.make_node("BatchNormalization", ["y", "g", "b", "m", "v"], ["z"])]
    weights = {"w": _w(rng, 2, 2, 1, 1), **{n: np.ones(2, np.float32) for n in "gbmv"}}
    model = _model(nodes, {"x": [1, 2, 3, 3]}, ["z", "y"], weights)
    assert _refusals("fold-batchnorm", model)[("y", "z")] == "the convolution's output has other readers"


# --- drop-identity-like ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("node", [
    helper.make_node("Identity", ["r"], ["i"]),
    helper.make_node("Dropout", ["r"], ["i"]),
    helper.make_node("Transpose", ["r"], ["i"], perm=[0, 1, 2, 3]),
    helper.make_node("Cast", ["r"], ["i"], to=TensorProto.FLOAT),
    helper.make_node("Reshape", ["r", "same"], ["i"]),
], ids=["identity", "dropout", "transpose", "cast", "reshape"])
def test_drop_identity_like_removes_the_node(node):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), node, helper.make_node("Sigmoid", ["i"], ["y"])]
    model = _model(nodes, {"x": [1, 2, 3, 4]}, ["y"], {"same": np.array([1, 2, 3, 4], np.int64)})
    rewritten = _apply_and_verify(model, "drop-identity-like")
    assert _ops(rewritten) == ["Relu", "Sigmoid"]


def test_drop_identity_like_keeps_a_model_output_name():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])]
    rewritten = _apply_and_verify(_model(nodes, {"x": [1, 2]}, ["y"], {}), "drop-identity-like")
    assert _ops(rewritten) == ["Relu"] and rewritten.graph.output[0].name == "y"


@pytest.mark.parametrize("node, reason", [
    (helper.make_node("Transpose", ["r"], ["i"], perm=[0, 1, 3, 2]), "moves axes"),
    (helper.make_node("Reshape", ["r", "flat"], ["i"]), "changes the shape"),
    (helper.make_node("Cast", ["r"], ["i"], to=TensorProto.DOUBLE), "changes the type"),
])
def test_drop_identity_like_refuses(node, reason):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), node, helper.make_node("Abs", ["i"], ["y"])]
    model = _model(nodes, {"x": [1, 2, 3, 3]}, ["y"], {"flat": np.array([1, 18], np.int64)})
    assert reason in _refusals("drop-identity-like", model)[("i",)]


# --- verification catches a wrong rewrite ------------------------------------------------------------------------

def test_verification_fails_a_rewrite_that_changes_the_result(monkeypatch):
    from fuseplan.passes.rules import conv as conv_rules

    rng = np.random.default_rng(0)
    model = _model([_conv("c", "x", "w", "y", kernel_shape=[1, 1])], {"x": [1, 3, 5, 5]}, ["y"],
                   {"w": _w(rng, 4, 3, 1, 1)})
    original = conv_rules._weights
    monkeypatch.setattr(conv_rules, "_weights", lambda node: original(node) * 1.001)  # a 0.1% weight error
    verification = Verifier(model, seed=0).check([{"rule": "enlarge-conv-kernel", "site": ["y"]}])
    assert not verification.passed and verification.max_error > 1e-4


def test_stripped_weights_stay_stripped_and_verify_with_random_values():
    model = _model([_conv("c", "x", "w", "y", kernel_shape=[1, 1]),
                    _conv("d", "x", "w2", "y2", kernel_shape=[1, 1])], {"x": [1, 3, 5, 5]}, ["y", "y2"],
                   {"w": np.ones((4, 3, 1, 1), np.float32), "w2": np.ones((2, 3, 1, 1), np.float32)})
    for init in model.graph.initializer:
        init.ClearField("raw_data")
        init.ClearField("float_data")
    rewritten = apply_substitution(model, "merge-parallel-convs", ["y", "y2"])
    merged = next(i for i in rewritten.graph.initializer if list(i.dims) == [6, 3, 1, 1])
    assert not merged.raw_data and not merged.float_data
    assert Verifier(model, seed=3).check([{"rule": "merge-parallel-convs", "site": ["y", "y2"]}]).passed
