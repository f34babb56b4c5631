"""The default search: the exact interval reference, refined by local search.

The interval DP is optimal among interval plans and fast; local search from
its answer then explores plans outside that space (groups that interleave
branches in ways no single topological order cuts out). On the zoo this
combination gives the lowest DRAM of all algorithms within a few seconds
(see docs/search.md).
"""

from __future__ import annotations

from typing import Any

from fuseplan.search.base import SearchAlgorithm, SearchContext
from fuseplan.search.interval_dp import IntervalDP
from fuseplan.search.local_search import LocalSearch


class Auto(SearchAlgorithm):
    """Interval DP, then :class:`LocalSearch` seeded with its plan for the rest of the budget."""

    name = "auto"

    def __init__(self, population: int = 10) -> None:
        self.population = population
        self._dp = IntervalDP()

    def reference(self) -> dict[str, Any] | None:
        return self._dp.reference()

    def run(self, ctx: SearchContext) -> None:
        plan, _, _, _ = self._dp.solve(ctx.problem)
        LocalSearch(self.population, initial=[plan]).run(ctx)
