"""The computation-graph IR that every later stage works on.

A :class:`CompGraph` holds the operators of a model (``OpNode``) and the
activation tensors between them (``Tensor``). Weights are not tensors of the
graph: each operator carries the element count of the parameters it reads.
Node indices are topological labels, so for every edge ``(i, j)`` we have
``i < j`` (the property the splitting algorithm relies on to find skip
connections).

Sizes are stored in *elements*; the cost models turn them into bytes with a
bytes-per-element parameter, so one graph serves every data width.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from functools import cached_property
from math import prod
from types import MappingProxyType
from typing import Any

from fuseplan.errors import FuseplanError, shown


@dataclass(frozen=True)
class RowGeometry:
    """How an operator reads one activation input row by row.

    Output row ``r`` of the operator needs input rows
    ``[stride * r + reach - kernel + 1, stride * r + reach]``. Operators that
    need their whole input before emitting anything (global pooling,
    Gemm, a Flatten, a Transpose that moves the row axis...) are *barriers*.
    """

    kernel: float = 1.0
    stride: float = 1.0
    reach: float = 0.0
    barrier: bool = False


POINTWISE = RowGeometry()


def _replaced(item, changes: dict[str, Any], cached: tuple[str, ...]):
    """``dataclasses.replace(item, **changes)`` for a frozen dataclass of this module whose ``__init__``
    only assigns its fields, without running it (a quarter of the time: a rewrite search rebuilds graphs
    thousands of times). Its ``__dict__`` holds the fields and the cached properties ``cached``, which
    are dropped (they may depend on what changed)."""
    new = object.__new__(type(item))
    state = new.__dict__
    state.update(item.__dict__, **changes)
    for name in cached:
        state.pop(name, None)
    return new


@dataclass(frozen=True)
class Tensor:
    """An activation tensor: produced by one operator (or a model input)."""

    index: int
    name: str
    shape: tuple[int, ...]
    producer: int | None
    consumers: tuple[int, ...]
    is_model_output: bool

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def rows(self) -> int:
        """Number of rows a line buffer streams this tensor in.

        Tensors of rank 4 or more are streamed along their second-to-last
        axis (``H`` in ``NCHW``); smaller ones are held whole, as one row.
        """
        return self.shape[-2] if len(self.shape) >= 4 else 1

    @property
    def row_numel(self) -> int:
        return self.numel // self.rows

    @cached_property
    def consumer_set(self) -> frozenset[int]:
        """:attr:`consumers` as a set (kept with the tensor, which a rewritten graph may share)."""
        return frozenset(self.consumers)

    def moved(self, **changes: Any) -> Tensor:
        """This tensor with ``changes`` to its fields (``dataclasses.replace``, sooner)."""
        return _replaced(self, changes, ("consumer_set",))


@dataclass(frozen=True)
class OpNode:
    """One operator of the model, labelled by its topological index."""

    index: int
    name: str
    op_type: str
    attributes: Mapping[str, Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    input_geometry: tuple[RowGeometry, ...]
    weight_names: tuple[str, ...] = ()
    weight_numel: int = 0
    known_op: bool = True
    macs: int = 0  # multiply-accumulates (convolutions and matrix products; see graph.ops.operator_macs)
    onnx_name: str | None = None  # the ONNX node's own name when ``name`` differs from it ("" if unnamed)

    @property
    def is_barrier(self) -> bool:
        return any(g.barrier for g in self.input_geometry)

    @cached_property
    def windows(self) -> tuple[tuple[int, float, float, float], ...]:
        """``(tensor, kernel, stride, reach)`` of each activation input (kept with the operator, which a
        rewritten graph may share)."""
        return tuple([(t, g.kernel, g.stride, g.reach) for t, g in zip(self.inputs, self.input_geometry)])

    def moved(self, index: int, inputs: tuple[int, ...], outputs: tuple[int, ...]) -> OpNode:
        """This operator at another index, reading and writing other tensor indices."""
        return _replaced(self, {"index": index, "inputs": inputs, "outputs": outputs}, ("windows",))


@dataclass
class CompGraph:
    """Operators and activation tensors of a model, topologically labelled."""

    name: str
    nodes: tuple[OpNode, ...]
    tensors: tuple[Tensor, ...]
    model_inputs: tuple[int, ...]
    model_outputs: tuple[int, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)
    # The passes that prepared the model before it was read, as plan.json records them (name, options, changed).
    passes: tuple[Mapping[str, Any], ...] = ()
    # False only for a reader that builds the nodes in topological order by construction (checked by its tests).
    check_order: InitVar[bool] = True

    def __post_init__(self, check_order: bool) -> None:
        self.metadata = MappingProxyType(dict(self.metadata))
        if not check_order:
            return
        for node in self.nodes:
            for t in node.inputs:
                producer = self.tensors[t].producer
                if producer is not None and producer >= node.index:
                    raise ValueError("node indices are not a topological order")

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"CompGraph({self.name!r}, nodes={len(self.nodes)}, edges={len(self.edges)})"

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """Distinct ``(producer, consumer)`` operator pairs, sorted."""
        pairs = {
            (tensor.producer, consumer)
            for tensor in self.tensors
            if tensor.producer is not None
            for consumer in tensor.consumers
        }
        return tuple(sorted(pairs))

    @cached_property
    def _adjacent(self) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
        """(successors, predecessors) of every operator, from the tensors (as :attr:`edges` pairs them)
        without building the sorted edge list; an operator's one tensor's readers, when sorted and
        distinct (as graphs are read), are its successors as they stand."""
        n = len(self.nodes)
        after: list[tuple[int, ...]] = [()] * n
        before: list[list[int]] = [[] for _ in range(n)]
        for tensor in self.tensors:
            producer, readers = tensor.producer, tensor.consumers
            if producer is None or not readers:
                continue
            for consumer in readers:
                before[consumer].append(producer)
            if after[producer] or len(readers) > 1 and any(a >= b for a, b in zip(readers, readers[1:])):
                after[producer] = tuple(sorted({*after[producer], *readers}))
            else:
                after[producer] = readers
        return tuple(after), tuple(tuple(p) if len(p) < 2 else tuple(sorted(set(p))) for p in before)

    @property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        return self._adjacent[0]

    @property
    def predecessors(self) -> tuple[tuple[int, ...], ...]:
        return self._adjacent[1]

    @cached_property
    def neighbours(self) -> tuple[frozenset[int], ...]:
        return tuple(frozenset(p + s) for p, s in zip(self.predecessors, self.successors))

    @cached_property
    def _index_by_name(self) -> dict[str, int]:
        return {node.name: node.index for node in self.nodes}

    def node_index(self, name: str) -> int:
        """Index of the operator called ``name`` (its ONNX node name)."""
        try:
            return self._index_by_name[name]
        except KeyError:
            raise FuseplanError(f"model {self.name!r} has no operator named {shown(name)}") from None

    @cached_property
    def fingerprint(self) -> str:
        """A digest of the operators, their types and output shapes, to tie plans to a model."""
        digest = hashlib.sha256()
        for node in self.nodes:
            shapes = ";".join("x".join(map(str, self.tensors[t].shape)) for t in node.outputs)
            digest.update(f"{node.name}|{node.op_type}|{shapes}\n".encode())
        return digest.hexdigest()[:16]

    @property
    def weight_numel(self) -> int:
        return sum(node.weight_numel for node in self.nodes)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of one inference (convolutions and matrix products)."""
        return sum(node.macs for node in self.nodes)

    @property
    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        return {self.tensors[t].name: self.tensors[t].shape for t in self.model_inputs}

    def is_connected(self, group: Iterable[int]) -> bool:
        """Whether ``group`` is weakly connected in this graph."""
        return len(self.components(group)) == 1

    def edges_within(self, nodes: Iterable[int]) -> list[tuple[int, int]]:
        """Data-flow edges ``(producer, consumer)`` between members of ``nodes``, sorted."""
        members = set(nodes)
        return sorted((i, j) for i in members for j in self.successors[i] if j in members)

    def components(self, nodes: Iterable[int]) -> list[frozenset[int]]:
        """Weakly connected components of the subgraph induced by ``nodes``."""
        remaining = set(nodes)
        neighbours = self.neighbours
        parts: list[frozenset[int]] = []
        while remaining:
            start = remaining.pop()
            comp, stack = {start}, [start]
            while stack:
                for other in neighbours[stack.pop()]:
                    if other in remaining:
                        remaining.discard(other)
                        comp.add(other)
                        stack.append(other)
            parts.append(frozenset(comp))
        return parts

    def group_order(self, groups: Sequence[Iterable[int]]) -> list[int] | None:
        """Indices of ``groups`` (disjoint sets of operators) in an order where each comes after every group
        it reads from, the one with the least operator first among those ready; ``None`` if the groups
        depend on each other in a cycle."""
        members = [tuple(group) for group in groups]
        owner = {v: i for i, group in enumerate(members) for v in group}
        after: list[set[int]] = [set() for _ in members]
        indegree = [0] * len(members)
        for i, group in enumerate(members):
            for v in group:
                for u in self.successors[v]:
                    j = owner.get(u)
                    if j is not None and j != i and j not in after[i]:
                        after[i].add(j)
                        indegree[j] += 1
        ready = [(min(members[i]), i) for i, d in enumerate(indegree) if d == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, i = heapq.heappop(ready)
            order.append(i)
            for j in after[i]:
                indegree[j] -= 1
                if indegree[j] == 0:
                    heapq.heappush(ready, (min(members[j]), j))
        return order if len(order) == len(members) else None

    def is_convex(self, group: Iterable[int]) -> bool:
        """Whether no path leaves ``group`` and comes back into it.

        A fusion group must be convex, or the graph of groups has a cycle.
        Topological labels bound the search: a path back into the group
        cannot pass a node labelled above the group's largest member.
        """
        members = set(group)
        last = max(members)
        successors = self.successors
        stack = [s for v in members for s in successors[v] if s not in members and s < last]
        seen = set(stack)
        while stack:
            for s in successors[stack.pop()]:
                if s in members:
                    return False
                if s < last and s not in seen:
                    seen.add(s)
                    stack.append(s)
        return True

    def to_networkx(self):
        """A ``networkx.DiGraph`` view with node and edge attributes (for analysis and drawing)."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        for node in self.nodes:
            out_shape = self.tensors[node.outputs[0]].shape if node.outputs else ()
            g.add_node(node.index, name=node.name, op_type=node.op_type, weight_numel=node.weight_numel,
                       output_shape=out_shape)
        for tensor in self.tensors:
            if tensor.producer is None:
                continue
            for consumer in tensor.consumers:
                g.add_edge(tensor.producer, consumer, tensor=tensor.name, numel=tensor.numel)
        return g
