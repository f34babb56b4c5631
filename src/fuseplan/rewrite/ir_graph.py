"""The planner's :class:`~fuseplan.graph.CompGraph` of an onnx-ir model, read without serialising it.

A rewrite search prices thousands of candidate graphs, each an onnx-ir
model. Serialising each to ONNX and importing it with
:func:`~fuseplan.graph.onnx_import.graph_from_model` cost more than the
substitution itself; :func:`graph_from_ir` reads the onnx-ir graph
directly and gives the same graph. It handles the models a rewrite search
sees (prepared: shapes known) and folds what the importer folds (``Constant``,
``Shape`` and ``Size`` nodes and nodes reading only constants), and returns
``None`` for anything else the importer would treat specially (an alias
node left over, a node without a name or with a duplicate one, an unused
output or operator, a weight passed as a model input, a ``Pad``, an
operator outside the standard domain, a value whose shape is not static),
so the caller imports the serialised model instead. Tests compare the two
on every rule's candidates over several zoo models.
"""

from __future__ import annotations

from collections.abc import Collection
from math import prod
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from fuseplan.graph.ir import CompGraph, OpNode, Tensor
from fuseplan.graph.onnx_import import _SOURCE_OPS, FLOAT_TYPES
from fuseplan.graph.ops import PARAMETER_SLOTS, WEIGHT_SLOTS, operator_macs, row_geometry
from fuseplan.passes.prepare import ALIAS_OPS

_LEFT_TO_IMPORTER = ALIAS_OPS | {"Pad"}  # aliases are resolved by the importer, a Pad's pads read from constants
_STATIC_SOURCES = _SOURCE_OPS | {"Constant"}  # folded by the importer, as is any node reading only constants


def _static_shape(value: ir.Value) -> tuple[int, ...] | None:
    shape = value.shape
    if shape is None:
        return None
    dims = tuple(shape)
    return dims if all(isinstance(d, int) and d > 0 for d in dims) else None


def _attribute_value(attr: Any) -> Any:
    """The value :func:`fuseplan.passes.prepare.node_attributes` reads from the serialised attribute."""
    kind = attr.type
    value = attr.value
    if kind == ir.AttributeType.FLOAT:
        return float(np.float32(value))  # what a float attribute holds once serialised
    if kind == ir.AttributeType.FLOATS:
        return [float(np.float32(v)) for v in value]
    if kind in (ir.AttributeType.INT, ir.AttributeType.STRING):
        return value
    if kind in (ir.AttributeType.INTS, ir.AttributeType.STRINGS):
        return list(value)
    return _UNSUPPORTED


_UNSUPPORTED = object()
_SKIPPED = (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS, ir.AttributeType.TENSOR,
            ir.AttributeType.SPARSE_TENSOR)


def graph_from_ir(model: ir.Model, name: str = "candidate", memo: dict[int, tuple] | None = None,
                  changed: Collection[int] = ()) -> CompGraph | None:
    """The graph ``graph_from_model(ir.to_proto(model), name, passes=[])`` gives, or ``None`` where it
    might differ (see the module docstring).

    ``memo`` keeps what each node reads as (its attributes, weights, row geometry, MACs), keyed by the
    node's ``id``: an empty one is filled; a filled one is reused for every node except those in
    ``changed`` (ids of nodes whose attributes, inputs or output shapes may differ since it was filled)
    and nodes it does not hold, which are read afresh and not kept. Only for a graph edited in place
    from the one the memo was filled from, its nodes still alive.
    """
    graph = model.graph
    initializers = graph.initializers
    is_static = {id(v) for v in initializers.values()}
    names: set[str] = set()
    nodes = []  # the operators the importer keeps
    for node in graph:
        if (not node.name or node.name in names or node.op_type in _LEFT_TO_IMPORTER
                or node.domain not in ("", "ai.onnx") or not node.outputs):
            return None
        names.add(node.name)
        if any(a.type == ir.AttributeType.GRAPH or a.type == ir.AttributeType.GRAPHS
               for a in node.attributes.values()):
            return None
        if node.op_type in _STATIC_SOURCES or all(v is None or id(v) in is_static for v in node.inputs):
            is_static.update(id(v) for v in node.outputs)  # folded to a constant by the importer
        else:
            nodes.append(node)
    kept = {id(node) for node in nodes}
    model_inputs = [v for v in graph.inputs if id(v) not in is_static]
    output_ids = {id(v) for v in graph.outputs}
    if any(id(v) in is_static or v.producer() is None and not v.is_graph_input() for v in graph.outputs):
        return None
    for value in model_inputs:  # a model input that feeds only weight slots is a weight: the importer's job
        uses = value.uses()
        if not uses or all(use.idx in WEIGHT_SLOTS.get(use.node.op_type, ()) for use in uses):
            return None
    # Every output of every operator is read by an operator or is a model output; no dead operator (one read
    # only by what folds to a constant, a Shape say, is dead to the importer).
    for node in nodes:
        for out in node.outputs:
            if out.name and id(out) not in output_ids and not any(id(use.node) in kept for use in out.uses()):
                return None

    tensor_index: dict[int, int] = {}
    tensor_values: list[ir.Value] = []
    shapes: list[tuple[int, ...]] = []
    producers: list[int | None] = []

    def add_tensor(value: ir.Value, producer: int | None) -> int | None:
        shape = _static_shape(value)
        if shape is None:
            return None
        tensor_index[id(value)] = len(tensor_values)
        tensor_values.append(value)
        shapes.append(shape)
        producers.append(producer)
        return tensor_index[id(value)]

    for value in model_inputs:
        if add_tensor(value, None) is None:
            return None
    built: list[OpNode] = []
    filling = memo is not None and not memo
    for index, node in enumerate(nodes):
        act_in: list[int] = []
        for value in node.inputs:
            if value is None or not value.name or id(value) in is_static:
                continue
            t = tensor_index.get(id(value))
            if t is None:
                return None
            act_in.append(t)
        outs: list[int] = []
        for value in node.outputs:
            if not value.name:
                continue
            t = add_tensor(value, index)
            if t is None:
                return None
            outs.append(t)
        parts = None if memo is None or id(node) in changed else memo.get(id(node))
        if parts is None:
            parts = _node_parts(node, is_static, [shapes[t] for t in act_in], [shapes[t] for t in outs])
            if parts is None:
                return None
            if filling:
                memo[id(node)] = parts
        attrs, weights, weight_numel, geometry, known, macs = parts
        built.append(OpNode(index=index, name=node.name, op_type=node.op_type, attributes=attrs,
                            inputs=tuple(act_in), outputs=tuple(outs), input_geometry=geometry,
                            weight_names=weights, weight_numel=weight_numel, macs=macs, known_op=known,
                            onnx_name=None))

    consumers: list[list[int]] = [[] for _ in tensor_values]
    for op in built:
        for t in dict.fromkeys(op.inputs):
            consumers[t].append(op.index)
    tensors = tuple(
        Tensor(index=i, name=value.name, shape=shapes[i], producer=producers[i], consumers=tuple(consumers[i]),
               is_model_output=id(value) in output_ids)
        for i, value in enumerate(tensor_values)
    )
    outputs = []
    for value in graph.outputs:
        t = tensor_index.get(id(value))
        if t is None:
            return None
        outputs.append(t)
    used = {t for op in built for t in op.inputs} | set(outputs)
    if any(tensor_index[id(v)] not in used for v in model_inputs):
        return None  # an unused model input: the importer drops it
    return CompGraph(name=name, nodes=tuple(built), tensors=tensors,
                     model_inputs=tuple(tensor_index[id(v)] for v in model_inputs),
                     model_outputs=tuple(dict.fromkeys(outputs)), metadata=dict(model.metadata_props), passes=())


def _node_parts(node: ir.Node, is_static: set[int], in_shapes: list[tuple[int, ...]],
                out_shapes: list[tuple[int, ...]]) -> tuple | None:
    """What the planner reads from ``node`` besides its tensors: ``(attributes, weight names, weight
    elements, row geometry, known, MACs)``, or ``None`` for an attribute it cannot read."""
    weights: list[str] = []
    weight_shapes: list[tuple[int, ...]] = []
    parameter_slots = PARAMETER_SLOTS.get(node.op_type, frozenset())
    for slot, value in enumerate(node.inputs):
        if value is None or not value.name or id(value) not in is_static:
            continue
        dtype = value.dtype
        if slot not in parameter_slots and (onnx.TensorProto.FLOAT if dtype is None else int(dtype)) in FLOAT_TYPES:
            weights.append(value.name)
            weight_shapes.append(tuple(value.shape) if value.shape is not None else ())
    attrs: dict[str, Any] = {}
    for attr in node.attributes.values():
        if attr.type in _SKIPPED:
            continue
        value = _attribute_value(attr)
        if value is _UNSUPPORTED:
            return None
        attrs[attr.name] = value
    geometry, known = row_geometry(node.op_type, attrs, in_shapes, out_shapes, weight_shapes, None)
    return (attrs, tuple(weights), sum(prod(s) for s in weight_shapes), geometry, known,
            operator_macs(node.op_type, attrs, _all_input_shapes(node), out_shapes))


def _all_input_shapes(node: ir.Node) -> list[tuple[int, ...] | None]:
    """Shapes of every input slot (``None`` where empty or unknown), as the importer hands them to
    ``operator_macs``; an initializer's shape is its dimensions as declared."""
    return [None if v is None or not v.name else tuple(v.shape) if v.is_initializer() and v.shape is not None
            else _static_shape(v) for v in node.inputs]
