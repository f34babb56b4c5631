"""Refinement: split parts that fit but pay for the buffer in DRAM.

Algorithm 1 stops as soon as every part fits. Under LBDF a part's ``F_D``
does not depend on the buffer, so stopping there is right. Under BRR it
does: a part whose weights and features do not fit together runs in row
tiles and reads its weights once per tile, so a fitting part can move more
DRAM than two smaller parts that each read their weights once. This step
walks the parts of a finished split and, where a part's ``F_D`` exceeds its
buffer-free ``F_D`` (:meth:`~fuseplan.cost.base.CostModel.dram_ignoring_buffer`),
tries the cuts at its blamed edges and keeps the one with the lowest total
``F_D`` if that is lower than the part's own; the new parts are refined the
same way. Every step lowers DRAM, so it ends; cuts are directed
(:mod:`fuseplan.graph.cuts`), so the plan stays acyclic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fuseplan.graph.cuts import candidate_cuts
from fuseplan.plan.plan import Group
from fuseplan.plan.problem import FusionProblem

Edge = tuple[int, int]


def pays_for_buffer(problem: FusionProblem, part: Group) -> bool:
    """Whether ``part`` moves more DRAM than it would with an unlimited buffer."""
    return len(part) > 1 and problem.cost.dram(part) > problem.cost.dram_ignoring_buffer(part)


def refine_parts(problem: FusionProblem, parts: Sequence[Group], ranked_edges: Callable[[Group], Sequence[Edge]],
                 memo: dict[Group, tuple[Group, ...]] | None = None) -> tuple[tuple[Group, ...], int]:
    """``parts`` with every part that pays for the buffer cut where that lowers DRAM; also the
    number of cuts made. ``ranked_edges(part)`` names the edges to try, most blamed first."""
    memo = {} if memo is None else memo
    cost = problem.cost
    cuts_made = 0

    def refine(part: Group) -> tuple[Group, ...]:
        nonlocal cuts_made
        if part in memo:
            return memo[part]
        result: tuple[Group, ...] = (part,)
        if pays_for_buffer(problem, part):
            best: tuple[int, tuple[Group, ...]] | None = None
            whole = cost.dram(part)
            for cut in candidate_cuts(problem.graph, part, ranked_edges(part)):
                if not all(problem.fits(p) for p in cut):
                    continue
                total = sum(cost.dram(p) for p in cut)
                if total < whole and (best is None or total < best[0]):
                    best = (total, cut)
            if best is not None:
                cuts_made += 1
                result = tuple(q for p in best[1] for q in refine(p))
        memo[part] = result
        return result

    refined = tuple(q for part in parts for q in refine(part))
    return tuple(sorted(refined, key=min)), cuts_made
