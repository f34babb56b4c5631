"""The default search: the exact solver within limits, else the best of everything, with a proven gap.

``auto`` first runs :func:`~fuseplan.search.exact.solve_exact` with limits
that keep it to seconds. When it proves a plan optimal, that plan is the
answer. Otherwise (very large or wide networks) it proposes the solver's
incumbent, if any (the best plan over candidates that a cut-short enumeration
left, grown by reduced cost: :mod:`fuseplan.search.columns`), and the interval DP's plan, if the DP stays within its
work limit, and refines the best by local search for the rest of the
budget. Either way the result carries the best proven lower bound, so the
gap to the optimum is known. All limits are deterministic (sets, states,
solver ticks), so the same seed gives the same plan.
"""

from __future__ import annotations

import time
from typing import Any

from fuseplan.search.base import SearchAlgorithm, SearchContext
from fuseplan.search.exact import ExactOutcome, bound_record, solve_exact
from fuseplan.search.interval_dp import IntervalDP, IntervalDPTooLarge
from fuseplan.search.local_search import LocalSearch

#: auto's limits on the exact solver (``exact`` itself allows more; see fuseplan.search.exact).
AUTO_MAX_SETS = 150_000
AUTO_MAX_STATES = 50_000
AUTO_SOLVER_TIME = 10.0


class Auto(SearchAlgorithm):
    """Exact when it proves optimality within its limits; else the best of the solver's incumbent, the
    interval DP and :class:`LocalSearch` seeded with both."""

    name = "auto"

    def __init__(self, population: int = 10, max_sets: int = AUTO_MAX_SETS, max_states: int = AUTO_MAX_STATES,
                 solver_time: float = AUTO_SOLVER_TIME, by_cells: bool = True) -> None:
        self.population = population
        self.by_cells = by_cells  # solve_exact's: plan cell by cell between articulation tensors first
        self.max_sets = max_sets
        self.max_states = max_states
        self.solver_time = solver_time
        self._dp = IntervalDP()
        self._dp_skipped: str | None = None
        self.outcome: ExactOutcome | None = None
        self._ctx: SearchContext | None = None

    def reference(self) -> dict[str, Any] | None:
        if self._dp_skipped is not None:
            return {"skipped": self._dp_skipped}
        reference = self._dp.reference()
        if reference is None and self.outcome is not None and self._ctx is not None:  # proven: the DP not run
            reference = IntervalDP.known_reference(self._ctx.problem, self.outcome.prices)
        return reference

    def details(self) -> dict[str, Any]:
        if self.outcome is None:
            return {}
        bound = self.outcome.lower_bound
        best = self._ctx.best_cost if self._ctx is not None else None
        optimal = self.outcome.optimal or (best is not None and best.objective <= bound)
        objective = self._ctx.problem.objective.name if self._ctx is not None else "dram"
        return {"optimal": optimal, **bound_record(bound, objective, self.outcome.bound_source),
                "exact": {"method": self.outcome.method, "max_sets": self.max_sets, **self.outcome.stats}}

    def run(self, ctx: SearchContext) -> None:
        self._ctx = ctx
        self.outcome = solve_exact(ctx.problem, max_sets=self.max_sets, max_states=self.max_states,
                                   by_cells=self.by_cells,
                                   solver_time=self.solver_time, seed=ctx.rng.randrange(2**31),
                                   on_status=ctx.status, deadline=ctx.deadline)
        out_of_time = ctx.deadline is not None and time.perf_counter() > ctx.deadline
        ctx.timed_out = out_of_time
        if self.outcome.optimal or out_of_time and self.outcome.plan is not None:
            assert self.outcome.plan is not None
            ctx.deadline = None  # out of time or not, the plan the solver found is the answer
            ctx.propose(self.outcome.plan)
            return
        self._dp.prices = self.outcome.prices  # a complete enumeration: the DP prices nothing
        seeds = []
        if self.outcome.plan is not None:
            seeds.append(self.outcome.plan)
        try:  # out of time too: its work limit keeps it to seconds, and a plan is owed
            plan, _, _, _ = self._dp.solve(ctx.problem)
            seeds.append(plan)
        except IntervalDPTooLarge as exc:
            self._dp_skipped = str(exc)
        if out_of_time:  # the seeds are the answer; no time for local search
            ctx.deadline = None
            for plan in seeds:
                ctx.propose(plan)
            return
        ctx.status("local search from the solver's and the interval DP's plans", self.outcome.dram,
                   self.outcome.lower_bound)
        try:
            LocalSearch(self.population, initial=seeds).run(ctx)
        finally:  # the budget ends local search by raising
            ctx.status("local search done", ctx.best_cost.objective if ctx.best_cost is not None else None,
                       self.outcome.lower_bound)
