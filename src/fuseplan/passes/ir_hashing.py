"""A structural hash of an onnx-ir graph, computed in full or updated after a local rewrite (Merkle style).

The same idea as :mod:`fuseplan.passes.hashing`, on the onnx-ir graph a
rewrite search edits, so a candidate is hashed without serialising it: a
graph input is labelled by its position and type, an initializer by its
element type and shape, a node by its domain, operator type, attributes
and the labels of its inputs, a node output by its node's label, its slot
and its type. The graph's digest combines the multiset of node labels with
the labels of the model outputs, so names and node order do not count.

:class:`HashState` keeps every node's labels. After a rewrite of a clone
of the hashed graph, :meth:`HashState.update` relabels only the nodes the
rewrite created or matched and those whose inputs changed label, and
reuses the rest. Rules edit the attributes of the nodes they matched and
of no other node, which is what makes the reuse exact (tests compare it
with the full hash after every rule at every site of the zoo models).

:meth:`HashState.digest_after` does the same for a rewrite of the hashed
graph itself, told which nodes it matched, which nodes may read something
else now and which nodes it added, without walking the graph: it relabels
the nodes downstream of those (a label covers everything upstream of its
node, so they all change) in a topological order of their own, and takes
the other labels from the state. The cost is that of the relabelled nodes
plus sorting the label multiset, not of the graph.

Requires onnx-ir (the ``rewrite`` extra).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import onnx_ir as ir


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _type_label(value: ir.Value) -> tuple:
    dtype = value.dtype
    shape = value.shape
    dims = None if shape is None else tuple(d if isinstance(d, int) else "?" for d in shape)
    return (None if dtype is None else int(dtype), dims)


def _tensor_label(tensor: Any) -> tuple:
    return ("tensor", int(tensor.dtype), tuple(tensor.shape), hashlib.sha256(tensor.tobytes()).hexdigest())


def _attribute_label(attr: Any) -> tuple:
    kind = attr.type
    value = attr.value
    if kind == ir.AttributeType.GRAPH:
        value = ir_structural_hash_of_graph(value)
    elif kind == ir.AttributeType.GRAPHS:
        value = tuple(ir_structural_hash_of_graph(g) for g in value)
    elif kind == ir.AttributeType.TENSOR:
        value = _tensor_label(value)
    elif kind == ir.AttributeType.TENSORS:
        value = tuple(_tensor_label(t) for t in value)
    elif isinstance(value, (list, tuple)):
        value = tuple(value)
    return (attr.name, int(kind), value)


def _attributes_label(node: ir.Node) -> tuple:
    return tuple(sorted((_attribute_label(a) for a in node.attributes.values()), key=lambda a: a[0]))


@dataclass
class _NodeLabels:
    attributes: tuple
    inputs: tuple[str, ...]
    label: str
    output_types: tuple
    outputs: tuple[str, ...]


class HashState:
    """The labels of one hashed onnx-ir graph (its nodes in graph order) and its digest."""

    def __init__(self, graph: ir.Graph, nodes: Sequence[_NodeLabels], digest: str,
                 initializers: dict[int, str] | None = None, values: dict[int, str] | None = None,
                 order: Sequence[ir.Node] | None = None) -> None:
        self.graph, self.nodes, self.digest = graph, list(nodes), digest
        self.initializers = initializers or {}  # id of an initializer -> its label
        self.values = values or {}  # id of a graph input, initializer or node output -> its label
        self.order = list(graph) if order is None else list(order)  # the nodes hashed, in graph order

    @classmethod
    def of(cls, graph: ir.Graph) -> HashState:
        """Hash ``graph`` in full."""
        return _hash(graph, None, frozenset())

    def update(self, graph: ir.Graph, before: Sequence[ir.Node], touched: Iterable[ir.Node]) -> HashState:
        """The state of ``graph``, a clone of this state's graph edited in place by a rewrite.

        ``before`` lists the clone's nodes before the rewrite (in graph
        order, so node ``k`` is this state's node ``k``); ``touched`` are
        the nodes the rewrite matched, whose attributes it may have edited.
        Nodes the rewrite added are found as those not in ``before``.
        """
        previous = {id(node): labels for node, labels in zip(before, self.nodes)}
        dirty = frozenset(id(node) for node in touched)
        return _hash(graph, previous, dirty, self.initializers)

    def digest_after(self, matched: Iterable[ir.Node], rewired: Iterable[ir.Node],
                     added: Sequence[ir.Node]) -> str:
        """The digest of this state's graph after a rewrite edited it in place (what :meth:`of` would give).

        ``matched`` are the nodes the rewrite matched (their attributes may
        have changed), ``rewired`` the nodes of the graph before that may
        read other values now (the matched nodes and the readers of their
        outputs) or were removed, ``added`` the nodes it inserted. Every other
        node must be as before, save for reading new labels. If the node count
        says a node came or went unseen, the graph is hashed in full.
        """
        graph = self.graph
        rewired = list({id(node): node for node in (*matched, *rewired)}.values())
        removed = [node for node in rewired if node.graph is not graph]
        if len(graph) != len(self.nodes) - len(removed) + len(added):
            return HashState.of(graph).digest
        incomplete = self._incomplete
        order = _downstream_in_order([*(node for node in rewired if node.graph is graph), *added,
                                      *(node for node in incomplete.values() if node.graph is graph)])
        if order is None:  # not a DAG after all: let the full hash say what it is
            return HashState.of(graph).digest
        edited = {id(node) for node in matched}
        own, values, templates, sha256 = self._by_node, self.values, self._templates, hashlib.sha256
        fresh: dict[int, str] = {}  # labels of the values the relabelled nodes compute
        dropped = [own[id(node)].label for node in removed]
        labels = []
        for node in order:
            key = id(node)
            old = own.get(key)
            inputs = tuple(["" if v is None else fresh.get(id(v)) or values.get(id(v)) or self._other_label(v)
                            for v in node.inputs])
            if old is None or key in edited or key in incomplete:  # labelled afresh, as update() does
                state = _labels(node, old.attributes if old is not None and key not in edited
                                else _attributes_label(node), inputs)
                label, outputs = state.label, state.outputs
            elif old.inputs == inputs:  # a rewired reader that reads a value with the same label
                label, outputs = old.label, old.outputs
            else:  # a node downstream of the rewrite: same attributes and (complete) output types, new inputs
                prefix, suffixes = templates.get(key) or self._template(node, old)
                label = sha256(f"{prefix}{inputs!r})".encode()).hexdigest()
                outputs = [sha256(f"('{label}'{suffix}".encode()).hexdigest() for suffix in suffixes]
            for value, out in zip(node.outputs, outputs):
                fresh[id(value)] = out
            if old is not None:
                dropped.append(old.label)
            labels.append(label)
        counts = dict(self._counts)
        for label in dropped:
            left = counts[label] - 1
            if left:
                counts[label] = left
            else:
                del counts[label]
        for label in labels:
            counts[label] = counts.get(label, 0) + 1
        outputs = tuple(fresh.get(id(v)) or values.get(id(v), f"free:{v.name}") for v in graph.outputs)
        return _digest("graph", sorted(counts.items()), outputs)

    def _other_label(self, value: ir.Value) -> str:
        """The label of a value the state has none for: a new initializer's, or a free value's."""
        if value.is_initializer() and self.graph.initializers.get(value.name) is value:
            return _digest("initializer", _type_label(value))
        return f"free:{value.name}"

    def _template(self, node: ir.Node, labels: _NodeLabels) -> tuple[str, tuple[str, ...]]:
        """What ``_digest`` hashes for ``node`` but its inputs' labels, and for each output but the node's label
        (the same text: a tuple's repr is its items' reprs between brackets, and a label is plain hex)."""
        prefix = repr(("node", node.domain or "ai.onnx", node.op_type, labels.attributes))[:-1] + ", "
        suffixes = tuple(f", {slot!r}, {t!r})" for slot, t in enumerate(labels.output_types))
        template = self._templates[id(node)] = (prefix, suffixes)
        return template

    @cached_property
    def _templates(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        return {}

    @cached_property
    def _by_node(self) -> dict[int, _NodeLabels]:
        return {id(node): labels for node, labels in zip(self.order, self.nodes)}

    @cached_property
    def _counts(self) -> dict[str, int]:
        return dict(Counter(labels.label for labels in self.nodes))

    @cached_property
    def _incomplete(self) -> dict[int, ir.Node]:
        """Nodes with an output type not fully known: per-node inference may fill it in, so they are labelled
        afresh after every rewrite (as :meth:`update` does)."""
        return {id(node): node for node, labels in zip(self.order, self.nodes) if not _complete(labels.output_types)}


def _downstream_in_order(seeds: Iterable[ir.Node]) -> list[ir.Node] | None:
    """``seeds`` and every node reading what they compute, directly or not, in a topological order (the
    reverse of a depth-first post-order along readers; ``None`` if they form a cycle)."""
    state: dict[int, bool] = {}  # id -> finished
    finished: list[ir.Node] = []
    for seed in seeds:
        if id(seed) in state:
            continue
        state[id(seed)] = False
        stack = [(seed, iter([use.node for value in seed.outputs for use in value.uses()]))]
        while stack:
            node, readers = stack[-1]
            for reader in readers:
                done = state.get(id(reader))
                if done is None:
                    state[id(reader)] = False
                    stack.append((reader, iter([use.node for value in reader.outputs for use in value.uses()])))
                    break
                if not done:
                    return None  # a reader still being explored: a cycle
            else:
                stack.pop()
                state[id(node)] = True
                finished.append(node)
    finished.reverse()
    return finished


def _hash(graph: ir.Graph, previous: dict[int, _NodeLabels] | None, dirty: frozenset[int],
          initializers: dict[int, str] | None = None) -> HashState:
    """Label ``graph``; with ``previous`` (labels of the nodes of the graph it was edited from, by node id),
    reuse the labels of nodes not ``dirty`` whose inputs kept their labels, and of ``initializers``
    (labels of that graph's initializers, by id: rules never edit an initializer, they add new ones)."""
    labels: dict[int, str] = {}  # id(value) -> label
    position = 0
    for value in graph.inputs:
        if value.is_initializer():
            continue
        labels[id(value)] = _digest("input", position, _type_label(value))
        position += 1
    known = initializers or {}
    own: dict[int, str] = {}
    for value in graph.initializers.values():
        label = known.get(id(value))
        own[id(value)] = labels[id(value)] = _digest("initializer", _type_label(value)) if label is None else label
    states: list[_NodeLabels] = []
    order: list[ir.Node] = []
    for node in graph:  # graph order is topological: rules insert a node before its first reader
        inputs = tuple("" if v is None else labels.get(id(v)) or f"free:{v.name}" for v in node.inputs)
        old = None if previous is None or id(node) in dirty else previous.get(id(node))
        if old is not None and old.inputs == inputs and _complete(old.output_types):
            # Same node, inputs with the same labels (types included), outputs fully typed: its outputs'
            # types are as before (rules edit only the nodes they matched, and per-node inference only
            # fills in what is unknown).
            state = old
        else:
            state = _labels(node, _attributes_label(node) if old is None else old.attributes, inputs)
        for value, out in zip(node.outputs, state.outputs):
            labels[id(value)] = out
        states.append(state)
        order.append(node)
    outputs = tuple(labels.get(id(v), f"free:{v.name}") for v in graph.outputs)
    digest = _digest("graph", sorted(Counter(s.label for s in states).items()), outputs)
    return HashState(graph, states, digest, own, labels, order)


def _labels(node: ir.Node, attributes: tuple, inputs: tuple[str, ...]) -> _NodeLabels:
    """Label ``node`` and its outputs afresh, given its attributes' and inputs' labels."""
    output_types = tuple(_type_label(v) for v in node.outputs)
    label = _digest("node", node.domain or "ai.onnx", node.op_type, attributes, inputs)
    return _NodeLabels(attributes, inputs, label, output_types,
                       tuple(_digest(label, slot, t) for slot, t in enumerate(output_types)))


def _complete(types: tuple) -> bool:
    """Whether every output type label has an element type and only static dimensions."""
    return all(dtype is not None and dims is not None and "?" not in dims for dtype, dims in types)


def ir_structural_hash_of_graph(graph: ir.Graph) -> str:
    return HashState.of(graph).digest


def ir_structural_hash(model: ir.Model) -> str:
    """A 16-hex-digit digest of the onnx-ir ``model``'s graph, independent of names and node order."""
    opsets = sorted((domain or "ai.onnx", version) for domain, version in model.opset_imports.items())
    return _digest(opsets, HashState.of(model.graph).digest)[:16]


def model_digest(model: ir.Model, state: HashState | str) -> str:
    """The digest :func:`ir_structural_hash` gives ``model`` whose graph's state (or its digest) is ``state``."""
    opsets = sorted((domain or "ai.onnx", version) for domain, version in model.opset_imports.items())
    return _digest(opsets, state if isinstance(state, str) else state.digest)[:16]
