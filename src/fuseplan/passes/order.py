"""Topological order of an ONNX graph's nodes, shared by the importer and the structural hash."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import onnx

from fuseplan.errors import FuseplanError


def topological_order(nodes: Sequence[onnx.NodeProto], available: set[str] | dict[str, object]) -> list[int]:
    """Indices of ``nodes`` in a topological order, stable with respect to file order.

    ``available`` names the values defined before any node runs (graph
    inputs, initializers); a name that neither they nor a node define is
    left for the caller to judge (a dangling input, or an outer-scope value
    of a subgraph). A cycle is one :class:`FuseplanError`.
    """
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    waiting = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        deps = {producer[name] for name in node.input if name and name not in available and name in producer}
        waiting[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(nodes):
        raise FuseplanError("the model graph has a cycle; ONNX graphs must be acyclic")
    return order
