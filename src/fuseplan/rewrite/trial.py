"""Try a substitution on an onnx-ir graph in place and take it back, instead of cloning the graph for it.

A search builds hundreds of candidates from each graph it expands, each one
substitution away. Cloning the whole graph for each cost more than all the
rest of building and pricing it. :class:`Undo` records, before a rule is
applied in place, the state of what a rule can change, and puts it back:
the graph's node order, inputs, outputs, initializers and name registry, and
every slot of the matched nodes, of the nodes reading their outputs, and of
the values those nodes read or write (their uses, names, shapes, types and
graph flags). Rules only edit the nodes they matched and rewire the readers
of the values those nodes compute, which is what makes this enough; a value
outside that neighbourhood that a new node read loses the new node's uses.
Values without a shape anywhere in the graph are recorded too, since
per-node shape inference may fill them in.

This reaches into onnx-ir's private slots (pinned below its next major
version in pyproject.toml). Tests apply and undo every rule at every site of
zoo models and compare the serialised graph byte for byte, and compare each
candidate with the one built on a clone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import onnx_ir as ir
from onnx_ir._linked_list import DoublyLinkedSet

_NODE_SLOTS = ("_inputs", "_outputs", "_name", "_graph", "_op_type", "_domain", "_overload", "_version")
_VALUE_SLOTS = ("_name", "_shape", "_type", "_const_value", "_producer", "_index", "_graph", "_is_graph_input",
                "_is_graph_output", "_is_initializer")


class Undo:
    """The state a substitution at the nodes ``touched`` of ``graph`` (whose nodes in order are ``before``)
    may change; calling it puts that state back."""

    def __init__(self, graph: ir.Graph, before: Sequence[ir.Node], touched: Iterable[ir.Node]) -> None:
        self.graph, self.before = graph, list(before)
        nodes: dict[int, ir.Node] = {id(n): n for n in touched}
        for node in list(nodes.values()):
            for value in node.outputs:
                for use in value.uses():
                    nodes.setdefault(id(use.node), use.node)
        values: dict[int, ir.Value] = {}
        for node in nodes.values():
            for value in (*node.inputs, *node.outputs):
                if value is not None:
                    values.setdefault(id(value), value)
        for node in self.before:  # per-node shape inference fills in whatever has no shape yet
            for value in node.outputs:
                if value.shape is None or value.type is None:
                    values.setdefault(id(value), value)
        self.nodes = [(node, [getattr(node, s) for s in _NODE_SLOTS], dict(node.attributes.data))
                      for node in nodes.values()]
        self.values = [(value, [getattr(value, s) for s in _VALUE_SLOTS], dict(value._uses))
                       for value in values.values()]
        self.value_ids = set(values)
        self.inputs = (list(graph.inputs.data), Counter(graph.inputs._ref_counter))
        self.outputs = (list(graph.outputs.data), Counter(graph.outputs._ref_counter))
        self.initializers = dict(graph.initializers.data)
        authority = graph._name_authority
        self.authority = (authority._value_counter, authority._node_counter, set(authority._value_names),
                          set(authority._node_names))

    @property
    def changed(self) -> frozenset[int]:
        """Ids of the nodes a substitution may have changed: the matched nodes and their readers."""
        return frozenset(id(node) for node, _, _ in self.nodes)

    def __call__(self) -> None:
        graph = self.graph
        kept = {id(n) for n in self.before}
        current = list(graph)
        added = [node for node in current if id(node) not in kept]
        for node, slots, attributes in self.nodes:
            for name, value in zip(_NODE_SLOTS, slots):
                setattr(node, name, value)
            node.attributes.data = attributes
        for value, slots, uses in self.values:
            for name, item in zip(_VALUE_SLOTS, slots):
                setattr(value, name, item)
            value._uses = uses
        for node in added:  # values outside the neighbourhood a new node read
            node._graph = None
            for value in node.inputs:
                if value is not None and id(value) not in self.value_ids:
                    value._uses = {use: None for use in value._uses if use.node is not node}
        if current != self.before:
            graph._nodes = DoublyLinkedSet(self.before)
        for node in self.before:
            node._graph = graph
        graph.inputs.data[:] = self.inputs[0]
        graph.inputs._ref_counter = Counter(self.inputs[1])
        graph.outputs.data[:] = self.outputs[0]
        graph.outputs._ref_counter = Counter(self.outputs[1])
        graph.initializers.data = dict(self.initializers)
        authority = graph._name_authority
        (authority._value_counter, authority._node_counter, authority._value_names,
         authority._node_names) = (self.authority[0], self.authority[1], set(self.authority[2]),
                                   set(self.authority[3]))


def undo_for(model: Any, site: Sequence[str]) -> tuple[list[ir.Node], list[ir.Node], Undo]:
    """``(nodes in order, nodes matched at site, Undo)`` for trying a substitution at ``site`` of ``model``."""
    before = list(model.graph)
    matched = set(site)
    touched = [node for node in before if node.outputs and node.outputs[0].name in matched]
    return before, touched, Undo(model.graph, before, touched)
