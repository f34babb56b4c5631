"""More candidates for a cut-short enumeration, grown by reduced cost (column generation, priced by a beam).

Where the enumeration stops at its limit (:func:`~fuseplan.search.candidates.enumerate_candidates`), the
candidates are the smallest sets of each seed: the large groups a large buffer rewards are missing, and the
best plan over the candidates can be far from the optimum (GoogLeNet under BRR at 512KB: 2.9% above it).
Column generation says which groups are worth adding. The linear relaxation over the candidates
(:func:`~fuseplan.search.relaxation.linear_relaxation`) charges each operator its dual price; a group whose
price is below its members' charges (a negative *reduced cost*) would lower the relaxation, so it is the
kind of group the plans lack. Finding the most negative one is the enumeration again; here a beam search
looks instead: from every seed, sets grow one neighbour at a time (connected, convex, fitting), the
``beam`` of least reduced cost kept at each size, and every set met with a negative reduced cost that is
not a candidate yet joins the candidates. A few rounds, each with the relaxation solved again, and the
solvers run over the grown list.

The added groups are real candidates (connected, convex, priced, fitting), so every plan over them is
valid and the best one is never worse than over the list before; nothing here is a proof (the list stays
cut short, and a beam misses groups). On GoogLeNet it brought auto's plans to the optimum under BRR at
256KB and 2MB, and 0.66% to 2.2% lower at 2MB (LBDF) and 512KB and 1MB (BRR), for 2.5 to 8 s more CPU
(docs/search.md). Only for lists of a few hundred operators (:data:`MAX_OPERATORS`): on a generated
network of 1,005 operators four rounds took 30 s of CPU and found no better plan.
"""

from __future__ import annotations

import time
from typing import Any

from fuseplan.plan.problem import FusionProblem
from fuseplan.search.candidates import Candidates, Reachability, fuseable_neighbour_masks, predecessors_outside
from fuseplan.search.relaxation import linear_relaxation

#: Rounds of relaxation and growth at most (on GoogLeNet two left LBDF 512KB 0.09% above the optimum that
#: four reach)
ROUNDS = 4
#: Sets kept at each size of a seed's growth (on GoogLeNet with 2, auto's plan at LBDF 1MB came out 1.1%
#: above the code before; with 3, no plan of the 12 set-ups is above it)
BEAM = 3
#: Problems with more fuseable operators than this are left as they are (the relaxation over a long list
#: costs seconds a round there, and the generated networks measured gained nothing).
MAX_OPERATORS = 500


def grow_columns(problem: FusionProblem, candidates: Candidates, *, rounds: int = ROUNDS, beam: int = BEAM,
                 deadline: float | None = None) -> tuple[Candidates, dict[str, Any]]:
    """``candidates`` with the groups of negative reduced cost the beam found (module docstring), and what
    it did: ``rounds``, ``added``, ``relaxation_bytes`` (the last relaxation's value over the list, not a
    bound on plans) and ``seconds``. Past ``deadline`` (a ``time.perf_counter()`` time) it stops between
    seeds."""
    started = time.perf_counter()
    cost, beta = problem.cost, problem.buffer_bytes
    reach = Reachability.of(problem)
    desc, anc = reach.descendants, reach.ancestors
    fuseable = problem.fuseable
    neighbours = fuseable_neighbour_masks(problem)
    known = set(candidates.masks)
    masks, drams = list(candidates.masks), list(candidates.dram)
    outside = list(candidates.outside_predecessors(problem))
    by_min = {seed: list(positions) for seed, positions in candidates.by_min.items()}
    stats: dict[str, Any] = {"rounds": 0, "added": 0, "relaxation_bytes": None}

    def out_of_time() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    def grown() -> Candidates:
        return Candidates(tuple(masks), tuple(drams), {s: tuple(p) for s, p in by_min.items()},
                          candidates.sets_visited, False, tuple(outside))

    for _ in range(rounds):
        if out_of_time():
            break
        relaxation = linear_relaxation(problem, grown())
        if relaxation is None:  # no OR-Tools
            break
        charge = relaxation.charges
        stats["rounds"] += 1
        stats["relaxation_bytes"] = round(relaxation.lp_value)
        found: dict[int, int] = {}
        for seed in sorted(fuseable):
            if out_of_time():
                break
            _grow(seed, charge, beam, cost, beta, neighbours, desc, anc, known, found)
        if not found:
            break
        for mask in sorted(found):
            known.add(mask)
            seed = (mask & -mask).bit_length() - 1
            by_min.setdefault(seed, []).append(len(masks))
            masks.append(mask)
            drams.append(found[mask])
            outside.append(predecessors_outside(problem, mask))
        stats["added"] += len(found)
    stats["seconds"] = round(time.perf_counter() - started, 3)
    return grown(), stats


def _grow(seed: int, charge: list[int], beam: int, cost, beta: int, neighbours: list[int], desc, anc,
          known: set[int], found: dict[int, int]) -> None:
    """One seed's beam: sets grow by a neighbour (any label) while they stay convex and fit; the ``beam``
    of least reduced cost go on; each set met with a negative reduced cost that is not known goes into
    ``found`` (bitmask -> DRAM). ``neighbours``: per operator, its fuseable neighbours as a bitmask."""
    # a set as (members, bitmask, descendants, ancestors, its members' charges, its neighbours outside it)
    level = [(frozenset((seed,)), 1 << seed, desc[seed], anc[seed], charge[seed], neighbours[seed])]
    seen = {1 << seed}
    while level:
        grown = []
        for members, mask, d, a, charged, frontier in level:
            rest = frontier
            while rest:
                low = rest & -rest
                rest ^= low
                bigger = mask | low
                if bigger in seen:
                    continue
                seen.add(bigger)
                u = low.bit_length() - 1
                gd, ga = d | desc[u], a | anc[u]
                if gd & ga & ~bigger:
                    continue  # not convex
                group = members | {u}
                priced = cost.evaluate(group)
                if priced.buffer >= beta:
                    continue
                reduced = priced.dram - charged - charge[u]
                outside = (frontier | neighbours[u]) & ~bigger
                grown.append((reduced, bigger, group, gd, ga, charged + charge[u], outside))
                if reduced < 0 and bigger not in known:
                    found[bigger] = priced.dram
        grown.sort(key=lambda item: (item[0], item[1]))
        level = [item[2:3] + item[1:2] + item[3:] for item in grown[:beam]]
