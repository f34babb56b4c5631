"""The explainer interface: which edges of an invalid fusion group make it too big.

Modelled on torch-geometric's ``ExplainerAlgorithm``: every explainer takes a
group and returns one :class:`Explanation` type, a ranking of the group's
data-flow edges, most responsible first. Explainers are interchangeable
inside the tree splitter (:class:`~fuseplan.split.tree.TreeSplitter`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from fuseplan.plan.plan import Group
from fuseplan.plan.problem import FusionProblem

Edge = tuple[int, int]


@dataclass(frozen=True)
class Explanation:
    """Edges of ``group`` ranked by blame (scores descending; higher = more responsible)."""

    group: Group
    edges: tuple[Edge, ...]
    scores: tuple[float, ...]
    explainer: str

    def top(self, k: int) -> tuple[Edge, ...]:
        return self.edges[:k]

    @classmethod
    def from_scores(cls, group: Group, scores: dict[Edge, float], explainer: str) -> Explanation:
        # Ties broken by edge order, so equal scores rank deterministically.
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return cls(group=group, edges=tuple(e for e, _ in ranked), scores=tuple(float(s) for _, s in ranked),
                   explainer=explainer)


class ExplainerAlgorithm(ABC):
    """Ranks the edges of a fusion group by how much they make it not fit."""

    name: str = "explainer"

    def setup(self, problem: FusionProblem) -> None:
        """Attach to a problem before a search (load models, reset caches)."""

    @abstractmethod
    def explain(self, problem: FusionProblem, group: Group) -> Explanation:
        """Rank the data-flow edges of ``group``."""
