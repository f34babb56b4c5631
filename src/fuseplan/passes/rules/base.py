"""Substitution rules over onnx-ir: a pattern (where a rule could apply), a check (why it may not) and a rewrite.

A rule names each place it applies, its *site*, by the first outputs of the
nodes it matched (ONNX makes them unique), so a sequence of substitutions
can be recorded in plan.json and replayed on the same model. Rules are
applied one site at a time to a copy; none of them runs greedily.

Zoo models are weight-stripped (initializers with a shape and no data):
rules that compute new weights compute them when the data is there and
otherwise emit stripped initializers of the right shape, so the same
sequence replayed on a model with weights gives a runnable, checkable model.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Set
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import onnx
import onnx_ir as ir

from fuseplan.errors import FuseplanError

Site = tuple[str, ...]


class RuleRefused(FuseplanError):
    """A rule's conditions do not hold at a site; the reason says which."""


@dataclass(frozen=True)
class Substitution:
    """One applied substitution: the rule and its site."""

    rule: str
    site: Site

    def record(self) -> dict[str, object]:
        return {"rule": self.rule, "site": list(self.site)}


class Rule:
    """A semantics-preserving substitution.

    Subclasses implement :meth:`candidates` (the pattern: node tuples by
    operator types and edges), :meth:`check` (``None`` or the reason the
    rule refuses) and :meth:`rewrite` (edit the graph in place and return
    the nodes it inserted, in graph order). :meth:`matches` says whether
    given nodes are one of the candidates; rules answer it by looking at
    those nodes rather than enumerating every candidate of the graph.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: rules that this one undoes (with the help of others at most): a bounded search does not apply it to a node
    #: one of them produced, so it cannot go back and forth between the two forever
    inverse_of: ClassVar[tuple[str, ...]] = ()

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        raise NotImplementedError

    def matches(self, graph: ir.Graph, nodes: tuple[ir.Node, ...], index: GraphIndex | None = None) -> bool:
        """Whether :meth:`candidates` yields ``nodes`` (nodes of ``graph``)."""
        return any(candidate == nodes for candidate in self.candidates(graph))

    def check(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> str | None:
        raise NotImplementedError

    def rewrite(self, graph: ir.Graph, nodes: tuple[ir.Node, ...], names: NameSource) -> list[ir.Node]:
        raise NotImplementedError

    def sites(self, model: ir.Model) -> list[Site]:
        """Every site where the rule's pattern matches and its check passes, in graph order."""
        return [site_of(nodes) for nodes in self.candidates(model.graph) if self.check(model.graph, nodes) is None]

    def refusals(self, model: ir.Model) -> dict[Site, str]:
        """Every site where the pattern matches but the check refuses, with the reason."""
        found = {}
        for nodes in self.candidates(model.graph):
            reason = self.check(model.graph, nodes)
            if reason is not None:
                found[site_of(nodes)] = reason
        return found

    def apply(self, model: ir.Model, site: Sequence[str], index: GraphIndex | None = None) -> list[ir.Node]:
        """Rewrite ``model`` in place at ``site``; :class:`RuleRefused` if the site is gone or the check fails.

        ``index``, made of the graph as it is now, saves scanning it. The
        result is the list of nodes the rewrite inserted, in graph order.
        """
        graph = model.graph
        if index is not None and index.graph is not graph:  # an index of another graph: look everything up
            index = None
        nodes = find_site(graph, site, index)
        if not self.matches(graph, nodes, index):
            raise RuleRefused(f"{self.name}: no match at {list(site)}")
        reason = self.check(graph, nodes)
        if reason is not None:
            raise RuleRefused(f"{self.name} at {list(site)}: {reason}")
        # Rewrites insert new nodes just before a node that reads what they compute, so the graph stays in
        # topological order without re-sorting it (sorting cost more than the rewrite itself).
        return self.rewrite(graph, nodes, NameSource(graph, None if index is None else index.names))


class GraphIndex:
    """What applying a rule looks up in a graph, gathered once: valid while the graph is left as it was.

    A search tries many substitutions on one graph, each undone before the
    next; with an index each one costs what it changes instead of a scan
    of the graph (finding the site, the names taken, node positions).
    """

    def __init__(self, graph: ir.Graph) -> None:
        self.graph = graph
        nodes = list(graph)
        self.producers = {node.outputs[0].name: node for node in nodes if node.outputs}
        self.position = {id(node): k for k, node in enumerate(nodes)}
        self.names = frozenset(_taken_names(graph, nodes))
        # whether a node output lacks a type or shape: per-node inference would try it again after a rewrite
        self.untyped = any(v.name and (v.type is None or v.shape is None) for node in nodes for v in node.outputs)


def positions(graph: ir.Graph, index: GraphIndex | None) -> dict[int, int]:
    """Each node's place in ``graph`` by id (from ``index`` when given)."""
    return index.position if index is not None else {id(node): k for k, node in enumerate(graph)}


def site_of(nodes: Sequence[ir.Node]) -> Site:
    return tuple(node.outputs[0].name for node in nodes)


def find_site(graph: ir.Graph, site: Sequence[str], index: GraphIndex | None = None) -> tuple[ir.Node, ...]:
    producers = index.producers if index is not None else {node.outputs[0].name: node for node in graph
                                                           if node.outputs}
    missing = [name for name in site if name not in producers]
    if missing:
        raise RuleRefused(f"no node produces {missing[0]!r}")
    return tuple(producers[name] for name in site)


class NameSource:
    """Fresh value and node names, derived from a stem and unique in the graph (and deterministic).

    ``taken``, the names ``graph`` uses if already known (an index's), saves
    collecting them."""

    def __init__(self, graph: ir.Graph, taken: Set[str] | None = None) -> None:
        self.existing = _taken_names(graph, graph) if taken is None else taken
        self.taken: set[str] = set()  # names given out

    def __call__(self, stem: str) -> str:
        name, k = stem, 1
        while name in self.taken or name in self.existing:
            k += 1
            name = f"{stem}_{k}"
        self.taken.add(name)
        return name


def _taken_names(graph: ir.Graph, nodes: Iterable[ir.Node]) -> set[str]:
    """The names of ``graph``'s inputs, initializers, nodes (``nodes``) and node outputs."""
    taken = {v.name for v in graph.inputs} | set(graph.initializers)
    for node in nodes:
        taken.add(node.name or "")
        taken.update(v.name for v in node.outputs)
    return taken


# --- helpers shared by the rules ---------------------------------------------------------------------------------

def ints(node: ir.Node, name: str, default: Sequence[int] | None = None) -> list[int] | None:
    attr = node.attributes.get(name)
    return list(attr.value) if attr is not None else (None if default is None else list(default))


def int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return int(attr.value) if attr is not None else default


def str_attr(node: ir.Node, name: str, default: str) -> str:
    attr = node.attributes.get(name)
    return str(attr.value) if attr is not None else default


def shape_of(value: ir.Value | None) -> tuple[int, ...] | None:
    """A static shape, or ``None`` if any dimension is unknown."""
    if value is None or value.shape is None:
        return None
    dims = tuple(value.shape)
    return dims if all(isinstance(d, int) for d in dims) else None


def constant(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The initializer behind ``value``, if it is one."""
    if value is None or value.const_value is None or not value.is_initializer():
        return None
    return value.const_value


def is_stripped(tensor: ir.TensorProtocol) -> bool:
    """Whether ``tensor`` has a shape but no data (as in the weight-stripped zoo)."""
    if not isinstance(tensor, ir.TensorProtoTensor):
        return False
    proto = tensor.raw
    if proto.data_location == onnx.TensorProto.EXTERNAL:
        return False
    numel = int(np.prod(proto.dims)) if proto.dims else 1
    fields = (proto.raw_data, proto.float_data, proto.int32_data, proto.int64_data, proto.double_data,
              proto.uint64_data, proto.string_data)
    return numel > 0 and not any(len(f) for f in fields)


def array(tensor: ir.TensorProtocol) -> np.ndarray | None:
    """The data of ``tensor`` or ``None`` if it is stripped."""
    return None if is_stripped(tensor) else tensor.numpy()


def new_initializer(graph: ir.Graph, name: str, data: np.ndarray | None, shape: Sequence[int],
                    dtype: ir.DataType = ir.DataType.FLOAT) -> ir.Value:
    """Register an initializer; ``data`` ``None`` gives a stripped one of ``shape``."""
    if data is None:
        proto = onnx.TensorProto(name=name, data_type=int(dtype), dims=list(shape))
        tensor: ir.TensorProtocol = ir.TensorProtoTensor(proto)
    else:  # what ir.tensor makes of an array, without its run-time protocol checks
        tensor = ir.Tensor(np.ascontiguousarray(data), name=name)
    value = ir.Value(name=name, shape=ir.Shape(list(shape)), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value


def only_used_by(value: ir.Value, node: ir.Node) -> bool:
    """Whether ``node`` is the only reader of ``value`` (a model output has another)."""
    return not value.is_graph_output() and all(user is node for user in value.consumers())


def opset(graph: ir.Graph) -> int:
    return graph.opset_imports.get("", 13)
