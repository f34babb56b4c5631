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

import time
from collections.abc import Callable
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


def _kahn(problem: FusionProblem, priority: Callable[[int, int | None], tuple]) -> list[int]:
    """A topological order taking, among ready operators, the smallest ``priority(v, last)``."""
    graph = problem.graph
    waiting = [len(p) for p in graph.predecessors]
    ready = [v for v, n in enumerate(waiting) if n == 0]
    order: list[int] = []
    last: int | None = None
    while ready:
        v = min(ready, key=lambda u: priority(u, last))
        ready.remove(v)
        order.append(v)
        last = v
        for s in graph.successors[v]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    return order


def candidate_orders(problem: FusionProblem) -> dict[str, list[int]]:
    """Named topological orders the interval DP is run on."""
    graph = problem.graph
    excluded = set(problem.excluded)

    def chained(v: int, last: int | None) -> tuple:
        return (0 if last is not None and v in graph.successors[last] else 1, v)

    def late(v: int, last: int | None) -> tuple:
        return (v in excluded, v)

    def chained_late(v: int, last: int | None) -> tuple:
        return (v in excluded, *chained(v, last))

    orders = {
        "model": list(range(len(graph))),
        "depth-first": _kahn(problem, chained),
        "unfuseable-late": _kahn(problem, late),
        "depth-first-unfuseable-late": _kahn(problem, chained_late),
    }
    unique: dict[tuple[int, ...], str] = {}
    for name, order in orders.items():
        unique.setdefault(tuple(order), name)
    return {name: list(order) for order, name in unique.items()}


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
    groups: list[Group] = []
    j = n
    while j > 0:
        step = back[j]
        assert step is not None
        i, parts = step
        groups.extend(parts)
        j = i
    return Plan.from_groups(groups), best[n], priced


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

    def __init__(self, exhaustive: bool = False, max_work: int | None = MAX_WORK) -> None:
        self.exhaustive = exhaustive
        self.max_work = max_work
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

    def run(self, ctx: SearchContext) -> None:
        try:
            plan, _, _, _ = self.solve(ctx.problem)
        except IntervalDPTooLarge as exc:
            raise FuseplanError(f"{exc}; groups can span too much of this network for the interval DP "
                                "(use --search exact or auto)") from None
        ctx.propose(plan)
