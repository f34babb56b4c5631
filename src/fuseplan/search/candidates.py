"""Every group that can appear in a valid plan: connected, convex and fitting the buffer.

A plan is valid iff its groups are connected, fit the buffer and the graph
of groups is acyclic; a group that is not convex (a path leaves it and comes
back) always closes a cycle, so candidates are the connected convex fitting
sets of fuseable operators.

**Enumeration.** Sets are grown one operator at a time from a seed ``m``,
adding only neighbours labelled above ``m``, so each set is reached from its
smallest member. Every connected convex set ``S`` with smallest member ``m``
is reached through connected convex sets: if ``|S| > 1``, some member other
than ``m`` can be removed keeping ``S`` connected and convex. Proof: take a
leaf block of the block-cut tree of ``S`` (the whole of ``S`` if it has no
cut vertex). The data-flow edges inside the block have a source and a sink,
which are different vertices, and at most one of them is the block's cut
vertex; the other has all its neighbours in ``S`` inside the block, so it has
no predecessor (or no successor) in ``S`` at all. Removing an operator with
no predecessor or no successor in ``S`` keeps ``S`` convex (a path leaving
and re-entering ``S`` minus it would either be such a path for ``S`` or give
it a neighbour in ``S`` on the wrong side), and removing a non-cut vertex
keeps it connected. With two or more leaf blocks there are two such
operators, so one differs from ``m``; with one block, its source and sink
differ, and only one can be ``m``.

**Pruning.** ``F_beta`` can fall when a producer joins a group, so a set
that does not fit is still grown; only :meth:`CostModel.buffer_floor`, which
never decreases as a set grows, prunes. Every set on the way to a fitting
set ``S`` is a subset of ``S``, so its floor is below the buffer and it is
grown. The floor is kept incrementally with a whole row or one block of
channels per tensor (:class:`GrowingFloor`); the cost model's own floor
(BRR's knows which tensors the full/partial alternation must hold whole) is
sharper but costs a pass over the set, so it is asked only of a set that
does not fit, once the floor counted with whole rows (which no floor
exceeds) reaches the buffer, and then each time those whole rows have grown
by what the last answer on the way to the set fell short of the buffer.
Sets are visited smallest first from each seed; a limit on sets visited is shared out evenly over the seeds,
and a seed that needs less leaves the rest to the seeds after it; seeds cut
short resume where they stopped with what is left, pass after pass while a
pass completes one of them. A seed still cut short by the limit makes the enumeration incomplete: the candidates still
build valid plans, but the optimum over them proves nothing. Sets are bitmasks (Python ints over
operator labels); convexity is ``descendants & ancestors ⊆ set``, kept
incrementally.

**Repeated stages** (:mod:`fuseplan.search.repeats`). Where every operator
from a set's smallest to its largest member agrees with the operator a stage
(``k`` labels) below, the set is priced as its copy ``mask >> k``, visited
before it. Where every operator that the growth from seed ``m - k`` reached
agrees with the one ``k`` below, the growth from seed ``m`` is that growth
shifted by ``k`` (the same sets, prices, limit and order), so it is not
walked at all. The candidates are those of pricing every set (tested on the
zoo and on random repeated blocks).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from fuseplan.cost.base import GroupCost
from fuseplan.plan.problem import FusionProblem
from fuseplan.search.repeats import Repeats


def bits(mask: int) -> list[int]:
    """The set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


class MaskUnion:
    """The union of per-operator bitmasks over the members of a set, taken eight operators at a time.

    Each byte of the set's bitmask (operators ``8k`` to ``8k + 7``) is looked
    up in a table of the unions over its 256 subsets, built as bytes are first
    met; a set of ``n`` consecutive operators then costs ``n / 8`` look-ups
    rather than ``n``.
    """

    def __init__(self, per_operator: Sequence[int]) -> None:
        self.per_operator = per_operator
        self.known: dict[int, int] = {}  # 256 * k + byte -> the union over those operators

    def __call__(self, mask: int) -> int:
        if not mask:
            return 0
        known, per_operator = self.known, self.per_operator
        first = ((mask & -mask).bit_length() - 1) >> 3
        found = 0
        for k, byte in enumerate((mask >> 8 * first).to_bytes((mask.bit_length() + 7) // 8 - first, "little"),
                                 first):
            if byte:
                key = k << 8 | byte
                union = known.get(key)
                if union is None:
                    union = 0
                    for i in range(8):
                        if byte >> i & 1:
                            union |= per_operator[8 * k + i]
                    known[key] = union
                found |= union
        return found


def fuseable_neighbour_masks(problem: FusionProblem) -> list[int]:
    """Per fuseable operator, its fuseable neighbours (producers and readers) as a bitmask (0 for the others)."""
    fuseable_mask = 0
    for v in problem.fuseable:
        fuseable_mask |= 1 << v
    masks = [0] * len(problem.graph)
    for v in problem.fuseable:
        for u in problem.graph.neighbours[v]:
            masks[v] |= 1 << u
        masks[v] &= fuseable_mask
    return masks


def predecessor_masks(problem: FusionProblem) -> list[int]:
    """Per operator, its direct predecessors as a bitmask."""
    masks = [0] * len(problem.graph)
    for v, preds in enumerate(problem.graph.predecessors):
        for p in preds:
            masks[v] |= 1 << p
    return masks


def predecessors_outside(problem: FusionProblem, mask: int) -> int:
    """The operators outside the set ``mask`` that its members read from."""
    preds = problem.graph.predecessors
    needed = 0
    for v in bits(mask):
        for p in preds[v]:
            needed |= 1 << p
    return needed & ~mask


@dataclass(frozen=True)
class Reachability:
    """Strict descendants and ancestors of every operator, as bitmasks over operator labels."""

    descendants: tuple[int, ...]
    ancestors: tuple[int, ...]

    @classmethod
    def of(cls, problem: FusionProblem) -> Reachability:
        graph = problem.graph
        n = len(graph)
        desc = [0] * n
        for v in range(n - 1, -1, -1):  # labels are a topological order
            mask = 0
            for s in graph.successors[v]:
                mask |= desc[s] | (1 << s)
            desc[v] = mask
        anc = [0] * n
        for v in range(n):
            mask = 0
            for p in graph.predecessors[v]:
                mask |= anc[p] | (1 << p)
            anc[v] = mask
        return cls(tuple(desc), tuple(anc))


@dataclass(frozen=True)
class Candidates:
    """The candidate groups of a problem, as bitmasks, with their prices."""

    masks: tuple[int, ...]
    dram: tuple[int, ...]
    by_min: dict[int, tuple[int, ...]]  # smallest member -> candidate positions
    sets_visited: int
    complete: bool = True  # False when a per-seed limit cut the enumeration short
    #: per candidate, the operators outside it that it reads from (a bitmask); empty where not recorded
    outside: tuple[int, ...] = ()

    def outside_predecessors(self, problem: FusionProblem) -> tuple[int, ...]:
        """Per candidate, the operators outside it that its members read from, as bitmasks."""
        if len(self.outside) == len(self.masks):
            return self.outside
        return tuple(predecessors_outside(problem, mask) for mask in self.masks)

    def __len__(self) -> int:
        return len(self.masks)


class GrowingFloor:
    """:meth:`CostModel.buffer_floor` kept as a set grows one operator at a time: the operators' terms
    (summed or maxed) and the feature elements of the floor rows, apart.

    A tensor's floor rows are the widest window a member reads it through (at
    least 1), each counting the scheme's ``floor_row_elements``. Where
    ``b * (own + rows)`` reaches the buffer, the scheme's ``lone_floor`` (a set
    that may still grow into a lone operator's group) has the last word
    (:meth:`reaches`).
    """

    def __init__(self, problem: FusionProblem) -> None:
        cost = problem.cost
        self.cost = cost
        self.beta = problem.buffer_bytes
        self.b = cost.bytes_per_element
        self.terms = cost.floor_terms()
        self.by_max = cost.floor_combine == "max"
        tables = cost.tables
        self.row_numel = cost.floor_row_elements
        self.whole_row = tables.tensor_row_numel
        operators = range(len(problem.graph))
        self.window = [tuple((t, max(1, min(int(k), tables.tensor_rows[t]))) for t, k, _s, _r in tables.node_inputs[v])
                       for v in operators]
        # per operator: the tensors whose floor rows its joining may change
        self.touched = [{t for t, _r in self.window[v]} | set(tables.node_outputs[v]) for v in operators]
        self.readers = [tuple((c, r) for c in tables.tensor_consumers[t] for tt, r in self.window[c] if tt == t)
                        for t in range(len(self.row_numel))]
        self.producer = [problem.graph.tensors[t].producer for t in range(len(self.row_numel))]

    def floor_rows(self, t: int, mask: int) -> int:
        """Floor rows of tensor ``t`` for the set ``mask`` (0 if the set does not touch it)."""
        producer = self.producer[t]
        rows = 1 if producer is not None and mask >> producer & 1 else 0
        for c, r in self.readers[t]:
            if mask >> c & 1 and r > rows:
                rows = r
        return rows

    def extra_rows(self, u: int, mask: int) -> float:
        """Feature elements the floor gains when ``u`` joins the set ``mask``."""
        grown = mask | (1 << u)
        extra = 0
        for t in self.touched[u]:
            gain = self.floor_rows(t, grown) - self.floor_rows(t, mask)
            if gain:
                extra += gain * self.row_numel[t]
        return extra

    def row_gains(self, u: int, mask: int) -> tuple[float, int]:
        """Feature elements the floor gains when ``u`` joins the set ``mask`` (:meth:`extra_rows`), and the
        elements of the same rows counted whole (:attr:`GraphTables.tensor_row_numel`)."""
        grown = mask | (1 << u)
        extra = 0
        whole = 0
        for t in self.touched[u]:
            gain = self.floor_rows(t, grown) - self.floor_rows(t, mask)
            if gain:
                extra += gain * self.row_numel[t]
                whole += gain * self.whole_row[t]
        return extra, whole

    def grown_terms(self, own: int, u: int) -> int:
        """The operator terms of a set with terms ``own`` once ``u`` joins it."""
        return max(own, self.terms[u]) if self.by_max else own + self.terms[u]

    def reaches(self, own: int, rows: float, members: tuple[int, ...]) -> bool:
        """Whether the floor of ``members`` (whose terms and rows are ``own`` and ``rows``) reaches the
        buffer: no fitting group holds them."""
        if self.b * (own + rows) < self.beta:
            return False
        lone = self.cost.lone_floor(members)
        return lone is None or self.b * lone >= self.beta


@dataclass
class _Growth:
    """Where the enumeration from one seed stands: sets to visit, sets visited but not yet grown (when a
    limit cut it short), sets reached, the fitting sets with their DRAM, and the sets priced.

    A set in the queue is a tuple: its bitmask, its members in the order they joined, its members'
    descendants and ancestors, the neighbours above the seed that may join, the floor's operator terms,
    its feature elements, the same rows counted whole, the operators its members read from, and the
    terms and whole rows at which the cost model's floor is asked next.
    """

    queue: deque
    waiting: list
    seen: set[int]
    found: list[tuple[int, int, int]]  # (set, DRAM, the operators outside it that it reads from)
    priced: set[int]
    visits: int = 0  # sets visited in all
    peak: int = 0  # the most sets visited and queued when the limit was looked at
    high: int = 0  # the largest operator label any set reached held or was refused for
    cut: bool = False
    visited: list = field(default_factory=list)  # (set, price) of every set visited, where repeats are looked up


def enumerate_candidates(problem: FusionProblem, max_sets: int | None = None,
                         orders: Sequence[Sequence[int]] = (), deadline: float | None = None,
                         repeats: Repeats | None = None) -> Candidates:
    """All connected convex fuseable groups that fit the buffer (see the module docstring).

    At most about ``max_sets`` sets (fitting or not) are visited; if that cuts
    any seed short, the result has ``complete=False``, and the groups of the
    interval plans of ``orders`` are added (:func:`run_components`), so that
    plans built from the candidates are never worse than the interval DP's.
    Past ``deadline`` (a ``time.perf_counter()`` time) every seed stops
    growing, as if the limit had been reached, and the interval plans' groups
    are added only as far as they were priced by then.
    ``repeats``: the graph's repeated stages (:class:`~fuseplan.search.repeats.Repeats`, found by default;
    ``Repeats(())`` prices every set): a seed whose growth is a copy of the finished growth of the seed a
    stage below takes that growth shifted, and a set inside a run of repeated stages takes the price of
    its copy a stage below.
    """
    cost = problem.cost
    beta = problem.buffer_bytes
    reach = Reachability.of(problem)
    desc, anc = reach.descendants, reach.ancestors
    fuseable_mask = 0
    for v in problem.fuseable:
        fuseable_mask |= 1 << v
    neighbour_mask = fuseable_neighbour_masks(problem)
    pred = predecessor_masks(problem)
    floor = GrowingFloor(problem)
    terms, by_max, row_gains = floor.terms, floor.by_max, floor.row_gains
    b = cost.bytes_per_element
    # Uncached: most visited sets are never priced again. A set grown by an operator above all its members
    # is priced from the pricing state of the set it grew from (visited just before it, almost always). A
    # set whose rest (less its largest member) was not priced has no state to grow from: it is priced
    # through the cache, so that the cost model builds the states of the sets grown from it, rather than
    # pricing every set grown from it from scratch (4,985 of resnet152's 72,190 sets under BRR at 256KB).
    price, evaluate, share_state, buffer_floor = cost.price, cost.evaluate, cost.share_state, cost.buffer_floor
    if repeats is None:
        repeats = Repeats.of(problem)
    copy_below = repeats.copy_below if repeats.shifts else None
    known: dict[int, GroupCost] = {}  # the price of every set visited, where repeats are looked up
    copies: dict[int, GroupCost] = {}  # the sets priced as their copy below
    remember = cost.remember

    def grow(m: int, allowance: float, growth: _Growth | None = None) -> tuple[_Growth, int, bool]:
        """Fitting sets with smallest member ``m``, smallest first, visiting about ``allowance`` more sets:
        ``(the growth so far, sets visited by this call, cut short)``. A growth cut short resumes where it
        stopped when handed back."""
        above = fuseable_mask & ~((1 << (m + 1)) - 1)
        if growth is None:
            start = 1 << m
            growth = _Growth(deque([(start, (m,), desc[m], anc[m], neighbour_mask[m] & above, terms[m],
                                     *row_gains(m, 0), pred[m], beta / b)]), [], {start}, [], set(), high=m)
        queue, seen, found, priced = growth.queue, growth.seen, growth.found, growth.priced
        waiting, growth.waiting = growth.waiting, []  # priced by an earlier call, not yet grown
        visits = 0
        cut = False
        # a set up to copy_to may have a copy a stage below; one up to source_to may be a copy's source
        copy_to, source_to = repeats.limits(m) if copy_below else (-1, -1)

        def expand(item: tuple) -> None:
            mask, members, d, a, frontier, own, rows, whole, reads, check_at = item
            above_all = 1 << mask.bit_length()  # an operator from here on joins above every member
            grown_above = 0
            rest = frontier
            while rest:
                low = rest & -rest
                rest ^= low
                grown = mask | low
                if grown in seen:
                    continue
                seen.add(grown)
                u = low.bit_length() - 1
                if u > growth.high:
                    growth.high = u
                gd, ga = d | desc[u], a | anc[u]
                if gd & ga & ~grown:
                    continue  # not convex: a path leaves the set and comes back
                grown_own = max(own, terms[u]) if by_max else own + terms[u]
                gain, whole_gain = row_gains(u, mask)
                grown_rows = rows + gain
                if b * (grown_own + grown_rows) >= beta and floor.reaches(grown_own, grown_rows, (*members, u)):
                    continue
                queue.append((grown, (*members, u), gd, ga, (frontier | neighbour_mask[u]) & above & ~grown,
                              grown_own, grown_rows, whole + whole_gain, reads | pred[u], check_at))
                if low >= above_all:
                    grown_above += 1
            if grown_above > 1:  # each will be priced from this set's pricing state
                share_state(frozenset(members), grown_above)

        for item in waiting:
            if visits + len(queue) >= allowance:
                growth.waiting.append(item)
                cut = True
            else:
                expand(item)
        while queue:
            item = queue.popleft()
            visits += 1
            mask, members = item[0], item[1]
            priced.add(mask)
            top = mask.bit_length() - 1
            known_cost = copy_below(mask, m, top, known) if top <= copy_to else None
            if known_cost is not None:
                buffer, dram = known_cost
                copies[mask] = known_cost
            elif len(members) > 1 and mask ^ (1 << top) in priced:
                group = frozenset(members)
                if mask ^ (1 << top) in copies:  # its rest was not priced here: the cost model learns its price
                    remember(group - {top}, copies[mask ^ (1 << top)])
                buffer, dram = price(group)
            else:
                buffer, dram = evaluate(frozenset(members))
            if top <= source_to:
                known[mask] = known_cost or GroupCost(buffer, dram)
                growth.visited.append((mask, known[mask]))
            if buffer < beta:
                found.append((item[0], dram, item[8] & ~item[0]))
            elif item[4] and item[5] + item[7] >= item[9]:  # the terms and whole rows reach the threshold
                least = buffer_floor(members)
                if least >= beta:
                    continue  # no set holding this one fits: not grown
                item = (*item[:9], item[5] + item[7] + (beta - least) / b)  # ask again once grown that much
            if deadline is not None and not visits & 1023 and time.perf_counter() > deadline:
                allowance = 0  # out of time: stop growing, as at the limit
            if visits + len(queue) > growth.peak:
                growth.peak = visits + len(queue)
            if visits + len(queue) >= allowance:
                if item[4]:  # a frontier left: kept to grow if the seed resumes
                    growth.waiting.append(item)
                    cut = True
                continue
            expand(item)
        growth.visits += visits
        growth.cut = cut
        return growth, visits, cut

    def copied(m: int, allowance: float) -> _Growth | None:
        """The growth from seed ``m`` as a copy of a finished growth ``k`` below it, where every operator it
        can reach agrees with the one ``k`` below (:mod:`fuseplan.search.repeats`) and the limit would not
        have cut it short; ``None`` where there is none."""
        for k, agreeing in repeats.shifts:
            below = growths.get(m - k)
            if below is None or below.cut or below.peak >= allowance:
                continue
            span = (1 << (below.high + k + 1)) - (1 << m)
            if span & ~agreeing:
                continue
            found = [(mask << k, dram, reads << k) for mask, dram, reads in below.found]
            visited = [(mask << k, price) for mask, price in below.visited]
            known.update(visited)
            return _Growth(deque(), [], set(), found, set(), visits=below.visits, peak=below.peak,
                           high=below.high + k, visited=visited)
        return None

    # First pass: an even share per seed, unused allowance carried forward.
    seeds = sorted(problem.fuseable)
    limit = float("inf") if max_sets is None else float(max_sets)
    growths: dict[int, _Growth] = {}
    visited = 0
    cut_seeds: list[int] = []
    def out_of_time() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    for position, m in enumerate(seeds):
        # out of time, a seed still gives its own operator alone: every plan needs those
        allowance = 1.0 if out_of_time() else max(1.0, (position + 1) * limit / len(seeds) - visited)
        copy = copied(m, allowance) if repeats.shifts else None
        if copy is not None:
            growths[m], visits, cut = copy, copy.visits, False
        else:
            growths[m], visits, cut = grow(m, allowance)
        visited += visits
        if cut:
            cut_seeds.append(m)
    # Later passes: seeds cut short resume where they stopped with what is left, shared out the same way,
    # as long as a pass completes some seed (what a completed seed leaves over goes to the others).
    while cut_seeds and limit - visited > len(cut_seeds) and not out_of_time():
        spare = limit - visited
        used = 0
        still_cut = []
        for position, m in enumerate(cut_seeds):
            allowance = max(1.0, (position + 1) * spare / len(cut_seeds) - used)
            _, visits, cut = grow(m, allowance, growths[m])
            used += visits
            if cut:
                still_cut.append(m)
        visited += used
        if len(still_cut) == len(cut_seeds):
            break
        cut_seeds = still_cut
    per_seed = {m: growth.found for m, growth in growths.items()}
    complete = not cut_seeds

    if not complete:
        known = {mask for found in per_seed.values() for mask, _, _ in found}
        for order in orders:
            for mask, dram in run_components(problem, order, reach, deadline=deadline):
                if mask not in known:
                    known.add(mask)
                    per_seed[(mask & -mask).bit_length() - 1].append((mask, dram,
                                                                      predecessors_outside(problem, mask)))

    masks: list[int] = []
    drams: list[int] = []
    outside: list[int] = []
    by_min: dict[int, tuple[int, ...]] = {}
    for m in seeds:
        by_min[m] = tuple(range(len(masks), len(masks) + len(per_seed[m])))
        for mask, dram, reads in per_seed[m]:
            masks.append(mask)
            drams.append(dram)
            outside.append(reads)
    return Candidates(masks=tuple(masks), dram=tuple(drams), by_min=by_min, sets_visited=visited,
                      complete=complete, outside=tuple(outside))


#: How far past the last growth of a run's component :func:`run_components` keeps scanning.
RUN_SLACK = 64
#: Operators priced per order by :func:`run_components`, at most.
RUN_WORK = 3_000_000


def run_components(problem: FusionProblem, order: Sequence[int], reach: Reachability | None = None,
                   max_work: int = RUN_WORK, deadline: float | None = None) -> list[tuple[int, int]]:
    """Fitting convex groups of the form "the component of ``order[p]`` among the fuseable operators of
    ``order[p:j]``", with their DRAM, for every start ``p`` and end ``j``.

    These are the groups the interval DP builds its plans from: a component
    of a run is the component of its first member within the run from that
    member on. A component only grows with ``j`` and its buffer floor with
    it, so each start stops once the floor passes the buffer, or
    :data:`RUN_SLACK` positions after its component last grew. All starts
    together price at most about ``max_work`` operators, shared out evenly
    over the starts (a start that needs less passes the rest on). Past ``deadline`` (a
    ``time.perf_counter()`` time) no more groups are priced: the groups found by then are returned.
    """
    graph, cost = problem.graph, problem.cost
    beta = problem.buffer_bytes
    reach = reach or Reachability.of(problem)
    desc, anc = reach.descendants, reach.ancestors
    fuseable = problem.fuseable
    neighbours = graph.neighbours
    found: list[tuple[int, int]] = []
    work = 0
    share = max_work / max(1, len(order))
    for p, m in enumerate(order):
        if m not in fuseable:
            continue
        allowance = (p + 1) * share
        root: dict[int, int] = {m: m}  # operator -> component id within the run
        members: dict[int, list[int]] = {m: [m]}
        last_growth = p
        grown = True
        for j in range(p, len(order)):
            v = order[j]
            if j > p:
                if v not in fuseable:
                    continue
                touching = {root[u] for u in neighbours[v] if u in root}
                merged = [v]
                for c in touching:
                    merged += members.pop(c)
                target = root[m] if root[m] in touching else v
                for u in merged:
                    root[u] = target
                members[target] = merged
                grown = target == root[m] and root[m] in touching
            if not grown:
                if j - last_growth > RUN_SLACK:
                    break
                continue
            last_growth = j
            group = members[root[m]]
            if cost.buffer_floor(group) >= beta:
                break
            work += len(group)
            if work > allowance:
                break
            mask = d = a = 0
            for u in group:
                mask |= 1 << u
                d |= desc[u]
                a |= anc[u]
            if d & a & ~mask:
                continue  # not convex: skipped, but it may become convex as it grows
            if deadline is not None and time.perf_counter() > deadline:
                return found
            buffer, dram = cost.price(frozenset(group))
            if buffer < beta:
                found.append((mask, dram))
    return found
