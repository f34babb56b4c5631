"""Small hand-built ONNX models for tests, in the styles of different exporters."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _value(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _const(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name + "_value"))


def two_convs(c0: int = 8, c1: int = 32, c2: int = 32, size: int = 16) -> onnx.ModelProto:
    """The worked example of docs/cost-models.md: two stacked 3x3 convolutions."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((c1, c0, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(c1).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((c2, c1, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(c2).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["y1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["y1", "w2", "b2"], ["y2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(nodes, "two_convs", [_value("x", [1, c0, size, size])],
                              [_value("y2", [1, c2, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def legacy_style(batch: int | str = 1) -> onnx.ModelProto:
    """An old-exporter-style net: weights from Constant nodes, Identity aliases and graph inputs;
    LRN, Dropout, Sum, an unfolded BatchNormalization and a Reshape/Transpose channel shuffle."""
    rng = np.random.default_rng(1)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)  # Constant node
    w2 = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)  # graph input + initializer
    w3 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)  # Identity of an initializer
    bn = [rng.random(8).astype(np.float32) + 0.5 for _ in range(4)]
    nodes = [
        _const("w1", w1),
        helper.make_node("Identity", ["w3_raw"], ["w3"], name="alias_w3"),
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("LRN", ["r1"], ["n1"], name="lrn1", size=5),
        helper.make_node("Dropout", ["n1"], ["d1"], name="drop1"),
        helper.make_node("Conv", ["d1", "w2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn_s", "bn_b", "bn_m", "bn_v"], ["b2"], name="bn2"),
        helper.make_node("Conv", ["d1", "w3"], ["c3"], name="conv3", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Sum", ["b2", "c3", "d1"], ["s"], name="sum"),
        # Channel shuffle with 2 groups; its shape tensors come from a constant subgraph.
        helper.make_node("Shape", ["s"], ["s_shape"], name="shape"),
        _const("split_shape", np.array([1, 2, 4, 16, 16], dtype=np.int64)),
        helper.make_node("ConstantOfShape", ["one"], ["unused_fill"], name="fill"),
        helper.make_node("Reshape", ["s", "split_shape"], ["s5"], name="shuffle_reshape"),
        helper.make_node("Transpose", ["s5"], ["t5"], name="shuffle_transpose", perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t5", "s_shape"], ["y"], name="shuffle_back"),
    ]
    inits = [
        numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(w3, "w3_raw"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
        *[numpy_helper.from_array(a, n) for a, n in zip(bn, ["bn_s", "bn_b", "bn_m", "bn_v"])],
    ]
    inputs = [_value("x", [batch, 3, 16, 16]), _value("w2", [8, 8, 1, 1])]
    graph = helper.make_graph(nodes, "legacy_style", inputs, [_value("y", [batch, 8, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    return model


def with_unknown_op() -> onnx.ModelProto:
    """A conv followed by an operator no fusion scheme knows about."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), dtype=np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Celu", ["c"], ["a"], name="known"),
        helper.make_node("MyCustomOp", ["a"], ["y"], name="mystery", domain="com.example"),
    ]
    graph = helper.make_graph(nodes, "unknown_op", [_value("x", [1, 3, 8, 8])], [_value("y", [1, 4, 8, 8])], [w])
    graph.value_info.append(_value("a", [1, 4, 8, 8]))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def conv_bn_prelu(channels: int = 24, size: int = 20) -> onnx.ModelProto:
    """Two 3x3 convolutions, each followed by an unfolded BatchNormalization and a PRelu of one slope per
    channel, then a 1x1 convolution: per-channel constants riding on convolutions (the zoo folds BN away).
    The maps are ``size`` wide and the channels another number, so a constant broadcast along the wrong axis
    fails or computes other values."""
    rng = np.random.default_rng(2)
    inits = []
    nodes = []
    x, c_in = "x", 8
    for i in (1, 2):
        names = [f"{part}{i}" for part in ("w", "b", "bn_scale", "bn_bias", "bn_mean", "bn_var", "slope")]
        values = [(rng.standard_normal((channels, c_in, 3, 3)) / np.sqrt(9 * c_in)).astype(np.float32),
                  rng.standard_normal(channels).astype(np.float32),
                  rng.random(channels).astype(np.float32) + 0.5, rng.standard_normal(channels).astype(np.float32),
                  rng.standard_normal(channels).astype(np.float32), rng.random(channels).astype(np.float32) + 0.5,
                  (rng.random((channels, 1, 1)) * 0.5).astype(np.float32)]
        inits += [numpy_helper.from_array(value, name) for name, value in zip(names, values)]
        nodes += [
            helper.make_node("Conv", [x, names[0], names[1]], [f"c{i}"], name=f"conv{i}", kernel_shape=[3, 3],
                             pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"c{i}", *names[2:6]], [f"n{i}"], name=f"bn{i}", epsilon=1e-3),
            helper.make_node("PRelu", [f"n{i}", names[6]], [f"p{i}"], name=f"prelu{i}"),
        ]
        x, c_in = f"p{i}", channels
    inits.append(numpy_helper.from_array(rng.standard_normal((16, channels, 1, 1)).astype(np.float32), "w3"))
    nodes.append(helper.make_node("Conv", [x, "w3"], ["y"], name="conv3", kernel_shape=[1, 1]))
    graph = helper.make_graph(nodes, "conv_bn_prelu", [_value("x", [1, 8, size, size])],
                              [_value("y", [1, 16, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
