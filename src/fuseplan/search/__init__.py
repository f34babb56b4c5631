"""Stage 3b: search algorithms over partition plans."""

from __future__ import annotations

from fuseplan.errors import FuseplanError
from fuseplan.search.auto import Auto
from fuseplan.search.base import BudgetExhausted, SearchAlgorithm, SearchContext, SearchResult, minimize
from fuseplan.search.candidates import Candidates, enumerate_candidates
from fuseplan.search.exact import Exact, ExactOutcome, solve_exact
from fuseplan.search.interval_dp import IntervalDP, candidate_orders, interval_dp, is_interval_plan
from fuseplan.search.local_search import LocalSearch
from fuseplan.search.nsga2 import NSGA2
from fuseplan.search.random_search import RandomSearch
from fuseplan.search.reference import reference_record

ALGORITHMS: dict[str, type[SearchAlgorithm]] = {
    "auto": Auto,
    "rs": RandomSearch,
    "ls": LocalSearch,
    "nsga2": NSGA2,
    "dp": IntervalDP,
    "exact": Exact,
}


def make_search(name: str) -> SearchAlgorithm:
    """A fresh search algorithm by its command-line name."""
    try:
        return ALGORITHMS[name.lower()]()
    except KeyError:
        raise FuseplanError(f"unknown search {name!r}; choose one of {', '.join(ALGORITHMS)}") from None


__all__ = ["ALGORITHMS", "Auto", "BudgetExhausted", "Candidates", "Exact", "ExactOutcome", "IntervalDP", "LocalSearch",
           "NSGA2", "RandomSearch", "SearchAlgorithm", "SearchContext", "SearchResult", "candidate_orders",
           "enumerate_candidates", "interval_dp", "is_interval_plan", "make_search", "minimize", "reference_record",
           "solve_exact"]
