"""One-operator ONNX models with real weights, for the lone mapper's and the lone executor's tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fuseplan.graph import CompGraph
from fuseplan.graph.onnx_import import graph_from_model


def _value(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _model(nodes, inputs, outputs, weights) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(array, name) for name, array in weights.items()]
    graph = helper.make_graph(nodes, "layer", [_value(n, s) for n, s in inputs], [_value(n, s) for n, s in outputs],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - (kernel - 1) * dilation - 1) // stride + 1


def conv(c_in: int, c_out: int, size: int, kernel: int = 3, stride: int = 1, pad: int = 1, dilation: int = 1,
         groups: int = 1, bias: bool = True, relu: bool = False, seed: int = 0, width: int | None = None,
         batch: int = 1):
    """A Conv (and a Relu after it): (model, graph, weights in the Conv's input order)."""
    rng = np.random.default_rng(seed)
    width = size if width is None else width
    w = rng.standard_normal((c_out, c_in // groups, kernel, kernel)).astype(np.float32)
    weights = {"w": w}
    names = ["x", "w"]
    if bias:
        weights["b"] = rng.standard_normal(c_out).astype(np.float32)
        names.append("b")
    h_out, w_out = _out(size, kernel, stride, pad, dilation), _out(width, kernel, stride, pad, dilation)
    nodes = [helper.make_node("Conv", names, ["y"], name="conv", kernel_shape=[kernel, kernel],
                              strides=[stride, stride], pads=[pad] * 4, dilations=[dilation, dilation], group=groups)]
    last = "y"
    if relu:
        nodes.append(helper.make_node("Relu", ["y"], ["r"], name="relu"))
        last = "r"
    model = _model(nodes, [("x", (batch, c_in, size, width))], [(last, (batch, c_out, h_out, w_out))], weights)
    return model, graph_from_model(model, "conv"), [weights[n] for n in names[1:]]


def pool(op_type: str, channels: int, size: int, kernel: int, stride: int, pad: int = 0, **attrs):
    """A MaxPool or AveragePool: (model, graph, [])."""
    h_out = _out(size, kernel, stride, pad, 1)
    if attrs.get("ceil_mode") and (size + 2 * pad - kernel) % stride:
        h_out += 1
    node = helper.make_node(op_type, ["x"], ["y"], name="pool", kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=[pad] * 4, **attrs)
    model = _model([node], [("x", (1, channels, size, size))], [("y", (1, channels, h_out, h_out))], {})
    return model, graph_from_model(model, "pool"), []


def matmul(m: int, k: int, n: int, batch: tuple[int, ...] = (), weight: bool = True, seed: int = 0):
    """A MatMul of (batch..., m, k) by a (k, n) weight, or by a (batch..., k, n) activation."""
    rng = np.random.default_rng(seed)
    if weight:
        weights = {"w": rng.standard_normal((k, n)).astype(np.float32)}
        node = helper.make_node("MatMul", ["a", "w"], ["y"], name="matmul")
        model = _model([node], [("a", (*batch, m, k))], [("y", (*batch, m, n))], weights)
        return model, graph_from_model(model, "matmul"), [weights["w"]]
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="matmul")
    model = _model([node], [("a", (*batch, m, k)), ("b", (*batch, k, n))], [("y", (*batch, m, n))], {})
    return model, graph_from_model(model, "matmul"), []


def gemm(m: int, k: int, n: int, trans_b: bool = True, seed: int = 0):
    """A Gemm with a weight and a bias: (model, graph, [weight, bias])."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node("Gemm", ["a", "w", "b"], ["y"], name="gemm", transB=int(trans_b))
    model = _model([node], [("a", (m, k))], [("y", (m, n))], {"w": w, "b": b})
    return model, graph_from_model(model, "gemm"), [w, b]


def node_graph(model: onnx.ModelProto) -> CompGraph:
    return graph_from_model(model, "layer")


def single(op_type: str, input_shapes, output_shapes, constants=(), **attrs):
    """One node of ``op_type`` on activations of ``input_shapes`` (and integer ``constants`` after them)."""
    inputs = [f"x{i}" for i in range(len(input_shapes))]
    outputs = [f"y{i}" for i in range(len(output_shapes))]
    weights = {f"c{i}": np.asarray(value) for i, value in enumerate(constants)}
    node = helper.make_node(op_type, inputs + list(weights), outputs, name=op_type.lower(), **attrs)
    model = _model([node], list(zip(inputs, input_shapes)), list(zip(outputs, output_shapes)), weights)
    return model, graph_from_model(model, op_type.lower()), []
