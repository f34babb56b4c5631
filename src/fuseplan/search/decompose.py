"""Splitting the exact problem into parts that no candidate group spans, solved one by one.

Take the candidates (:mod:`fuseplan.search.candidates`), complete, and join
two operators whenever some candidate holds both: the classes are *parts*
that no group of any valid plan spans. Unfuseable operators, tensors no
fitting group can hold and buffers too small for groups across a branch all
show up here without being looked for.

Each part is solved by the downset search on its own, every operator
outside it a group of its own at no cost. A plan's DRAM is the sum over its
groups, each inside one part, so the optimum is the sum of what each part
contributes. Each part's optimum is at most that part's share of the
optimum: keep the optimum's groups inside the part and split every other
group into single operators, and the plan stays acyclic (a cycle through
single operators of one group would run through that group and another in
both directions, a cycle of the optimum). So the sum of the parts' optima
(or of their proven bounds, for parts a limit stopped) is a lower bound on
the optimum. Their plans put together are a candidate plan; when its group
graph is acyclic (which the parts alone cannot promise: two parts may each
read from the other through different groups) it costs exactly that bound
and is optimal.

The state space of the downset search grows with the product of the
lengths of independent branches; solved apart, parts add up instead.
:func:`fuseplan.search.exact.solve_parts` does the solving.
"""

from __future__ import annotations

from fuseplan.plan.problem import FusionProblem
from fuseplan.search.candidates import Candidates, bits


def independent_parts(problem: FusionProblem, candidates: Candidates) -> list[int]:
    """Bitmasks of the classes of fuseable operators that some candidate joins, by smallest member."""
    parent = {v: v for v in problem.fuseable}
    members = {v: 1 << v for v in problem.fuseable}  # per class root: the class, as a bitmask

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for mask in candidates.masks:
        first = root((mask & -mask).bit_length() - 1)
        outside = mask & ~members[first]
        if not outside:
            continue  # most candidates lie in a class already joined: one test, no walk over members
        for v in bits(outside):
            other = root(v)
            if other != first:
                parent[other] = first
                members[first] |= members.pop(other)
    return sorted(members.values(), key=lambda mask: mask & -mask)


def restrict(candidates: Candidates, part: int) -> Candidates:
    """The candidates inside ``part`` (a bitmask)."""
    masks: list[int] = []
    drams: list = []
    outside: list[int] = []
    recorded = len(candidates.outside) == len(candidates.masks)
    by_min: dict[int, tuple[int, ...]] = {}
    for seed, positions in candidates.by_min.items():
        if not part >> seed & 1:
            continue
        by_min[seed] = tuple(range(len(masks), len(masks) + len(positions)))
        for c in positions:
            masks.append(candidates.masks[c])
            drams.append(candidates.dram[c])
            if recorded:
                outside.append(candidates.outside[c])
    return Candidates(masks=tuple(masks), dram=tuple(drams), by_min=by_min,
                      sets_visited=candidates.sets_visited, complete=candidates.complete, outside=tuple(outside))
