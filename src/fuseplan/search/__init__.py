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


#: the most sets ``max_sets`` may ask the exact enumeration to visit (about 1 GB of memory per million sets:
#: GoogLeNet's 1.9 million under LBDF at 2MB peaked at 1.9 GB)
MAX_SETS_CAP = 10_000_000


def make_search(name: str, *, max_sets: int | None = None) -> SearchAlgorithm:
    """A fresh search algorithm by its command-line name. ``max_sets`` replaces the enumeration's limit of
    the searches that enumerate candidates (``exact``, ``auto``): at most :data:`MAX_SETS_CAP`."""
    try:
        algorithm = ALGORITHMS[name.lower()]()
    except KeyError:
        raise FuseplanError(f"unknown search {name!r}; choose one of {', '.join(ALGORITHMS)}") from None
    if max_sets is not None:
        check_max_sets(name, max_sets)
        algorithm.max_sets = max_sets
    return algorithm


def check_max_sets(name: str, max_sets: int) -> None:
    """Refuse a limit on enumerated sets (``--max-sets``) for a search that enumerates none, or outside 1 to
    :data:`MAX_SETS_CAP`: the command line asks before any work, :func:`make_search` again."""
    if ALGORITHMS.get(name.lower()) not in (Exact, Auto):
        raise FuseplanError(f"--max-sets applies to --search exact and auto, not {name}")
    if not 1 <= max_sets <= MAX_SETS_CAP:
        raise FuseplanError(f"--max-sets must be 1 to {MAX_SETS_CAP:,} (about 1 GB of memory per million sets), "
                            f"got {max_sets:,}")


__all__ = ["ALGORITHMS", "MAX_SETS_CAP", "Auto", "BudgetExhausted", "Candidates", "Exact", "ExactOutcome",
           "IntervalDP", "LocalSearch", "NSGA2", "RandomSearch", "SearchAlgorithm", "SearchContext", "SearchResult",
           "candidate_orders", "check_max_sets", "enumerate_candidates", "interval_dp", "is_interval_plan",
           "make_search", "minimize", "reference_record", "solve_exact"]
