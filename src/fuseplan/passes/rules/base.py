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

from collections.abc import Iterator, Sequence
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
    rule refuses) and :meth:`rewrite` (edit the graph in place).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def candidates(self, graph: ir.Graph) -> Iterator[tuple[ir.Node, ...]]:
        raise NotImplementedError

    def check(self, graph: ir.Graph, nodes: tuple[ir.Node, ...]) -> str | None:
        raise NotImplementedError

    def rewrite(self, graph: ir.Graph, nodes: tuple[ir.Node, ...], names: NameSource) -> None:
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

    def apply(self, model: ir.Model, site: Sequence[str]) -> None:
        """Rewrite ``model`` in place at ``site``; :class:`RuleRefused` if the site is gone or the check fails."""
        nodes = find_site(model.graph, site)
        for candidate in self.candidates(model.graph):
            if candidate == nodes:
                break
        else:
            raise RuleRefused(f"{self.name}: no match at {list(site)}")
        reason = self.check(model.graph, nodes)
        if reason is not None:
            raise RuleRefused(f"{self.name} at {list(site)}: {reason}")
        # Rewrites insert new nodes just before a node that reads what they compute, so the graph stays in
        # topological order without re-sorting it (sorting cost more than the rewrite itself).
        self.rewrite(model.graph, nodes, NameSource(model.graph))


def site_of(nodes: Sequence[ir.Node]) -> Site:
    return tuple(node.outputs[0].name for node in nodes)


def find_site(graph: ir.Graph, site: Sequence[str]) -> tuple[ir.Node, ...]:
    producers = {node.outputs[0].name: node for node in graph if node.outputs}
    missing = [name for name in site if name not in producers]
    if missing:
        raise RuleRefused(f"no node produces {missing[0]!r}")
    return tuple(producers[name] for name in site)


class NameSource:
    """Fresh value and node names, derived from a stem and unique in the graph (and deterministic)."""

    def __init__(self, graph: ir.Graph) -> None:
        self.taken = {v.name for v in graph.inputs} | set(graph.initializers)
        for node in graph:
            self.taken.add(node.name or "")
            self.taken.update(v.name for v in node.outputs)

    def __call__(self, stem: str) -> str:
        name, k = stem, 1
        while name in self.taken:
            k += 1
            name = f"{stem}_{k}"
        self.taken.add(name)
        return name


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
    else:
        tensor = ir.tensor(np.ascontiguousarray(data), name=name)
    value = ir.Value(name=name, shape=ir.Shape(list(shape)), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value


def only_used_by(value: ir.Value, node: ir.Node) -> bool:
    """Whether ``node`` is the only reader of ``value`` (a model output has another)."""
    return not value.is_graph_output() and all(user is node for user in value.consumers())


def opset(graph: ir.Graph) -> int:
    return graph.opset_imports.get("", 13)
