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

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from itertools import chain
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


class NodeReading:
    """What the planner read from one onnx-ir node, kept to read the node again in a graph rewritten
    around it: its parts (attributes, weights, row geometry, MACs), its named outputs' static shapes,
    and the operator and output tensors it was read as (reused where nothing about them moved)."""

    __slots__ = ("parts", "out_shapes", "op", "tensors")

    def __init__(self, parts: tuple, out_shapes: tuple[tuple[int, ...], ...]) -> None:
        self.parts, self.out_shapes = parts, out_shapes
        self.op: OpNode | None = None
        self.tensors: tuple[Tensor, ...] = ()


class IrMemo:
    """What :func:`read_ir` read from one onnx-ir graph, to read graphs edited in place from it sooner.

    ``nodes`` holds each kept node's :class:`NodeReading` by the node's ``id``. The rest describes the
    graph in node order, so that a graph edited in place takes over the reading of the nodes before
    the first one the edit touched (its *prefix*) without walking them again: for every node, its
    ``id``, its name, whether it was folded to a constant (with the ids of its outputs), and after it
    how many operators and tensors were read.
    """

    def __init__(self) -> None:
        self.nodes: dict[int, NodeReading] = {}
        self.sequence: list[int] = []  # id of every node, in order
        self.names: list[str] = []
        self.folded: list[tuple[int, ...]] = []  # per node: ids of its outputs if it folds to a constant
        self.operators_after: list[int] = []  # per node: operators read up to and including it
        self.tensors_after: list[int] = []
        self.initializers: dict[int, ir.Value] = {}  # by id
        self.model_inputs: tuple[int, ...] = ()
        self.values: list[ir.Value] = []  # each tensor's value, by tensor index
        self.value_ids: list[int] = []
        self.shapes: list[tuple[int, ...]] = []
        self.producers: list[int | None] = []
        self.reading: IrReading | None = None

    def __bool__(self) -> bool:
        return self.reading is not None

    def prefix(self, walk: Iterator[ir.Node], changed: Collection[int]) -> tuple[int, ir.Node | None]:
        """How many nodes ``walk`` (a graph's nodes in order) yields from the start that are the memo's, in
        the same place and unchanged, and the node after them (``None`` at the end)."""
        sequence, limit = self.sequence, len(self.sequence)
        k = 0
        for node in walk:
            if k == limit or id(node) != sequence[k] or id(node) in changed:
                return k, node
            k += 1
        return k, None

    def suffix(self, graph: ir.Graph, changed: Collection[int], limit: int) -> int:
        """How many nodes of ``graph`` from the end (at most ``limit``) are the memo's last ones, in the same
        order and unchanged."""
        sequence, k = self.sequence, 0
        for node in reversed(graph):
            if k == limit or id(node) != sequence[-1 - k] or id(node) in changed:
                break
            k += 1
        return k


@dataclass(frozen=True)
class IrReading:
    """A graph read from onnx-ir (:func:`read_ir`) and which onnx-ir node each operator was read from."""

    graph: CompGraph
    node_ids: tuple[int, ...]  # ``id`` of the onnx-ir node of each operator, by index
    fresh: tuple[int, ...]  # operators read afresh rather than from the memo, ascending


def graph_from_ir(model: ir.Model, name: str = "candidate", memo: IrMemo | None = None,
                  changed: Collection[int] = ()) -> CompGraph | None:
    """The graph ``graph_from_model(ir.to_proto(model), name, passes=[])`` gives, or ``None`` where it
    might differ (see the module docstring). ``memo`` and ``changed``: as :func:`read_ir`."""
    reading = read_ir(model, name, memo, changed)
    return None if reading is None else reading.graph


def read_ir(model: ir.Model, name: str = "candidate", memo: IrMemo | None = None,
            changed: Collection[int] = (), *, ends: bool = True) -> IrReading | None:
    """:func:`graph_from_ir`'s graph with the onnx-ir node each operator was read from.

    An empty ``memo`` (:class:`IrMemo`) is filled. A filled one is reused for every node except those
    in ``changed`` (ids of nodes whose attributes, inputs or output shapes may differ since it was
    filled) and nodes it does not hold, which are read afresh and not kept: only for a graph edited in
    place from the one the memo was filled from, its nodes still alive. A node taken from the memo keeps
    its operator and output tensors (the same objects) when their indices and readers did not move.
    With ``ends``, the nodes before the first one that moved or changed (the prefix) are taken over
    without being walked, and those after the last one (the suffix) are read from the memo's operators,
    only their tensor indices brought up to date.
    """
    graph = model.graph
    initializers = graph.initializers
    is_static = set(map(id, initializers.data.values()))  # (a UserDict: its data, sooner than its values())
    filling = memo is not None and not memo
    entries = None if memo is None or filling else memo.nodes
    start = end = 0  # nodes taken over from the memo at the start (its prefix) and at the end (its suffix)
    walk: Iterator[ir.Node] = iter(graph)
    if ends and entries is not None and all(not v.uses() for k, v in memo.initializers.items()
                                            if k not in is_static):  # (one dropped once unused was read by none)
        start, after = memo.prefix(walk, changed)
        walk = walk if after is None else chain((after,), walk)  # the rest of the graph's nodes
        end = memo.suffix(graph, changed, min(len(graph), len(memo.sequence)) - start)
    tail = len(memo.sequence) - end if end else 0  # where the suffix starts in the memo's graph
    if end:  # taken over only while nothing between prefix and suffix folds to a constant, either side
        if any(memo.folded[start:tail]):
            return read_ir(model, name, memo, changed, ends=False)
    if start:
        names = set(memo.names[:start])
        is_static.update(chain.from_iterable(memo.folded[:start]))
        nodes: list[ir.Node] = []  # the operators the importer keeps, after the prefix
    else:
        names = set()
        nodes = []
    taken = memo.operators_after[start - 1] if start else 0  # operators of the prefix
    names.update(memo.names[tail:] if end else ())
    stop = len(graph) - end
    known: list[NodeReading | None] = []  # memo entries of the operators after the prefix, None where fresh
    for position, node in enumerate(walk, start):
        if position == stop:
            break
        if (not node.name or node.name in names or node.op_type in _LEFT_TO_IMPORTER
                or node.domain not in ("", "ai.onnx") or not node.outputs):
            return None
        names.add(node.name)
        entry = entries.get(id(node)) if entries is not None and id(node) not in changed else None
        # A memo entry's attributes were read before: none is a graph.
        if entry is None and any(a.type == ir.AttributeType.GRAPH or a.type == ir.AttributeType.GRAPHS
                                 for a in node.attributes.values()):
            return None
        if node.op_type in _STATIC_SOURCES or all(v is None or id(v) in is_static for v in node.inputs):
            if end:
                return read_ir(model, name, memo, changed, ends=False)
            outputs = tuple(id(v) for v in node.outputs)
            is_static.update(outputs)  # folded to a constant by the importer
        else:
            outputs = ()
            nodes.append(node)
            known.append(entry)
        if filling:
            memo.sequence.append(id(node))
            memo.names.append(node.name)
            memo.folded.append(outputs)
            memo.operators_after.append(len(nodes))
    if end:
        is_static.update(chain.from_iterable(memo.folded[tail:]))
    model_inputs = [v for v in graph.inputs if id(v) not in is_static]
    output_ids = {id(v) for v in graph.outputs}
    if any(id(v) in is_static or v.producer() is None and not v.is_graph_input() for v in graph.outputs):
        return None
    for value in model_inputs:  # a model input that feeds only weight slots is a weight: the importer's job
        uses = value.uses()
        if not uses or all(use.idx in WEIGHT_SLOTS.get(use.node.op_type, ()) for use in uses):
            return None
    if (start or end) and tuple(map(id, model_inputs)) != memo.model_inputs:
        return read_ir(model, name, memo, changed, ends=False)  # the model inputs moved: walk every node

    if start:  # the prefix's operators and tensors, as the memo read them
        before = memo.reading
        count = memo.tensors_after[start - 1]
        tensor_values = memo.values[:count]
        tensor_ids = memo.value_ids[:count]
        tensor_index = dict(zip(tensor_ids, range(count)))
        shapes, producers = memo.shapes[:count], memo.producers[:count]
        earlier: list[Tensor | None] = list(before.graph.tensors[:count])
        built = list(before.graph.nodes[:taken])
        node_ids = list(before.node_ids[:taken])
    else:
        count = 0
        tensor_values, tensor_ids, tensor_index, shapes, producers, earlier = [], [], {}, [], [], []
        built, node_ids = [], []
        for value in model_inputs:
            shape = _static_shape(value)
            if shape is None:
                return None
            tensor_index[id(value)] = len(tensor_ids)
            tensor_values.append(value)
            tensor_ids.append(id(value))
            shapes.append(shape)
            producers.append(None)
            earlier.append(None)  # per tensor: the one a memo entry read it as, if any
        if filling:
            memo.model_inputs = tuple(tensor_ids)
            memo.initializers = {id(v): v for v in initializers.data.values()}
    fresh: list[int] = []
    for index, node in enumerate(nodes, start=taken):
        entry = known[index - taken]
        act_in: list[int] = []
        for value in node.inputs:
            if value is None or not value.name or id(value) in is_static:
                continue
            t = tensor_index.get(id(value))
            if t is None:
                return None
            act_in.append(t)
        first_out = len(tensor_ids)
        named_outputs = [value for value in node.outputs if value.name]
        if entry is None:
            out_shapes = tuple(map(_static_shape, named_outputs))
            if None in out_shapes:
                return None
            parts = _node_parts(node, is_static, [shapes[t] for t in act_in], list(out_shapes))
            if parts is None:
                return None
            fresh.append(index)
            if filling:
                memo.nodes[id(node)] = NodeReading(parts, out_shapes)
        else:
            out_shapes, parts = entry.out_shapes, entry.parts  # the same outputs, so the same shapes
        for value, shape in zip(named_outputs, out_shapes):
            tensor_index[id(value)] = len(tensor_ids)
            tensor_values.append(value)
            tensor_ids.append(id(value))
            shapes.append(shape)
            producers.append(index)
        if entry is None or len(entry.tensors) != len(named_outputs):
            earlier.extend([None] * len(named_outputs))
        else:
            earlier.extend(entry.tensors)
        inputs, outputs = tuple(act_in), tuple(range(first_out, len(tensor_ids)))
        op = None if entry is None else entry.op
        if op is not None and op.name == node.name:
            if op.index != index or op.inputs != inputs or op.outputs != outputs:
                op = op.moved(index, inputs, outputs)  # the same operator elsewhere
        else:
            attrs, weights, weight_numel, geometry, known_op, macs = parts
            op = OpNode(index=index, name=node.name, op_type=node.op_type, attributes=attrs, inputs=inputs,
                        outputs=outputs, input_geometry=geometry, weight_names=weights, weight_numel=weight_numel,
                        macs=macs, known_op=known_op, onnx_name=None)
        built.append(op)
        node_ids.append(id(node))
    if end:  # the suffix: the memo's operators, reading and writing the tensors' indices here
        before = memo.reading
        first = memo.operators_after[tail - 1] if tail else 0
        values, value_ids, value_shapes, parent_ids = memo.values, memo.value_ids, memo.shapes, before.node_ids
        parent_tensors = before.graph.tensors
        for parent in before.graph.nodes[first:]:
            index = len(built)
            try:
                inputs = tuple([tensor_index[value_ids[t]] for t in parent.inputs])
            except KeyError:  # a value read here that is no tensor any more
                return read_ir(model, name, memo, changed, ends=False)
            first_out = len(tensor_ids)
            for t in parent.outputs:
                tensor_index[value_ids[t]] = len(tensor_ids)
                tensor_values.append(values[t])
                tensor_ids.append(value_ids[t])
                shapes.append(value_shapes[t])
                producers.append(index)
                earlier.append(parent_tensors[t])
            outputs = tuple(range(first_out, len(tensor_ids)))
            same = parent.index == index and parent.inputs == inputs and parent.outputs == outputs
            built.append(parent if same else parent.moved(index, inputs, outputs))
            node_ids.append(parent_ids[parent.index])

    late: dict[int, list[int]] = {}  # tensor -> its readers after the prefix
    for op in built[taken:]:
        for t in (op.inputs if len(op.inputs) < 2 else dict.fromkeys(op.inputs)):
            if t in late:
                late[t].append(op.index)
            else:
                late[t] = [op.index]
    tensors: list[Tensor] = []
    for i, value_id in enumerate(tensor_ids):
        same, value, is_output = earlier[i], tensor_values[i], value_id in output_ids
        more = late.get(i)
        if i < count:  # a tensor of the prefix: its readers in the prefix are the memo's (sorted)
            readers = same.consumers
            if readers and readers[-1] >= taken:
                readers = tuple(c for c in readers if c < taken)
            if more:
                readers += tuple(more)
        else:
            readers = tuple(more) if more else ()
        # Every output of every operator is read by an operator or is a model output, and so is every model
        # input; the importer drops the rest (an operator read only by what folds, a Shape say, is dead to it).
        if not readers and not is_output:
            return None
        if same is None:
            same = Tensor(index=i, name=value.name, shape=shapes[i], producer=producers[i], consumers=readers,
                          is_model_output=is_output)
        elif (same.index != i or same.producer != producers[i] or same.consumers != readers
              or same.is_model_output != is_output or same.name != value.name):  # a rule may rename a value
            same = same.moved(index=i, name=value.name, producer=producers[i], consumers=readers,
                              is_model_output=is_output)  # the memo's tensor (its shape) elsewhere
        tensors.append(same)
    outputs = []
    for value in graph.outputs:
        t = tensor_index.get(id(value))
        if t is None:
            return None
        outputs.append(t)
    # Every operator reads tensors made before it (looked up as they were added): in topological order.
    compgraph = CompGraph(name=name, nodes=tuple(built), tensors=tuple(tensors),
                          model_inputs=tuple(range(len(model_inputs))), model_outputs=tuple(dict.fromkeys(outputs)),
                          metadata=dict(model.metadata_props), passes=(), check_order=False)
    reading = IrReading(compgraph, tuple(node_ids), tuple(fresh))
    if filling:
        for node, op in zip(nodes, built):
            entry = memo.nodes[id(node)]
            entry.op = op
            entry.tensors = tuple(compgraph.tensors[t] for t in op.outputs)
        tensors_after = [len(model_inputs)]
        for op in built:
            tensors_after.append(tensors_after[-1] + len(op.outputs))
        memo.tensors_after = [tensors_after[k] for k in memo.operators_after]
        memo.values, memo.value_ids, memo.shapes, memo.producers = tensor_values, tensor_ids, shapes, producers
        memo.reading = reading
    return reading


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
