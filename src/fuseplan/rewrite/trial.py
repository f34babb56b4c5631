"""Try a substitution on an onnx-ir graph in place and take it back, instead of cloning the graph for it.

A search builds hundreds of candidates from each graph it expands, each one
substitution away. Cloning the whole graph for each cost more than all the
rest of building and pricing it. :class:`Undo` records, before a rule is
applied in place, the state of what a rule can change, and puts it back:
the graph's node order, inputs, outputs, initializers and name registry, and
every slot of the matched nodes, of the nodes reading their outputs, and of
the values those nodes read or write (their uses, names, shapes, types and
graph flags); the node order and initializers it puts back are those
:class:`Trials` gathered once for the graph. Rules only edit the nodes they matched and rewire the readers
of the values those nodes compute, which is what makes this enough; a value
outside that neighbourhood that a new node read loses the new node's uses.
Values without a shape anywhere in the graph are recorded too, since
per-node shape inference may fill them in.

:class:`Trials` gathers once, for the graph a search expands, what every
trial on it looks up (node order and positions, the names taken, the
initializers, the values without a shape), so recording a trial and
undoing it costs what the substitution changed, not the graph: the nodes
the rule inserted are taken out of the node list, the nodes it removed
are put back at their places, and names the rule registered go to a
throw-away layer over the graph's name registry.

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
from onnx_ir._name_authority import NameAuthority

from fuseplan.passes.rules.base import GraphIndex

_NODE_SLOTS = ("_inputs", "_outputs", "_name", "_graph", "_op_type", "_domain", "_overload", "_version")
_VALUE_SLOTS = ("_name", "_shape", "_type", "_const_value", "_producer", "_index", "_graph", "_is_graph_input",
                "_is_graph_output", "_is_initializer")


class Trials:
    """A graph on which substitutions are tried in place one at a time, each undone before the next, and what
    recording and undoing them looks up, gathered once (valid while the graph stays as it is between trials)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        graph = model.graph
        self.index = GraphIndex(graph)
        self.nodes = list(graph)
        self.initializers = dict(graph.initializers.data)
        # per-node shape inference fills in whatever has no shape yet
        self.unshaped = {id(v): v for node in self.nodes for v in node.outputs if v.shape is None or v.type is None}

    def touched(self, site: Sequence[str]) -> list[ir.Node]:
        """The nodes computing the values of ``site``, in graph order (what a substitution there matched)."""
        producers, place = self.index.producers, self.index.position
        return sorted({id(producers[name]): producers[name] for name in site if name in producers}.values(),
                      key=lambda node: place[id(node)])

    def start(self, site: Sequence[str]) -> Undo:
        """Record the state a substitution at ``site`` may change (the sites' nodes found in the index)."""
        return Undo(self, self.touched(site))


class Undo:
    """The state a substitution at the nodes ``touched`` of the graph of ``trials`` may change; calling it puts
    that state back. Between recording and calling it, the graph's name registry is a layer over its own."""

    def __init__(self, trials: Trials, touched: Iterable[ir.Node]) -> None:
        self.trials = trials
        graph = self.graph = trials.model.graph
        nodes: dict[int, ir.Node] = {id(n): n for n in touched}
        self.touched = list(nodes.values())
        for node in self.touched:
            for value in node.outputs:
                for use in value.uses():
                    nodes.setdefault(id(use.node), use.node)
        values: dict[int, ir.Value] = dict(trials.unshaped)
        for node in nodes.values():
            for value in (*node.inputs, *node.outputs):
                if value is not None:
                    values.setdefault(id(value), value)
        self.nodes = [(node, [getattr(node, s) for s in _NODE_SLOTS], dict(node.attributes.data))
                      for node in nodes.values()]
        self.values = [(value, [getattr(value, s) for s in _VALUE_SLOTS], dict(value._uses))
                       for value in values.values()]
        self.value_ids = set(values)
        self.inputs = (list(graph.inputs.data), Counter(graph.inputs._ref_counter))
        self.outputs = (list(graph.outputs.data), Counter(graph.outputs._ref_counter))
        self.authority = graph._name_authority
        graph._name_authority = _LayeredAuthority(self.authority)

    @property
    def changed(self) -> frozenset[int]:
        """Ids of the nodes a substitution may have changed: the matched nodes and their readers."""
        return frozenset(id(node) for node, _, _ in self.nodes)

    @property
    def neighbourhood(self) -> list[ir.Node]:
        """The matched nodes and their readers (the nodes whose inputs a substitution may change)."""
        return [node for node, _, _ in self.nodes]

    def __call__(self, added: Sequence[ir.Node] | None = None) -> None:
        """Put the recorded state back; ``added``, the nodes the rule inserted if known, saves finding them."""
        graph, trials = self.graph, self.trials
        listed = graph._nodes
        removed = [node for node, _, _ in self.nodes if node.graph is not graph]
        added = [] if added is None else [node for node in added if node.graph is graph]
        if len(listed) != len(trials.nodes) - len(removed) + len(added):  # the rule did not finish (or say)
            kept = {id(n) for n in trials.nodes}
            added = [node for node in graph if id(node) not in kept]
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
            listed.remove(node)
            for value in node.inputs:
                if value is not None and id(value) not in self.value_ids:
                    value._uses = {use: None for use in value._uses if use.node is not node}
        _put_back(listed, removed, trials)
        graph.inputs.data[:] = self.inputs[0]
        graph.inputs._ref_counter = Counter(self.inputs[1])
        graph.outputs.data[:] = self.outputs[0]
        graph.outputs._ref_counter = Counter(self.outputs[1])
        graph.initializers.data = dict(trials.initializers)
        graph._name_authority = self.authority


def _put_back(listed: DoublyLinkedSet, removed: list[ir.Node], trials: Trials) -> None:
    """Put the ``removed`` nodes back into the node list at their places in ``trials.nodes``."""
    place = trials.index.position
    for node in sorted(removed, key=lambda n: place[id(n)]):  # each one's predecessor is back before it
        k = place[id(node)]
        if k > 0:
            listed.insert_after(trials.nodes[k - 1], [node])
        elif len(listed):
            listed.insert_before(next(iter(listed)), [node])
        else:
            listed.append(node)
    if len(listed) != len(trials.nodes):  # a rule moved a node in or out unseen: list them all again
        trials.model.graph._nodes = DoublyLinkedSet(trials.nodes)


class _LayeredNames:
    """A name set that adds to a layer of its own over ``base``, which it leaves as it is."""

    def __init__(self, base: set[str]) -> None:
        self.base, self.added = base, set()

    def __contains__(self, name: object) -> bool:
        return name in self.added or name in self.base

    def add(self, name: str) -> None:
        self.added.add(name)


class _LayeredAuthority(NameAuthority):
    """A name registry that names and counts as ``base`` would, registering new names in a layer of its own."""

    def __init__(self, base: NameAuthority) -> None:
        super().__init__()
        self._value_counter, self._node_counter = base._value_counter, base._node_counter
        self._value_names = _LayeredNames(base._value_names)
        self._node_names = _LayeredNames(base._node_names)


def undo_for(model: Any, site: Sequence[str]) -> tuple[list[ir.Node], list[ir.Node], Undo]:
    """``(nodes in order, nodes matched at site, Undo)`` for trying a substitution at ``site`` of ``model``
    (gathering :class:`Trials` for this one trial)."""
    trials = Trials(model)
    undo = trials.start(site)
    return trials.nodes, undo.touched, undo
