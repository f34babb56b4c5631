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

Requires onnx-ir (the ``rewrite`` extra).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
                 initializers: dict[int, str] | None = None) -> None:
        self.graph, self.nodes, self.digest = graph, list(nodes), digest
        self.initializers = initializers or {}  # id of an initializer -> its label

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
    for node in graph:  # graph order is topological: rules insert a node before its first reader
        inputs = tuple("" if v is None else labels.get(id(v)) or f"free:{v.name}" for v in node.inputs)
        old = None if previous is None or id(node) in dirty else previous.get(id(node))
        if old is not None and old.inputs == inputs and _complete(old.output_types):
            # Same node, inputs with the same labels (types included), outputs fully typed: its outputs'
            # types are as before (rules edit only the nodes they matched, and per-node inference only
            # fills in what is unknown).
            state = old
        else:
            attributes = _attributes_label(node) if old is None else old.attributes
            output_types = tuple(_type_label(v) for v in node.outputs)
            label = _digest("node", node.domain or "ai.onnx", node.op_type, attributes, inputs)
            state = _NodeLabels(attributes, inputs, label, output_types,
                                tuple(_digest(label, slot, t) for slot, t in enumerate(output_types)))
        for value, out in zip(node.outputs, state.outputs):
            labels[id(value)] = out
        states.append(state)
    outputs = tuple(labels.get(id(v), f"free:{v.name}") for v in graph.outputs)
    digest = _digest("graph", sorted(Counter(s.label for s in states).items()), outputs)
    return HashState(graph, states, digest, own)


def _complete(types: tuple) -> bool:
    """Whether every output type label has an element type and only static dimensions."""
    return all(dtype is not None and dims is not None and "?" not in dims for dtype, dims in types)


def ir_structural_hash_of_graph(graph: ir.Graph) -> str:
    return HashState.of(graph).digest


def ir_structural_hash(model: ir.Model) -> str:
    """A 16-hex-digit digest of the onnx-ir ``model``'s graph, independent of names and node order."""
    opsets = sorted((domain or "ai.onnx", version) for domain, version in model.opset_imports.items())
    return _digest(opsets, HashState.of(model.graph).digest)[:16]


def model_digest(model: ir.Model, state: HashState) -> str:
    """The digest :func:`ir_structural_hash` gives ``model`` whose graph's state is ``state``."""
    opsets = sorted((domain or "ai.onnx", version) for domain, version in model.opset_imports.items())
    return _digest(opsets, state.digest)[:16]
