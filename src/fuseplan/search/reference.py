"""How a search result compares with the exact interval reference and the lower bound."""

from __future__ import annotations

from typing import Any

from fuseplan.plan.problem import FusionProblem
from fuseplan.search.base import SearchResult
from fuseplan.search.interval_dp import MAX_WORK, IntervalDP, IntervalDPTooLarge, candidate_orders, is_interval_plan


def reference_record(problem: FusionProblem, result: SearchResult, max_work: int | None = MAX_WORK) -> dict[str, Any]:
    """The ``reference`` object of plan.json for ``result``.

    Reuses the interval DP's answer when the search computed it (``dp``,
    ``auto``); takes the plan's own DRAM where the plan is proven to move the
    least DRAM of all plans and is an interval plan of a candidate order
    (``from_proof``); otherwise solves it within the DP's work limit. Where the limit
    is reached (groups that can span most of a long network) the figure is
    skipped: the record then says why instead of giving ``dram_bytes`` and
    ``ratio``.
    """
    record: dict[str, Any] = {"algorithm": "interval-dp"}
    reference = result.reference
    if reference is None and result.details.get("optimal") and problem.objective.name == "dram":
        # A plan proven to move the least DRAM of all plans that is an interval plan of some order is that
        # order's interval optimum, and no order's is lower: the DP would find its DRAM, so it is not run.
        for name, order in candidate_orders(problem).items():
            if is_interval_plan(problem, result.plan, order):
                return {**record, "order": name, "dram_bytes": result.cost.dram, "ratio": 1.0,
                        "plan_in_interval_space": True, "lower_bound_bytes": problem.cost.dram_lower_bound(),
                        "from_proof": True}
    if reference is None:
        dp = IntervalDP(max_work=max_work)
        try:
            dp.solve(problem)
        except IntervalDPTooLarge as exc:
            return {**record, "skipped": str(exc), "lower_bound_bytes": problem.cost.dram_lower_bound()}
        reference = dp.reference()
    assert reference is not None
    if "skipped" in reference:
        return {**record, "skipped": reference["skipped"], "lower_bound_bytes": problem.cost.dram_lower_bound()}
    dp_dram = min(reference["dram_by_order"].values())
    order = candidate_orders(problem)[reference["order"]]
    if dp_dram > 0:
        ratio = round(result.cost.dram / dp_dram, 6)
    else:  # nothing is fuseable, or nothing moves: equal plans
        ratio = 1.0 if result.cost.dram == 0 else None
    return {
        **record,
        "order": reference["order"],
        "dram_bytes": dp_dram,
        "ratio": ratio,
        "plan_in_interval_space": is_interval_plan(problem, result.plan, order),
        "lower_bound_bytes": problem.cost.dram_lower_bound(),
    }
