"""A structural hash of an ONNX graph that ignores the names of values and nodes.

Each value gets a label built from what defines it: a graph input from its
position and type, an initializer from its element type and shape (not its
data: weight-stripped models have none), a node output from the node's
domain, operator type, attributes, the labels of its inputs and the output's
position. Labels are combined in topological order, so two graphs that differ
only in names or in node order hash alike, and any change to an operator,
an attribute, an edge, an initializer's shape or type, or a declared value
type changes the hash.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import onnx

from fuseplan.passes.order import topological_order


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _type_label(value_type: onnx.TypeProto) -> tuple:
    tensor_type = value_type.tensor_type
    if not tensor_type.HasField("shape"):
        return (tensor_type.elem_type, None)
    dims = tuple(d.dim_value if d.HasField("dim_value") else "?" for d in tensor_type.shape.dim)
    return (tensor_type.elem_type, dims)


def _tensor_label(tensor: onnx.TensorProto) -> tuple:
    # Constants inside attributes are part of the computation; their bytes count.
    payload = hashlib.sha256(tensor.raw_data or onnx.numpy_helper.to_array(tensor).tobytes()).hexdigest() \
        if tensor.data_location == onnx.TensorProto.DEFAULT else "external"
    return ("tensor", tensor.data_type, tuple(tensor.dims), payload)


def _attribute_label(attr: onnx.AttributeProto, outer: dict[str, str]) -> tuple:
    kind = attr.type
    if kind == onnx.AttributeProto.GRAPH:
        value: object = _graph_hash(attr.g, outer)
    elif kind == onnx.AttributeProto.GRAPHS:
        value = tuple(_graph_hash(g, outer) for g in attr.graphs)
    elif kind == onnx.AttributeProto.TENSOR:
        value = _tensor_label(attr.t)
    elif kind == onnx.AttributeProto.TENSORS:
        value = tuple(_tensor_label(t) for t in attr.tensors)
    elif kind == onnx.AttributeProto.SPARSE_TENSOR:
        value = attr.sparse_tensor.SerializeToString(deterministic=True)
    else:
        value = onnx.helper.get_attribute_value(attr)
        if isinstance(value, list):
            value = tuple(value)
    return (attr.name, kind, value)


def _graph_hash(graph: onnx.GraphProto, outer: dict[str, str] | None = None) -> str:
    """The hash of ``graph``; ``outer`` labels values of enclosing graphs that a subgraph reads."""
    labels: dict[str, str] = dict(outer or {})
    declared = {v.name: _type_label(v.type) for v in [*graph.input, *graph.value_info, *graph.output]}
    initializer_names = {init.name for init in graph.initializer}
    position = 0
    for value in graph.input:
        if value.name in initializer_names:
            continue
        labels[value.name] = _digest("input", position, declared[value.name])
        position += 1
    for init in graph.initializer:
        labels[init.name] = _digest("initializer", init.data_type, tuple(init.dims))
    nodes = list(graph.node)
    node_labels: list[str] = []
    for i in topological_order(nodes, labels):
        node = nodes[i]
        attributes = tuple(sorted((_attribute_label(a, labels) for a in node.attribute), key=lambda a: a[0]))
        # A name nothing defines (an outer-scope value of a subgraph, or a dangling input) keeps its name.
        inputs = tuple(labels.get(x, f"free:{x}") if x else "" for x in node.input)
        node_label = _digest("node", node.domain or "ai.onnx", node.op_type, attributes, inputs)
        node_labels.append(node_label)
        for slot, out in enumerate(node.output):
            if out:
                labels[out] = _digest(node_label, slot, declared.get(out))
    outputs = tuple(labels.get(v.name, f"free:{v.name}") for v in graph.output)
    return _digest("graph", sorted(Counter(node_labels).items()), outputs)


def structural_hash(model: onnx.ModelProto) -> str:
    """A 16-hex-digit digest of ``model``'s graph, independent of value and node names and node order."""
    opsets = sorted((imp.domain or "ai.onnx", imp.version) for imp in model.opset_import)
    return _digest(opsets, _graph_hash(model.graph))[:16]
