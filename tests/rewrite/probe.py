"""The 17-operator probe on which an unbounded relaxed rewrite search kept growing: parallel 1x1 convolutions,
a 1x1 convolution beside a 3x3 one, and a convolution with BatchNormalization and a skip connection.

Built with onnx.helper (seeded weights), so tests and benchmarks need no file.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIDE = 56  # spatial size: at 64 KB of buffer most of these convolutions do not fit whole


def probe_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []

    def conv(name: str, source: str, channels_in: int, channels_out: int, kernel: int) -> str:
        fan_in = channels_in * kernel * kernel
        weight = (rng.standard_normal((channels_out, channels_in, kernel, kernel)) / np.sqrt(fan_in)).astype(np.float32)
        weights.append(numpy_helper.from_array(weight, f"{name}.weight"))
        weights.append(numpy_helper.from_array(rng.standard_normal(channels_out).astype(np.float32) * 0.1,
                                               f"{name}.bias"))
        pad = kernel // 2
        nodes.append(helper.make_node("Conv", [source, f"{name}.weight", f"{name}.bias"], [name], name=name,
                                      kernel_shape=[kernel, kernel], pads=[pad] * 4))
        return name

    def op(kind: str, name: str, inputs: list[str], **attributes) -> str:
        nodes.append(helper.make_node(kind, inputs, [name], name=name, **attributes))
        return name

    stem = op("Relu", "stem_relu", [conv("stem", "input", 16, 32, 3)])
    # parallel 1x1 convolutions reading one tensor
    branches = [conv(f"branch{k}", stem, 32, 16, 1) for k in range(3)]
    joined = conv("join", op("Concat", "concat", branches, axis=1), 48, 32, 1)
    # a 1x1 convolution beside a 3x3 one
    side = op("Relu", "side_relu", [op("Add", "side_add", [conv("side1x1", joined, 32, 32, 1),
                                                             conv("side3x3", joined, 32, 32, 3)])])
    # convolution, BatchNormalization, skip connection
    for parameter, values in (("scale", rng.uniform(0.5, 1.5, 32)), ("shift", rng.standard_normal(32) * 0.1),
                              ("mean", rng.standard_normal(32) * 0.1), ("var", rng.uniform(0.5, 1.5, 32))):
        weights.append(numpy_helper.from_array(values.astype(np.float32), f"bn.{parameter}"))
    normalised = op("BatchNormalization", "bn", [conv("body", side, 32, 32, 3), "bn.scale", "bn.shift", "bn.mean",
                                                 "bn.var"])
    merged = op("Relu", "skip_relu", [op("Add", "skip_add", [normalised, side])])
    op("GlobalAveragePool", "output", [conv("head", merged, 32, 64, 1)])
    graph = helper.make_graph(nodes, "probe17", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                [1, 16, SIDE, SIDE])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 64, 1, 1])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="fuseplan-tests")
    onnx.checker.check_model(model)
    assert len(model.graph.node) == 17
    return model
