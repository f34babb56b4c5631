"""Rules on data movement: merge a Concat of a Split's outputs, drop nodes that compute nothing."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx_ir as ir

from fuseplan.passes.rules.base import Rule, array, constant, int_attr, ints, shape_of


def _axis(node: ir.Node, rank: int | None, default: int = 0) -> int | None:
    axis = int_attr(node, "axis", default)
    if axis < 0:
        return None if rank is None else axis + rank
    return axis


class MergeConcatOfSplits(Rule):
    """A Concat of all of one Split's outputs, in order and along the same axis, is the Split's input."""

    name = "merge-concat-of-splits"
    description = "Concat(Split(x)) -> x"

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        for node in graph:
            if node.op_type != "Concat" or not node.inputs or node.inputs[0] is None:
                continue
            producer = node.inputs[0].producer()
            if producer is not None and producer.op_type == "Split":
                yield (producer, node)

    def matches(self, graph, nodes, index=None):
        if len(nodes) != 2:
            return False
        split, concat = nodes
        return (concat.op_type == "Concat" and bool(concat.inputs) and concat.inputs[0] is not None
                and split.op_type == "Split" and concat.inputs[0].producer() is split)

    def check(self, graph, nodes):
        split, concat = nodes
        if list(concat.inputs) != list(split.outputs):
            return "the Concat does not read exactly the Split's outputs in order"
        rank = len(shape_of(split.inputs[0]) or ()) or None
        if _axis(split, rank) is None or _axis(split, rank) != _axis(concat, rank):
            return "the Split and the Concat use different (or unknown) axes"
        if concat.outputs[0].is_graph_output() and (split.inputs[0].is_graph_input()
                                                    or split.inputs[0].is_graph_output()):
            return "both ends are model inputs or outputs"
        return None

    def rewrite(self, graph, nodes, names):
        split, concat = nodes
        source, result = split.inputs[0], concat.outputs[0]
        _bypass(graph, result, source)
        graph.remove(concat, safe=True)
        if not any(out.uses() or out.is_graph_output() for out in split.outputs):
            graph.remove(split, safe=True)
        return []


def _bypass(graph: ir.Graph, result: ir.Value, source: ir.Value) -> None:
    """Readers of ``result`` read ``source``; a model output ``result`` renames ``source`` (keeping the
    model's interface) when ``source`` is neither a model input nor a model output."""
    if result.is_graph_output():
        name = result.name
        result.replace_all_uses_with(source, replace_graph_outputs=True)
        result.name = None
        source.name = name
    else:
        result.replace_all_uses_with(source)


def _identity_like(node: ir.Node) -> str | None:
    """``None`` if ``node`` passes its first input through unchanged, else why not."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return "not a standard operator on one data input"
    if any(out.uses() or out.is_graph_output() for out in node.outputs[1:]):
        return "a second output is read"
    data = node.inputs[0]
    if op == "Identity":
        return None
    if op == "Dropout":
        training = constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
        if len(node.inputs) > 2 and node.inputs[2] is not None and (training is None or bool(array(training))):
            return "dropout in training mode (or a mode unknown before run time)"
        return None
    if op == "Transpose":
        perm = ints(node, "perm")
        rank = len(shape_of(data) or ()) or None
        if perm is None or perm != list(range(len(perm))) or (rank is not None and len(perm) != rank):
            return "the permutation moves axes"
        return None
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
        before, after = shape_of(data), shape_of(node.outputs[0])
        if before is None or after is None:
            return "a shape is unknown"
        return None if before == after else "it changes the shape"
    if op == "Cast":
        return None if data.dtype is not None and int_attr(node, "to", -1) == int(data.dtype) else "it changes the type"
    if op == "Pad":
        pads = constant(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
        values = array(pads) if pads is not None else (np.array(ints(node, "pads")) if "pads" in node.attributes
                                                         else None)
        if values is None or np.any(values != 0):
            return "it pads"
        return None
    return f"{op} is not identity-like"


class DropIdentityLike(Rule):
    """Nodes that compute nothing (Identity, inference Dropout, an identity Transpose, a shape-preserving
    Reshape, Flatten, Squeeze or Unsqueeze, a Cast to the same type, a zero Pad) are removed."""

    name = "drop-identity-like"
    description = "Identity, Dropout, no-op Transpose/Reshape/Cast/Pad -> nothing"
    _OPS = frozenset({"Identity", "Dropout", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "Pad"})

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        return ((node,) for node in graph if node.op_type in self._OPS)

    def matches(self, graph, nodes, index=None):
        return len(nodes) == 1 and nodes[0].op_type in self._OPS

    def check(self, graph, nodes):
        (node,) = nodes
        reason = _identity_like(node)
        if reason is None and node.outputs[0].is_graph_output() and (
                node.inputs[0].is_graph_input() or node.inputs[0].is_graph_output() or node.inputs[0].is_initializer()):
            reason = "it joins a model input or constant to a model output"
        return reason

    def rewrite(self, graph, nodes, names):
        (node,) = nodes
        _bypass(graph, node.outputs[0], node.inputs[0])
        graph.remove(node, safe=True)
        return []
