"""Merge-back: join parts of a split again where that saves DRAM and still fits.

Algorithm 1 stops at the first cut whose parts fit, but a cut chosen for one
blamed edge, or a part that fell apart into components, can leave neighbours
that would fit together. Fusing two adjacent parts removes the DRAM round
trip of the tensors between them. This step does that greedily, largest
saving first, and only where the merged part keeps the plan acyclic: the
split group itself is convex in an acyclic plan, so the only paths that
matter run through the group's other parts.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuseplan.plan.plan import Group
from fuseplan.plan.problem import FusionProblem


def _reaches_indirectly(start: int, target: int, successors: list[set[int]]) -> bool:
    """Whether ``target`` is reachable from ``start`` through at least one other part."""
    stack = [s for s in successors[start] if s != target]
    seen = set(stack)
    while stack:
        current = stack.pop()
        if current == target:
            return True
        for nxt in successors[current]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def merge_parts(problem: FusionProblem, parts: Sequence[Group]) -> tuple[tuple[Group, ...], int]:
    """Greedily merge adjacent ``parts`` while a merge fits and lowers total DRAM.

    Returns the merged parts (sorted by smallest member) and how many merges were made.
    """
    graph, cost = problem.graph, problem.cost
    current = list(parts)
    merges = 0
    while len(current) > 1:
        owner = {v: k for k, part in enumerate(current) for v in part}
        successors: list[set[int]] = [set() for _ in current]
        for k, part in enumerate(current):
            for v in part:
                for w in graph.successors[v]:
                    other = owner.get(w)
                    if other is not None and other != k:
                        successors[k].add(other)
        best: tuple[int, int, int] | None = None  # (saving, a, b)
        for a in range(len(current)):
            for b in successors[a]:
                union = current[a] | current[b]
                if not problem.fits(union):
                    continue
                saving = cost.dram(current[a]) + cost.dram(current[b]) - cost.dram(union)
                if saving > 0 and (best is None or saving > best[0]) and not _reaches_indirectly(a, b, successors):
                    best = (saving, a, b)
        if best is None:
            break
        _, a, b = best
        merged = current[a] | current[b]
        current = [p for k, p in enumerate(current) if k not in (a, b)] + [merged]
        merges += 1
    return tuple(sorted(current, key=min)), merges
