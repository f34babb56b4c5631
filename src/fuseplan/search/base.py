"""Search algorithms over partition plans, and :func:`minimize` that runs them.

As in pymoo, the problem (:class:`~fuseplan.plan.FusionProblem`) and the
optimiser (:class:`SearchAlgorithm`) are separate: an algorithm proposes
plans through a :class:`SearchContext`, which repairs them with the splitter,
prices them, counts them against the budget and keeps the best. The budget is
the number of plans proposed, the reference paper's unit.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuseplan.errors import FuseplanError
from fuseplan.plan.moves import dissolve_dearer_groups
from fuseplan.plan.plan import Plan, PlanCost
from fuseplan.plan.problem import FusionProblem
from fuseplan.split.base import Splitter
from fuseplan.units import format_bytes


class BudgetExhausted(Exception):
    """Raised by :meth:`SearchContext.propose` once the budget is spent."""


@dataclass
class SearchResult:
    """The best plan a search found, and how it was found."""

    plan: Plan
    cost: PlanCost
    algorithm: str
    splitter: str
    budget: int
    seed: int
    evaluated: int
    wall_seconds: float
    interrupted: bool = False
    # (plans evaluated, best objective) at each improvement
    history: list[tuple[int, float]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    reference: dict[str, Any] | None = None  # the interval DP's answer, when the algorithm computed it

    def search_record(self) -> dict[str, Any]:
        """The ``search`` object of plan.json."""
        return {
            "algorithm": self.algorithm,
            "splitter": self.splitter,
            "budget": self.budget,
            "seed": self.seed,
            "plans_evaluated": self.evaluated,
            "wall_seconds": round(self.wall_seconds, 3),
            "interrupted": self.interrupted,
            **self.details,
        }


class SearchContext:
    """What an algorithm sees while it runs: propose plans, read the best so far."""

    def __init__(self, problem: FusionProblem, splitter: Splitter, budget: int, rng: random.Random,
                 on_improve: Callable[[int, int, PlanCost], None] | None = None,
                 on_propose: Callable[[int], None] | None = None,
                 on_status: Callable[[str, float | None, float | None], None] | None = None,
                 deadline: float | None = None) -> None:
        self.problem = problem
        self.deadline = deadline  # time.perf_counter() past which the search stops (None: no time limit)
        self.timed_out = False
        self.splitter = splitter
        self.budget = budget
        self.rng = rng
        self.evaluated = 0
        self.best: Plan | None = None
        self.best_cost: PlanCost | None = None
        self.history: list[tuple[int, float]] = []
        self._on_improve = on_improve
        self._on_propose = on_propose
        self._on_status = on_status

    @property
    def remaining(self) -> int:
        return self.budget - self.evaluated

    def propose(self, plan: Plan) -> tuple[Plan, PlanCost]:
        """Repair ``plan``, price it and count it; raises :class:`BudgetExhausted` when spent."""
        if self.evaluated >= self.budget:
            raise BudgetExhausted
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.timed_out = True
            raise BudgetExhausted
        repaired = self.splitter.repair(plan)
        cost = self.problem.evaluate(repaired)
        self.evaluated += 1
        self.consider(repaired, cost)
        if self._on_propose is not None:
            self._on_propose(self.evaluated)
        return repaired, cost

    def status(self, stage: str, incumbent: float | None, bound: float | None) -> None:
        """Tell the caller where a proving search stands: the stage just done, the best objective known
        so far and the best proven lower bound (``None`` where there is none yet)."""
        if self._on_status is not None:
            self._on_status(stage, incumbent, bound)

    def consider(self, plan: Plan, cost: PlanCost) -> None:
        """Keep ``plan`` if it is the best valid plan so far (ties keep the earlier one)."""
        if not cost.valid:
            return
        if self.best_cost is None or cost.objective < self.best_cost.objective:
            self.best, self.best_cost = plan, cost
            self.history.append((self.evaluated, cost.objective))
            if self._on_improve is not None:
                self._on_improve(self.evaluated, cost.dram, cost)


class SearchAlgorithm(ABC):
    """Proposes plans through a :class:`SearchContext` until the budget runs out."""

    name: str = "search"
    uses_budget: bool = True

    @abstractmethod
    def run(self, ctx: SearchContext) -> None:
        """Search; return when done or let :class:`BudgetExhausted` end the run."""

    def details(self) -> dict[str, Any]:
        """Algorithm-specific facts for the result's ``search`` record."""
        return {}

    def reference(self) -> dict[str, Any] | None:
        """The exact interval reference's details, if this algorithm computed them."""
        return None


def minimize(problem: FusionProblem, algorithm: SearchAlgorithm, splitter: Splitter, *, budget: int = 5000,
             seed: int = 0, on_improve: Callable[[int, int, PlanCost], None] | None = None,
             on_propose: Callable[[int], None] | None = None,
             on_status: Callable[[str, float | None, float | None], None] | None = None,
             time_limit: float | None = None, dissolve: bool = True) -> SearchResult:
    """Run ``algorithm`` on ``problem`` and return the best valid plan.

    Same problem, algorithm, splitter, budget and seed give the same plan.
    ``on_status`` hears from the proving searches (``exact``, ``auto``) after
    each stage: its name, the best objective so far and the proven bound.
    ``time_limit`` (seconds) stops proposing plans once it has passed, and
    stops ``exact`` and ``auto`` inside their enumeration, downset search and
    CP-SAT too, with the best plan and bound found by then; a time-limited
    result depends on the machine's speed, a budget's does not.
    ``dissolve`` splits every group of the best plan that costs more than its
    operators apart (:func:`~fuseplan.plan.moves.dissolve_dearer_groups`;
    never one of a proven optimum, which would not be optimal): the result's
    ``dissolved_groups`` and ``dissolved_saving`` say what it did. Off, the
    algorithm's own best plan is returned as it found it.
    A ``KeyboardInterrupt`` stops the search and still returns the best valid
    plan found so far (``interrupted=True``). A problem without a fuseable
    operator (none fits the buffer alone) is a :class:`FuseplanError`.
    """
    if budget < 1:
        raise ValueError("budget must be at least 1")
    if not problem.fuseable:
        raise FuseplanError(
            f"{problem.graph.name}: no operator fits the {format_bytes(problem.buffer_bytes)} buffer even alone "
            f"(all {len(problem.excluded)} are unfuseable), so there is nothing to fuse; use a larger buffer")
    rng = random.Random(seed)
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    splitter.setup(problem, random.Random(rng.getrandbits(64)))
    ctx = SearchContext(problem, splitter, budget, random.Random(rng.getrandbits(64)), on_improve, on_propose,
                        on_status, deadline)
    interrupted = False
    start = time.perf_counter()
    try:
        algorithm.run(ctx)
    except BudgetExhausted:
        pass
    except KeyboardInterrupt:
        interrupted = True
    wall = time.perf_counter() - start
    if ctx.best is None:
        # Every fuseable operator fits alone: the trivial plan is the fallback.
        trivial = Plan.from_groups([v] for v in sorted(problem.fuseable))
        ctx.consider(trivial, problem.evaluate(trivial))
    assert ctx.best is not None and ctx.best_cost is not None
    best, best_cost, dissolved = ctx.best, ctx.best_cost, {}
    found = algorithm.details()
    # a proven optimum has no group dearer than its operators apart (splitting one would be a better plan), so
    # pricing every operator of every group alone to look for one is skipped
    if dissolve and not found.get("optimal"):
        polished, split = dissolve_dearer_groups(problem, best)
        if split:
            polished_cost = problem.evaluate(polished)
            dissolved = {"dissolved_groups": len(split),
                         "dissolved_saving": best_cost.objective - polished_cost.objective}
            best, best_cost = polished, polished_cost
    return SearchResult(
        plan=best,
        cost=best_cost,
        algorithm=algorithm.name,
        splitter=splitter.name,
        budget=budget,
        seed=seed,
        evaluated=ctx.evaluated,
        wall_seconds=wall,
        interrupted=interrupted,
        history=ctx.history,
        details={**found, **splitter.stats_dict(), **dissolved,
                 **({} if time_limit is None else {"time_limit": time_limit, "time_limit_reached": ctx.timed_out})},
        reference=algorithm.reference(),
    )
