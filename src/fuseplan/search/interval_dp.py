"""The exact reference: dynamic programming over contiguous intervals of a topological order.

Fix a topological order of the operators. Cutting it into contiguous runs,
and every run into its weakly connected components, always gives a valid
plan structure (see :mod:`fuseplan.plan.moves`); unfuseable operators are
runs of their own. Among all plans of that form the cheapest is found
exactly by a shortest-path recursion over cut positions::

    best[j] = min over i < j of best[i] + sum of F_D over the components of order[i:j]

where every component must fit the buffer. Extending a run only ever adds a
consumer to a component, and a component that does not fit stays too big as
it grows, so the scan of run ends from a given start stops at the first
component that does not fit (the growth exception documented in
docs/cost-models.md only arises when a *producer* is added, which a run
extended in topological order never does, except when it merges two
components; ``exhaustive=True`` skips the early stop to check).

The optimum depends on the order. fuseplan tries a few natural orders (the
model's own, a depth-first one that keeps chains together, and both with
unfuseable operators scheduled as late as possible) and keeps the best; the
answer is optimal among the interval plans of the order it reports.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from fuseplan.errors import FuseplanError
from fuseplan.plan.plan import Group, Plan
from fuseplan.plan.problem import FusionProblem
from fuseplan.search.base import SearchAlgorithm, SearchContext

INF = float("inf")

#: Operators priced, summed over the intervals of one order, before the DP gives up. Groups that can span most of a
#: long network make the DP cubic in time and quadratic in memory (every interval's groups are cached);
#: this keeps it to seconds and well under a gigabyte. The zoo stays far below it.
MAX_WORK = 5_000_000


class IntervalDPTooLarge(Exception):
    """Raised when the interval DP would price more than its work limit."""


def candidate_orders(problem: FusionProblem) -> dict[str, list[int]]:
    """Named topological orders the interval DP is run on (an order two names share, under the first)."""
    unique: dict[tuple[int, ...], str] = {}
    for name, order in named_orders(problem).items():
        unique.setdefault(tuple(order), name)
    return {name: list(order) for order, name in unique.items()}


def named_orders(problem: FusionProblem) -> dict[str, list[int]]:
    """Every named order of :func:`candidate_orders`, equal ones included."""
    graph = problem.graph
    model = list(range(len(graph)))
    depth_first = _kahn_heap(graph, None, chained=True)
    if not problem.excluded:  # nothing to schedule late: the orders without it (smallest index first is the model's)
        return {"model": model, "depth-first": depth_first, "unfuseable-late": list(model),
                "depth-first-unfuseable-late": list(depth_first)}
    excluded = [False] * len(graph)
    for v in problem.excluded:
        excluded[v] = True
    return {
        "model": model,
        "depth-first": depth_first,
        "unfuseable-late": _kahn_heap(graph, excluded, chained=False),
        "depth-first-unfuseable-late": _kahn_heap(graph, excluded, chained=True),
    }


def _kahn_heap(graph, late: list[bool] | None, *, chained: bool) -> list[int]:
    """A topological order (Kahn's algorithm, O(n log n)) taking, among ready operators, those not ``late``
    first; among those, a successor of the last one taken if ``chained``; then the smallest index."""
    if _takes_the_model_order(graph, late, chained=chained):
        return list(range(len(graph)))
    successors = graph.successors
    waiting = [len(p) for p in graph.predecessors]
    n = len(waiting)
    # One heap of keys ordering (late, index): a late operator's key is its index plus n.
    key = list(range(n)) if late is None else [v + n if late[v] else v for v in range(n)]
    ready = [w == 0 for w in waiting]
    heap = [key[v] for v in range(n) if ready[v]]
    heapq.heapify(heap)
    order: list[int] = []
    last: int | None = None
    while True:
        taken = -1
        if chained and last is not None:
            for s in successors[last]:  # the first ready successor by key (they are sorted by index)
                if ready[s] and (taken < 0 or key[s] < key[taken]):
                    taken = s
        while heap and not ready[heap[0] % n]:
            heapq.heappop(heap)  # taken earlier as a successor
        if heap and (taken < 0 or heap[0] < n <= key[taken]):
            taken = heapq.heappop(heap) % n  # no ready successor, or only a late one while another is not late
        if taken < 0:
            return order
        ready[taken] = False
        order.append(taken)
        last = taken
        for s in successors[taken]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready[s] = True
                heapq.heappush(heap, key[s])


def _takes_the_model_order(graph, late: list[bool] | None, *, chained: bool) -> bool:
    """Whether :func:`_kahn_heap` takes the operators in index order (as it does on most exported models),
    checked in O(edges) without running it.

    Suppose it took ``0 .. v-1``. Then the ready operators are those from ``v`` on whose last predecessor
    is below ``v``, ``v`` among them; the ready successors of ``v - 1`` are those whose last predecessor is
    ``v - 1``. ``v`` is taken next unless a ready operator ranks before it: one not late while ``v`` is
    late, or, if ``chained``, a ready successor of ``v - 1`` other than ``v`` in ``v``'s class.
    """
    n = len(graph)
    predecessors, successors = graph.predecessors, graph.successors
    last_before = [p[-1] if p else -1 for p in predecessors]
    if late is not None:
        # Per v: the earliest last predecessor of an operator after v that is not late (n if none).
        soonest = [n] * (n + 1)
        for u in range(n - 1, -1, -1):
            soonest[u] = soonest[u + 1]
            if u + 1 < n and not late[u + 1] and last_before[u + 1] < soonest[u]:
                soonest[u] = last_before[u + 1]
        for v in range(n):
            if late[v] and soonest[v] < v:
                return False  # an operator that is not late is ready while v is late
    if chained:
        for v in range(1, n):
            lateness = late is not None and late[v]
            for s in successors[v - 1]:  # ascending: the first ready one of v's class is taken
                if last_before[s] == v - 1 and (late is None or late[s] == lateness):
                    if s != v:
                        return False
                    break
    return True


def interval_dp(problem: FusionProblem, order: list[int], *, exhaustive: bool = False,
                max_work: int | None = None) -> tuple[Plan | None, float, int]:
    """Cheapest interval plan of ``order``: ``(plan, DRAM bytes, intervals priced)``.

    Raises :class:`IntervalDPTooLarge` once the sizes of the groups priced add
    up to more than ``max_work``.
    """
    n = len(order)
    excluded = set(problem.excluded)
    neighbours = problem.graph.neighbours  # only fuseable operators ever enter a component
    evaluate = problem.cost.evaluate
    beta = problem.buffer_bytes
    best = [INF] * (n + 1)
    back: list[tuple[int, list[Group]] | None] = [None] * (n + 1)
    best[0] = 0.0
    priced = work = 0
    for i in range(n):
        if best[i] == INF:
            continue
        if order[i] in excluded:
            if best[i] < best[i + 1]:
                best[i + 1], back[i + 1] = best[i], (i, [])
            continue
        # Grow the run order[i:j], keeping its components and their total DRAM.
        component: dict[int, int] = {}  # operator -> component id
        members: dict[int, set[int]] = {}
        costs: dict[int, int] = {}
        oversized: set[int] = set()  # components that do not fit
        total = 0
        for j in range(i, n):
            v = order[j]
            if v in excluded:
                break
            touching = {component[u] for u in neighbours[v] if u in component}
            merged = {v}
            for c in touching:
                merged |= members.pop(c)
                total -= costs.pop(c)
                oversized.discard(c)
            for u in merged:
                component[u] = v
            work += len(merged)
            if max_work is not None and work > max_work:
                raise IntervalDPTooLarge(f"the interval DP would price more than {max_work} operators")
            buffer, dram = evaluate(frozenset(merged))
            priced += 1
            members[v], costs[v] = merged, dram
            total += dram
            if buffer >= beta:
                if not exhaustive:
                    break
                oversized.add(v)
            if not oversized and best[i] + total < best[j + 1]:
                best[j + 1] = best[i] + total
                back[j + 1] = (i, [frozenset(m) for m in members.values()])
    if best[n] == INF:
        return None, INF, priced
    return Plan.from_groups(_walk_back(back)), best[n], priced


def _walk_back(back: list) -> list:
    """The parts of the runs of the cheapest plan, from the last position's ``(start, parts)`` back to 0."""
    parts: list = []
    j = len(back) - 1
    while j > 0:
        step = back[j]
        assert step is not None
        j, run = step
        parts.extend(run)
    return parts


def interval_dp_known(problem: FusionProblem, order: list[int], prices: Mapping[int, float],
                      max_work: int | None = None) -> tuple[Plan | None, float, int]:
    """:func:`interval_dp` (not exhaustive) over known prices: ``prices`` maps the bitmask of every
    connected convex fuseable set that fits the buffer to its DRAM (a complete candidate list); a component
    not in it does not fit. Nothing is priced, so long runs cost a look-up a step: components are bitmasks,
    and an operator joining components relabels the smaller ones. ``max_work`` counts steps.
    """
    n = len(order)
    excluded = set(problem.excluded)
    neighbours = problem.graph.neighbours
    best = [INF] * (n + 1)
    back: list[tuple[int, tuple[int, ...]] | None] = [None] * (n + 1)
    best[0] = 0.0
    work = looked_up = 0
    for i in range(n):
        if best[i] == INF:
            continue
        if order[i] in excluded:
            if best[i] < best[i + 1]:
                best[i + 1], back[i + 1] = best[i], (i, ())
            continue
        component: dict[int, int] = {}  # operator -> component id
        masks: dict[int, int] = {}  # component id -> its members
        sizes: dict[int, int] = {}
        costs: dict[int, float] = {}
        total = 0.0
        for j in range(i, n):
            v = order[j]
            if v in excluded:
                break
            touching = {component[u] for u in neighbours[v] if u in component}
            keep = max(touching, key=sizes.__getitem__) if touching else v
            mask, size = 1 << v, 1
            for c in touching:
                members = masks[c]
                mask |= members
                size += sizes[c]
                total -= costs.pop(c)
                if c != keep:
                    del masks[c], sizes[c]
                    while members:
                        low = members & -members
                        members ^= low
                        component[low.bit_length() - 1] = keep
            component[v] = keep
            masks[keep], sizes[keep] = mask, size
            work += 1
            if max_work is not None and work > max_work:
                raise IntervalDPTooLarge(f"the interval DP would look up more than {max_work} groups")
            dram = prices.get(mask)
            looked_up += 1
            if dram is None:
                break  # the component does not fit: nor does any run from i that goes on
            costs[keep] = dram
            total += dram
            if best[i] + total < best[j + 1]:
                best[j + 1] = best[i] + total
                back[j + 1] = (i, tuple(masks.values()))
    if best[n] == INF:
        return None, INF, looked_up
    groups = [frozenset(u for u in range(m.bit_length()) if m >> u & 1) for m in _walk_back(back)]
    return Plan.from_groups(groups), best[n], looked_up


def _runs(order: list[int], i: int, excluded: set[int] | frozenset[int], neighbours, evaluate,
          beta: int, known: tuple[int, int] | None = None,
          stop: int | None = None) -> tuple[list[tuple[int, float]], int]:
    """The runs ``order[i:j]`` :func:`interval_dp` scans from start ``i`` that fit, as ``(j, DRAM of their
    components)``, and the last position the scan looked at (where it stopped).

    ``known``: ``(p, DRAM of order[i:p])`` where every run up to ``p`` is known to fit and is not wanted
    again; the operators before ``p`` are then only joined into components, and a component among them
    is priced only when a later operator joins it. ``stop``: no run ends after position ``stop``.
    """
    if order[i] in excluded:
        return [(i + 1, 0)], i
    component: dict[int, int] = {}  # operator -> id of its component
    members: dict[int, set[int]] = {}
    costs: dict[int, int] = {}  # component id -> its DRAM (absent: not priced yet)
    total = 0
    first = i
    if known is not None:
        first, total = known
        for j in range(i, first):
            v = order[j]
            _join(v, {component[u] for u in neighbours[v] if u in component}, component, members)
    runs: list[tuple[int, float]] = []
    for j in range(first, len(order) if stop is None else stop):
        v = order[j]
        if v in excluded:
            return runs, j
        touching = {component[u] for u in neighbours[v] if u in component}
        for c in touching:  # they leave the run's total, as parts of v's component
            cost = costs.pop(c, None)
            total -= evaluate(frozenset(members[c])).dram if cost is None else cost
        kept = _join(v, touching, component, members)
        buffer, dram = evaluate(frozenset(members[kept]))
        costs[kept] = dram
        total += dram
        if buffer >= beta:
            return runs, j
        runs.append((j + 1, total))
    return runs, len(order) - 1


def _join(v: int, touching: set[int], component: dict[int, int], members: dict[int, set[int]]) -> int:
    """Put ``v`` into one component with the components ``touching`` it; the id of that component.

    The largest of them keeps its id and set, so an operator changes component only when it is in the
    smaller part of a merge: a run's scan joins each operator ``O(log n)`` times, not once per step.
    """
    if not touching:
        members[v] = {v}
        component[v] = v
        return v
    if len(touching) == 1:  # the common case: v extends one component
        (kept,) = touching
        members[kept].add(v)
    else:
        kept = max(touching, key=lambda c: len(members[c]))
        merged = members[kept]
        for c in touching:
            if c != kept:
                other = members.pop(c)
                merged |= other
                for u in other:
                    component[u] = kept
        merged.add(v)
    component[v] = kept
    return kept


@dataclass
class IntervalTables:
    """What a window of an order can be re-solved from (:func:`window_dp`).

    ``forward[i]``: the cheapest interval plan of ``order[:i]``; ``backward[i]``: of ``order[i:]``;
    ``first_reaching[p]``: the smallest start whose scan looked at position ``p`` (``p`` if none before it);
    ``runs[i]``: the runs that fit found by the scan from start ``i`` (:func:`_runs`). Each value depends
    only on what the operators of its part of the order are, which is what lets a rewritten graph whose
    order agrees with this one at both ends reuse them.
    """

    forward: list[float]
    backward: list[float]
    first_reaching: list[int]
    runs: list[list[tuple[int, float]]]
    reach: list[int]  # the last position the scan from each start looked at

    @property
    def best(self) -> float:
        return self.forward[-1]


def interval_tables(problem: FusionProblem, order: list[int], parent: IntervalTables | None = None,
                    prefix: int = 0, suffix: int = 0) -> IntervalTables:
    """The :class:`IntervalTables` of ``order``; ``forward[-1]`` is :func:`interval_dp`'s optimum.

    With ``parent``, the tables of an order whose first ``prefix`` and last ``suffix`` operators are the
    same as ``order``'s (as for :func:`window_dp`), a start whose scan there stayed inside the prefix, or
    that lies inside the suffix, keeps the parent's runs (a suffix start's shifted to its place); only the
    other starts are scanned. The tables are the same as without ``parent``; the cheap sums over the runs
    are redone whole."""
    n = len(order)
    excluded = set(problem.excluded)
    neighbours, evaluate, beta = problem.graph.neighbours, problem.cost.evaluate, problem.buffer_bytes
    if parent is None:
        scans = [_runs(order, i, excluded, neighbours, evaluate, beta) for i in range(n)]
    else:
        shift = len(parent.forward) - 1 - n
        scans = []
        for i in range(n):
            if i < prefix and parent.reach[i] < prefix:
                scans.append((parent.runs[i], parent.reach[i]))
            elif i >= n - suffix:
                scans.append(([(end - shift, dram) for end, dram in parent.runs[i + shift]],
                              parent.reach[i + shift] - shift))
            else:
                scans.append(_runs(order, i, excluded, neighbours, evaluate, beta))
    forward = [INF] * (n + 1)
    forward[0] = 0.0
    for i, (runs, _) in enumerate(scans):
        here = forward[i]
        if here == INF:
            continue
        for end, dram in runs:
            if here + dram < forward[end]:
                forward[end] = here + dram
    backward = [INF] * (n + 1)
    backward[n] = 0.0
    for i in range(n - 1, -1, -1):
        backward[i] = min((dram + backward[end] for end, dram in scans[i][0]), default=INF)
    first_reaching = list(range(n + 1))
    for start, (_, reach) in enumerate(scans):
        for p in range(start + 1, reach + 1):
            if first_reaching[p] > start:
                first_reaching[p] = start
    return IntervalTables(forward, backward, first_reaching, [runs for runs, _ in scans], [reach for _, reach in scans])


def optimal_cuts(tables: IntervalTables) -> list[int]:
    """The positions, ascending, where some optimal interval plan of ``tables``' order cuts (0 and the end
    included): ``forward[k] + backward[k]`` is the optimum exactly there (the values are sums of integers)."""
    best = tables.best
    if best == INF:
        return [0, len(tables.forward) - 1]
    return [k for k, (ahead, behind) in enumerate(zip(tables.forward, tables.backward)) if ahead + behind == best]


def window_dp(problem: FusionProblem, order: list[int], parent: IntervalTables, prefix: int, suffix: int, *,
              first: int | None = None, last: int | None = None) -> float:
    """:func:`interval_dp`'s optimum for ``order``, re-solving only a window of it.

    ``parent`` holds the tables of an order whose first ``prefix`` and last ``suffix`` operators are the
    same as ``order``'s (same prices, same neighbours among themselves; ``prefix + suffix`` at most the
    shorter length). Starts whose scan in the parent stayed inside the prefix scan the same here, so
    only starts from ``parent.first_reaching[prefix]`` up to the suffix are scanned again; every plan
    has a first cut ``k`` inside the suffix, after which it costs ``parent.backward`` at ``k``'s place.
    A start inside the prefix finds the parent's runs up to the end of the prefix again, and those can
    improve no cost the parent found: its scan resumes at the end of the prefix from the DRAM the parent
    found there (:func:`_runs`'s ``known``), or is skipped where the parent's stopped before it.

    ``first`` (at most ``prefix``) and ``last`` (at least ``len(order) - suffix``) narrow the window:
    no start before ``first`` is scanned and no run ends after ``last``. The answer is then the DRAM of
    the cheapest interval plan of ``order`` that cuts at ``first`` or before it and keeps the parent's
    optimum of the prefix there, and cuts at ``last`` or after it: a real plan, so never below the
    optimum, and equal to it wherever an optimal plan cuts there.
    """
    n, n_parent = len(order), len(parent.forward) - 1
    end_of_window = n - suffix
    shift = n_parent - n
    forward = parent.forward[:prefix + 1] + [INF] * (n - prefix)
    excluded = set(problem.excluded)
    neighbours, evaluate, beta = problem.graph.neighbours, problem.cost.evaluate, problem.buffer_bytes
    furthest = end_of_window
    scanned_from = parent.first_reaching[prefix] if first is None else max(first, parent.first_reaching[prefix])
    for start in range(scanned_from, end_of_window):
        here = forward[start]
        if here == INF:
            continue
        known = None
        if start < prefix:
            found = parent.runs[start]
            if len(found) < prefix - start:  # stopped inside the prefix
                continue
            known = (prefix, found[prefix - start - 1][1])
        for end, dram in _runs(order, start, excluded, neighbours, evaluate, beta, known, last)[0]:
            if here + dram < forward[end]:
                forward[end] = here + dram
                if end > furthest:
                    furthest = end
    backward = parent.backward
    return min(forward[k] + backward[k + shift] for k in range(end_of_window, furthest + 1))


def is_interval_plan(problem: FusionProblem, plan: Plan, order: list[int]) -> bool:
    """Whether ``plan`` is among the plans :func:`interval_dp` searches for ``order``.

    Scan the order, closing a run as soon as every group it touched is
    complete; the plan is an interval plan iff no group straddles an
    unfuseable operator and the groups of each run are not adjacent (each
    run's components are exactly its groups). Minimal runs are the finest
    possible cut, so if they fail, every coarser cut fails too.
    """
    group_of = plan.group_of
    excluded = set(problem.excluded)
    sizes = [len(g) for g in plan.groups]
    seen = [0] * len(plan.groups)
    open_groups: set[int] = set()
    run: list[int] = []
    for v in order:
        if v in excluded:
            if open_groups:
                return False
            continue
        g = group_of.get(v)
        if g is None:
            return False
        seen[g] += 1
        open_groups.add(g)
        run.append(v)
        if seen[g] == sizes[g]:
            open_groups.discard(g)
        if not open_groups:
            in_run = set(run)
            if any(group_of[u] != group_of[w] for w in run for u in problem.graph.neighbours[w] if u in in_run):
                return False
            run = []
    return not open_groups


class IntervalDP(SearchAlgorithm):
    """The exact reference over interval plans (deterministic; ignores the budget)."""

    name = "dp"
    uses_budget = False

    def __init__(self, exhaustive: bool = False, max_work: int | None = MAX_WORK,
                 prices: Mapping[int, float] | None = None) -> None:
        self.exhaustive = exhaustive
        self.max_work = max_work
        # every fitting connected convex set's DRAM, where a complete enumeration knows them: nothing is priced
        self.prices = None if exhaustive else prices
        self._details: dict[str, Any] = {}

    def reference(self) -> dict[str, Any] | None:
        return dict(self._details) if self._details else None

    def solve(self, problem: FusionProblem) -> tuple[Plan, float, str, dict[str, float]]:
        """Best interval plan over the candidate orders: ``(plan, DRAM, order name, DRAM per order)``.

        Raises :class:`IntervalDPTooLarge` when one order passes the work limit.
        """
        results: dict[str, float] = {}
        best: tuple[Plan, float, str] | None = None
        priced = 0
        start = time.perf_counter()
        for name, order in candidate_orders(problem).items():
            if self.prices is not None:
                plan, dram, count = interval_dp_known(problem, order, self.prices, self.max_work)
            else:
                plan, dram, count = interval_dp(problem, order, exhaustive=self.exhaustive, max_work=self.max_work)
            priced += count
            results[name] = dram
            if plan is not None and (best is None or dram < best[1]):
                best = (plan, dram, name)
        if best is None:  # cannot happen: single operators always fit
            raise RuntimeError("no interval plan fits the buffer")
        self._details = {"order": best[2], "dram_by_order": {k: int(v) for k, v in results.items()},
                         "intervals_priced": priced, "dp_seconds": round(time.perf_counter() - start, 3)}
        return best[0], best[1], best[2], results

    @classmethod
    def known_reference(cls, problem: FusionProblem, prices: Mapping[int, float] | None) -> dict[str, Any] | None:
        """The reference (as :meth:`reference`) over the known prices of a complete enumeration, or what
        says why it was skipped; ``None`` without prices."""
        if prices is None:
            return None
        dp = cls(prices=prices)
        try:
            dp.solve(problem)
        except IntervalDPTooLarge as exc:
            return {"skipped": str(exc)}
        return dp.reference()

    def run(self, ctx: SearchContext) -> None:
        try:
            plan, _, _, _ = self.solve(ctx.problem)
        except IntervalDPTooLarge as exc:
            raise FuseplanError(f"{exc}; groups can span too much of this network for the interval DP "
                                "(use --search exact or auto)") from None
        ctx.propose(plan)
