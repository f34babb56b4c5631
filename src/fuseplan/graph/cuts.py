"""Candidate cuts of a fusion group at an edge, skip connections included (paper Sec. III-C).

Cutting one edge ``(i, j)`` rarely separates a group: a skip connection
over the edge, or one the edge lies under, keeps the two sides joined. The
cut at ``(i, j)`` used here removes *every* edge that must go for ``i`` and
``j`` to end up apart while the plan stays acyclic:

* **downstream cut**: the second part is everything in the group reachable
  from ``j``; every edge entering it is cut (``(i, j)`` itself, skips over
  the edge, and skips into the part such as a residual ``Add``'s shortcut);
* **upstream cut**: the first part is everything in the group that reaches
  ``i``; every edge leaving it is cut.

Both are directed cuts (all cut edges point from the first part to the
second), so replacing the group by the parts can never close a cycle; nested
skips (Squeeze-and-Excite inside a residual block) are handled by the same
reachability, without special cases. A part that falls apart becomes its
weakly connected components. Candidates that produce the same parts are kept
once: the minimal set of solutions.
"""

from __future__ import annotations

from collections.abc import Iterable

from fuseplan.graph.ir import CompGraph

Group = frozenset[int]
Cut = tuple[Group, ...]


def _closure(start: int, group: Group, step: tuple[tuple[int, ...], ...]) -> set[int]:
    seen = {start}
    stack = [start]
    while stack:
        for other in step[stack.pop()]:
            if other in group and other not in seen:
                seen.add(other)
                stack.append(other)
    return seen


def cuts_at_edge(graph: CompGraph, group: Group, edge: tuple[int, int]) -> list[Cut]:
    """The downstream and upstream cuts of ``group`` at data-flow edge ``edge`` (distinct, each 2+ parts)."""
    i, j = edge
    found: list[Cut] = []
    for second in (_closure(j, group, graph.successors), group - _closure(i, group, graph.predecessors)):
        first = group - second
        if not first or not second:
            continue
        cut = tuple(sorted(graph.components(first) + graph.components(second), key=min))
        if cut not in found:
            found.append(cut)
    return found


def candidate_cuts(graph: CompGraph, group: Group, edges: Iterable[tuple[int, int]]) -> list[Cut]:
    """Cuts at each edge, in the order given, without duplicates."""
    seen: set[Cut] = set()
    out: list[Cut] = []
    for edge in edges:
        for cut in cuts_at_edge(graph, group, edge):
            if cut not in seen:
                seen.add(cut)
                out.append(cut)
    return out

