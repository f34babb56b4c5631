"""Random Search: a fresh random plan at every step (Li and Talwalkar, UAI 2020)."""

from __future__ import annotations

from fuseplan.plan.moves import random_plan
from fuseplan.search.base import SearchAlgorithm, SearchContext


class RandomSearch(SearchAlgorithm):
    """Propose independent random plans; the context keeps the best valid one."""

    name = "rs"

    def run(self, ctx: SearchContext) -> None:
        while True:
            ctx.propose(random_plan(ctx.problem, ctx.rng))
