"""Exact plans cell by cell, between the graph's articulation tensors.

An *articulation tensor* ``t``, made by operator ``p``, is the only tensor
passing from the operators up to ``p`` to the operators after it: every
other operator is an ancestor or a descendant of ``p`` (labels being a
topological order, the ancestors are exactly the labels below ``p``), and no
tensor but ``t`` (no model input either) is read on both sides. A chain has
one after every operator, a network of blocks one after every block:
GoogLeNet after each inception block's concatenation and each pooling
between them.

The articulation tensors split the operators into *cells*, runs of
consecutive labels. Every operator of a cell is an ancestor of every
operator of the next, so everything in a cell runs before anything in the
next one except through the group that holds the articulation tensor's
producer: a plan is a plan of each cell plus the groups that cross
articulation tensors. A crossing group is made of *pieces*, one per cell it
spans. A piece leaving a cell holds the cell's last operator (the next
articulation tensor's producer) and is convex and connected in the cell; a
piece entering a cell holds readers of the articulation tensor and is, with
its producer, convex and connected; a piece that enters and leaves is the
whole cell (a convex group holding both ends holds everything between them).
Where the scheme's price adds across articulation tensors
(:meth:`CostModel.articulation_share`: LBDF), a crossing group's ``F_beta``
and ``F_D`` are the sums of its pieces' shares.

So a shortest path runs cell by cell. Entering a cell, either no group is
open (the least cost of everything before, one number) or one is, as a
Pareto list of (its ``F_beta`` so far, the cost so far). Inside the cell, a
search over the cell's downsets (as :func:`fuseplan.search.exact.downset_search`
over the whole graph) starts from the empty set (nothing open) and from
every entering piece that closes an open group within the buffer; its steps
are the fitting groups inside the cell. Leaving the cell, each leaving piece
opens a group from the downset of the rest of the cell, and an open group may
take the whole cell. The optimum is the cost of the whole graph with nothing
open. It is exact, and needs no list of the crossing groups, whose number
multiplies with the cells they span (GoogLeNet under LBDF at 2MB: 1.9
million candidates, almost all crossing). The pieces of a cell are
enumerated whole, pruned only by the buffer floor of the groups that would
hold them (:meth:`CostModel.buffer_floor`), so nothing is missed; the search
gives up (``None``) where the pieces or the downsets pass their limits.
"""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.search.candidates import Reachability, bits, fuseable_neighbour_masks, predecessor_masks

#: Sets the pieces' enumeration may visit over all cells before the search gives up.
MAX_PIECE_SETS = 300_000
#: Downsets the cells' searches may settle, all cells together, before the search gives up.
MAX_CELL_STATES = 200_000


@dataclass(frozen=True)
class Articulation:
    """An articulation tensor and the operator that makes it."""

    tensor: int
    producer: int


def articulation_tensors(problem: FusionProblem) -> list[Articulation]:
    """The graph's articulation tensors (module docstring), by their producers' labels.

    A producer that is a barrier (its output starts a new phase of the streaming analysis) is left out:
    across it the streaming positions after it do not follow from the articulation tensor's alone.
    """
    graph = problem.graph
    n = len(graph)
    if n < 2:
        return []
    reach = Reachability.of(problem)
    full = (1 << n) - 1
    change = [0] * (n + 1)  # tensors passing the boundary after label k: +1 at their first label, -1 at the last
    for tensor in graph.tensors:
        if not tensor.consumers:
            continue
        first = tensor.producer if tensor.producer is not None else min(tensor.consumers)
        last = max(tensor.consumers)
        if first < last:
            change[first] += 1
            change[last] -= 1
    found = []
    passing = 0
    for p in range(n - 1):
        passing += change[p]
        if passing != 1 or graph.nodes[p].is_barrier:
            continue
        if reach.ancestors[p] != (1 << p) - 1 or reach.descendants[p] != full & ~((1 << (p + 1)) - 1):
            continue
        crossing = [t for t in graph.nodes[p].outputs if any(c > p for c in graph.tensors[t].consumers)]
        if len(crossing) == 1:
            found.append(Articulation(crossing[0], p))
    return found


@dataclass
class _Cell:
    """A run of labels between articulation tensors, with its pieces (bitmasks) and their prices or shares."""

    low: int
    high: int
    mask: int
    entering: Articulation | None  # the articulation tensor read in the cell, made before it
    leaving: Articulation | None  # the articulation tensor made by the cell's last operator, read after it
    # smallest member -> (group, DRAM, the operators outside it that it reads from): fitting groups inside the cell
    inner: dict[int, list[tuple[int, int, int]]]
    closing: list[tuple[int, int, int]]  # (piece, F_beta share, DRAM share): entering pieces that end the group
    leaving_pieces: list[tuple[int, int, int]]  # (piece, F_beta share, DRAM share): pieces holding the last operator
    through: tuple[int, int] | None  # the whole cell's shares, entering and leaving


class _GiveUp(Exception):
    pass


def cell_search(problem: FusionProblem, max_sets: int = MAX_PIECE_SETS, max_states: int = MAX_CELL_STATES,
                deadline: float | None = None) -> dict[str, Any] | None:
    """The optimal plan, found cell by cell between the articulation tensors, as ``{"plan", "dram", "stats"}``.

    ``None`` where the scheme's prices do not add across articulation tensors, the objective does not follow
    DRAM, no group can cross an articulation tensor, the pieces' enumeration visits more than ``max_sets``
    sets, the cells' searches settle more than ``max_states`` downsets, or the ``deadline`` (a
    ``time.perf_counter()`` time) passes.
    """
    if not problem.objective.follows_dram or not problem.fuseable:
        return None
    start_time = time.perf_counter()
    cost = problem.cost
    if cost.articulation_share(frozenset((min(problem.fuseable),)), None, None) is None:
        return None  # the scheme's prices do not add across articulation tensors
    articulations = articulation_tensors(problem)
    if not any(a.producer in problem.fuseable for a in articulations):
        return None  # no group can cross one: the search over the whole graph is no worse
    try:
        cells, visits = _cells(problem, articulations, max_sets, deadline)
        dram, groups, states = _shortest_path(problem, cells, max_states, deadline)
    except _GiveUp:
        return None
    plan = Plan.from_groups(bits(mask) for mask in groups)
    pieces = sum(sum(map(len, cell.inner.values())) + len(cell.closing) + len(cell.leaving_pieces)
                 + (cell.through is not None) for cell in cells)
    stats = {"cells": len(cells), "articulation_tensors": len(articulations),
             "largest_cell": max(cell.high - cell.low + 1 for cell in cells), "pieces": pieces,
             "sets_visited": visits, "states": states, "seconds": round(time.perf_counter() - start_time, 3)}
    return {"plan": plan, "dram": dram, "stats": stats}


def _cells(problem: FusionProblem, articulations: list[Articulation], max_sets: int,
           deadline: float | None) -> tuple[list[_Cell], int]:
    """The cells between ``articulations``, each with its pieces priced, and the sets visited to find them."""
    cost = problem.cost
    beta = problem.buffer_bytes
    graph = problem.graph
    n = len(graph)
    reach = Reachability.of(problem)
    desc, anc = reach.descendants, reach.ancestors
    neighbours = fuseable_neighbour_masks(problem)
    pred = predecessor_masks(problem)
    fuseable = problem.fuseable
    visits = 0

    def grow(seed: int, allowed: int) -> list[int]:
        """Connected convex sets of operators in ``allowed`` holding ``seed`` (its smallest member), whose
        buffer floor is below the buffer."""
        nonlocal visits
        found = []
        queue = [1 << seed]
        seen = {1 << seed}
        above = allowed & ~((1 << (seed + 1)) - 1)
        while queue:
            mask = queue.pop()
            visits += 1
            if visits > max_sets or (deadline is not None and not visits & 255 and time.perf_counter() > deadline):
                raise _GiveUp
            if cost.buffer_floor(bits(mask)) >= beta:
                continue  # no group holding it fits
            found.append(mask)
            frontier = 0
            for v in bits(mask):
                frontier |= neighbours[v]
            frontier &= above & ~mask
            d = a = 0
            for v in bits(mask):
                d |= desc[v]
                a |= anc[v]
            for u in bits(frontier):
                grown = mask | (1 << u)
                if grown in seen:
                    continue
                seen.add(grown)
                if (d | desc[u]) & (a | anc[u]) & ~grown:
                    continue  # not convex
                queue.append(grown)
        return found

    bounds = [a.producer for a in articulations]
    lows = [0] + [p + 1 for p in bounds]
    highs = bounds + [n - 1]
    cells = []
    for k, (low, high) in enumerate(zip(lows, highs)):
        mask = ((1 << (high + 1)) - 1) & ~((1 << low) - 1)
        fuse_mask = 0
        for v in range(low, high + 1):
            if v in fuseable:
                fuse_mask |= 1 << v
        entering = articulations[k - 1] if k > 0 and articulations[k - 1].producer in fuseable else None
        leaving = articulations[k] if k < len(articulations) and high in fuseable else None
        inner: dict[int, list[tuple[int, int, int]]] = {}
        leaving_pieces = []
        for seed in bits(fuse_mask):
            for piece in grow(seed, fuse_mask):
                members = frozenset(bits(piece))
                buffer, dram = cost.evaluate(members)
                if buffer < beta:
                    outside = 0
                    for v in members:
                        outside |= pred[v]
                    inner.setdefault(seed, []).append((piece, dram, outside & ~piece))
                if leaving is not None and piece >> high & 1:
                    share = cost.articulation_share(members, None, leaving.tensor)
                    if share.buffer < beta:
                        leaving_pieces.append((piece, share.buffer, share.dram))
        closing = []
        through = None
        if entering is not None:
            for grown in grow(entering.producer, fuse_mask | (1 << entering.producer)):
                piece = grown & ~(1 << entering.producer)
                if not piece:
                    continue
                members = frozenset(bits(piece))
                share = cost.articulation_share(members, entering.tensor, None)
                if share.buffer < beta:
                    closing.append((piece, share.buffer, share.dram))
                if leaving is not None and piece == mask:
                    both = cost.articulation_share(members, entering.tensor, leaving.tensor)
                    if both.buffer < beta:
                        through = (both.buffer, both.dram)
        cells.append(_Cell(low, high, mask, entering, leaving, inner, closing, leaving_pieces, through))
    return cells, visits


def _shortest_path(problem: FusionProblem, cells: list[_Cell], max_states: int,
                   deadline: float | None) -> tuple[int, list[int], int]:
    """The least DRAM over the cells (module docstring), the groups of a plan that moves it, and the downsets
    settled."""
    beta = problem.buffer_bytes
    pred = predecessor_masks(problem)
    excluded = 0
    for v in problem.excluded:
        excluded |= 1 << v
    # A plan so far is a linked list of groups: (group, the rest) or None.
    closed: tuple[int, Any] | None = (0, None)  # (cost, plan) with no group open after the cell
    opened: list[tuple[int, int, Any, int]] = []  # Pareto list (F_beta so far, cost, plan, members), F_beta rising
    settled = 0
    for cell in cells:
        before = (1 << cell.low) - 1  # every earlier cell is done before this one starts

        def settle(state: int) -> int:
            """``state`` with every unfuseable operator of the cell that it makes ready."""
            grown = True
            while grown:
                grown = False
                for v in bits(cell.mask & excluded & ~state):
                    if pred[v] & ~(state | before) == 0:
                        state |= 1 << v
                        grown = True
            return state

        sources: dict[int, tuple[int, Any]] = {}

        def offer(state: int, cost: int, plan: Any) -> None:
            state = settle(state)
            if state not in sources or cost < sources[state][0]:
                sources[state] = (cost, plan)

        if closed is not None:
            offer(0, *closed)
        if opened and cell.closing:
            sizes = [label[0] for label in opened]
            for piece, share_buffer, share_dram in cell.closing:
                i = bisect_left(sizes, beta - share_buffer) - 1  # the cheapest open group it still fits beside
                if i >= 0:
                    _, cost, plan, members = opened[i]
                    offer(piece, cost + share_dram, (members | piece, plan))
        best: dict[int, tuple[int, Any]] = {}
        heap = [(cost, state) for state, (cost, _plan) in sources.items()]
        heapq.heapify(heap)
        while heap:
            cost, state = heapq.heappop(heap)
            if state in best:
                continue
            best[state] = (cost, sources[state][1])
            settled += 1
            if settled > max_states or (deadline is not None and not settled & 255
                                        and time.perf_counter() > deadline):
                raise _GiveUp
            plan = sources[state][1]
            for r in bits(cell.mask & ~state & ~excluded):
                if pred[r] & ~(state | before):
                    continue  # not ready
                for group, dram, outside in cell.inner.get(r, ()):
                    if group & state or outside & ~(state | before):
                        continue
                    grown = settle(state | group)
                    if grown in best:
                        continue
                    total = cost + dram
                    if grown not in sources or total < sources[grown][0]:
                        sources[grown] = (total, (group, plan))
                        heapq.heappush(heap, (total, grown))
        done = best.get(cell.mask)
        labels: list[tuple[int, int, Any, int]] = []
        for piece, share_buffer, share_dram in cell.leaving_pieces:
            reached = best.get(cell.mask & ~piece)
            if reached is not None:
                labels.append((share_buffer, reached[0] + share_dram, reached[1], piece))
        if cell.through is not None:
            share_buffer, share_dram = cell.through
            for size, cost, plan, members in opened:
                if size + share_buffer < beta:
                    labels.append((size + share_buffer, cost + share_dram, plan, members | cell.mask))
        labels.sort(key=lambda label: (label[0], label[1]))
        opened = []
        for label in labels:  # keep those cheaper than every smaller one
            if not opened or label[1] < opened[-1][1]:
                opened.append(label)
        closed = done
    if closed is None:  # cannot happen: every fuseable operator fits alone
        raise _GiveUp
    groups = []
    plan = closed[1]
    while plan is not None:
        groups.append(plan[0])
        plan = plan[1]
    return closed[0], groups[::-1], settled
