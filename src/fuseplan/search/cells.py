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

Where the price does not add (BRR), an open group keeps its pricing state and
a record of its totals instead, and a group is priced whole when it closes
(:func:`_shortest_path_by_states`).
"""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np

from fuseplan.cost.base import FloorParts
from fuseplan.plan.plan import Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.search.candidates import Reachability, bits, fuseable_neighbour_masks, predecessor_masks

#: Sets the pieces' enumeration may visit over all cells before the search gives up.
MAX_PIECE_SETS = 300_000
#: Seconds between two reports of how far the search is (``on_progress`` of :func:`cell_search`).
PROGRESS_EVERY = 0.25
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
                deadline: float | None = None,
                on_progress: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The optimal plan, found cell by cell between the articulation tensors, as ``{"plan", "dram", "stats"}``.

    ``None`` where the scheme prices open groups neither by shares nor by records
    (:attr:`CostModel.prices_open_groups`), the objective does not follow DRAM, no group can cross an
    articulation tensor, the pieces' enumeration visits more than ``max_sets``
    sets, the cells' searches settle more than ``max_states`` downsets, or the ``deadline`` (a
    ``time.perf_counter()`` time) passes. ``on_progress`` hears how far each phase is (a line for a
    terminal), at most every :data:`PROGRESS_EVERY` seconds and at each phase's last cell.
    """
    if not problem.objective.follows_dram or not problem.fuseable:
        return None
    start_time = time.perf_counter()
    cost = problem.cost
    by_shares = cost.articulation_share(frozenset((min(problem.fuseable),)), None, None) is not None
    if not by_shares and not cost.prices_open_groups:
        return None  # neither shares nor open groups' states: no search cell by cell for this scheme
    # a tensor across which the scheme cannot price a crossing group from its parts does not split cells
    articulations = [a for a in articulation_tensors(problem) if cost.groups_cross(a.producer, a.tensor)]
    if not any(a.producer in problem.fuseable for a in articulations):
        return None  # no group can cross one: the search over the whole graph is no worse
    reported = [time.perf_counter()]

    def progress(phase: str, done: int, total: int) -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise _GiveUp
        if on_progress is not None and (done == total or time.perf_counter() - reported[0] >= PROGRESS_EVERY):
            reported[0] = time.perf_counter()
            on_progress(f"cell by cell, {phase}: cell {done:,} of {total:,}")

    try:
        cells, visits = _cells(problem, articulations, max_sets, deadline, by_shares, progress)
        if by_shares:
            dram, groups, states = _shortest_path(problem, cells, max_states, deadline, progress)
        else:
            dram, groups, states = _shortest_path_by_states(problem, cells, max_states, deadline, progress)
    except _GiveUp:
        return None
    plan = Plan.from_groups(bits(mask) for mask in groups)
    pieces = sum(sum(map(len, cell.inner.values())) + len(cell.closing) + len(cell.leaving_pieces)
                 + (cell.through is not None) for cell in cells)
    stats = {"cells": len(cells), "articulation_tensors": len(articulations),
             "largest_cell": max(cell.high - cell.low + 1 for cell in cells), "pieces": pieces,
             "sets_visited": visits, "states": states, "candidates_complete": True,
             "seconds": round(time.perf_counter() - start_time, 3)}
    return {"plan": plan, "dram": dram, "stats": stats}


def _cells(problem: FusionProblem, articulations: list[Articulation], max_sets: int,
           deadline: float | None, by_shares: bool = True,
           progress: Callable[[str, int, int], None] = lambda *_: None) -> tuple[list[_Cell], int]:
    """The cells between ``articulations``, each with its pieces priced, and the sets visited to find them.
    Without ``by_shares`` the crossing pieces carry no shares (0, 0): their groups are priced whole."""
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

    crossable = [a.producer in fuseable for a in articulations]
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
        entering = articulations[k - 1] if k > 0 and crossable[k - 1] else None
        leaving = articulations[k] if k < len(articulations) and crossable[k] else None
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
                    if not by_shares:
                        leaving_pieces.append((piece, 0, 0))
                        continue
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
                if not by_shares:
                    closing.append((piece, 0, 0))
                    if leaving is not None and piece == mask:
                        through = (0, 0)
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
        progress("listing pieces", k + 1, len(lows))
    return cells, visits


def _settle(cell: _Cell, state: int, pred: list[int], excluded: int) -> int:
    """``state`` (a downset of ``cell``) with every unfuseable operator of the cell that it makes ready."""
    before = (1 << cell.low) - 1  # every earlier cell is done before this one starts
    grown = True
    while grown:
        grown = False
        for v in bits(cell.mask & excluded & ~state):
            if pred[v] & ~(state | before) == 0:
                state |= 1 << v
                grown = True
    return state


def _downsets(cell: _Cell, sources: dict[int, tuple[int, Any]], pred: list[int], excluded: int,
              settled: list[int], max_states: int, deadline: float | None) -> dict[int, tuple[int, Any]]:
    """The least cost (and plan) of every downset of ``cell`` reached from ``sources`` (downset -> (cost,
    plan)) by fitting groups inside the cell: Dijkstra. ``settled`` counts the downsets settled, all cells
    together."""
    before = (1 << cell.low) - 1
    sources = dict(sources)
    best: dict[int, tuple[int, Any]] = {}
    heap = [(cost, state) for state, (cost, _plan) in sources.items()]
    heapq.heapify(heap)
    while heap:
        cost, state = heapq.heappop(heap)
        if state in best:
            continue
        best[state] = (cost, sources[state][1])
        settled[0] += 1
        if settled[0] > max_states or (deadline is not None and not settled[0] & 255
                                       and time.perf_counter() > deadline):
            raise _GiveUp
        plan = sources[state][1]
        for r in bits(cell.mask & ~state & ~excluded):
            if pred[r] & ~(state | before):
                continue  # not ready
            for group, dram, outside in cell.inner.get(r, ()):
                if group & state or outside & ~(state | before):
                    continue
                grown = _settle(cell, state | group, pred, excluded)
                if grown in best:
                    continue
                total = cost + dram
                if grown not in sources or total < sources[grown][0]:
                    sources[grown] = (total, (group, plan))
                    heapq.heappush(heap, (total, grown))
    return best


def _offer(sources: dict[int, tuple[int, Any]], cell: _Cell, state: int, cost: int, plan: Any, pred: list[int],
           excluded: int) -> None:
    state = _settle(cell, state, pred, excluded)
    if state not in sources or cost < sources[state][0]:
        sources[state] = (cost, plan)


def _unfold(closed: tuple[int, Any] | None, settled: int) -> tuple[int, list[int], int]:
    """The cost, the groups and the downsets settled, from the last cell's (cost, plan as a linked list)."""
    if closed is None:  # cannot happen: every fuseable operator fits alone
        raise _GiveUp
    groups = []
    plan = closed[1]
    while plan is not None:
        groups.append(plan[0])
        plan = plan[1]
    return closed[0], groups[::-1], settled


def _shortest_path(problem: FusionProblem, cells: list[_Cell], max_states: int, deadline: float | None,
                   progress: Callable[[str, int, int], None] = lambda *_: None) -> tuple[int, list[int], int]:
    """The least DRAM over the cells (module docstring), the groups of a plan that moves it, and the downsets
    settled: groups crossing articulation tensors priced by their pieces' shares."""
    beta = problem.buffer_bytes
    pred = predecessor_masks(problem)
    excluded = _excluded_mask(problem)
    # A plan so far is a linked list of groups: (group, the rest) or None.
    closed: tuple[int, Any] | None = (0, None)  # (cost, plan) with no group open after the cell
    opened: list[tuple[int, int, Any, int]] = []  # Pareto list (F_beta so far, cost, plan, members), F_beta rising
    settled = [0]
    for done, cell in enumerate(cells):
        progress("searching", done, len(cells))
        sources: dict[int, tuple[int, Any]] = {}
        if closed is not None:
            _offer(sources, cell, 0, *closed, pred, excluded)
        if opened and cell.closing:
            sizes = [label[0] for label in opened]
            for piece, share_buffer, share_dram in cell.closing:
                i = bisect_left(sizes, beta - share_buffer) - 1  # the cheapest open group it still fits beside
                if i >= 0:
                    _, cost, plan, members = opened[i]
                    _offer(sources, cell, piece, cost + share_dram, (members | piece, plan), pred, excluded)
        best = _downsets(cell, sources, pred, excluded, settled, max_states, deadline)
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
        closed = best.get(cell.mask)
    progress("searching", len(cells), len(cells))
    return _unfold(closed, settled[0])


def _shortest_path_by_states(problem: FusionProblem, cells: list[_Cell], max_states: int, deadline: float | None,
                             progress: Callable[[str, int, int], None] = lambda *_: None
                             ) -> tuple[int, list[int], int]:
    """As :func:`_shortest_path`, for a scheme whose prices do not add across articulation tensors (BRR).

    Each open group keeps its pricing state and its record (:meth:`CostModel.open_record`). A closing piece
    is added to the state of the cheapest open group of each key, which gives that group's closed price
    and what the piece adds to the record of every open group of the key (:meth:`CostModel.close_delta`);
    the others are priced from their records (:meth:`CostModel.price_closed`, or as arrays). Of the open
    groups at an articulation tensor, those that another of the same key, no dearer, beats on every entry of
    the vector are dropped, and so is one that no closing can fit: by its closing floor
    (:meth:`CostModel.closing_floor`), or, before it takes a whole cell, by the floor joined from its own and
    the cell's (:meth:`CostModel.join_floor`).
    """
    cost_model = problem.cost
    beta = problem.buffer_bytes
    pred = predecessor_masks(problem)
    excluded = _excluded_mask(problem)
    closed: tuple[int, Any] | None = (0, None)
    # (cost, plan, members, pricing state, key, record, floor parts), cheapest first
    opened: list[tuple[int, Any, int, Any, tuple, tuple, FloorParts]] = []
    settled = [0]

    def grown(state: Any, piece: int, copy: bool = True) -> Any:
        union = cost_model.copy_state(state) if copy else state
        added = bits(piece)
        for v in added:
            union.add(v)
        union.members = state.members | frozenset(added)
        return union

    for done, cell in enumerate(cells):
        progress("searching", done, len(cells))
        sources: dict[int, tuple[int, Any]] = {}
        if closed is not None:
            _offer(sources, cell, 0, *closed, pred, excluded)
        keys = _by_key(opened) if opened and cell.closing else {}
        for piece, _share_buffer, _share_dram in cell.closing if opened else ():
            found = _cheapest_closing(cost_model, opened, keys, frozenset(bits(piece)))
            if found is not None:
                _cost, plan, members, *_ = opened[found[1]]
                _offer(sources, cell, piece, found[0], (members | piece, plan), pred, excluded)
        best = _downsets(cell, sources, pred, excluded, settled, max_states, deadline)
        labels: list[tuple[int, Any, int, Any, FloorParts]] = []
        for piece, _share_buffer, _share_dram in cell.leaving_pieces:
            reached = best.get(cell.mask & ~piece)
            if reached is not None:
                start = cost_model.new_state()
                start.members = frozenset()
                labels.append((reached[0], reached[1], piece, grown(start, piece), cost_model.floor_parts(bits(piece))))
        if cell.through is not None and opened:
            whole_cell = cost_model.floor_parts(bits(cell.mask))
            for cost, plan, members, state, _key, _record, parts in opened:
                # the floor of the open group with the whole cell, bounded from the parts' floors; priced afresh
                # only where the bound says it no longer fits (a lone schedule may still hold next to nothing)
                joined = cost_model.join_floor(parts, whole_cell)
                if cost_model.floor_bytes(joined) >= beta:
                    if cost_model.buffer_floor(bits(members | cell.mask)) >= beta:
                        continue  # no group holding it fits
                # the open groups of this tensor are done with (closed above): each state grows in place
                labels.append((cost, plan, members | cell.mask, grown(state, cell.mask, copy=False), joined))
        labels.sort(key=lambda label: label[0])
        opened = []
        kept: dict[tuple, _Vectors] = {}
        for cost, plan, members, state, parts in labels:  # cheapest first: a kept one is never dearer than one it beats
            key, vector, record = cost_model.open_record(state, cell.leaving.tensor)
            if cost_model.closing_floor(vector) >= beta:
                continue  # no group it closes into fits
            beaten = kept.get(key)
            if beaten is None:
                beaten = kept[key] = _Vectors(len(vector))
            elif beaten.any_at_most(vector):
                continue
            beaten.add(vector)
            opened.append((cost, plan, members, state, key, record, parts))
        closed = best.get(cell.mask)
    progress("searching", len(cells), len(cells))
    return _unfold(closed, settled[0])


class _Vectors:
    """The vectors of the open groups kept for one key, rows of an array that doubles as it fills: whether one
    of them is no higher than a new vector in every entry is one comparison of arrays."""

    def __init__(self, width: int) -> None:
        self.rows = np.empty((8, width))
        self.count = 0

    def any_at_most(self, vector: tuple) -> bool:
        return bool(self.count) and bool((self.rows[:self.count] <= vector).all(axis=1).any())

    def add(self, vector: tuple) -> None:
        if self.count == len(self.rows):
            self.rows = np.concatenate([self.rows, np.empty_like(self.rows)])
        self.rows[self.count] = vector
        self.count += 1


#: Open groups of one key past which their closings are priced as arrays (:meth:`CostModel.price_closed_many`).
_MANY = 8
_NONE = np.iinfo(np.int64).max  # the total of a closing that does not fit


def _cheapest_closing(cost_model: Any, opened: list[tuple], keys: dict,
                      piece: frozenset[int]) -> tuple[int, int] | None:
    """The least cost of an open group (of ``opened``, by key: :func:`_by_key`) closed by ``piece`` within the
    buffer, with the index of that group (the first of equals in ``opened``); ``None`` where none fits.

    Per key, the piece is added to the state of the key's cheapest group (:meth:`CostModel.close_delta`),
    which prices that closing and gives the delta the others are priced from, one by one or, from
    :data:`_MANY` groups on, as arrays (:meth:`CostModel.price_closed_many`)."""
    beta = cost_model.buffer_bytes
    found: tuple[int, int] | None = None
    for key, (indices, costs, records) in keys.items():  # keys by their cheapest open group
        first = opened[indices[0]]
        if found is not None and first[0] > found[0]:
            break  # prices are not negative: no later (dearer) key does better
        delta, price = cost_model.close_delta(first[3], first[3].members, piece)
        if price.buffer < beta and (found is None or first[0] + price.dram < found[0]):
            found = (first[0] + price.dram, indices[0])
        if len(indices) == 1:
            continue
        if len(indices) >= _MANY:
            buffers, drams = cost_model.price_closed_many(key, records, delta)
        else:
            prices = [cost_model.price_closed(key, opened[i][5], delta) for i in indices[1:]]
            buffers = np.array([price.buffer for price in prices], dtype=np.int64)
            drams = np.array([price.dram for price in prices], dtype=np.int64)
        totals = np.where(buffers < beta, costs + drams, _NONE)
        at = int(totals.argmin())  # the first of the least
        total = int(totals[at])
        if total < _NONE and (found is None or total < found[0] or total == found[0] and indices[at + 1] < found[1]):
            found = (total, indices[at + 1])
    return found


def _by_key(opened: list[tuple]) -> dict[tuple, tuple[list[int], np.ndarray, np.ndarray]]:
    """The open groups (cheapest first) by key, keys in the order of their cheapest: per key the indices of
    its groups in ``opened``, and of all but the first (whose closing prices the key's delta) their costs
    and records, as arrays."""
    indices: dict[tuple, list[int]] = {}
    for index, entry in enumerate(opened):
        indices.setdefault(entry[4], []).append(index)
    return {key: (found, np.array([opened[i][0] for i in found[1:]], dtype=np.int64),
                  np.array([opened[i][5] for i in found[1:]], dtype=np.float64).reshape(-1, 10))
            for key, found in indices.items()}


def _excluded_mask(problem: FusionProblem) -> int:
    mask = 0
    for v in problem.excluded:
        mask |= 1 << v
    return mask
