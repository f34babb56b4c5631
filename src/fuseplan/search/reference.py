"""How a search result compares with the exact interval reference and the lower bound."""

from __future__ import annotations

from typing import Any

from fuseplan.plan.problem import FusionProblem
from fuseplan.search.base import SearchResult
from fuseplan.search.interval_dp import IntervalDP, candidate_orders, is_interval_plan


def reference_record(problem: FusionProblem, result: SearchResult) -> dict[str, Any]:
    """The ``reference`` object of plan.json for ``result``.

    Reuses the interval DP's answer when the search computed it (``dp``,
    ``auto``); otherwise solves it (a few seconds at most on the zoo).
    """
    reference = result.reference
    if reference is None:
        dp = IntervalDP()
        dp.solve(problem)
        reference = dp.reference()
    assert reference is not None
    dp_dram = min(reference["dram_by_order"].values())
    order = candidate_orders(problem)[reference["order"]]
    return {
        "algorithm": "interval-dp",
        "order": reference["order"],
        "dram_bytes": dp_dram,
        "ratio": round(result.cost.dram / dp_dram, 6),
        "plan_in_interval_space": is_interval_plan(problem, result.plan, order),
        "lower_bound_bytes": problem.cost.dram_lower_bound(),
    }
