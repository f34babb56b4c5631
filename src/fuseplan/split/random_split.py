"""The reference paper's baseline repair: random splits, blind to DRAM cost."""

from __future__ import annotations

from fuseplan.plan.moves import bisect_group
from fuseplan.plan.plan import Group
from fuseplan.split.base import Splitter


class RandomSplitter(Splitter):
    """Cut an invalid group in two at a random point of a random topological order, and
    recurse on every part that still does not fit. Searches exclude unfuseable operators
    beforehand, so every part ends up fitting; a lone operator that does not fit is returned
    as it is."""

    name = "random"

    def _split(self, group: Group) -> list[Group]:
        problem = self._problem()
        parts: list[Group] = []
        pending = [group]
        while pending:
            current = pending.pop()
            if len(current) == 1 or problem.fits(current):
                parts.append(current)  # a single operator cannot be split further
            else:
                pending.extend(bisect_group(problem, current, self.rng))
        return parts
