"""The splitter interface: repair a fusion group that does not fit the buffer.

A search proposes plans; some groups in them need more buffer than there is.
A :class:`Splitter` replaces such a group by smaller groups that all fit,
without breaking the plan's structure (every part weakly connected, the group
graph still acyclic). Splitters are interchangeable: the search code only
calls :meth:`Splitter.split` and reads :class:`SplitStats`.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from fuseplan.plan.plan import Group, Plan
from fuseplan.plan.problem import FusionProblem


@dataclass
class SplitStats:
    """Counters a splitter keeps across one search."""

    invalid_groups: int = 0  # distinct invalid groups the splitter was asked to repair
    memo_hits: int = 0  # repairs answered from the memo
    seconds: float = 0.0  # time spent splitting (memo hits included)

    def as_dict(self) -> dict[str, float]:
        return {"invalid_groups": self.invalid_groups, "memo_hits": self.memo_hits,
                "splitter_seconds": round(self.seconds, 6)}


class Splitter(ABC):
    """Repairs invalid fusion groups; results are memoised per group, as in the reference paper."""

    name: str = "splitter"

    def __init__(self) -> None:
        self.stats = SplitStats()
        self._memo: dict[Group, tuple[Group, ...]] = {}
        self.problem: FusionProblem | None = None
        self.rng = random.Random(0)

    def setup(self, problem: FusionProblem, rng: random.Random) -> None:
        """Attach to a problem before a search; clears the memo and the counters."""
        self.problem = problem
        self.rng = rng
        self._memo.clear()
        self.stats = SplitStats()

    def stats_dict(self) -> dict[str, Any]:
        """Counters for the search record (subclasses add their own)."""
        return self.stats.as_dict()

    def split(self, group: Group) -> tuple[Group, ...]:
        """Valid groups whose union is ``group`` (``(group,)`` if it already fits)."""
        problem = self._problem()
        if problem.fits(group):
            return (group,)
        cached = self._memo.get(group)
        if cached is not None:
            self.stats.memo_hits += 1
            return cached
        start = time.perf_counter()
        self.stats.invalid_groups += 1
        parts = tuple(self._split(group))
        self._memo[group] = parts
        self.stats.seconds += time.perf_counter() - start
        return parts

    def repair(self, plan: Plan) -> Plan:
        """``plan`` with every group that does not fit replaced by its split."""
        problem = self._problem()
        invalid = [g for g in plan.groups if not problem.fits(g)]
        if not invalid:
            return plan
        return plan.replace(invalid, [part for g in invalid for part in self.split(g)])

    @abstractmethod
    def _split(self, group: Group) -> list[Group]:
        """Split an invalid ``group`` into valid parts (no memo, no counters)."""

    def _problem(self) -> FusionProblem:
        if self.problem is None:
            raise RuntimeError(f"{type(self).__name__} is not set up; call setup(problem, rng) first")
        return self.problem
